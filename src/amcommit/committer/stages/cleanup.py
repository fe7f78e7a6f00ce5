"""Stage 8 (``cleanup``): delete the job directory once the commit is done (or by
``abort_job``): ``run(ctx, CleanupInputs) -> None``. Idempotent; the journal is deleted
last, so an interrupted cleanup resumes as "committed"."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

import anyio

from amcommit.committer.context import FAILED_IN_BATCH_CONCURRENCY, JobContext
from amcommit.errors import StoreError
from amcommit.parallel import run_parallel
from amcommit.store.base import BatchDeleter, ObjectInfo, batch_deleter


@dataclass(frozen=True)
class CleanupInputs:
    """Nothing beyond the context: the layout says what to delete, ``config`` how
    (``cleanup_skipped``, ``cleanup_base_first``, ``cleanup_parallel_delete``)."""


async def run(ctx: JobContext, inputs: CleanupInputs) -> None:
    """Delete the job directory (see :func:`cleanup`)."""
    await cleanup(ctx)


async def cleanup(ctx: JobContext) -> None:
    """Delete the job directory: task attempt directories in parallel first, then the job
    attempt directory (manifests), then the rest, the journal last, so a cleanup
    interrupted at any point resumes as "committed"; finally ``_temporary`` itself if no
    other job uses it. Idempotent; every request goes through the job's retry layer (on
    flat stores a listing that fails midway restarts the deletion pass: deletes are
    idempotent and memory stays bounded). Flat stores with ``delete_batch``
    (:class:`~amcommit.store.base.BatchDeleter`, e.g. Blob) delete the listed objects in
    batches of up to ``delete_batch_max`` (see :func:`delete_in_batch`); the journal is
    always deleted last, alone, once every other object is gone."""
    if ctx.config.cleanup_skipped:
        return
    store, layout = ctx.store, ctx.layout
    if store.capabilities.directories:
        if ctx.config.cleanup_base_first:
            try:
                await ctx.call(lambda: store.delete(layout.job_dir, recursive=True))
            except StoreError:
                pass
        if ctx.config.cleanup_parallel_delete and store.capabilities.parallel_io:
            children = [i.path async for i in ctx.list(layout.tasks_dir, recursive=False)]

            async def rm_dir(p: str) -> None:
                await ctx.call(lambda: store.delete(p, recursive=True))

            await run_parallel(children, rm_dir, ctx.config.io_threads)
        elif ctx.config.cleanup_parallel_delete:
            # local files: every task attempt directory in one request, one after another
            # (parallel deletes contend in the kernel, measured 2-10x slower than one
            # thread on ext4 under load; one request is one worker-thread hop)
            await ctx.call(lambda: store.delete(layout.tasks_dir, recursive=True))
        await ctx.call(lambda: store.delete(layout.attempt_dir, recursive=True))
        await ctx.call(lambda: store.delete(layout.job_dir, recursive=True))
        if layout.staging is not None:
            return  # a kind's staging folder stays (its other jobs stage in it)
        try:  # only if empty: other jobs may use it
            await ctx.call(lambda: store.delete(layout.temp_root))
        except StoreError:
            pass
    else:
        journal = layout.journal_path
        batcher = batch_deleter(store)

        async def rm(info: ObjectInfo) -> None:
            if info.path != journal:
                await ctx.call(lambda: store.delete(info.path))

        async def one_pass() -> None:
            await run_parallel(store.list(layout.job_dir, recursive=True), rm, ctx.config.io_threads)

        async def chunks(size: int) -> AsyncIterator[list[str]]:
            chunk: list[str] = []
            async for info in store.list(layout.job_dir, recursive=True):
                if info.path != journal:
                    chunk.append(info.path)
                    if len(chunk) >= size:
                        yield chunk
                        chunk = []
            if chunk:
                yield chunk

        async def one_batched_pass() -> None:
            assert batcher is not None
            size = store.capabilities.delete_batch_max
            await run_parallel(chunks(size), partial(delete_in_batch, ctx, batcher), ctx.config.io_threads)

        await _restarting(ctx, one_pass if batcher is None else one_batched_pass)
        await ctx.call(lambda: store.delete(journal))


async def delete_in_batch(ctx: JobContext, batcher: BatchDeleter, paths: Sequence[str]) -> None:
    """Delete the files ``paths`` with one :meth:`~amcommit.store.base.BatchDeleter.delete_batch`
    call (through the job's limiter and retry layer: the call as a whole is repeated after
    a retryable failure, which is safe: deletes are idempotent), then each path whose
    delete failed in the batch as a single delete would fail or be retried: a
    non-retryable error (permission denied, ...) is raised as it is; after a retryable
    one (throttled, transient, no answer) the job's backoff is waited and the path is
    deleted again with ``store.delete`` under the job's retry layer. Not atomic: a failure
    or a kill leaves any subset deleted (cleanup is idempotent and runs again)."""
    failed = await ctx.call(partial(batcher.delete_batch, paths))
    if not failed:
        return

    async def redo(i: int) -> None:
        backoff = ctx.backoff()
        await anyio.sleep(backoff.after(failed[i], 1))  # raises what is not retryable
        await ctx.call(lambda: ctx.store.delete(paths[i]))

    await run_parallel(sorted(failed), redo, FAILED_IN_BATCH_CONCURRENCY)


async def _restarting(ctx: JobContext, fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` (a pass over a listing doing idempotent work) again from the start when
    its listing fails with a retryable error, under the job's retry policy."""
    backoff = ctx.backoff()
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
