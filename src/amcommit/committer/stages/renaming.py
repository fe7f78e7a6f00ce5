"""Shared by the stages that rename: the rename ids, and the recovery of one rename.

Every rename the engine makes carries a deterministic id (:func:`rename_id` for forward
renames, :func:`aside_id` for moves to the trash, :func:`restore_id` for moves back from
it, :func:`back_id` for a rollback's moves back into the task directory), so a later
process recognises its own half-done copies. Whether a rename happened is decided in one
place, :func:`amcommit.store.proof.judge_rename`; :func:`look` and :func:`settle` apply it
to what the store shows now, and :func:`move_aside` moves an old file to the job's trash
(:func:`move_tree_aside`: every file of an old directory).

Used by ``rename_files``, ``prepare_dirs``, ``validate_output``, ``renames_done``,
``save_success`` and ``rollback``. Nothing here is atomic beyond the single rename.
"""

from __future__ import annotations

import hashlib

from amcommit.committer.context import JobContext
from amcommit.committer.stages.scope import trash_path
from amcommit.errors import AlreadyExists, CommitError, NotFound
from amcommit.manifest import RenameEntry
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.proof import Expected, Verdict, judge_rename


def _id(*parts: str) -> str:
    h = hashlib.blake2b("\0".join(parts).encode("utf-8", "surrogatepass"), digest_size=12)
    return h.hexdigest()


def rename_id(job_id: str, dst: str) -> str:
    """Id of the forward rename of a task file to ``dst`` by job ``job_id``."""
    return _id(job_id, dst)


def aside_id(job_id: str, path: str) -> str:
    """Id of the move of the old file at ``path`` to job ``job_id``'s trash."""
    return _id(job_id, "aside", path)


def restore_id(job_id: str, path: str) -> str:
    """Id of the move of a trash entry back to ``path`` (rollback of a move aside)."""
    return _id(job_id, "restore", path)


def back_id(job_id: str, src: str) -> str:
    """Id of a rollback's move of a renamed file back to its task path ``src``."""
    return _id(job_id, "back", src)


def forward_expected(job_id: str, entry: RenameEntry) -> Expected:
    return Expected(rename_id(job_id, entry.dst), entry.size, entry.etag)


async def stat_or_none(ctx: JobContext, path: str) -> ObjectInfo | None:
    async def one() -> ObjectInfo | None:
        try:
            return await ctx.store.stat(path)
        except NotFound:
            return None

    return await ctx.call(one)


async def look(ctx: JobContext, src: str, dst: str, want: Expected) -> tuple[Verdict, ObjectInfo | None]:
    """Judge the rename ``src -> dst`` as the store shows it now; also returns ``dst``'s info."""
    d = await stat_or_none(ctx, dst)
    if d is None:
        return Verdict.ABSENT, None
    s = await stat_or_none(ctx, src)
    return judge_rename(ctx.store.capabilities, want, d, s), d


async def settle(ctx: JobContext, src: str, dst: str, want: Expected) -> Verdict:
    """Judge a rename and complete it if it stopped between copy and delete (HALF: the
    source, still the version copied, is deleted; the verdict becomes DONE)."""
    return (await settle_look(ctx, src, dst, want))[0]


async def settle_look(
    ctx: JobContext, src: str, dst: str, want: Expected
) -> tuple[Verdict, ObjectInfo | None]:
    """:func:`settle`, also returning ``dst``'s info as :func:`look` found it."""
    verdict, d = await look(ctx, src, dst, want)
    if verdict is Verdict.HALF:
        await ctx.call(lambda: ctx.store.delete(src))
        return Verdict.DONE, d
    return verdict, d


def is_ours(store: Store, entry: RenameEntry, dst_info: ObjectInfo, rid: str) -> bool:
    """Is ``dst_info`` (its source gone) provably ``entry`` renamed by this job? (pure)"""
    want = Expected(rid, entry.size, entry.etag)
    return judge_rename(store.capabilities, want, dst_info, None) is Verdict.DONE


async def move_aside(ctx: JobContext, path: str) -> None:
    """Move the old file at ``path`` to the job's trash (id :func:`aside_id`). Recognises
    its own half-done copy from an earlier run; CommitError if the trash slot holds
    something else."""
    store, trash = ctx.store, trash_path(ctx, path)
    want = Expected(aside_id(ctx.layout.job_id, path))
    for _ in range(2):
        try:
            await ctx.call(lambda: store.rename(path, trash, rename_id=want.rename_id))
        except NotFound:
            pass  # gone meanwhile (an earlier attempt moved it): the caller renames again
        except AlreadyExists:
            verdict = await settle(ctx, path, trash, want)
            if verdict is Verdict.STALE:  # our copy of an older version: copy again
                await ctx.call(lambda: store.delete(trash))
                continue
            if verdict is not Verdict.DONE:
                raise CommitError(f"cannot move {path!r} aside: {trash!r} is occupied") from None
        ctx.report.moved_aside += 1
        return
    raise CommitError(f"cannot move {path!r} aside: it keeps changing")


async def move_tree_aside(ctx: JobContext, path: str) -> None:
    """Move every file below the old directory ``path`` to the job's trash, each with
    :func:`move_aside` (its own id: a later run recognises its half-done moves and a
    rollback restores each file to its place), then delete the directories this emptied,
    deepest first, ``path`` last. Not atomic: a run stopped midway left some files moved;
    running it again moves the rest. Each delete is not recursive, so a directory that
    still holds anything stays (the caller's rename then meets it again). For stores with
    directories (on a flat store no directory is in the way of a file)."""
    async for info in ctx.list(path, recursive=False):
        if info.is_dir:
            await move_tree_aside(ctx, info.path)
        else:
            await move_aside(ctx, info.path)
    await ctx.call(lambda: ctx.store.delete(path))
