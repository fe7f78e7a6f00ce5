"""Stages 5-8: delete the old files (overwrite), validate output, save ``_SUCCESS``,
write the summary report, clean up.

These run after every file is in place (journal state ``renamed``): none of them can make
the new output incomplete. A failure here is resumed by running ``commit_job`` again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from amcommit.committer.context import JobContext, run_parallel
from amcommit.committer.stages.check_conflicts import load_victims
from amcommit.committer.stages.rename_files import is_ours, rename_id
from amcommit.errors import AlreadyExists, CommitError, NotFound, StoreError
from amcommit.manifest import RenameEntry, encode_json
from amcommit.store.base import ObjectInfo, PutMode, is_within, join, parent
from amcommit.store.retry import Backoff


async def delete_victims(ctx: JobContext, chunks: int) -> int:
    """Delete the recorded old files (skipping paths a new file now occupies) and the trash;
    then remove directories the deletion emptied. Returns the number of files deleted."""
    assert ctx.spool is not None
    spool = ctx.spool
    deleted = 0
    emptied: set[str] = set()

    async def one(path: str) -> None:
        nonlocal deleted
        if spool.has_dest(path):
            return  # a new file has this name; the old one went to the trash
        if await ctx.call(lambda: ctx.store.delete(path)):
            deleted += 1
            emptied.add(parent(path))

    for chunk in await load_victims(ctx, chunks):
        await run_parallel(chunk, one, ctx.config.io_threads)
    cfg = ctx.config
    if chunks or cfg.delete_target_files or cfg.conflict_mode in ("replace", "overwrite"):
        # only these modes move old files aside (possibly in an earlier, interrupted run)
        await ctx.call(lambda: ctx.store.delete(ctx.layout.trash_dir, recursive=True))
    if ctx.store.capabilities.directories:
        await _remove_empty_dirs(ctx, emptied)
    ctx.report.victims_deleted += deleted
    return deleted


async def _remove_empty_dirs(ctx: JobContext, dirs: set[str]) -> None:
    """Delete now-empty directories bottom-up (never the destination itself, never a file,
    never a directory that still holds anything: the delete is not recursive)."""
    await remove_empty_dirs(ctx, dirs)


async def remove_empty_dirs(ctx: JobContext, dirs: set[str]) -> list[str]:
    """Delete the empty directories among ``dirs`` and their ancestors below the
    destination, deepest first; return the ones deleted. A path that is a file (a user's
    file where the job wanted a directory) or a non-empty directory is left alone. Only
    on stores with real directories (elsewhere there is nothing to delete)."""
    removed: list[str] = []
    if not ctx.store.capabilities.directories:
        return removed
    todo = set(dirs)
    while todo:
        d = max(todo, key=lambda p: (p.count("/"), p))
        todo.discard(d)
        if not d or d == ctx.layout.dest or not is_within(d, ctx.layout.dest):
            continue
        try:
            info = await ctx.store.stat(d)
            if not info.is_dir:
                continue
            await ctx.store.delete(d)
        except StoreError:  # not empty (PreconditionFailed), gone, or unreachable: leave it
            continue
        removed.append(d)
        todo.add(parent(d))
    return removed


async def validate_output(ctx: JobContext) -> None:
    """Check each destination's size (and etag / provenance); CommitError listing mismatches."""
    assert ctx.spool is not None
    bad: list[str] = []

    async def one(e: RenameEntry) -> None:
        try:
            info = await ctx.call(lambda: ctx.store.stat(e.dst))
        except NotFound:
            bad.append(f"{e.dst} is missing")
            return
        if info.size != e.size:
            bad.append(f"{e.dst} has {info.size} bytes, expected {e.size}")
        elif not is_ours(ctx.store, e, info, rename_id(ctx.layout.job_id, e.dst)):
            bad.append(f"{e.dst} is not the file the task wrote (etag/provenance differs)")

    await run_parallel(ctx.spool.entries(), one, ctx.config.io_threads)
    if bad:
        raise CommitError(f"output validation failed for {len(bad)} file(s): " + "; ".join(sorted(bad)[:5]))


async def save_success(ctx: JobContext) -> None:
    """Write ``_SUCCESS`` via a temporary file and a rename (replacing an older one).

    Runs after the point of no return, so every request uses the patient retry policy. A
    rename whose answer was lost and that, retried, finds its source gone (or its
    destination taken) is proven by reading ``_SUCCESS`` back: this run's report (its bytes,
    which carry this run's timestamp) means the rename happened. Not atomic as a whole:
    between the delete of an older ``_SUCCESS`` and the rename there is none.
    """
    layout, store = ctx.layout, ctx.store
    data = encode_json(ctx.report.to_success_data())
    tmp, final = layout.success_tmp_path, layout.success_path
    rid = rename_id(layout.job_id, final)

    async def published() -> bool:
        try:
            return await ctx.call(lambda: store.get(final), patient=True) == data
        except NotFound:
            return False

    need_tmp = True
    for _ in range(3):
        if need_tmp:
            await ctx.call(lambda: store.put(tmp, data, mode=PutMode.OVERWRITE), patient=True)
        await ctx.call(lambda: store.delete(final), patient=True)
        try:
            await ctx.call(lambda: store.rename(tmp, final, rename_id=rid), patient=True)
            return
        except NotFound:
            if await published():  # an earlier attempt's answer was lost
                return
            need_tmp = True  # the temporary file is gone: write it again
        except AlreadyExists:
            if await published():  # renamed by an attempt whose answer was lost
                await ctx.call(lambda: store.delete(tmp), patient=True)  # a copy's leftover
                return
            need_tmp = False  # another writer's _SUCCESS appeared in between: replace it
    raise CommitError("could not replace _SUCCESS (another job keeps writing it)")


async def write_summary(ctx: JobContext) -> None:
    """Write ``summary-<jobId>.json`` to ``config.summary_report_directory`` (best effort
    on failure paths: errors here are recorded, never raised over the original error).
    The put goes through the job's retry layer."""
    from amcommit.store.urls import open_location

    url = ctx.config.summary_report_directory
    if not url:
        return
    store, base = open_location(url)
    try:
        data = encode_json(ctx.report.to_success_data())
        path = join(base, f"summary-{ctx.layout.job_id}.json")
        await ctx.call(lambda: store.put(path, data, mode=PutMode.OVERWRITE))
    finally:
        if store is not ctx.store:
            await store.aclose()


async def cleanup(ctx: JobContext) -> None:
    """Delete the job directory: task attempt directories in parallel first, then the job
    attempt directory (manifests), then the rest, the journal last, so a cleanup
    interrupted at any point resumes as "committed"; finally ``_temporary`` itself if no
    other job uses it. Idempotent; every request goes through the job's retry layer (on
    flat stores a listing that fails midway restarts the deletion pass: deletes are
    idempotent and memory stays bounded)."""
    if ctx.config.cleanup_skipped:
        return
    store, layout = ctx.store, ctx.layout
    if store.capabilities.directories:
        if ctx.config.cleanup_base_first:
            try:
                await ctx.call(lambda: store.delete(layout.job_dir, recursive=True))
            except StoreError:
                pass
        if ctx.config.cleanup_parallel_delete:
            children = [i.path async for i in ctx.list(layout.tasks_dir, recursive=False)]

            async def rm_dir(p: str) -> None:
                await ctx.call(lambda: store.delete(p, recursive=True))

            await run_parallel(children, rm_dir, ctx.config.io_threads)
        await ctx.call(lambda: store.delete(layout.attempt_dir, recursive=True))
        await ctx.call(lambda: store.delete(layout.job_dir, recursive=True))
        if layout.table:
            return  # .hoodie/.temp stays (other writers allocate their staging in it)
        try:  # only if empty: other jobs may use it
            await ctx.call(lambda: store.delete(layout.temp_root))
        except StoreError:
            pass
    else:
        journal = layout.journal_path

        async def rm(info: ObjectInfo) -> None:
            if info.path != journal:
                await ctx.call(lambda: store.delete(info.path))

        async def one_pass() -> None:
            await run_parallel(store.list(layout.job_dir, recursive=True), rm, ctx.config.io_threads)

        await _restarting(ctx, one_pass)
        await ctx.call(lambda: store.delete(journal))


async def _restarting(ctx: JobContext, fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` (a pass over a listing doing idempotent work) again from the start when
    its listing fails with a retryable error, under the job's retry policy."""
    backoff = Backoff(ctx.retry, limiter=ctx.limiter, stats=ctx.report.job_stats)
    attempt = 0
    while True:
        attempt += 1
        try:
            await fn()
            return
        except StoreError as e:
            delay = backoff.after(e, attempt)
            ctx.report.job_stats.incr("committer_listing_restarted")
        await anyio.sleep(delay)
