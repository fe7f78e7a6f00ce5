"""Stage 4: rename every file into place, in parallel, rate limited, recovering retries.

Each rename never overwrites. What happens when it does not simply succeed:

* transient failure / throttling: retried with backoff (the limiter slows down);
* the source is gone (a lost response, or a resumed commit): the destination is checked;
  if it is provably this job's file (same etag where renames keep it, same ``rename_id``
  mark where renames copy, else same size), the rename counts as *recovered*;
* the destination exists and is not ours: in ``replace``/``overwrite`` scope (or with
  ``delete_target_files``) the old file is moved aside to the job's trash and the rename
  retried; otherwise it is a :class:`~amcommit.errors.ConflictError`;
* the source's etag changed since task commit: a :class:`~amcommit.errors.CommitError`.
"""

from __future__ import annotations

import hashlib

from amcommit.committer.context import JobContext, run_parallel
from amcommit.committer.stages.check_conflicts import in_replace_scope, replace_scope, trash_path
from amcommit.errors import AlreadyExists, CommitError, ConflictError, NotFound, PreconditionFailed
from amcommit.manifest import RenameEntry
from amcommit.store.base import ObjectInfo, RenameResult, Store
from amcommit.uris import path_to_uri


def rename_id(job_id: str, dst: str) -> str:
    """Deterministic provenance id of the rename of ``dst`` by job ``job_id``."""
    h = hashlib.blake2b(f"{job_id}\0{dst}".encode("utf-8", "surrogatepass"), digest_size=12)
    return h.hexdigest()


async def _stat(store: Store, path: str) -> ObjectInfo | None:
    try:
        return await store.stat(path)
    except NotFound:
        return None


def is_ours(store: Store, entry: RenameEntry, dst_info: ObjectInfo, rid: str) -> bool:
    """Does ``dst_info`` prove that ``entry`` was renamed there by this job? (pure)"""
    caps = store.capabilities
    if dst_info.is_dir:
        return False
    if caps.etag_kept_on_rename and entry.etag:
        return dst_info.etag == entry.etag
    if caps.rename_provenance and dst_info.rename_id is not None:
        return dst_info.rename_id == rid and dst_info.size == entry.size
    return dst_info.size == entry.size


def is_our_copy(store: Store, entry: RenameEntry, dst_info: ObjectInfo, rid: str) -> bool:
    """A copy-based rename's destination carrying this job's provenance mark (pure)."""
    return (
        store.capabilities.rename_provenance
        and not dst_info.is_dir
        and dst_info.rename_id == rid
        and dst_info.size == entry.size
    )


async def proven_renamed(ctx: JobContext, entry: RenameEntry, rid: str) -> bool:
    """True if the destination is provably this job's file; completes a copy-based rename
    that stopped between its copy and its delete (the source is then deleted)."""
    info = await ctx.call(lambda: _stat(ctx.store, entry.dst))
    if info is None:
        return False
    if await ctx.call(lambda: _stat(ctx.store, entry.src)) is None:
        return is_ours(ctx.store, entry, info, rid)
    if is_our_copy(ctx.store, entry, info, rid):
        await ctx.call(lambda: ctx.store.delete(entry.src))
        return True
    return False


async def rename_one(ctx: JobContext, entry: RenameEntry, roots: list[str] | None) -> RenameResult:
    """Rename one file with recovery (see module docstring). ``roots``: replace scope."""
    store = ctx.store
    rid = rename_id(ctx.layout.job_id, entry.dst)
    moved_aside = False
    while True:
        try:
            return await ctx.call(
                lambda: store.rename(entry.src, entry.dst, src_etag=entry.etag, rename_id=rid)
            )
        except NotFound:
            if await proven_renamed(ctx, entry, rid):
                return RenameResult(entry.dst, recovered=True)
            raise CommitError(
                f"source {entry.src!r} of {entry.dst!r} is missing and the destination is not this job's file"
            ) from None
        except AlreadyExists:
            if await proven_renamed(ctx, entry, rid):
                return RenameResult(entry.dst, recovered=True)
            if moved_aside or roots is None or not in_replace_scope(ctx, entry.dst, roots):
                raise ConflictError(f"destination {entry.dst!r} already exists") from None
            await ctx.call(lambda: store.rename(entry.dst, trash_path(ctx, entry.dst)))
            ctx.report.moved_aside += 1
            moved_aside = True
        except PreconditionFailed as e:
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
