"""Stage 1 (``load_manifests``): load and validate every task manifest into the
bounded-memory spool: ``run(ctx, LoadInputs) -> LoadedManifests``.

Manifests are read with ``config.load_threads`` in parallel; each is decoded, validated
(:func:`amcommit.manifest.check_manifest`) and appended to the spool, then dropped, so at
most ``load_threads`` manifests are in memory. Duplicate destinations across manifests are
found exactly and reported with the manifests that name them, before anything is renamed.
So are a destination that is a file in one entry and a directory of others, a destination
or directory the store cannot hold (``Capabilities.name_limits``, :mod:`amcommit.store.names`),
what the job kind's own check refuses (:attr:`LoadInputs.check`), and (on local stores,
where an ``lstat`` is cheap) a source that is a directory, a symbolic link or lies behind
one: elsewhere the rename itself refuses a directory source (see ``Store.rename``).
Every listing, read and write goes through the job's retry layer
(:mod:`amcommit.store.retry`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

import anyio.abc
import anyio.lowlevel

from amcommit.committer.context import JobContext
from amcommit.committer.layout import MANIFEST_SUFFIX
from amcommit.committer.lock import FencedStore
from amcommit.committer.spool import EntrySpool
from amcommit.errors import ManifestError
from amcommit.manifest import (
    CheckedManifest,
    TaskManifest,
    check_manifest_columns,
    decode_manifest,
    manifest_is_plain,
)
from amcommit.parallel import first_error, run_parallel
from amcommit.paths import basename, parent
from amcommit.store.base import Store
from amcommit.store.local import LocalStore, local_store_of
from amcommit.store.names import NameLimits, shorten

_YIELD_EVERY = 0.05
"""Seconds of loading after which the stage yields to the event loop at least once."""


async def list_manifest_paths(ctx: JobContext) -> list[str]:
    """Committed manifests of the job attempt (``*-manifest.json``; ``.tmp`` excluded)."""
    paths = [
        i.path
        async for i in ctx.list(ctx.layout.manifests_dir, recursive=False)
        if not i.is_dir and i.path.endswith(MANIFEST_SUFFIX)
    ]
    return sorted(paths)


ManifestCheck = Callable[[TaskManifest, CheckedManifest, str], None]
"""A job kind's own check of each manifest (:attr:`LoadInputs.check`): called with the
manifest, its validated renames and directories (store paths) and its name; raises
:class:`~amcommit.errors.ManifestError` to refuse it."""


@dataclass(frozen=True)
class LoadInputs:
    """``spool``: an empty spool the caller owns and closes (:func:`new_spool`; on a failure
    it keeps what was appended before it). ``manifests``: the task manifests if the caller
    has them (else they are read from the job attempt's manifest directory). ``check``: a
    further check of each manifest (e.g. a table's: only its own base files), run after the
    protocol's checks and before the manifest's entries are spooled."""

    spool: EntrySpool
    manifests: Sequence[TaskManifest] | None = None
    check: ManifestCheck | None = None


@dataclass(frozen=True)
class LoadedManifests:
    """The stage's result: every rename entry (in ``spool``), the directories the entries
    declare, the non-empty ``extra_data`` of the manifests (table writes read row counts
    from them) and the number of manifests loaded."""

    spool: EntrySpool
    dirs: frozenset[str]
    extra_data: tuple[dict[str, str], ...]
    manifests: int


def new_spool(ctx: JobContext) -> EntrySpool:
    """An empty spool in ``config.spool_dir`` for :class:`LoadInputs`."""
    return EntrySpool(directory=ctx.config.spool_dir)


async def run(ctx: JobContext, inputs: LoadInputs) -> LoadedManifests:
    """Load, validate and spool every manifest (see the module docstring); also counts
    manifests, files and bytes in the report. ManifestError on bad input."""
    spool, manifests = inputs.spool, inputs.manifests
    all_dirs: set[str] = set()
    extra_data: list[dict[str, str]] = []
    scope = ctx.scope
    job_id = ctx.layout.job_id
    task_ids: dict[str, str] = {}
    done = 0
    limits = ctx.store.capabilities.name_limits
    storable_dirs: set[str] = set()  # directories found within the store's name limits
    check = inputs.check

    def accept(m: TaskManifest, name: str, plain: bool = False) -> None:
        nonlocal done
        c = check_manifest_columns(m, job_id=job_id, scope=scope, name=name, plain=plain)
        if limits is not None:
            _check_names(limits, c, name, storable_dirs)
        if check is not None:
            check(m, c, name)
        other = task_ids.get(m.task_id)
        if other is not None:
            raise ManifestError(f"task {m.task_id} was committed twice (also in {other})", manifest=name)
        task_ids[m.task_id] = name
        spool.append_columns(c.srcs, c.dsts, c.sizes, c.etags, spool.add_manifest(name), c.meta)
        if sources is not None:
            sources.add(c.srcs, name)
        all_dirs.update(c.dirs)
        if m.extra_data:
            extra_data.append(dict(m.extra_data))
        ctx.report.task_stats.merge(m.iostatistics)
        done += 1

    sources = _local_sources(ctx)
    try:
        async with anyio.create_task_group() as tg:
            if manifests is not None:
                total = len(manifests)
                for m in manifests:
                    accept(m, f"manifest of {m.task_attempt_id}")
                    ctx.emit("load_manifests", done, total)
                    if sources is not None and sources.full():
                        await sources.start(tg)
            else:
                paths = await list_manifest_paths(ctx)
                total = len(paths)

                last_yield = time.monotonic()

                async def take(path: str, data: bytes) -> None:
                    nonlocal last_yield
                    accept(
                        decode_manifest(data, name=basename(path)), basename(path), manifest_is_plain(data)
                    )
                    ctx.emit("load_manifests", done, total)
                    if sources is not None and sources.full():
                        await sources.start(tg)
                    if time.monotonic() - last_yield > _YIELD_EVERY:
                        # a store that answers without waiting (a cache, a test double) would
                        # otherwise hold the event loop for the whole stage: the lock's
                        # heartbeat and progress reports must run
                        await anyio.lowlevel.checkpoint()
                        last_yield = time.monotonic()

                local = _plain_local(ctx.store)
                if local is not None:
                    await _read_in_chunks(ctx, local, paths, take, max(1, ctx.config.load_threads // 2))
                else:

                    async def load(path: str) -> None:
                        await take(path, await ctx.call(lambda: ctx.store.get(path)))

                    await run_parallel(paths, load, ctx.config.load_threads)
            if sources is not None:
                await sources.start(tg)
    except BaseExceptionGroup as eg:
        raise first_error(eg) from None

    dups = spool.find_duplicates()
    if dups:
        dst, names = dups[0]
        more = f" (and {len(dups) - 1} more)" if len(dups) > 1 else ""
        if len(set(names)) == 1:
            raise ManifestError(f"duplicate destination {dst!r}{more}", manifest=names[0])
        raise ManifestError(f"destination {dst!r} is written by several tasks: {', '.join(names)}{more}")
    _check_file_dir_clashes(spool, all_dirs, ctx.layout.dest)
    if sources is not None and sources.bad is not None:
        path, why, name = sources.bad
        raise ManifestError(f"source {path!r} is not usable: {why}", manifest=name)
    ctx.report.manifests = done
    ctx.report.files = spool.count
    ctx.report.bytes = spool.total_bytes
    return LoadedManifests(spool, frozenset(all_dirs), tuple(extra_data), done)


def _check_names(limits: NameLimits, c: CheckedManifest, name: str, storable_dirs: set[str]) -> None:
    """ManifestError naming the first destination (or directory) of a manifest the store
    cannot hold (:meth:`~amcommit.store.names.NameLimits.first_problem`). ``storable_dirs``:
    directories already found fine (partition directories repeat across manifests); the
    new ones are added."""
    new_dirs = c.dirs - storable_dirs
    bad = limits.first_problem(c.dsts, new_dirs)
    if bad is not None:
        path, why = bad
        raise ManifestError(f"destination {shorten(path)} cannot be stored: {why}", manifest=name)
    if len(storable_dirs) > 100_000:
        storable_dirs.clear()
    storable_dirs.update(new_dirs)


def _plain_local(store: Store) -> LocalStore | None:
    """The :class:`LocalStore` that answers ``store``'s reads unchanged: the store itself
    or one below destination-lock fences (whose reads pass through); None otherwise (a
    wrapper that may change reads, e.g. a fault injector, is read through as it is)."""
    while isinstance(store, FencedStore):
        store = store.inner
    return store if isinstance(store, LocalStore) else None


async def _read_in_chunks(
    ctx: JobContext,
    local: LocalStore,
    paths: list[str],
    take: Callable[[str, bytes], Awaitable[None]],
    chunk: int,
) -> None:
    """Local files: read the manifests ``chunk`` at a time, one worker-thread hop per chunk
    (:meth:`LocalStore.get_many`, through the job's retry layer), the next chunk read while
    this one is decoded and checked by ``take`` (at most two chunks in memory)."""
    send, receive = anyio.create_memory_object_stream[tuple[list[str], tuple[bytes, ...]]](0)

    async def reader() -> None:
        async with send:
            for i in range(0, len(paths), chunk):
                part = paths[i : i + chunk]
                await send.send((part, await ctx.call(partial(local.get_many, part))))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        async with receive:
            async for part, datas in receive:
                for path, data in zip(part, datas, strict=True):
                    await take(path, data)


def _check_file_dir_clashes(spool: EntrySpool, dirs: set[str], dest: str) -> None:
    """ManifestError if a destination file is also a directory of the job (an ancestor of
    another destination, or a declared directory). Hash lookups, then one exact pass over
    the spool only when a hash matches."""
    seen: set[str] = set()
    for d in dirs:
        while d and d != dest and d not in seen:
            seen.add(d)
            d = parent(d)
    suspects = {d for d in seen if spool.has_dest(d)}
    if not suspects:
        return
    for mi, rows in spool.frames():
        for e in rows:
            if e.dst in suspects:
                raise ManifestError(
                    f"destination {e.dst!r} is a file, but the job also writes below it as a directory",
                    manifest=spool.sources[mi],
                )


def _local_sources(ctx: JobContext) -> _LocalSources | None:
    """The check of the sources on a local store (None elsewhere: there the rename itself
    refuses a directory source, see ``Store.rename``)."""
    local = local_store_of(ctx.store)
    return None if local is None else _LocalSources(local, ctx.scope.tasks_dir)


class _LocalSources:
    """On a local store, refuse before any rename a source that is not a regular file (a
    directory, a symbolic link, a FIFO...) or lies behind a symlinked directory
    (:meth:`~amcommit.store.local.LocalStore.find_non_file`).

    The sources are checked in batches of ``batch`` in a worker thread *while later
    manifests load* (the thread mostly waits on the filesystem): at most one batch is
    being checked while the next fills, so at most two are in memory. The first bad
    source found is kept in :attr:`bad` (path, reason, manifest); the stage raises it after
    its duplicate and clash checks."""

    def __init__(self, local: LocalStore, below: str, batch: int = 16384) -> None:
        self.local, self.below, self.batch = local, below, batch
        self.srcs: list[str] = []
        self.owners: list[tuple[str, int]] = []
        """(manifest name, number of sources in the batch once its sources were added)"""
        self.bad: tuple[str, str, str] | None = None
        self._checking: anyio.Event | None = None

    def add(self, srcs: list[str], manifest: str) -> None:
        if self.bad is not None:
            return  # one is enough
        self.srcs += srcs
        self.owners.append((manifest, len(self.srcs)))

    def full(self) -> bool:
        return len(self.srcs) >= self.batch

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Check the batch gathered so far in ``tg`` (after the previous batch's check)."""
        while self._checking is not None:
            await self._checking.wait()
        if not self.srcs or self.bad is not None:
            self.srcs, self.owners = [], []
            return
        srcs, owners = self.srcs, self.owners
        self.srcs, self.owners = [], []
        done = self._checking = anyio.Event()

        async def check() -> None:
            try:
                bad = await self.local.find_non_file(srcs, self.below)
                if bad is not None:
                    path, why = bad
                    at = srcs.index(path)
                    self.bad = path, why, next(name for name, end in owners if at < end)
            finally:
                self._checking = None
                done.set()

        tg.start_soon(check)
