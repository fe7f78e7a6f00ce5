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
**kept** keep-alive (``start(..., spare=True)``): one long-lived process per starting
process serves all its writes (``python -m amcommit.table.timeline.beater --serve``). The
starter keeps its pipe open and hands it each write as it begins (one write at a time); the
process beats each write exactly as a keep-alive of its own would (same checks, same
keeper record, same ends), so a micro-batch waits for one beat and starts no process (a
Python start-up costs 0.1-0.15 s of CPU, 0.3-1.5 s of wall time on a busy 2-core host).
What changes is only which process beats: a write's liveness is judged as before (its beats,
its keeper). The kept process takes no new write once its starter is gone (its pipe
closed: a forked child never uses its parent's), and exits once it beats no write any more;
it also exits after :data:`SPARE_IDLE` seconds without any write. If it is gone (killed), the
next ``start`` of its starter starts a fresh one: the writes it beat are then no longer
beaten (as when a keep-alive of their own is killed) and are judged by their beats' age.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from amcommit.errors import CommitError
from amcommit.liveness import ProcessId, process_gone, write_processes

__all__ = ["main", "start", "write_processes"]
# (write_processes lives in amcommit.liveness, the home of process identities; named here too)

START_TIMEOUT = 60.0
SPARE_IDLE = 120.0
"""Seconds a kept keep-alive process that beats no write waits for one before it exits."""

_kept: tuple[int, subprocess.Popen[bytes]] | None = None
"""(pid of the process that started it, the kept keep-alive process) (module doc)."""
_kept_lock = threading.Lock()


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
    """Start the keep-alive of the write ``instant`` of the table at ``url`` and wait for
    its first beat (module doc); returns the process that beats it. ``watch``: processes of
    this host (:func:`~amcommit.liveness.local_process`; default none); the write's beats
    stop when any of them is gone (:func:`~amcommit.liveness.process_gone`: a zombie is
    gone), and the first is recorded as the write's keeper. ``spare``: more writes follow
    from this process: the write is handed to this process's kept keep-alive process
    (started if there is none, or it is gone), which stays for the next ones (module doc);
    else a keep-alive process of its own beats it."""
    watched = (watch,) if isinstance(watch, ProcessId) else tuple(watch)
    job = pickle.dumps(_Job(url, dict(store_options), instant, ttl, watched))
    if spare:
        return _start_kept(job, instant)
    proc = _spawn()
    line = _hand(proc, job)
    if line != "ok":
        _not_started(proc, instant, line)
    assert proc.stdout is not None
    proc.stdout.close()
    threading.Thread(target=proc.wait, name=f"amcommit-beater-{instant}", daemon=True).start()
    return proc


def _start_kept(job: bytes, instant: str) -> subprocess.Popen[bytes]:
    """Hand ``job`` to this process's kept keep-alive process (a fresh one if there is
    none, or the one there is did not answer: killed, or gone idle); one hand-over at a
    time. Atomic per write: it is beaten once this returns, or CommitError is raised."""
    global _kept
    with _kept_lock:
        mine = _kept[1] if _kept is not None and _kept[0] == os.getpid() else None
        line = _ask(mine, job) if mine is not None else ""
        proc = mine
        if proc is None or line == "":  # none, or it is gone: a fresh one
            if proc is not None:
                _end(proc)
            proc = _spawn(serve=True)
            line = _ask(proc, job)
        if line != "ok":
            _kept = None
            _not_started(proc, instant, line)
        _kept = (os.getpid(), proc)
        return proc


def _not_started(proc: subprocess.Popen[bytes], instant: str, line: str) -> NoReturn:
    _end(proc)
    why = line.removeprefix("error: ") or "no answer"
    raise CommitError(
        f"table write {instant}: the driver's heartbeat process did not start ({why}); the write "
        "was not begun",
        stage="begin_write",
    )


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` (a keep-alive that did not answer) and reap it."""
    proc.kill()
    proc.wait()


def _spawn(*, serve: bool = False) -> subprocess.Popen[bytes]:
    """A keep-alive process, waiting for its job (``serve``: its jobs) on its pipe."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.Popen(
        [sys.executable, "-m", "amcommit.table.timeline.beater", *(["--serve"] if serve else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        close_fds=True,
        start_new_session=True,  # not killed with the worker's process group; it watches the JVM
    )


def _hand(proc: subprocess.Popen[bytes], job: bytes) -> str:
    """Send ``job`` to the keep-alive ``proc`` of its own (its pipe is then closed) and read
    its answer: ``ok``, ``error: ...``, or empty if it said nothing within START_TIMEOUT."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(job)
        proc.stdin.close()
    except OSError:
        return ""
    return _answer(proc)


def _ask(proc: subprocess.Popen[bytes], job: bytes) -> str:
    """Send ``job`` to the kept keep-alive ``proc`` (length-prefixed; its pipe stays open)
    and read its answer (:func:`_hand`); empty if it is gone."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(struct.pack(">I", len(job)) + job)
        proc.stdin.flush()
    except (OSError, ValueError):  # gone (broken pipe), or its pipe closed already
        return ""
    return _answer(proc)


def _answer(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
        return proc.stdout.readline().decode("utf-8", "replace").strip() if ready else ""
    except (OSError, ValueError):
        return ""


def _describe(e: Exception) -> str:
    """One line; the text only of amcommit's own (redacted) errors."""
    from amcommit.errors import AmcommitError

    text = str(e).splitlines()[0] if isinstance(e, AmcommitError) and str(e) else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


async def _keep(job: _Job, say: Callable[[str], None]) -> None:
    """Beat the write of ``job``: first beat and keeper record, ``say("ok")`` (else
    ``say("error: ...")``, one line), then beats until the write or a watched process is
    gone (module doc)."""
    from amcommit.store.schemes import open_location
    from amcommit.table.timeline.heartbeat import beat, claim_keeper, keep_beating

    first = job.watch[0] if job.watch else None
    # the keeper record serves a judge only if it can prove the keeper dead: full /proc fields
    keeper = first if first is not None and first.start and not process_gone(first) else None

    def still_running() -> bool:
        return not any(process_gone(p) for p in job.watch)

    try:
        store, dest = open_location(job.url, **job.store_options)
    except Exception as e:  # one line back to start(), never a traceback
        say(f"error: {_describe(e)}")
        return
    async with store:
        try:
            await beat(store, dest, job.instant)
            if keeper is not None:  # before "ok": the write is not over yet
                await claim_keeper(store, dest, job.instant, keeper)
        except Exception as e:
            say(f"error: {_describe(e)}")
            return
        say("ok")
        await keep_beating(
            store, dest, job.instant, ttl=job.ttl, still_running=still_running if job.watch else None
        )


def main() -> None:
    """The keep-alive process: read the job from stdin, beat, say ``ok``, keep beating;
    with ``--serve``, the kept one (:func:`serve`)."""
    from amcommit import loop as amcommit_loop

    if "--serve" in sys.argv[1:]:
        serve()
        return
    ready, _, _ = select.select([sys.stdin], [], [], START_TIMEOUT)
    data = sys.stdin.buffer.read() if ready else b""
    if not data:  # no job (its starter is gone): nothing written
        return
    job: _Job = pickle.loads(data)
    out = sys.stdout

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()
        if line == "ok":
            out.close()

    amcommit_loop.run(_keep, job, say)


def _read_job(idle: float | None) -> bytes | None:
    """The next job on stdin (blocking; length-prefixed, read unbuffered); None at its end
    (the starter is gone or closed it), b"" if none came within ``idle`` seconds (None: no
    limit)."""
    fd = sys.stdin.fileno()
    ready, _, _ = select.select([fd], [], [], idle)
    if not ready:
        return b""
    size = _read_exactly(fd, 4)
    if len(size) < 4:
        return None
    n = struct.unpack(">I", size)[0]
    data = _read_exactly(fd, n)
    return data if len(data) == n and n else None


def _read_exactly(fd: int, n: int) -> bytes:
    parts: list[bytes] = []
    left = n
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def serve() -> None:
    """The kept keep-alive process (module doc): beats every write handed to it on stdin,
    each as :func:`main` would, answering one line per write on stdout; takes no new write
    once stdin is closed and exits once it beats none; exits after :data:`SPARE_IDLE`
    seconds beating none without being handed one. A write whose beats fail ends alone."""
    import anyio

    from amcommit import loop as amcommit_loop

    out = sys.stdout

    def say(line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # its starter is gone
            out.write(line + "\n")
            out.flush()

    async def run() -> None:
        active = [0]

        async def one(job: _Job) -> None:
            said: list[str] = []

            def say_once(line: str) -> None:
                said.append(line)
                say(line)

            try:
                await _keep(job, say_once)
            except Exception as e:  # this write's beats end; the others go on
                if not said:
                    say(f"error: {_describe(e)}")
            finally:
                active[0] -= 1

        async with anyio.create_task_group() as tg:
            while True:
                data = await anyio.to_thread.run_sync(_read_job, SPARE_IDLE)
                if data is None:  # the starter is gone: beat on what was handed, take no more
                    break
                if data == b"":
                    if active[0] == 0:  # idle: nothing to beat
                        break
                    continue
                active[0] += 1
                tg.start_soon(one, pickle.loads(data))

    amcommit_loop.run(run)


if __name__ == "__main__":
    main()
