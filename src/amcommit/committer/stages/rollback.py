"""Rollback of a partly renamed job commit (journal state ``renaming``), stage name
``rollback``: ``run(ctx, RollbackInputs) -> RollbackResult``.

Order, each step idempotent and recoverable by a later process:

1. *Undo* every forward rename this job provably made (judged by
   :func:`~amcommit.store.proof.judge_rename`): a finished one is deleted (``abort_job``) or,
   with ``keep_job``, moved back into its task directory (id
   :func:`~amcommit.committer.stages.renaming.back_id`), so the job can be committed
   again; a copy whose source is still there (killed between copy and delete) is deleted.
2. Remove the directories the commit created that are now empty, so that an old *file*
   moved aside from where the job needed a directory can come back.
3. *Restore* every trash entry to its place (id
   :func:`~amcommit.committer.stages.renaming.restore_id`). A trash entry that is a
   half-done move aside (the original never left: the trash holds our copy of that very
   version) is simply deleted; a half-done restore is completed.
4. Remove the directories left empty.

A failure raises :class:`~amcommit.errors.RollbackError` and keeps the journal, so the
rollback can be run again (``abort_job``). Nothing here deletes a file that is not provably
this job's, or a non-empty directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from amcommit.committer.context import JobContext
from amcommit.committer.stages.dirs import remove_empty_dirs
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.renaming import (
    aside_id,
    back_id,
    forward_expected,
    restore_id,
    settle,
    stat_or_none,
)
from amcommit.errors import AlreadyExists, NotFound, RollbackError, StoreError
from amcommit.manifest import RenameEntry
from amcommit.parallel import run_parallel
from amcommit.paths import join, relative_to
from amcommit.store.base import ObjectInfo
from amcommit.store.proof import Expected, Verdict, judge_rename


@dataclass(frozen=True)
class RollbackInputs:
    loaded: LoadedManifests
    keep_job: bool = False
    """Move renamed files back to their task paths instead of deleting them."""


@dataclass(frozen=True)
class RollbackResult:
    rolled_back: bool
    """Always True when ``run`` returns (also ``report.rolled_back``)."""


async def run(ctx: JobContext, inputs: RollbackInputs) -> RollbackResult:
    """Undo the renames and moves aside (see module doc); RollbackError if incomplete."""
    await rollback(ctx, inputs.loaded, keep_job=inputs.keep_job)
    return RollbackResult(ctx.report.rolled_back)


async def rollback(ctx: JobContext, loaded: LoadedManifests, *, keep_job: bool = False) -> None:
    """Undo the renames and moves aside of a partly renamed commit (see module doc).
    ``keep_job``: move renamed files back to their task paths instead of deleting them."""
    store, layout = ctx.store, ctx.layout
    job = layout.job_id
    try:

        async def undo(e: RenameEntry) -> None:
            dst = await stat_or_none(ctx, e.dst)
            if dst is None:
                return
            src = await stat_or_none(ctx, e.src)
            verdict = judge_rename(store.capabilities, forward_expected(job, e), dst, src)
            if verdict in (Verdict.HALF, Verdict.STALE):
                await ctx.call(lambda: store.delete(e.dst))  # our copy; the source is still there
            elif verdict is Verdict.DONE:
                if keep_job:
                    await move_back(ctx, e)
                else:
                    await ctx.call(lambda: store.delete(e.dst))

        await run_parallel(loaded.spool.entries(), undo, ctx.config.io_threads)
        await remove_empty_dirs(ctx, set(loaded.dirs))

        async def restore(info: ObjectInfo) -> None:
            await restore_one(ctx, info, join(layout.dest, relative_to(info.path, layout.trash_dir)))

        await run_parallel(ctx.list(layout.trash_dir, recursive=True), restore, ctx.config.io_threads)
        await remove_empty_dirs(ctx, set(loaded.dirs))
    except RollbackError:
        raise
    except StoreError as e:
        raise RollbackError(f"rollback incomplete ({e}); run abort again to finish it") from e
    ctx.report.rolled_back = True


async def move_back(ctx: JobContext, e: RenameEntry) -> None:
    """Rename ``e.dst`` (provably this job's) back to its task path ``e.src``."""
    want = Expected(back_id(ctx.layout.job_id, e.src), e.size)
    try:
        await ctx.call(lambda: ctx.store.rename(e.dst, e.src, rename_id=want.rename_id))
    except (AlreadyExists, NotFound):
        if await settle(ctx, e.dst, e.src, want) is not Verdict.DONE:
            raise RollbackError(f"cannot move {e.dst!r} back to {e.src!r}") from None


async def restore_one(ctx: JobContext, trash: ObjectInfo, target: str) -> None:
    """Put the trash entry ``trash`` back at ``target`` (see module doc, step 3)."""
    store, job = ctx.store, ctx.layout.job_id
    want = Expected(restore_id(job, target), trash.size)
    for _ in range(2):
        try:
            await ctx.call(lambda: store.rename(trash.path, target, rename_id=want.rename_id))
            return
        except NotFound:
            # the trash entry is gone: an earlier restore of ours finished?
            if await settle(ctx, trash.path, target, want) is Verdict.DONE:
                return
            raise RollbackError(f"cannot restore {target!r}: its copy in the trash is gone") from None
        except AlreadyExists:
            here = await stat_or_none(ctx, target)
            if here is not None and here.is_dir:
                # a directory this commit created where the old file was: remove it if empty
                if await remove_empty_dirs(ctx, {target}):
                    continue
                raise RollbackError(
                    f"cannot restore {target!r}: a non-empty directory is in the way"
                ) from None
            t = await stat_or_none(ctx, trash.path)
            if t is None:
                continue
            # the move aside stopped between copy and delete: the original never left
            aside = judge_rename(store.capabilities, Expected(aside_id(job, target)), t, here)
            if aside is Verdict.HALF:
                await ctx.call(lambda: store.delete(trash.path))
                return
            # the restore stopped between copy and delete: finish it
            if await settle(ctx, trash.path, target, want) is Verdict.DONE:
                return
            raise RollbackError(f"cannot restore {target!r}: the path is occupied") from None
    raise RollbackError(f"cannot restore {target!r}: the path keeps changing")


async def forget_commit(ctx: JobContext, victim_chunks: int) -> None:
    """After a rollback that kept the job: delete what only the failed commit needed (the
    trash, now empty, then the journal, then the victim lists). The job is then back to
    "set up, tasks committed"; its task output and manifests are untouched.

    The journal goes before the victim lists: a journal that outlived its victim lists
    (a delete that failed in between) would make a resumed commit delete none of the old
    files it replaces. Victim lists left behind are harmless: the next commit writes its
    own from the first (the journal counts them) and cleanup removes the rest."""
    store, layout = ctx.store, ctx.layout
    await ctx.call(lambda: store.delete(layout.trash_dir, recursive=True))
    await ctx.call(lambda: store.delete(layout.journal_path))
    for i in range(victim_chunks):
        await ctx.call(partial(store.delete, layout.victims_path(i)))
