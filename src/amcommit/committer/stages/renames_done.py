"""Did a commit whose journal says ``renaming`` in fact rename every file? (used by
``abort_job``: ``run(ctx, RenamesDoneInputs) -> RenamesDoneResult``)

The journal's ``renamed`` write is the point of no return. A commit can finish every
rename and then fail to write it (a storm of throttling outlasting even the patient retry
policy, or a kill between the last rename and the write). ``abort_job`` must then complete
the commit, not roll back a complete output: :func:`renames_done` tells it, from the store,
without needing any write.

A file counts as renamed when its source is gone and its destination is provably this
job's file (:func:`~amcommit.committer.stages.renaming.is_ours`: etag where renames keep
it, the rename id mark where they copy, else the size). A copy-based rename stopped between
its copy and its delete (source still there) is *not* done: the rollback removes its copy.
A job with no files is never "done" this way (abort then leaves the destination alone).
"""

from __future__ import annotations

from dataclasses import dataclass

from amcommit.committer.context import JobContext
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.renaming import is_ours, rename_id
from amcommit.errors import NotFound
from amcommit.manifest import RenameEntry
from amcommit.parallel import run_parallel
from amcommit.store.base import ObjectInfo


@dataclass(frozen=True)
class RenamesDoneInputs:
    loaded: LoadedManifests


@dataclass(frozen=True)
class RenamesDoneResult:
    done: bool
    """Every file of the loaded manifests is in place (never for a job with no files)."""


async def run(ctx: JobContext, inputs: RenamesDoneInputs) -> RenamesDoneResult:
    """See :func:`renames_done`."""
    return RenamesDoneResult(await renames_done(ctx, inputs.loaded))


class _NotDone(Exception):
    """Stops the scan at the first file that is not in place."""


async def _stat(ctx: JobContext, path: str) -> ObjectInfo | None:
    try:
        return await ctx.call(lambda: ctx.store.stat(path))
    except NotFound:
        return None


async def renames_done(ctx: JobContext, loaded: LoadedManifests) -> bool:
    """True if every file of the loaded spool is in place (see the module docstring).

    Costs up to two ``stat`` per file, stopping at the first file not in place. Store
    errors are raised (the caller then decides nothing).
    """
    spool = loaded.spool
    if spool.count == 0:
        return False
    job_id = ctx.layout.job_id

    async def check(e: RenameEntry) -> None:
        if await _stat(ctx, e.src) is not None:
            raise _NotDone
        info = await _stat(ctx, e.dst)
        if info is None or not is_ours(ctx.store, e, info, rename_id(job_id, e.dst)):
            raise _NotDone

    try:
        await run_parallel(spool.entries(), check, ctx.config.io_threads)
    except _NotDone:
        return False
    return True
