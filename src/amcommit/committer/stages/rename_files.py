"""Stage 4 (``rename_files``): rename every file into place, in parallel, rate limited,
recovering retries: ``run(ctx, RenameInputs) -> RenameResults``.

Each rename never overwrites, and every rename the engine makes carries a deterministic id
(:mod:`~amcommit.committer.stages.renaming`: forward renames, moves to the trash and back,
a rollback's moves back into the task directory), so a later process recognises its own
half-done copies. Whether a rename happened is decided in one place,
:func:`amcommit.store.proof.judge_rename`.

What happens when a rename does not simply succeed:

* transient failure / throttling: retried with backoff (the limiter slows down);
* the source is gone (a lost response, or a resumed commit): the destination is checked;
  if it is provably this job's file, the rename counts as *recovered*;
* both exist and the destination is this job's copy of the source (a copy-based rename
  killed between copy and delete): the source is deleted, completing the rename;
* the destination exists and is not ours: in ``replace``/``overwrite`` scope (or with
  ``delete_target_files``) the old file is moved aside to the job's trash and the rename
  retried (an old *directory* of that name, on a store with directories: every file in it,
  see :func:`~amcommit.committer.stages.renaming.move_tree_aside`); otherwise it is a
  :class:`~amcommit.errors.ConflictError` naming the path and what to do next;
* the source's etag changed since task commit: a :class:`~amcommit.errors.CommitError`,
  unless the source carries this job's
  :func:`~amcommit.committer.stages.renaming.back_id` (an earlier rollback of this job put
  it back; a copy-based store gave it a new etag).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import itemgetter

import anyio

from amcommit.committer.config import DEFAULT_IO_THREADS
from amcommit.committer.context import FAILED_IN_BATCH_CONCURRENCY, JobContext
from amcommit.committer.spool import EntrySpool
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.messages import conflict_message
from amcommit.committer.stages.renaming import (
    back_id,
    forward_expected,
    move_aside,
    move_tree_aside,
    rename_id,
    settle,
    settle_look,
    stat_or_none,
)
from amcommit.committer.stages.scope import in_replace_scope, replace_scope
from amcommit.errors import (
    AlreadyExists,
    CommitError,
    ConflictError,
    NotFound,
    PreconditionFailed,
    StoreError,
)
from amcommit.manifest import RenameEntry
from amcommit.parallel import run_parallel
from amcommit.paths import path_to_uri
from amcommit.store.base import BatchRenamer, RenameRequest, RenameResult, batch_renamer, recovered_in
from amcommit.store.limits import Limiter
from amcommit.store.proof import Expected, Verdict


@dataclass(frozen=True)
class RenameInputs:
    loaded: LoadedManifests


@dataclass(frozen=True)
class RenameResults:
    renamed: int
    """Files renamed by this run (also counted in the report, with ``recovered_renames``
    and the first ``filenames``)."""
    recovered: int


async def run(ctx: JobContext, inputs: RenameInputs) -> RenameResults:
    """Rename every file of the loaded manifests (see the module docstring)."""
    await rename_files(ctx, inputs.loaded)
    return RenameResults(ctx.report.renamed, ctx.report.recovered_renames)


async def rename_one(
    ctx: JobContext, entry: RenameEntry, roots: list[str] | None, first: StoreError | None = None
) -> RenameResult:
    """Rename one file with recovery (see module docstring). ``roots``: replace scope.
    ``first``: the answer an earlier attempt of this rename got (a batch's), a
    non-retryable error, taken as the first call's answer instead of calling again."""
    store, job = ctx.store, ctx.layout.job_id
    want = forward_expected(job, entry)
    rid = want.rename_id
    src_etag, src_meta = entry.etag, entry.meta
    moved_aside = stale_removed = moved_back = False
    while True:
        try:
            if first is not None:
                err, first = first, None
                raise err
            return await ctx.call(
                partial(
                    store.rename, entry.src, entry.dst, src_etag=src_etag, rename_id=rid, src_meta=src_meta
                )
            )
        except NotFound:
            if await settle(ctx, entry.src, entry.dst, want) is Verdict.DONE:
                return RenameResult(entry.dst, recovered=True)
            raise CommitError(
                f"source {entry.src!r} of {entry.dst!r} is missing and the destination is not this job's file"
            ) from None
        except AlreadyExists:
            verdict, here = await settle_look(ctx, entry.src, entry.dst, want)
            if verdict is Verdict.DONE:
                return RenameResult(entry.dst, recovered=True)
            if verdict is Verdict.STALE and not stale_removed:
                await ctx.call(lambda: store.delete(entry.dst))  # our copy of another version
                stale_removed = True
                continue
            is_dir = here is not None and here.is_dir
            if moved_aside or roots is None or not in_replace_scope(ctx, entry.dst, roots):
                raise ConflictError(conflict_message(ctx, entry.dst, directory=is_dir)) from None
            if is_dir:
                await move_tree_aside(ctx, entry.dst)
            else:
                await move_aside(ctx, entry.dst)
            moved_aside = True
        except PreconditionFailed as e:
            s = await stat_or_none(ctx, entry.src)
            if (
                not moved_back
                and s is not None
                and s.rename_id == back_id(job, entry.src)
                and s.size == entry.size
            ):
                # an earlier rollback of this job moved the file back (new etag on a copy store)
                src_etag, src_meta, moved_back = s.etag, s.user_meta, True
                want = Expected(rid, entry.size, s.etag)
                continue
            raise CommitError(
                f"source {entry.src!r} changed after its task committed ({e.message}); nothing of it was published"
            ) from None


async def rename_files(ctx: JobContext, loaded: LoadedManifests) -> None:
    """Rename everything in the spool; counts renamed and recovered files in the report.
    With ``processes`` (or its default) above one, worker processes rename
    (:mod:`amcommit.committer.shard`)."""
    from amcommit.committer.shard import plan as shard_plan
    from amcommit.committer.shard import rename_sharded

    spool = loaded.spool
    report = ctx.report
    total = spool.count
    replacing = ctx.config.conflict_mode in ("replace", "overwrite") or ctx.config.delete_target_files
    roots = (
        (replace_scope(ctx, spool) if ctx.config.conflict_mode != "append" else [ctx.layout.dest])
        if replacing
        else None
    )
    names: list[str] = []
    limit = ctx.config.success_filenames
    shard = shard_plan(ctx, total)
    if shard is not None:  # worker processes rename (amcommit.committer.shard)
        names = await rename_sharded(ctx, spool, roots, shard)
        report.filenames = [path_to_uri(ctx.store.root_uri, n) for n in sorted(names)]
        return

    gate = _follow_gate(ctx)

    async def one(entry: RenameEntry) -> None:
        if gate is None:
            res = await rename_one(ctx, entry, roots)
        else:
            async with gate:
                res = await rename_one(ctx, entry, roots)
        report.renamed += 1
        if res.recovered:
            report.recovered_renames += 1
        if len(names) < limit:
            names.append(entry.dst)
        ctx.emit("rename_files", report.renamed, total)

    batcher = batch_renamer(ctx.store)
    size = ctx.config.rename_batch_size
    if batcher is not None and size > 1 and ctx.config.io_rate is None:

        async def batch(rows: list[RenameEntry]) -> None:
            redone = await rename_batch(ctx, batcher, rows, roots)
            report.renamed += len(rows)
            report.recovered_renames += sum(1 for r in redone.values() if r.recovered)
            if len(names) < limit:
                names.extend(e.dst for e in rows[: limit - len(names)])
            ctx.emit("rename_files", report.renamed, total)

        if gate is None:
            await run_parallel(_batches(spool, size), batch, min(ctx.config.io_threads, BATCH_WORKERS))
        else:  # as many batches in progress as the limit has room for their renames

            async def gated(rows: list[RenameEntry]) -> None:
                async with gate.hold(len(rows)):
                    await batch(rows)

            gate.min_holders, gate.floor = BATCH_WORKERS, 0
            await run_parallel(_batches(spool, size), gated, FOLLOW_BATCHES)
    else:
        await run_parallel(spool.entries(), one, max(1, min(rename_workers(ctx), total)))
    report.filenames = [path_to_uri(ctx.store.root_uri, n) for n in sorted(names)]


def store_limiter(store: object, *, depth: int = 8) -> Limiter | None:
    """The limiter of ``store`` (or of the store it wraps, following ``inner``); None if
    there is none."""
    for _ in range(depth):
        lim = getattr(store, "limiter", None)
        if isinstance(lim, Limiter):
            return lim
        store = getattr(store, "inner", None)
        if store is None:
            return None
    return None


def _following(ctx: JobContext) -> Limiter | None:
    """The store's limiter when the renames follow it: ``io_threads`` at its default
    (:data:`~amcommit.committer.config.DEFAULT_IO_THREADS`) and a limiter whose in-flight
    ceiling is above it; else None (``io_threads`` bounds the renames, as Hadoop's
    ``io.threads`` does)."""
    if ctx.config.io_threads != DEFAULT_IO_THREADS:
        return None
    lim = store_limiter(ctx.store)
    if lim is None:
        return None
    ceiling = lim.concurrency_ceiling
    return lim if ceiling is not None and ceiling > DEFAULT_IO_THREADS else None


def rename_workers(ctx: JobContext) -> int:
    """Rename workers (one coroutine each, path by path): ``io_threads``, or, when the
    renames follow the store's limiter (:func:`_following`), its in-flight ceiling (an HTTP
    store's adaptive limit: 1,024 requests, :data:`~amcommit.store.limits.DEFAULT_ADAPTIVE`);
    how many of them rename at once is then the :class:`FollowGate`'s to say."""
    lim = _following(ctx)
    if lim is None:
        return ctx.config.io_threads
    return lim.concurrency_ceiling or ctx.config.io_threads


HEADROOM_MIN = 8
"""Renames admitted above the store's in-flight limit: at least this many, or a quarter of
the limit (see :class:`FollowGate`)."""

WRITE_MARGIN = 1.5
"""Renames admitted while the store's write gate binds: this many times the renames that
were, on average over the last window, in flight and *not* waiting at the gate (see
:class:`FollowGate`)."""
WRITE_WINDOW = 0.25
"""Seconds (at least) over which :class:`FollowGate` measures the write gate's queue."""
WRITE_MIN_SAMPLES = 32
"""Renames that end (at least) in a window before it is judged."""
WRITE_BINDS = 0.1
"""The write gate binds when, on average over a window, at least this share of the renames
in flight were waiting at it (below that the gate is left unbounded by it)."""
WRITE_FLOOR = 16
"""The fewest renames the write-gate bound admits."""


def store_write_gate(store: object, *, depth: int = 8) -> Limiter | None:
    """The write gate of ``store`` (a rate limit on its writes only, e.g. a cold GCS
    bucket's 1,000 writes/s: its ``write_limiter``), or of the store it wraps; None if
    there is none (``bucket_warm=true``, or a store without one)."""
    for _ in range(depth):
        gate = getattr(store, "write_limiter", None)
        if isinstance(gate, Limiter):
            return gate
        store = getattr(store, "inner", None)
        if store is None:
            return None
    return None


class FollowGate:
    """Admits renames while fewer than the store limiter's in-flight limit *now*, plus a
    headroom, are renaming; never more than its ceiling, never fewer than
    :data:`~amcommit.committer.config.DEFAULT_IO_THREADS` (below that the limiter's own gate
    holds the requests back, as before: on a machine whose CPU is saturated the adaptive
    limit shrinks with the client's own latency, and fewer renames offered than 128 were
    measured slower, 154 against 239 files/s on fake-gcs-server at 50 ms, 2026-11-29, load
    8-10). The adaptive limit grows while
    the service's latency holds and its limit is reached, and shrinks when latency rises;
    renames follow it, instead of a fixed ``io_threads`` below it (issue 35: 128 renames of
    about 4 requests each bound fake-gcs-server's commit at 50 ms per request to 2.0-2.3x
    the SDK committer). The headroom keeps the limiter's gate reached (a rename sends its
    requests one after another, with client work between them: exactly as many renames
    as the limit would leave it short, and it would never grow).

    **The store's write ceiling** (``write_gate``: a cold GCS bucket's 1,000 writes/s, two
    writes per rename): when the renames wait at the write gate, more of them in flight
    only lengthen its queue (and every waiter costs the event loop wake-ups), the rate
    stays the gate's. Over windows of at least :data:`WRITE_WINDOW` seconds and
    :data:`WRITE_MIN_SAMPLES` ended renames, the gate measures the renames in flight on
    average, ``N`` (the integral of the count over time, by the injected ``clock``) and
    the writes waiting at the write gate on average, ``Q`` (its ``waited_seconds`` over the
    window's length); when ``Q`` is at least :data:`WRITE_BINDS` of ``N`` the write gate
    binds, and the renames admitted are bounded by :data:`WRITE_MARGIN` × (``N`` − ``Q``)
    (Little's law: the renames that keep the write gate busy at its rate, with a margin
    that keeps a queue at it, about a third of the renames), never below
    :data:`WRITE_FLOOR`; below the share the bound is lifted (``write_cap`` None) and the
    renames follow the in-flight limit again (a bucket warmed up, a rate restored). This
    bound may be below the 128. Without a write gate (``bucket_warm=true``, Blob) there is
    no such bound.

    **Batches** (:meth:`hold`, Blob's Copy Blob + Blob Batch): a batch of ``n`` renames
    takes ``n`` turns at once, admitted when they fit (or while fewer than
    :attr:`min_holders` holds run), in order with everything waiting. Not thread-safe (one
    event loop)."""

    def __init__(
        self,
        limiter: Limiter,
        write_gate: Limiter | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limiter = limiter
        self.write_gate = write_gate
        self.ceiling = limiter.concurrency_ceiling or DEFAULT_IO_THREADS
        self.active = 0
        self.peak = 0
        self.write_cap: int | None = None
        """The bound the write gate sets now (None: none; see the class docstring)."""
        self.floor = DEFAULT_IO_THREADS
        """The fewest renames admitted whatever the limit (the batch path: none, see
        :data:`FOLLOW_BATCHES`)."""
        self.holders = 0
        """Holds in progress (:meth:`hold`: a batch of renames each; one per rename)."""
        self.min_holders = 0
        """Holds admitted whatever their weight while fewer are in progress (the batch
        path keeps :data:`BATCH_WORKERS` batches going, as before it followed the limit)."""
        self._waiters: deque[tuple[anyio.Event, int]] = deque()
        self._clock = clock
        now = clock()
        self._last = now  # the last change of ``active``
        self._win_start = now
        self._win_area = 0.0  # integral of ``active`` over the window (rename-seconds)
        self._win_ended = 0
        self._win_waited = write_gate.waited_seconds if write_gate is not None else 0.0

    def allowed(self) -> int:
        """Renames admitted at once now."""
        limit = self.limiter.concurrency_limit or self.ceiling
        n = min(self.ceiling, max(self.floor, limit + max(HEADROOM_MIN, limit // 4)))
        cap = self.write_cap
        return n if cap is None else min(n, cap)

    async def __aenter__(self) -> None:
        await self._enter(1)

    async def __aexit__(self, *exc: object) -> None:
        self._leave(1)

    @asynccontextmanager
    async def hold(self, renames: int) -> AsyncIterator[None]:
        """Admit a batch of ``renames`` at once (counted as that many renames in flight):
        when they fit under :meth:`allowed` beside those in flight, or when fewer than
        :attr:`min_holders` holds are in progress (a batch larger than the limit is not
        kept out for ever); in order with the single renames and batches waiting."""
        n = max(1, renames)
        await self._enter(n)
        try:
            yield
        finally:
            self._leave(n)

    def _fits(self, n: int) -> bool:
        return self.active + n <= self.allowed() or self.holders < self.min_holders

    async def _enter(self, n: int) -> None:
        if not self._waiters and self._fits(n):
            self._admit(n)  # fast path: a turn is free and nobody is in line
            return
        ev = anyio.Event()
        entry = (ev, n)
        self._waiters.append(entry)
        try:
            await ev.wait()  # the turn is counted for us by _wake
        except BaseException:
            if ev.is_set():
                self._leave(n, ended=False)  # handed a turn while being cancelled: pass it on
            else:
                self._waiters.remove(entry)
            raise

    def _tick(self) -> float:
        """Account the renames in flight since the last change; the time now."""
        now = self._clock()
        self._win_area += self.active * (now - self._last)
        self._last = now
        return now

    def _admit(self, n: int) -> None:
        if self.write_gate is not None:
            self._tick()
        self.active += n
        self.holders += 1
        self.peak = max(self.peak, self.active)

    def _leave(self, n: int, *, ended: bool = True) -> None:
        if self.write_gate is not None:
            now = self._tick()
            self._win_ended += n if ended else 0
            if now - self._win_start >= WRITE_WINDOW and self._win_ended >= WRITE_MIN_SAMPLES:
                self._judge(now)
        self.active -= n
        self.holders -= 1
        self._wake()

    def _judge(self, now: float) -> None:
        """Close the window: set or lift the write-gate bound (see the class docstring)."""
        gate = self.write_gate
        assert gate is not None
        span = now - self._win_start
        waited = gate.waited_seconds
        in_flight = self._win_area / span
        queued = min(in_flight, max(0.0, waited - self._win_waited) / span)
        if in_flight > 0 and queued >= WRITE_BINDS * in_flight:
            self.write_cap = max(WRITE_FLOOR, math.ceil(WRITE_MARGIN * (in_flight - queued)))
        else:
            self.write_cap = None
        self._win_start, self._win_area, self._win_ended, self._win_waited = now, 0.0, 0, waited

    def _wake(self) -> None:
        """Hand the free turns (the limit may have grown) to waiters, in order."""
        waiters = self._waiters
        while waiters and self._fits(waiters[0][1]):
            ev, n = waiters.popleft()
            self._admit(n)
            ev.set()


def _follow_gate(ctx: JobContext) -> FollowGate | None:
    lim = _following(ctx)
    return FollowGate(lim, store_write_gate(ctx.store)) if lim is not None else None


BATCH_WORKERS = 2
"""Batches in progress at once on a :class:`~amcommit.store.base.BatchRenamer`: one is
prepared while the other renames (the local store renames one batch at a time: see
:class:`~amcommit.store.local.LocalStore`; Blob copies the files of the batches in
progress at once, within its limiter, and deletes their sources in one Blob Batch per
batch). On Blob, as many batches as ``io_threads`` measured the same client CPU
(2026-11-24, 2,000 files, c=8, alternating runs: 0.40-0.47 vs 0.39-0.47 ms/file). When the
renames follow the store's limiter (Blob with the default ``io_threads``), this is the
fewest batches in progress; more run while the limit has room (:data:`FOLLOW_BATCHES`)."""


FOLLOW_BATCHES = 64
"""Batches in progress at most when the renames follow the store's limiter
(:func:`_following`; Blob's Copy Blob + Blob Batch): each batch takes as many turns of the
:class:`FollowGate` as it has renames, so the files copied at once follow the adaptive
limit instead of two batches' worth (2 × 20 files with a task's 20-file manifest: at 50 ms
per request the commit could never have more than 40 copies in flight, whatever the
limit). Batches beyond what the gate admits wait holding their rows, so this bounds the
rows held in memory (64 × ``rename_batch_size``). Unlike single renames, batches get no
floor of 128 renames (``FollowGate.floor`` 0): a batch's copies wait at the limiter anyway,
and on an emulator whose own CPU binds (Azurite, limit at its floor of 32) more batches in
progress only lengthen them; with the limit at 32 and 20-file manifests the commit runs
the two batches it ran before."""


def _batches(spool: EntrySpool, size: int) -> Iterator[list[RenameEntry]]:
    """The spool's entries in lists of at most ``size``, one manifest's frame at a time
    (a batch never spans manifests: the kill tests' progress points fall between them)."""
    for _, rows in spool.frames():
        for i in range(0, len(rows), size):
            yield rows[i : i + size] if len(rows) > size else rows


_src, _dst, _etag = itemgetter(0), itemgetter(1), itemgetter(3)


def _requests(job: str, rows: list[RenameEntry], provenance: bool) -> list[RenameRequest]:
    """The batch's requests: each with its etag, and with its rename id where the store
    keeps provenance or the entry has no etag (see :func:`rename_id`)."""
    if not provenance and None not in map(_etag, rows):  # C loops only (local files)
        n = len(rows)
        fields = zip(
            map(_src, rows), map(_dst, rows), map(_etag, rows), repeat(None, n), repeat(None, n), strict=True
        )
        return list(map(tuple.__new__, repeat(RenameRequest, n), fields))
    return [
        RenameRequest(
            e.src, e.dst, e.etag, rename_id(job, e.dst) if provenance or e.etag is None else None, e.meta
        )
        for e in rows
    ]


async def rename_batch(
    ctx: JobContext, batcher: BatchRenamer, rows: list[RenameEntry], roots: list[str] | None
) -> dict[int, RenameResult]:
    """Rename ``rows`` with one :meth:`~amcommit.store.base.BatchRenamer.rename_batch` call
    (through the job's limiter and retry layer: one slot per batch), then every request
    that failed through :func:`rename_one` and its recovery: a non-retryable answer (the
    source gone, the destination taken, the etag changed) is handed to it as the first
    answer; after a retryable one (throttled, transient) it waits the backoff and renames
    again. Returns the results of the requests that went through :func:`rename_one`, by
    index in ``rows``, and ``RenameResult(dst, recovered=True)`` for those the batch
    reports recovered (:class:`~amcommit.store.base.BatchFailures`); every other row was
    renamed by the batch."""
    requests = _requests(ctx.layout.job_id, rows, ctx.store.capabilities.rename_provenance)
    failed = await ctx.call(partial(batcher.rename_batch, requests))
    results: dict[int, RenameResult] = {
        i: RenameResult(rows[i].dst, recovered=True) for i in recovered_in(failed)
    }
    if failed:

        async def recover(i: int) -> None:
            err = failed[i]
            if err.retryable:
                backoff = ctx.backoff()
                await anyio.sleep(backoff.after(err, 1))
                results[i] = await rename_one(ctx, rows[i], roots)
            else:
                results[i] = await rename_one(ctx, rows[i], roots, first=err)

        await run_parallel(sorted(failed), recover, FAILED_IN_BATCH_CONCURRENCY)
    return results
