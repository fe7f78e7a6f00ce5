"""Stage 6 (``validate_output``, with ``config.validate_output``): check every destination
after the renames: ``run(ctx, ValidateInputs) -> ValidateResult``. Reads only (one ``stat``
per file); a mismatch is a CommitError listing the first five."""

from __future__ import annotations

from dataclasses import dataclass

from amcommit.committer.context import JobContext
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.renaming import is_ours, rename_id
from amcommit.errors import CommitError, NotFound
from amcommit.manifest import RenameEntry
from amcommit.parallel import run_parallel


@dataclass(frozen=True)
class ValidateInputs:
    loaded: LoadedManifests


@dataclass(frozen=True)
class ValidateResult:
    checked: int


async def run(ctx: JobContext, inputs: ValidateInputs) -> ValidateResult:
    """Check each destination's size (and etag / provenance); CommitError listing mismatches."""
    await validate_output(ctx, inputs.loaded)
    return ValidateResult(inputs.loaded.spool.count)


async def validate_output(ctx: JobContext, loaded: LoadedManifests) -> None:
    """Check each destination's size (and etag / provenance); CommitError listing mismatches."""
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

    await run_parallel(loaded.spool.entries(), one, ctx.config.io_threads)
    if bad:
        raise CommitError(f"output validation failed for {len(bad)} file(s): " + "; ".join(sorted(bad)[:5]))
