"""Stage 5 (``delete_victims``): after every file is in place (journal ``renamed``), delete
the old files a ``replace``/``overwrite`` commit recorded, and the trash:
``run(ctx, DeleteVictimsInputs) -> DeleteVictimsResult``.

Runs after the point of no return: nothing here can make the new output incomplete. Each
delete is idempotent; a failure is resumed by running ``commit_job`` again.

On stores with directories, a recorded old file whose name is now a directory of the new
output (an old file ``p=1`` where the job wrote ``p=1/x.bin``) is not deleted: it went to
the trash before the directory was created (``prepare_dirs``), and the trash goes here.
"""

from __future__ import annotations

from dataclasses import dataclass

from amcommit.committer.context import JobContext
from amcommit.committer.spool import EntrySpool
from amcommit.committer.stages.dirs import remove_empty_dirs
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.prepare_dirs import with_ancestors
from amcommit.committer.stages.victims import load_victims
from amcommit.parallel import run_parallel
from amcommit.paths import parent


@dataclass(frozen=True)
class DeleteVictimsInputs:
    loaded: LoadedManifests
    victim_chunks: int
    """The number of victim lists the journal counts."""


@dataclass(frozen=True)
class DeleteVictimsResult:
    deleted: int
    """Old files this run deleted."""
    removed: int
    """Recorded old files now gone for good, over all runs (``report.victims_deleted``)."""


async def run(ctx: JobContext, inputs: DeleteVictimsInputs) -> DeleteVictimsResult:
    """Delete the victims; ``report.victims_deleted`` counts the recorded old files now
    gone, not this run's successful deletes: an earlier run may have deleted some, a lost
    answer hides a delete."""
    spool, chunks = inputs.loaded.spool, inputs.victim_chunks
    deleted = await delete_victims(ctx, spool, chunks, new_directories(ctx, inputs.loaded))
    if chunks:
        ctx.report.victims_deleted = await count_removed_victims(ctx, spool, chunks)
    return DeleteVictimsResult(deleted, ctx.report.victims_deleted)


def new_directories(ctx: JobContext, loaded: LoadedManifests) -> frozenset[str]:
    """The directories of the new output below the destination, on stores with real
    directories (elsewhere a file and a directory of one name coexist: none). Pure."""
    if not ctx.store.capabilities.directories:
        return frozenset()
    return frozenset(with_ancestors(set(loaded.dirs), ctx.layout.dest))


async def delete_victims(
    ctx: JobContext, spool: EntrySpool, chunks: int, new_dirs: frozenset[str] = frozenset()
) -> int:
    """Delete the recorded old files (skipping paths a new file now occupies, and
    ``new_dirs``, the directories of the new output) and the trash; then remove
    directories the deletion emptied. Returns the number of files deleted."""
    deleted = 0
    emptied: set[str] = set()

    async def one(path: str) -> None:
        nonlocal deleted
        if spool.has_dest(path) or path in new_dirs:
            return  # a new file, or a directory of new files, has this name; the old one went to the trash
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


async def count_removed_victims(ctx: JobContext, spool: EntrySpool, chunks: int) -> int:
    """How many recorded old files are gone for good (not replaced by a new file of the
    same name): what ``delete_victims`` removes over all runs of a commit."""
    return sum(1 for chunk in await load_victims(ctx, chunks) for p in chunk if not spool.has_dest(p))
