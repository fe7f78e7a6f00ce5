"""Part of stage 1 (``load_manifests``, same stage name and time): when the caller gives
the manifests (Spark commit messages), publish exactly them in the job directory before the
journal exists: ``run(ctx, PublishInputs) -> PublishResult``.

Every listing, read and write goes through the job's retry layer
(:mod:`amcommit.store.retry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amcommit.committer.context import JobContext
from amcommit.committer.layout import MANIFEST_SUFFIX
from amcommit.errors import NotFound
from amcommit.manifest import TaskManifest, encode_json
from amcommit.parallel import run_parallel
from amcommit.store.base import PutMode


@dataclass(frozen=True)
class PublishInputs:
    """The manifests the caller commits and, optionally, the etags their tasks saw after
    publishing them (same length: ``commit_job`` checks it before any I/O)."""

    manifests: Sequence[TaskManifest]
    etags: Sequence[str | None] | None = None


@dataclass(frozen=True)
class PublishResult:
    changed: int
    """How many manifests were written or removed."""


async def run(ctx: JobContext, inputs: PublishInputs) -> PublishResult:
    """Make the job's published manifests exactly ``inputs.manifests`` (the ones the caller
    commits, e.g. those Spark's commit coordinator authorised).

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
    manifests, etags = inputs.manifests, inputs.etags
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
    return PublishResult(changed)
