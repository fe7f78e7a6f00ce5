"""The worker process of a sharded job commit (:mod:`amcommit.committer.shard`, whose
module doc says who owns what): it opens the store again from the coordinator's recipe,
with limiters whose rate tokens come from the coordinator, behind a fence that is the
coordinator's lock as last reported, and renames the units it is given with the
one-process stage's code (:func:`~amcommit.committer.stages.rename_files.rename_one`,
:func:`~amcommit.committer.stages.rename_files.rename_batch`), reporting each unit done.

Started as ``python -c`` :data:`~amcommit.committer.shard._BOOT`; :func:`main` is its entry
point. A worker whose coordinator is gone (end-of-file on its socket) refuses every later
write (its fence closes) and stops at once. What is atomic: each rename, nothing more.
"""

from __future__ import annotations

import contextlib
import math
import socket
import sys
import time
from typing import Any

import anyio
import msgspec

from amcommit.committer.context import JobContext
from amcommit.committer.report import JobReport
from amcommit.committer.shard import GRANT_FIRST, GRANT_MAX, WORKER_CREDIT, Channel, WorkerSpec
from amcommit.committer.stages.rename_files import rename_batch, rename_one
from amcommit.coord.lease import FencedStore, LeaseLost
from amcommit.manifest import RenameEntry
from amcommit.parallel import first_error, run_parallel
from amcommit.store.base import batch_renamer

_rows = msgspec.msgpack.Decoder(list[RenameEntry])


class _Fence:
    """The coordinator's lock as last reported (``safe_until``, monotonic; None: no lock)."""

    def __init__(self, until: float | None) -> None:
        self.until = until

    def check(self, op: str, path: str) -> None:
        if self.until is not None and time.monotonic() >= self.until:
            raise LeaseLost(
                f"the destination lock was not confirmed by the committing process in time; {op} {path!r} "
                "was not started"
            )


class _RemoteBudget:
    """A worker's side of one shared budget: a :class:`~amcommit.store.limits.TokenSource`
    fed by the coordinator's grants."""

    def __init__(self, key: str, send: Any) -> None:
        self.key = key
        self._send = send
        self.tokens = 0
        self.want = GRANT_FIRST
        self._asked = False
        self._ok = 0
        self._event = anyio.Event()

    def take_nowait(self) -> bool:
        if self.tokens <= 0:
            return False
        self.tokens -= 1
        if self.tokens < self.want // 2:
            self._ask()  # ask for the next grant before this one runs out
        return True

    async def take(self) -> None:
        while self.tokens <= 0:
            self._ask()
            await self._event.wait()
        self.tokens -= 1
        if self.tokens < self.want // 2:
            self._ask()  # ask for the next grant before this one runs out

    def _ask(self) -> None:
        if not self._asked:
            self._asked = True
            ok, self._ok = self._ok, 0
            self._send(("want", self.key, self.want, ok))

    def granted(self, n: int) -> None:
        self.tokens += n
        self._asked = False
        if n >= self.want:
            self.want = min(GRANT_MAX, self.want * 2)  # the budget has room: ask for more at once
        event, self._event = self._event, anyio.Event()
        event.set()

    def answered(self, throttled: bool, retry_after: float | None) -> None:
        if throttled:
            ok, self._ok = self._ok, 0
            self._send(("thr", self.key, retry_after, ok))
        else:
            self._ok += 1


def main(fd: int) -> None:
    """Entry point of a worker process (see the module doc): its spec is the first
    message on the socket ``fd``. Never raises: an error is reported to the coordinator;
    the process then exits."""
    from amcommit import loop as amcommit_loop

    chan = Channel(socket.socket(fileno=fd))
    try:
        try:
            _, spec = chan.receive_now()
        except EOFError:
            return  # the coordinator is gone already
        if not amcommit_loop.run(_worker, chan, spec):
            return  # the coordinator is gone: nobody to say goodbye to
    except BaseException as e:  # reported; the coordinator raises it
        if isinstance(e, BaseExceptionGroup):
            e = first_error(e)
        with contextlib.suppress(Exception):
            chan.send_now(("error", type(e).__name__, type(e).__module__, str(e)))
        sys.exit(1)
    with contextlib.suppress(Exception):
        chan.send_now(("bye",))
    chan.close()


async def _worker(chan: Channel, spec: WorkerSpec) -> bool:
    """Rename what the coordinator hands out; False if the coordinator went away."""

    send = chan.send

    gone = anyio.Event()
    budgets = {key: _RemoteBudget(key, send) for key in spec.budgets}
    fence = _Fence(spec.fence_until)
    extra: dict[str, object] = {}
    if "store" in spec.budgets:
        extra["limiter"] = spec.budgets["store"].build(budgets["store"])
    if "write" in spec.budgets:
        extra["write_limiter"] = spec.budgets["write"].build(budgets["write"])
    inner = spec.recipe.open(**extra)
    units_in, units_out = anyio.create_memory_object_stream[tuple[int, list[RenameEntry]]](math.inf)

    async with inner, anyio.create_task_group() as tg:
        store = FencedStore(inner, fence)
        report = JobReport(job_id=spec.layout.job_id, dest_uri=spec.dest_uri)
        job_limiter = spec.budgets["job"].build(budgets["job"])
        ctx = JobContext(store, spec.layout, spec.config, report, job_limiter)

        async def read() -> None:
            while True:
                try:
                    msgs = await chan.receive()
                except (EOFError, OSError):
                    # the coordinator is gone: no write starts any more, stop now
                    fence.until = 0.0
                    gone.set()
                    tg.cancel_scope.cancel()
                    return
                for msg in msgs:
                    kind = msg[0]
                    if kind == "unit":
                        units_in.send_nowait((msg[1], _rows.decode(msg[2])))
                    elif kind == "end":
                        units_in.close()
                    elif kind == "grant":
                        fence.until = msg[3]
                        budgets[msg[1]].granted(msg[2])
                    elif kind == "fence":
                        fence.until = msg[1]
                    elif kind == "stop":
                        tg.cancel_scope.cancel()
                        return

        sent_aside = 0

        def done(uid: int, recovered: int) -> None:
            nonlocal sent_aside
            aside, sent_aside = report.moved_aside - sent_aside, report.moved_aside
            send(("done", uid, recovered, aside))  # (and asks for the next unit)

        async def rename_all() -> None:
            for _ in range(WORKER_CREDIT):
                send(("more",))
            batcher = batch_renamer(store) if spec.batched else None
            if batcher is not None:

                async def batch(unit: tuple[int, list[RenameEntry]]) -> None:
                    uid, rows = unit
                    redone = await rename_batch(ctx, batcher, rows, spec.roots)
                    done(uid, sum(1 for r in redone.values() if r.recovered))

                await run_parallel(units_out, batch, min(spec.config.io_threads, WORKER_CREDIT))
            else:
                # units side by side, each renamed by its share of io_threads (a shared
                # iterator per unit: no hand-off per file)
                per_unit = max(1, spec.config.io_threads // WORKER_CREDIT)

                async def unit(item: tuple[int, list[RenameEntry]]) -> None:
                    uid, rows = item
                    recovered = 0

                    async def one(entry: RenameEntry) -> None:
                        nonlocal recovered
                        recovered += (await rename_one(ctx, entry, spec.roots)).recovered

                    await run_parallel(rows, one, per_unit)
                    done(uid, recovered)

                await run_parallel(units_out, unit, WORKER_CREDIT)
            tg.cancel_scope.cancel()  # done: stop reading

        tg.start_soon(chan.pump)
        tg.start_soon(read)
        tg.start_soon(rename_all)
    return not gone.is_set()
