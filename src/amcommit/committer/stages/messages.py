"""Shared by the stages that meet existing files: what the user reads about a conflict
(the path as a URI, what happens to the job, and what to do next). Pure text."""

from __future__ import annotations

from amcommit.committer.context import JobContext
from amcommit.paths import path_to_uri


def uri(ctx: JobContext, path: str) -> str:
    """``path`` as the user wrote the destination (a URI, like the rest of the report)."""
    return path_to_uri(ctx.store.root_uri, path)


def next_steps(ctx: JobContext, problem: str) -> str:
    """``problem`` plus what happens to the job and what the user can do next."""
    kept = (
        "nothing of this job stays published (its renamed files go back, the job is kept)"
        if ctx.config.rollback_on_failure
        else "the files renamed so far stay in place (rollback_on_failure is off)"
    )
    return (
        f"{problem} (conflict mode {ctx.config.conflict_mode!r}); {kept}. Commit the job again "
        "with --mode replace or --mode overwrite (or delete_target_files) to replace what is "
        f"there, or run `amcommit abort-job {uri(ctx, ctx.layout.dest)} --job-id {ctx.layout.job_id}` "
        "to discard the job"
    )


def conflict_message(ctx: JobContext, dst: str, *, directory: bool = False) -> str:
    """What a user reads when a new file meets an existing one (``directory``: an existing
    directory of that name)."""
    if directory:
        return next_steps(ctx, f"a directory is in the way of file {uri(ctx, dst)!r}")
    return next_steps(ctx, f"destination {uri(ctx, dst)!r} already exists")
