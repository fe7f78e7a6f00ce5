"""A driver's keep-alive process for a table write (``python -m amcommit.table.timeline.beater``).

Used by the Spark writer (:func:`amcommit.spark.driver.keep_write_alive`); any engine whose
driver cannot run :func:`amcommit.table.timeline.heartbeat.heartbeat` for the whole write can use it
too. Between ``begin_write`` (in the data source's ``writer()``) and the job commit, a Spark write
may go on for longer than ``writer_ttl`` without any write task running: an upstream stage
before a shuffle, tasks queued behind other jobs, the wait before ``commit()``. Nothing of
the write beats then, and a concurrent writer would judge the live instant dead and roll it
back. ``writer()`` runs in a short-lived Python worker that Spark may kill when idle, and
``commit()``/``abort()`` run in other processes; so the driver's beats come from a small
process of its own, started by :func:`start` right after the instant is allocated:

- it beats every ``writer_ttl / 4`` (:func:`amcommit.table.timeline.heartbeat.keep_beating`);
- it stops by itself once the write is over: its job marker is gone (committed, or aborted
  by Spark after a failure). The marker is checked before each beat, so the process writes
  nothing once the write ended (not even into a table folder deleted meanwhile), and again
  after it, removing a beat that raced the end;
- it stops when the process that runs the write is gone
  (:func:`~amcommit.liveness.write_processes`: the
  Spark driver's JVM that ran ``writer()``, the nearest ``java`` ancestor; else the Python
  driver that began the write, and its JVM), checked before each beat; a zombie (killed,
  not reaped, as under a PID 1 that does not reap) counts as gone
  (:func:`~amcommit.liveness.process_gone`). It records that process (the first one) as
  the write's keeper (:func:`~amcommit.table.timeline.heartbeat.claim_keeper`),
  so a judge on the driver's host finds a killed driver's instant dead at once; elsewhere
  it is judged dead ``writer_ttl`` after its last beat.

:func:`start` waits until the process made its first beat and fails (CommitError, one line)
if it could not: a write whose liveness cannot be kept is not begun. Settings (store options,
possibly credentials) go through a pipe, never the command line or the environment.
"""

from __future__ import annotations

import os
import pickle
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from amcommit.errors import CommitError
from amcommit.liveness import ProcessId, process_gone, write_processes

__all__ = ["main", "start", "write_processes"]
# (write_processes lives in amcommit.liveness, the home of process identities; named here too)

START_TIMEOUT = 60.0


@dataclass(frozen=True)
class _Job:
    url: str
    store_options: dict[str, Any]
    instant: str
    ttl: float
    watch: tuple[ProcessId, ...]


def start(
    url: str,
    store_options: dict[str, Any],
    instant: str,
    ttl: float,
    *,
    watch: ProcessId | tuple[ProcessId, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start the keep-alive process of the write ``instant`` of the table at ``url`` and
    wait for its first beat (module doc). ``watch``: processes of this host
    (:func:`~amcommit.liveness.local_process`; default none); the keep-alive stops when any
    of them is gone (:func:`~amcommit.liveness.process_gone`: a zombie is gone), and the
    first is recorded as the write's keeper."""
    watched = (watch,) if isinstance(watch, ProcessId) else tuple(watch)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "amcommit.table.timeline.beater"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        close_fds=True,
        start_new_session=True,  # not killed with the worker's process group; it watches the JVM
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(pickle.dumps(_Job(url, dict(store_options), instant, ttl, watched)))
        proc.stdin.close()
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
        line = proc.stdout.readline().decode("utf-8", "replace").strip() if ready else ""
    except OSError as e:
        line = f"error: {type(e).__name__}"
    if line != "ok":
        proc.kill()
        proc.wait()
        why = line.removeprefix("error: ") or "no answer"
        raise CommitError(
            f"table write {instant}: the driver's heartbeat process did not start ({why}); the write "
            "was not begun",
            stage="begin_write",
        )
    proc.stdout.close()
    threading.Thread(target=proc.wait, name=f"amcommit-beater-{instant}", daemon=True).start()
    return proc


def _describe(e: Exception) -> str:
    """One line; the text only of amcommit's own (redacted) errors."""
    from amcommit.errors import AmcommitError

    text = str(e).splitlines()[0] if isinstance(e, AmcommitError) and str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def main() -> None:
    """The keep-alive process: read the job from stdin, beat, say ``ok``, keep beating."""
    from amcommit import loop as amcommit_loop
    from amcommit.store.schemes import open_location
    from amcommit.table.timeline.heartbeat import beat, claim_keeper, keep_beating

    job: _Job = pickle.loads(sys.stdin.buffer.read())
    out = sys.stdout
    first = job.watch[0] if job.watch else None
    # the keeper record serves a judge only if it can prove the keeper dead: full /proc fields
    keeper = first if first is not None and first.start and not process_gone(first) else None

    def still_running() -> bool:
        return not any(process_gone(p) for p in job.watch)

    async def run() -> None:
        try:
            store, dest = open_location(job.url, **job.store_options)
        except Exception as e:  # one line back to start(), never a traceback
            out.write(f"error: {_describe(e)}\n")
            out.flush()
            return
        async with store:
            try:
                await beat(store, dest, job.instant)
                if keeper is not None:  # before "ok": the write is not over yet
                    await claim_keeper(store, dest, job.instant, keeper)
            except Exception as e:
                out.write(f"error: {_describe(e)}\n")
                out.flush()
                return
            out.write("ok\n")
            out.flush()
            out.close()
            await keep_beating(
                store, dest, job.instant, ttl=job.ttl, still_running=still_running if job.watch else None
            )

    amcommit_loop.run(run)


if __name__ == "__main__":
    main()
