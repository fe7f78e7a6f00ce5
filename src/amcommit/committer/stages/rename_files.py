"""Stage 4: rename every file into place, in parallel, rate limited, recovering retries.

Each rename never overwrites, and every rename the engine makes carries a deterministic id
(:func:`rename_id` for forward renames, :func:`aside_id` for moves to the trash,
:func:`restore_id` for moves back from it, :func:`back_id` for a rollback's moves back into
the task directory), so a later process recognises its own half-done copies. Whether a
rename happened is decided in one place, :func:`amcommit.store.proof.judge_rename`.

What happens when a rename does not simply succeed:

* transient failure / throttling: retried with backoff (the limiter slows down);
* the source is gone (a lost response, or a resumed commit): the destination is checked;
  if it is provably this job's file, the rename counts as *recovered*;
* both exist and the destination is this job's copy of the source (a copy-based rename
  killed between copy and delete): the source is deleted, completing the rename;
* the destination exists and is not ours: in ``replace``/``overwrite`` scope (or with
  ``delete_target_files``) the old file is moved aside to the job's trash and the rename
  retried; otherwise it is a :class:`~amcommit.errors.ConflictError` naming the path and
  what to do next;
* the source's etag changed since task commit: a :class:`~amcommit.errors.CommitError`,
  unless the source carries this job's :func:`back_id` (an earlier rollback of this job put
  it back; a copy-based store gave it a new etag).
"""

from __future__ import annotations

import hashlib
from functools import partial

from amcommit.committer.context import JobContext, run_parallel
from amcommit.committer.stages.check_conflicts import in_replace_scope, replace_scope, trash_path
from amcommit.errors import AlreadyExists, CommitError, ConflictError, NotFound, PreconditionFailed
from amcommit.manifest import RenameEntry
from amcommit.store.base import ObjectInfo, RenameResult, Store
from amcommit.store.proof import Expected, Verdict, judge_rename
from amcommit.uris import path_to_uri


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
    verdict, _ = await look(ctx, src, dst, want)
    if verdict is Verdict.HALF:
        await ctx.call(lambda: ctx.store.delete(src))
        return Verdict.DONE
    return verdict


def is_ours(store: Store, entry: RenameEntry, dst_info: ObjectInfo, rid: str) -> bool:
    """Is ``dst_info`` (its source gone) provably ``entry`` renamed by this job? (pure)"""
    want = Expected(rid, entry.size, entry.etag)
    return judge_rename(store.capabilities, want, dst_info, None) is Verdict.DONE


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


def conflict_message(ctx: JobContext, dst: str) -> str:
    """What a user reads when a new file meets an existing one."""
    return next_steps(ctx, f"destination {uri(ctx, dst)!r} already exists")


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


async def rename_one(ctx: JobContext, entry: RenameEntry, roots: list[str] | None) -> RenameResult:
    """Rename one file with recovery (see module docstring). ``roots``: replace scope."""
    store, job = ctx.store, ctx.layout.job_id
    want = forward_expected(job, entry)
    rid = want.rename_id
    src_etag = entry.etag
    moved_aside = stale_removed = moved_back = False
    while True:
        try:
            return await ctx.call(
                partial(store.rename, entry.src, entry.dst, src_etag=src_etag, rename_id=rid)
            )
        except NotFound:
            if await settle(ctx, entry.src, entry.dst, want) is Verdict.DONE:
                return RenameResult(entry.dst, recovered=True)
            raise CommitError(
                f"source {entry.src!r} of {entry.dst!r} is missing and the destination is not this job's file"
            ) from None
        except AlreadyExists:
            verdict = await settle(ctx, entry.src, entry.dst, want)
            if verdict is Verdict.DONE:
                return RenameResult(entry.dst, recovered=True)
            if verdict is Verdict.STALE and not stale_removed:
                await ctx.call(lambda: store.delete(entry.dst))  # our copy of another version
                stale_removed = True
                continue
            if moved_aside or roots is None or not in_replace_scope(ctx, entry.dst, roots):
                raise ConflictError(conflict_message(ctx, entry.dst)) from None
            await move_aside(ctx, entry.dst)
            moved_aside = True
        except PreconditionFailed as e:
            s = await stat_or_none(ctx, entry.src)
            if (
                not moved_back
                and s is not None
                and s.rename_id == back_id(job, entry.src)
                and s.size == entry.size
            ):
                # an earlier rollback of this job moved the file back (new etag on a copy store)
                src_etag, moved_back = s.etag, True
                want = Expected(rid, entry.size, s.etag)
                continue
            raise CommitError(
                f"source {entry.src!r} changed after its task committed ({e.message}); nothing of it was published"
            ) from None


async def rename_files(ctx: JobContext) -> None:
    """Rename everything in the spool; counts renamed and recovered files in the report."""
    assert ctx.spool is not None
    report = ctx.report
    total = ctx.spool.count
    replacing = ctx.config.conflict_mode in ("replace", "overwrite") or ctx.config.delete_target_files
    roots = (
        (replace_scope(ctx) if ctx.config.conflict_mode != "append" else [ctx.layout.dest])
        if replacing
        else None
    )
    names: list[str] = []
    limit = ctx.config.success_filenames

    async def one(entry: RenameEntry) -> None:
        res = await rename_one(ctx, entry, roots)
        report.renamed += 1
        if res.recovered:
            report.recovered_renames += 1
        if len(names) < limit:
            names.append(entry.dst)
        ctx.emit("rename_files", report.renamed, total)

    await run_parallel(ctx.spool.entries(), one, ctx.config.io_threads)
    report.filenames = [path_to_uri(ctx.store.root_uri, n) for n in sorted(names)]
