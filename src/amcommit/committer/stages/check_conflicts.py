"""Stage 2: decide what the commit may touch in the destination, before touching it.

* ``fail`` mode: any file already in a partition directory written to is a conflict.
* ``replace`` / ``overwrite``: record the *victims* (the old files to remove after the new
  ones are in) on the store, so a resumed commit or a rollback knows them exactly.

Pure planning (:func:`partitions_of`, :func:`minimal_roots`) is separate from the listing.
Listings and chunk writes go through the job's retry layer; the victim listing is
unbounded, so a listing that fails midway restarts the whole recording (chunks are
rewritten from the first; no path is recorded twice, memory stays one chunk).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import anyio
import msgspec

from amcommit.committer.context import JobContext, run_parallel
from amcommit.committer.layout import SUCCESS_NAME
from amcommit.errors import ConflictError, NotFound, StoreError
from amcommit.store.base import ObjectInfo, PutMode, basename, is_within, join, parent
from amcommit.store.retry import Backoff

VICTIM_CHUNK = 50_000


def partitions_of(dirs: set[str], dest: str, has_top_level_files: bool) -> set[str]:
    """Directories receiving files: ``dirs`` plus ``dest`` itself for top-level files."""
    out = set(dirs)
    if has_top_level_files:
        out.add(dest)
    return out


def minimal_roots(dirs: set[str]) -> list[str]:
    """Drop every directory that lies below another one in the set (pure)."""
    roots: list[str] = []
    for d in sorted(dirs, key=lambda p: (p.count("/"), p)):
        if not any(is_within(d, r) for r in roots):
            roots.append(d)
    return roots


def _has_top_level_files(ctx: JobContext) -> bool:
    assert ctx.spool is not None
    return any(parent(e.dst) == ctx.layout.dest for e in ctx.spool.entries())


def replace_scope(ctx: JobContext) -> list[str]:
    """The directories whose old content a ``replace``/``overwrite`` commit removes."""
    if ctx.config.conflict_mode == "overwrite":
        return [ctx.layout.dest]
    file_dirs = set()
    assert ctx.spool is not None
    for e in ctx.spool.entries():
        file_dirs.add(parent(e.dst))
    return minimal_roots(file_dirs)


def in_replace_scope(ctx: JobContext, path: str, roots: list[str]) -> bool:
    return not is_within(path, ctx.layout.temp_root) and any(is_within(path, r) for r in roots)


async def check_fail_mode(ctx: JobContext) -> None:
    """ConflictError naming the first non-empty partition (``fail`` mode)."""
    parts = partitions_of(ctx.dirs, ctx.layout.dest, _has_top_level_files(ctx))
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


async def record_victims(ctx: JobContext) -> int:
    """List the old files in the replace scope and save them in chunks; return chunk count.

    A listing that fails with a retryable error is started again from the beginning (the
    job's retry policy; chunks already written are overwritten), so each old file is
    recorded exactly once. Only the chunks counted by the journal are ever read."""
    roots = replace_scope(ctx)
    backoff = Backoff(ctx.retry, limiter=ctx.limiter, stats=ctx.report.job_stats)
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
        data = msgspec.json.encode(chunk)
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


async def count_removed_victims(ctx: JobContext, chunks: int) -> int:
    """How many recorded old files are gone for good (not replaced by a new file of the
    same name): what ``delete_victims`` removes over all runs of a commit."""
    assert ctx.spool is not None
    spool = ctx.spool
    return sum(1 for chunk in await load_victims(ctx, chunks) for p in chunk if not spool.has_dest(p))


async def load_victims(ctx: JobContext, chunks: int) -> list[list[str]]:
    _dec = msgspec.json.Decoder(list[str])
    out = []
    for i in range(chunks):
        path = ctx.layout.victims_path(i)
        try:
            out.append(_dec.decode(await ctx.call(partial(ctx.store.get, path))))
        except NotFound:
            out.append([])
    return out


def trash_path(ctx: JobContext, dst: str) -> str:
    """Where an old file at ``dst`` is moved aside to."""
    rel = dst[len(ctx.layout.dest) + 1 :] if ctx.layout.dest else dst
    return join(ctx.layout.trash_dir, rel)
