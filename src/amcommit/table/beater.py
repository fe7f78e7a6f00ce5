"""A driver's keep-alive process for a table write (``python -m amcommit.table.beater``).

Used by the Spark writer (:func:`amcommit.spark.driver.keep_write_alive`); any engine whose
driver cannot run :func:`amcommit.table.heartbeat.heartbeat` for the whole write can use it
too. Between ``begin_write`` (in the data source's ``writer()``) and the job commit, a Spark write
may go on for longer than ``writer_ttl`` without any write task running: an upstream stage
before a shuffle, tasks queued behind other jobs, the wait before ``commit()``. Nothing of
the write beats then, and a concurrent writer would judge the live instant dead and roll it
back. ``writer()`` runs in a short-lived Python worker that Spark may kill when idle, and
``commit()``/``abort()`` run in other processes; so the driver's beats come from a small
process of its own, started by :func:`start` right after the instant is allocated:

- it beats every ``writer_ttl / 4`` (:func:`amcommit.table.heartbeat.keep_beating`);
- it stops by itself once the write is over: its job marker is gone (committed, or aborted
  by Spark after a failure). The marker is checked before each beat, so the process writes
  nothing once the write ended (not even into a table folder deleted meanwhile), and again
  after it, removing a beat that raced the end;
- it stops when the Spark driver is gone: the JVM that ran ``writer()`` (the nearest
  ``java`` ancestor; else the worker's parent) no longer exists (checked before each beat).
  It records that process as the write's keeper (:func:`~amcommit.table.heartbeat.claim_keeper`),
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
from amcommit.liveness import java_ancestor, pid_exists, proc_stat

__all__ = ["ProcessWatch", "jvm_watch", "main", "start", "this_process"]

START_TIMEOUT = 60.0


@dataclass(frozen=True)
class ProcessWatch:
    """A process identified by pid and, where /proc tells it, its start time (pid reuse)."""

    pid: int
    start_time: str | None = None

    def alive(self) -> bool:
        """True while the process exists (and is the same one: same start time, where
        ``/proc`` tells it). Without a start time (no ``/proc``: macOS, the BSDs) only the
        pid is checked (:func:`~amcommit.liveness.pid_exists`, no signal sent); where even
        that cannot be told the process counts as alive."""
        if self.start_time is not None:
            return _start_time(self.pid) == self.start_time
        return pid_exists(self.pid) is not False


def _start_time(pid: int) -> str | None:
    st = proc_stat(pid)
    return None if st is None else st[3]


def this_process() -> ProcessWatch:
    """This process, as :class:`ProcessWatch` (a driver that commits in its own process)."""
    pid = os.getpid()
    return ProcessWatch(pid, _start_time(pid))


def jvm_watch() -> ProcessWatch:
    """The Spark driver to watch from a Python worker: its nearest ``java`` ancestor, else
    its parent process (the PySpark daemon or the JVM)."""
    jvm = java_ancestor()
    if jvm is not None:
        return ProcessWatch(jvm.pid, jvm.start)
    parent = os.getppid()
    return ProcessWatch(parent, _start_time(parent))


@dataclass(frozen=True)
class _Job:
    url: str
    store_options: dict[str, Any]
    instant: str
    ttl: float
    watch: ProcessWatch | None


def start(
    url: str,
    store_options: dict[str, Any],
    instant: str,
    ttl: float,
    *,
    watch: ProcessWatch | None = None,
) -> subprocess.Popen[bytes]:
    """Start the keep-alive process of the write ``instant`` of the table at ``url`` and
    wait for its first beat (module doc). ``watch``: stop when that process is gone."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "amcommit.table.beater"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        close_fds=True,
        start_new_session=True,  # not killed with the worker's process group; it watches the JVM
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(pickle.dumps(_Job(url, dict(store_options), instant, ttl, watch)))
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
    from amcommit.liveness import process_id
    from amcommit.store.schemes import open_location
    from amcommit.table.heartbeat import beat, claim_keeper, keep_beating

    job: _Job = pickle.loads(sys.stdin.buffer.read())
    out = sys.stdout
    keeper = None if job.watch is None else process_id(job.watch.pid)
    if keeper is not None and job.watch is not None and job.watch.start_time not in (None, keeper.start):
        keeper = None  # the watched process is already gone (its pid reused)

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
            watch = job.watch
            await keep_beating(
                store,
                dest,
                job.instant,
                ttl=job.ttl,
                still_running=None if watch is None else watch.alive,
            )

    amcommit_loop.run(run)


if __name__ == "__main__":
    main()
