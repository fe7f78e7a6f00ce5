"""Stage 1: load and validate every task manifest into the bounded-memory spool.

Manifests are read with ``config.load_threads`` in parallel; each is decoded, validated
(:func:`amcommit.manifest.check_manifest`) and appended to the spool, then dropped, so at
most ``load_threads`` manifests are in memory. Duplicate destinations across manifests are
found exactly and reported with the manifests that name them, before anything is renamed.
So are a destination that is a file in one entry and a directory of others, and (on local
stores, where an ``lstat`` is cheap) a source that is a directory, a symbolic link or lies
behind one: elsewhere the rename itself refuses a directory source (see ``Store.rename``).
Every listing, read and write goes through the job's retry layer
(:mod:`amcommit.committer.context`).
"""

from __future__ import annotations

from collections.abc import Sequence

from amcommit.committer.context import JobContext, run_parallel
from amcommit.committer.layout import MANIFEST_SUFFIX
from amcommit.committer.spool import EntrySpool
from amcommit.errors import ManifestError, NotFound
from amcommit.manifest import TaskManifest, check_manifest, decode_manifest, encode_json, manifest_is_plain
from amcommit.store.base import PutMode, basename, parent
from amcommit.store.local import local_store_of


async def list_manifest_paths(ctx: JobContext) -> list[str]:
    """Committed manifests of the job attempt (``*-manifest.json``; ``.tmp`` excluded)."""
    paths = [
        i.path
        async for i in ctx.list(ctx.layout.manifests_dir, recursive=False)
        if not i.is_dir and i.path.endswith(MANIFEST_SUFFIX)
    ]
    return sorted(paths)


async def publish_given(
    ctx: JobContext, manifests: Sequence[TaskManifest], etags: Sequence[str | None] | None = None
) -> int:
    """Make the job's published manifests exactly ``manifests`` (the ones the caller commits,
    e.g. those Spark's commit coordinator authorised); return how many were written or
    removed.

    A resumed commit (``commit-job``) and a rollback (``abort-job``) read the published
    manifests, so they must name exactly the files being committed: a manifest published
    by another attempt of the same task (denied the commit, or a zombie) is replaced, and
    manifests of tasks that are not part of the job are removed. A published manifest is
    left alone when its etag equals the one in ``etags`` (what its task saw after
    publishing) or, without a known etag, when its bytes are what this commit would write.
    Runs before the journal exists; each write is an atomic whole-object put (not atomic
    as a set: a crash midway leaves a mix, which the next commit with the same manifests
    repairs).
    """
    store, layout = ctx.store, ctx.layout
    published: dict[str, str | None] = {}
    try:
        async for info in ctx.list(layout.manifests_dir, recursive=False):
            if not info.is_dir and info.path.endswith(MANIFEST_SUFFIX):
                published[info.path] = info.etag
    except NotFound:
        pass
    # commit_job checks that ``etags`` match ``manifests`` before any I/O
    known = list(etags) if etags is not None else [None] * len(manifests)
    wanted: dict[str, tuple[TaskManifest, str | None]] = {}
    for m, etag in zip(manifests, known, strict=True):
        wanted[layout.manifest_path(m.task_id)] = (m, etag)
    changed = 0

    async def sync(path: str) -> None:
        nonlocal changed
        m, etag = wanted[path]
        data = encode_json(m)
        if path in published:
            if etag is not None and published[path] == etag:
                return
            if etag is None:
                try:
                    if await ctx.call(lambda: store.get(path)) == data:
                        return
                except NotFound:
                    pass
        await ctx.call(lambda: store.put(path, data, mode=PutMode.OVERWRITE))
        changed += 1

    async def remove(path: str) -> None:
        nonlocal changed
        await ctx.call(lambda: store.delete(path))
        changed += 1

    await run_parallel(sorted(wanted), sync, ctx.config.load_threads)
    await run_parallel(sorted(published.keys() - wanted.keys()), remove, ctx.config.load_threads)
    if changed:
        ctx.report.job_stats.incr("committer_manifests_republished", changed)
    return changed


async def load_manifests(ctx: JobContext, manifests: Sequence[TaskManifest] | None = None) -> EntrySpool:
    """Fill ``ctx.spool`` and ``ctx.dirs``; return the spool. ManifestError on bad input."""
    spool = EntrySpool(directory=ctx.config.spool_dir)
    ctx.spool = spool
    scope = ctx.scope
    job_id = ctx.layout.job_id
    task_ids: dict[str, str] = {}
    done = 0

    def accept(m: TaskManifest, name: str, plain: bool = False) -> None:
        nonlocal done
        entries, dirs = check_manifest(m, job_id=job_id, scope=scope, name=name, plain=plain)
        other = task_ids.get(m.task_id)
        if other is not None:
            raise ManifestError(f"task {m.task_id} was committed twice (also in {other})", manifest=name)
        task_ids[m.task_id] = name
        spool.append(entries, spool.add_manifest(name))
        ctx.dirs |= dirs
        if m.extra_data:
            ctx.extra_data.append(dict(m.extra_data))
        ctx.report.task_stats.merge(m.iostatistics)
        done += 1

    if manifests is not None:
        total = len(manifests)
        for m in manifests:
            accept(m, f"manifest of {m.task_attempt_id}")
            ctx.emit("load_manifests", done, total)
    else:
        paths = await list_manifest_paths(ctx)
        total = len(paths)

        async def load(path: str) -> None:
            data = await ctx.call(lambda: ctx.store.get(path))
            accept(decode_manifest(data, name=basename(path)), basename(path), manifest_is_plain(data))
            ctx.emit("load_manifests", done, total)

        await run_parallel(paths, load, ctx.config.load_threads)

    dups = spool.find_duplicates()
    if dups:
        dst, names = dups[0]
        more = f" (and {len(dups) - 1} more)" if len(dups) > 1 else ""
        if len(set(names)) == 1:
            raise ManifestError(f"duplicate destination {dst!r}{more}", manifest=names[0])
        raise ManifestError(f"destination {dst!r} is written by several tasks: {', '.join(names)}{more}")
    _check_file_dir_clashes(spool, ctx.dirs, ctx.layout.dest)
    await _check_local_sources(ctx, spool)
    ctx.report.manifests = done
    ctx.report.files = spool.count
    ctx.report.bytes = spool.total_bytes
    return spool


def _check_file_dir_clashes(spool: EntrySpool, dirs: set[str], dest: str) -> None:
    """ManifestError if a destination file is also a directory of the job (an ancestor of
    another destination, or a declared directory). Hash lookups, then one exact pass over
    the spool only when a hash matches."""
    seen: set[str] = set()
    suspects: set[str] = set()
    for d in dirs:
        while d and d != dest and d not in seen:
            seen.add(d)
            if spool.has_dest(d):
                suspects.add(d)
            d = parent(d)
    if not suspects:
        return
    for mi, rows in spool.frames():
        for e in rows:
            if e.dst in suspects:
                raise ManifestError(
                    f"destination {e.dst!r} is a file, but the job also writes below it as a directory",
                    manifest=spool.sources[mi],
                )


async def _check_local_sources(ctx: JobContext, spool: EntrySpool) -> None:
    """On a local store, refuse before any rename a source that is not a regular file (a
    directory, a symbolic link, a FIFO...) or lies behind a symlinked directory. One
    ``lstat`` per source, in worker threads, one spool frame at a time."""
    local = local_store_of(ctx.store)
    if local is None:
        return
    for mi, rows in spool.frames():
        bad = await local.find_non_file([e.src for e in rows], ctx.scope.tasks_dir)
        if bad is not None:
            path, why = bad
            raise ManifestError(f"source {path!r} is not usable: {why}", manifest=spool.sources[mi])
