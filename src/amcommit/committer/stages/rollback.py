"""Rollback of a partly renamed job commit (journal state ``renaming``).

Every destination that is provably this job's file (see
:func:`~amcommit.committer.stages.rename_files.is_ours`) is deleted, old files moved aside
to the trash are put back, and directories left empty are removed. The task output is
discarded: a rolled-back job is aborted. Idempotent; a failure raises
:class:`~amcommit.errors.RollbackError` and keeps the journal so it can be run again.
"""

from __future__ import annotations

from amcommit.committer.context import JobContext, run_parallel
from amcommit.committer.stages.finish import _remove_empty_dirs
from amcommit.committer.stages.rename_files import is_our_copy, is_ours, rename_id
from amcommit.errors import AlreadyExists, NotFound, RollbackError, StoreError
from amcommit.manifest import RenameEntry
from amcommit.store.base import ObjectInfo, join, relative_to


async def rollback(ctx: JobContext) -> None:
    assert ctx.spool is not None
    store, layout = ctx.store, ctx.layout
    try:

        async def undo(e: RenameEntry) -> None:
            try:
                info = await ctx.call(lambda: store.stat(e.dst))
            except NotFound:
                return
            rid = rename_id(layout.job_id, e.dst)
            if is_our_copy(store, e, info, rid):
                await ctx.call(lambda: store.delete(e.dst))  # ours, even if the copy's source remains
                return
            try:
                await ctx.call(lambda: store.stat(e.src))
                return  # source still there: this destination was never ours
            except NotFound:
                pass
            if is_ours(store, e, info, rid):
                await ctx.call(lambda: store.delete(e.dst))

        await run_parallel(ctx.spool.entries(), undo, ctx.config.io_threads)

        async def restore(info: ObjectInfo) -> None:
            target = join(layout.dest, relative_to(info.path, layout.trash_dir))
            try:
                await ctx.call(lambda: store.rename(info.path, target))
            except AlreadyExists:
                raise RollbackError(f"cannot restore {target!r}: the path is occupied") from None

        await run_parallel(ctx.list(layout.trash_dir, recursive=True), restore, ctx.config.io_threads)
        if store.capabilities.directories:
            await _remove_empty_dirs(ctx, set(ctx.dirs))
    except RollbackError:
        raise
    except StoreError as e:
        raise RollbackError(f"rollback incomplete ({e}); run abort again to finish it") from e
    ctx.report.rolled_back = True
