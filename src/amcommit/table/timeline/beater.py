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

A process that begins write after write (a streaming query's micro-batches) asks for a
**spare** (``start(..., spare=True)``): the next keep-alive process is started at once, off
the write's path, and waits (imports done) for its job on its pipe; the next ``start`` of
this process hands it the job, so a micro-batch waits for one beat instead of a Python
start-up (0.3-1.5 s on a busy 2-core host). A spare that gets no job within
:data:`SPARE_IDLE` seconds, or whose starter is gone (its pipe closed), exits having written
nothing; a forked child never uses its parent's spare.
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
SPARE_IDLE = 120.0
"""Seconds a spare keep-alive process waits for its job before it exits."""

_spare: tuple[int, subprocess.Popen[bytes]] | None = None
"""(pid of the process that started it, the spare) (module doc)."""
_spare_lock = threading.Lock()


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
    spare: bool = False,
) -> subprocess.Popen[bytes]:
    """Start the keep-alive process of the write ``instant`` of the table at ``url`` and
    wait for its first beat (module doc). ``watch``: processes of this host
    (:func:`~amcommit.liveness.local_process`; default none); the keep-alive stops when any
    of them is gone (:func:`~amcommit.liveness.process_gone`: a zombie is gone), and the
    first is recorded as the write's keeper. ``spare``: start the next one now (module
    doc); a spare of this process, if any, is used first."""
    watched = (watch,) if isinstance(watch, ProcessId) else tuple(watch)
    job = pickle.dumps(_Job(url, dict(store_options), instant, ttl, watched))
    global _spare
    with _spare_lock:
        mine = _spare if _spare is not None and _spare[0] == os.getpid() else None
        _spare = None
    proc, line = (mine[1], _hand(mine[1], job)) if mine is not None else (None, "")
    if proc is None or line == "":  # no spare, or one that had exited (idle): a fresh one
        if proc is not None:
            proc.kill()
            proc.wait()
        proc = _spawn()
        line = _hand(proc, job)
    if spare and line == "ok":
        with _spare_lock:
            _spare = (os.getpid(), _spawn())
    if line != "ok":
        proc.kill()
        proc.wait()
        why = line.removeprefix("error: ") or "no answer"
        raise CommitError(
            f"table write {instant}: the driver's heartbeat process did not start ({why}); the write "
            "was not begun",
            stage="begin_write",
        )
    assert proc.stdout is not None
    proc.stdout.close()
    threading.Thread(target=proc.wait, name=f"amcommit-beater-{instant}", daemon=True).start()
    return proc


def _spawn() -> subprocess.Popen[bytes]:
    """A keep-alive process, waiting for its job on its pipe."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.Popen(
        [sys.executable, "-m", "amcommit.table.timeline.beater"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        close_fds=True,
        start_new_session=True,  # not killed with the worker's process group; it watches the JVM
    )


def _hand(proc: subprocess.Popen[bytes], job: bytes) -> str:
    """Send ``job`` to the keep-alive ``proc`` and read its answer: ``ok``, ``error: ...``,
    or empty if it said nothing (it exited: e.g. a spare gone idle) within START_TIMEOUT."""
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(job)
        proc.stdin.close()
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
        return proc.stdout.readline().decode("utf-8", "replace").strip() if ready else ""
    except OSError:
        return ""


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

    ready, _, _ = select.select([sys.stdin], [], [], SPARE_IDLE)
    data = sys.stdin.buffer.read() if ready else b""
    if not data:  # a spare never given a job (idle, or its starter is gone): nothing written
        return
    job: _Job = pickle.loads(data)
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
