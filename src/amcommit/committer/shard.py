"""A plain job commit's renames sharded over worker processes (``processes`` > 1).

One process renames about 2,400 files/s on Azure (0.42 ms of client CPU per file); an
account takes about 20,000 requests/s. So the rename stage of a big commit can use more
than one core: the committing process (the *coordinator*) hands the rename plan out to
worker processes, each with its own event loop and its own store client.

Who owns what:

* the **coordinator** owns the destination lock (it keeps renewing it), the journal,
  directory creation, ``_SUCCESS`` and cleanup: everything before and after the rename
  stage runs there as in a one-process commit. It reads the spool and hands the entries out
  in *units* (at most ``rename_batch_size`` entries of one manifest where the store
  renames in batches, else :data:`UNIT_FILES`), a few at a time per worker
  (:data:`WORKER_CREDIT`, each renamed by its share of ``io_threads``), so a slow worker
  gets less; it counts what the workers report, names the first files for the
  report and emits progress;
* a **worker** only renames the units it is given (the same code, with the same
  recovery and rename ids, as the one-process stage:
  :func:`~amcommit.committer.stages.rename_files.rename_one` /
  :func:`~amcommit.committer.stages.rename_files.rename_batch`) and reports each unit
  done. It writes nothing else: no journal, no directory, no marker.

**One rate budget per account or bucket**, shared by every process: the coordinator's
limiters (the store's: an Azure account's 20,000 requests/s, a GCS bucket's write gate with
its ramp; and the job's ``io_rate``) stay the only token buckets. A worker's limiter takes
its tokens from the coordinator over the worker's socket, in grants
(:meth:`amcommit.store.limits.Limiter.take`: after the first token, what is available at
once), asking again before its grant runs out, and reports its answers there (throttling
ones at once, the others counted with its next request): the coordinator's limiter cuts,
probes, restores and ramps the one rate exactly as in one process (the token bucket and its
adaptation are not duplicated in shared memory, which would need the same logic
re-implemented across processes under a lock). The cost is one message per grant, not
per request. Each worker keeps its own in-flight limit (it bounds its own client's queue).

**Fence**: a worker's store is a :class:`~amcommit.coord.lease.FencedStore` whose fence is
the coordinator's lock as last reported (its ``safe_until``, a ``CLOCK_MONOTONIC`` time,
the same clock in every process of the host; sent with every grant and every second): no
worker write starts after the lock could have been lost. A worker whose coordinator is gone
(its socket reaches end-of-file: the kernel closes it when the coordinator dies, even by
SIGKILL) closes its fence (no write starts any more) and stops; a request already sent
still lands, as when a one-process commit is killed.

**Failures**: a worker's error is sent to the coordinator and raised there as the same
error type (a conflict rolls back like one in one process); a worker that dies, or fails
with an error of no known type, is :class:`~amcommit.errors.RenameWorkerFailed`. Either way
every worker is stopped (and waited for) before the error leaves this module, and the
journal is kept: recovery of a killed shard is the journal's, as for a killed one-process
commit (a resumed commit renames again and proves what was renamed; an abort rolls back).

Workers are *spawned*: a fresh interpreter (``sys.executable``, the coordinator's
``sys.path``), never a ``fork`` of a process that runs threads (Spark's ``commit()``
worker, an event loop's thread pool). They are started directly (:mod:`subprocess`, one
socket pair each, :class:`Channel` on it: whole messages, never a blocking write), not through
:mod:`multiprocessing`'s ``spawn`` context, whose child first runs the parent's
``__main__`` script again (a script without a ``__main__`` guard, or Spark's worker
module, would run twice). So this works wherever the committing code runs, including
Spark's ``commit()`` worker on the driver host (no SparkSession there, and none needed).
A worker needs about half a second of CPU to start (interpreter and imports).

What is atomic: each rename, as in one process; nothing more.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec

from amcommit import errors as amcommit_errors
from amcommit.committer.config import CommitterConfig
from amcommit.committer.context import JobContext
from amcommit.committer.layout import JobLayout
from amcommit.committer.spool import EntrySpool
from amcommit.coord.lease import FencedStore, LeaseLost
from amcommit.errors import AmcommitError, RenameWorkerFailed
from amcommit.manifest import RenameEntry
from amcommit.parallel import first_error
from amcommit.store.adaptive import AdaptiveLimit
from amcommit.store.base import Store, StoreRecipe, store_recipe
from amcommit.store.limits import DEFAULT_ADAPTIVE, Limiter, TokenSource

log = logging.getLogger("amcommit.shard")

WORKER_CREDIT = 3
"""Units a worker holds at once (renaming and queued): enough to keep its renames going
while it asks for the next, few enough that the work stays balanced."""

UNIT_FILES = 256
"""Entries per unit when renaming file by file (with batches: ``rename_batch_size``)."""

AUTO_MIN_FILES = 20_000
"""With ``processes`` unset, a job of fewer files renames in one process (starting a
worker costs about a second of CPU; below this a second process gains less)."""

PROCESS_REQUESTS_PER_S = 4_800.0
"""Requests per second one process sends while renaming at full CPU (about 2,400 files/s,
two requests per rename on a copy-based store): the store's ceiling divided by this is
how many processes it keeps busy."""

GRANT_FIRST = 256
GRANT_MAX = 4096
"""The rate tokens a worker asks for at first, and at most: it doubles its ask while the
budget grants all of it, and asks again when half is left (a worker waiting for tokens
idles: measured, asks of 32 to 512 left a worker at a third of its CPU). A grant never
holds more than the budget has at once (a bucket's burst, a tenth of its rate)."""

FENCE_EVERY = 1.0
"""Seconds between the coordinator's fence messages to its workers."""


def available_cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def unwrap(store: Store) -> Store:
    """The store below the destination lock's fence (:class:`FencedStore` only: any
    other wrapper is kept, and such a store has no recipe)."""
    while isinstance(store, FencedStore):
        store = store.inner
    return store


def _budgets(store: Store, job_limiter: Limiter) -> dict[str, Limiter]:
    """The coordinator's limiters a worker's requests must share (by key)."""
    out = {"job": job_limiter}
    for key, attr in (("store", "limiter"), ("write", "write_limiter")):
        lim = getattr(store, attr, None)
        if isinstance(lim, Limiter):
            out[key] = lim
    return out


def default_processes(store: Store, files: int, cores: int | None = None) -> int:
    """How many processes rename ``files`` files on ``store`` when ``processes`` is unset
    (pure but for reading the store's limiters):

    * 1 on local files (the kernel serialises renames between directories: two processes
      were measured slower than one) and for fewer than :data:`AUTO_MIN_FILES` files;
    * else the cores, but no more than the store's ceilings keep busy: each of its rate
      limits (requests/s, a GCS bucket's writes/s) divided by
      :data:`PROCESS_REQUESTS_PER_S`, rounded up (no rate limit: the cores)."""
    inner = unwrap(store)
    if inner.capabilities.local_root is not None or files < AUTO_MIN_FILES:
        return 1
    n = cores if cores is not None else available_cores()
    for key in ("store", "write"):
        lim = _budgets(inner, Limiter(max_concurrency=None)).get(key)
        if lim is not None and lim.max_rate is not None:
            n = min(n, math.ceil(lim.max_rate / PROCESS_REQUESTS_PER_S))
    return max(1, n)


@dataclass(frozen=True)
class ShardPlan:
    """How the renames of a commit are sharded: ``processes`` workers opening ``recipe``."""

    processes: int
    recipe: StoreRecipe


def plan(ctx: JobContext, files: int) -> ShardPlan | None:
    """The sharding of ``files`` renames (None: rename in this process): ``processes``
    (the config's, else :func:`default_processes`), if more than one, for a plain job
    (its directory under ``_temporary``; a table's commit renames in one process), and
    if the store can be opened again in a worker (it keeps a
    :class:`~amcommit.store.base.StoreRecipe` whose arguments pickle)."""
    if ctx.layout.staging is not None:
        return None  # a kind's own staging (a table's): its commit renames in one process
    n = ctx.config.processes
    if n is None:
        n = default_processes(ctx.store, files)
    n = min(n, max(1, files))
    if n <= 1:
        return None
    recipe = store_recipe(unwrap(ctx.store))
    if recipe is None:
        log.info("renaming in one process: the store %s cannot be opened in another", ctx.store.root_uri)
        return None
    try:
        pickle.dumps(recipe)
    except Exception:  # a credential object that does not pickle, ...
        log.info("renaming in one process: the store's settings cannot be passed to another process")
        return None
    return ShardPlan(n, recipe)


# -- what travels between the processes -------------------------------------------------


@dataclass(frozen=True)
class LimiterShape:
    """How a worker builds its limiter for one budget: its own in-flight limit (as the
    coordinator's: adaptive, fixed or none) and the shared rate."""

    adaptive: bool
    max_concurrency: int | None

    @staticmethod
    def of(lim: Limiter) -> LimiterShape:
        return LimiterShape(lim.adaptive is not None, lim.max_concurrency)

    def build(self, source: TokenSource) -> Limiter:
        if self.adaptive:
            return Limiter(
                max_concurrency=None, adaptive=AdaptiveLimit(**DEFAULT_ADAPTIVE), token_source=source
            )
        return Limiter(max_concurrency=self.max_concurrency, token_source=source)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs (pickled into the spawned process)."""

    index: int
    recipe: StoreRecipe
    layout: JobLayout
    config: CommitterConfig
    roots: list[str] | None
    budgets: dict[str, LimiterShape]
    fence_until: float | None
    dest_uri: str
    batched: bool


# coordinator -> worker: ("unit", id, rows as MessagePack) ("end",) ("grant", key, n, fence) ("fence", t) ("stop",)
# worker -> coordinator: ("more",) ("want", key, n, ok) ("thr", key, retry_after, ok)
#                        ("done", ...) also asks for the next unit
#                        ("done", id, recovered, moved_aside) ("error", type, module, message)
#                        ("bye",)


_BOOT = (
    "import sys, json; sys.path[:0] = json.loads(sys.argv[2]); "
    "from amcommit.committer.shard_worker import main; main(int(sys.argv[1]))"
)
"""A worker's command line (``python -c _BOOT FD PATH``): the coordinator's import path
first, then the worker's entry point on the socket ``FD``."""


_HEADER = 4


class Channel:
    """One end of a worker's socket pair: whole pickled messages (a 4-byte length, then
    the pickle), sent without ever blocking (what the socket does not take now waits in an
    outgoing buffer that :meth:`pump` writes when the socket can take it), received as
    they arrive. Neither side can then stall the other: a coordinator writing units to a
    worker that is writing its reports back does not wait for it, nor the reverse."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._out = bytearray()
        self._in = bytearray()
        self._pending = anyio.Event()

    def send(self, msg: tuple[Any, ...]) -> None:
        """Queue ``msg`` (never blocks); :meth:`pump` writes it, with whatever else was
        queued meanwhile (one system call for many messages)."""
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        self._out += len(data).to_bytes(_HEADER, "little") + data
        self._pending.set()

    def _write(self) -> None:
        try:
            while self._out:
                n = self.sock.send(self._out)
                del self._out[:n]
        except (BlockingIOError, InterruptedError):
            pass  # the socket is full: pump writes the rest when it can take more
        except OSError:
            self._out.clear()  # the other end is gone: receive() reports it

    async def pump(self) -> None:
        """Write the outgoing buffer whenever the socket can take more (run as a task)."""
        while True:
            if not self._out:
                await self._pending.wait()
                self._pending = anyio.Event()
                continue
            self._write()
            if self._out:
                await anyio.wait_writable(self.sock)

    async def receive(self) -> list[Any]:
        """The messages that arrived (waits for at least some bytes). EOFError once the
        other end is closed (its process gone)."""
        while True:
            await anyio.wait_readable(self.sock)
            try:
                data = self.sock.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                raise EOFError
            buf = self._in
            buf += data
            out: list[Any] = []
            pos = 0
            while len(buf) - pos >= _HEADER:
                n = int.from_bytes(buf[pos : pos + _HEADER], "little")
                if len(buf) - pos - _HEADER < n:
                    break
                out.append(pickle.loads(buf[pos + _HEADER : pos + _HEADER + n]))
                pos += _HEADER + n
            del buf[:pos]
            if out:
                return out

    def send_now(self, msg: tuple[Any, ...]) -> None:
        """Send ``msg`` after what is queued, blocking until written (outside an event
        loop: a worker's last words)."""
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        self.sock.setblocking(True)
        self.sock.sendall(bytes(self._out) + len(data).to_bytes(_HEADER, "little") + data)
        self._out.clear()

    def receive_now(self) -> Any:
        """One message, blocking (outside an event loop: a worker's spec). EOFError if
        the other end is closed."""
        self.sock.setblocking(True)
        try:
            header = self._read_exactly(_HEADER)
            msg = pickle.loads(self._read_exactly(int.from_bytes(header, "little")))
        finally:
            self.sock.setblocking(False)
        return msg

    def _read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


# -- the coordinator ----------------------------------------------------------------------


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    chan: Channel
    units: dict[int, list[RenameEntry]] = field(default_factory=dict)
    finished: bool = False
    started: float = field(default_factory=time.monotonic)

    def send(self, msg: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # a worker that died: its reader reports it
            self.chan.send(msg)


encode_rows = msgspec.msgpack.Encoder().encode
"""A unit's rows as MessagePack (the spool's own encoding: one C call each way, where
pickling builds every entry through its constructor)."""


def units_of(spool: EntrySpool, size: int) -> Iterator[list[RenameEntry]]:
    """The spool's entries in units of at most ``size``, one manifest's frame at a time."""
    for _, rows in spool.frames():
        for i in range(0, len(rows), size):
            yield rows[i : i + size] if len(rows) > size else rows


def _error_from(name: str, module: str, message: str, worker: int) -> BaseException:
    """The worker's error as the coordinator raises it: the same amcommit error type
    (a conflict stays a conflict), else :class:`RenameWorkerFailed`."""
    cls = getattr(amcommit_errors, name, None) if module == amcommit_errors.__name__ else None
    if cls is None and module == "amcommit.coord.lease" and name == "LeaseLost":
        cls = LeaseLost
    if isinstance(cls, type) and issubclass(cls, AmcommitError):
        try:
            err: BaseException = cls(message)
            return err
        except Exception:
            pass
    return RenameWorkerFailed(f"rename worker {worker} failed: {name}: {message}")


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


async def rename_sharded(
    ctx: JobContext, spool: EntrySpool, roots: list[str] | None, shard: ShardPlan
) -> list[str]:
    """Rename every entry of ``spool`` with ``shard.processes`` worker processes (see the
    module doc). Counts renamed, recovered and moved-aside files in the report and emits
    progress; returns the first ``success_filenames`` destinations renamed."""
    report = ctx.report
    total = spool.count
    limit = ctx.config.success_filenames
    names: list[str] = []
    inner = unwrap(ctx.store)
    budgets = _budgets(inner, ctx.limiter)
    lock = ctx.store.lock if isinstance(ctx.store, FencedStore) else None

    def fence_until() -> float | None:
        until = getattr(lock, "safe_until", None)
        return until if isinstance(until, float) else None

    batched = ctx.config.rename_batch_size > 1 and ctx.config.io_rate is None
    size = ctx.config.rename_batch_size if batched else UNIT_FILES
    units = units_of(spool, size)
    next_id = 0
    workers: list[_Worker] = []
    report.job_stats.incr("committer_rename_processes", shard.processes)

    def next_unit(w: _Worker) -> None:
        nonlocal next_id
        rows = next(units, None)
        if rows is None:
            w.send(("end",))
            return
        next_id += 1
        w.units[next_id] = rows
        w.send(("unit", next_id, encode_rows(rows)))

    async def grant(w: _Worker, lim: Limiter, key: str, n: int) -> None:
        got = await lim.take(n)
        w.send(("grant", key, got, fence_until()))

    async def serve(w: _Worker, tg: anyio.abc.TaskGroup) -> None:
        first = True
        while True:
            try:
                msgs = await w.chan.receive()
                if first:  # its first word: the worker is up (interpreter, imports, store)
                    first = False
                    report.job_stats.record("rename_worker_start", time.monotonic() - w.started)
            except (EOFError, OSError):
                if w.finished:
                    return
                await _wait(w.proc, 5.0)
                raise RenameWorkerFailed(
                    f"rename worker {w.index} (pid {w.proc.pid}) died ({_exit_text(w.proc.returncode)}); "
                    "the commit stopped with its journal kept: run commit_job again to resume it, or "
                    "abort_job to roll it back",
                    stage="rename_files",
                ) from None
            for msg in msgs:
                kind = msg[0]
                if kind == "more":
                    next_unit(w)
                elif kind == "want":
                    lim = budgets[msg[1]]
                    lim.record_answers(msg[3])
                    tg.start_soon(grant, w, lim, msg[1], msg[2])
                elif kind == "thr":
                    lim = budgets[msg[1]]
                    lim.record_answers(msg[3])
                    lim.throttled(msg[2])
                elif kind == "done":  # and one more unit, please
                    next_unit(w)
                    rows = w.units.pop(msg[1], [])
                    report.renamed += len(rows)
                    report.recovered_renames += msg[2]
                    report.moved_aside += msg[3]
                    if len(names) < limit:
                        names.extend(e.dst for e in rows[: limit - len(names)])
                    if rows:
                        ctx.emit("rename_files", report.renamed, total)
                elif kind == "error":
                    raise _error_from(msg[1], msg[2], msg[3], w.index)
                elif kind == "bye":
                    w.finished = True
                    return

    async def push_fence() -> None:
        while True:
            await anyio.sleep(FENCE_EVERY)
            until = fence_until()
            for w in workers:
                if not w.finished:
                    w.send(("fence", until))

    try:
        boot = [sys.executable, "-c", _BOOT]
        path = json.dumps(sys.path)  # "" (the working directory) too: the worker inherits it
        for i in range(shard.processes):
            ours, theirs = socket.socketpair()
            with ours, theirs:
                # (a fork+exec of a few ms; the worker's start-up runs in the worker)
                proc = subprocess.Popen(  # noqa: ASYNC220
                    [*boot, str(theirs.fileno()), path],
                    pass_fds=[theirs.fileno()],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
                chan = Channel(socket.socket(fileno=ours.detach()))
            workers.append(_Worker(i, proc, chan))
            spec = WorkerSpec(
                index=i,
                recipe=shard.recipe,
                layout=ctx.layout,
                config=ctx.config,
                roots=roots,
                budgets={k: LimiterShape.of(v) for k, v in budgets.items()},
                fence_until=fence_until(),
                dest_uri=report.dest_uri,
                batched=batched,
            )
            chan.send(("spec", spec))
        async with anyio.create_task_group() as tg:
            tg.start_soon(push_fence)
            for w in workers:
                tg.start_soon(w.chan.pump)
            async with anyio.create_task_group() as serving:
                for w in workers:
                    serving.start_soon(serve, w, tg)
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as eg:
        raise first_error(eg) from None
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(workers)
    return names


async def _stop(workers: list[_Worker]) -> None:
    """Stop every worker and wait until it is gone: asked first (it cancels what it is
    doing, as a one-process commit does on an error), killed after a grace period."""
    for w in workers:
        if w.proc.poll() is None:
            w.send(("stop",))
    deadline = time.monotonic() + 5.0
    for w in workers:
        await _wait(w.proc, max(0.0, deadline - time.monotonic()))
        if w.proc.poll() is None:
            w.proc.kill()
            await _wait(w.proc, 5.0)
        with contextlib.suppress(OSError):
            w.chan.close()


async def _wait(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait (in a thread) up to ``seconds`` for ``proc`` to exit."""

    def wait() -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(seconds)

    await anyio.to_thread.run_sync(wait)
