"""Stage 2 (``check_conflicts``): decide what the commit may touch in the destination,
before touching it: ``run(ctx, ConflictInputs) -> ConflictResult``.

* ``fail`` mode: any file already in a partition directory written to is a conflict.
* ``replace`` / ``overwrite``: record the *victims* (the old files to remove after the new
  ones are in) on the store (:mod:`~amcommit.committer.stages.victims`), so a resumed
  commit or a rollback knows them exactly.
* ``append``: nothing to check (a clash shows at the rename).

Pure planning (:func:`partitions_of`, :func:`~amcommit.committer.stages.scope.minimal_roots`)
is separate from the listing. Listings and chunk writes go through the job's retry layer;
the victim listing is unbounded, so a listing that fails midway restarts the whole
recording (chunks are rewritten from the first; no path is recorded twice, memory stays
one chunk).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio

from amcommit.committer.context import JobContext
from amcommit.committer.layout import SUCCESS_NAME
from amcommit.committer.spool import EntrySpool
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.scope import replace_scope
from amcommit.committer.stages.victims import VICTIM_CHUNK, encode_victims
from amcommit.errors import ConflictError, StoreError
from amcommit.parallel import run_parallel
from amcommit.paths import basename, is_within, parent
from amcommit.store.base import ObjectInfo, PutMode


@dataclass(frozen=True)
class ConflictInputs:
    loaded: LoadedManifests


@dataclass(frozen=True)
class ConflictResult:
    victim_chunks: int
    """How many victim lists were recorded (0 unless ``replace``/``overwrite``)."""


async def run(ctx: JobContext, inputs: ConflictInputs) -> ConflictResult:
    """Check (``fail``) or record (``replace``/``overwrite``) per ``ctx.config.conflict_mode``."""
    if ctx.config.conflict_mode == "fail":
        await check_fail_mode(ctx, inputs.loaded)
    chunks = 0
    if ctx.config.conflict_mode in ("replace", "overwrite"):
        chunks = await record_victims(ctx, inputs.loaded.spool)
    return ConflictResult(chunks)


def partitions_of(dirs: set[str], dest: str, has_top_level_files: bool) -> set[str]:
    """Directories receiving files: ``dirs`` plus ``dest`` itself for top-level files."""
    out = set(dirs)
    if has_top_level_files:
        out.add(dest)
    return out


def _has_top_level_files(ctx: JobContext, spool: EntrySpool) -> bool:
    return any(parent(e.dst) == ctx.layout.dest for e in spool.entries())


async def check_fail_mode(ctx: JobContext, loaded: LoadedManifests) -> None:
    """ConflictError naming the first non-empty partition (``fail`` mode)."""
    parts = partitions_of(set(loaded.dirs), ctx.layout.dest, _has_top_level_files(ctx, loaded.spool))
    found: list[str] = []

    async def probe(d: str) -> None:
        async for info in ctx.list(d, recursive=False):
            if not info.is_dir and basename(info.path) != SUCCESS_NAME:
                found.append(info.path)
                return

    await run_parallel(sorted(parts), probe, ctx.config.io_threads)
    if found:
        raise ConflictError(
            f"conflict mode 'fail': partition {parent(sorted(found)[0]) or '/'!r} already holds "
            f"{sorted(found)[0]!r} ({len(found)} non-empty partition(s))"
        )


async def record_victims(ctx: JobContext, spool: EntrySpool) -> int:
    """List the old files in the replace scope and save them in chunks; return chunk count.

    A listing that fails with a retryable error is started again from the beginning (the
    job's retry policy; chunks already written are overwritten), so each old file is
    recorded exactly once. Only the chunks counted by the journal are ever read."""
    roots = replace_scope(ctx, spool)
    backoff = ctx.backoff()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await _record_victims_once(ctx, roots)
        except StoreError as e:
            delay = backoff.after(e, attempt)
            ctx.report.job_stats.incr("committer_listing_restarted")
        await anyio.sleep(delay)


async def _record_victims_once(ctx: JobContext, roots: list[str]) -> int:
    chunk: list[str] = []
    n = 0

    async def flush() -> None:
        nonlocal n, chunk
        path = ctx.layout.victims_path(n)
        data = encode_victims(ctx.layout.dest, chunk)
        await ctx.call(lambda: ctx.store.put(path, data, mode=PutMode.OVERWRITE))
        n += 1
        chunk = []

    for root in roots:
        async for info in list_files_outside(ctx, root):
            chunk.append(info.path)
            if len(chunk) >= VICTIM_CHUNK:
                await flush()
    if chunk:
        await flush()
    return n


async def list_files_outside(ctx: JobContext, root: str) -> AsyncIterator[ObjectInfo]:
    """Every file below ``root`` except the job's ``_temporary`` tree, which is not even
    listed (its size grows with the job; a flat store lists it as one common prefix)."""
    temp = ctx.layout.temp_root
    if not is_within(temp, root):
        async for info in ctx.store.list(root, recursive=True):
            if not info.is_dir:
                yield info
        return
    children = [c async for c in ctx.list(root, recursive=False)]  # one directory level
    for child in children:
        if child.path == temp or is_within(child.path, temp):
            continue
        if child.is_dir:
            async for info in list_files_outside(ctx, child.path):
                yield info
        else:
            yield child
