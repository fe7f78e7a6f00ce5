"""Driver side of a write: the job commit and the job abort (run by Spark in a Python worker
on the driver host, with the commit messages of the tasks Spark authorised).

``commit_write``:

1. decodes the manifests carried by the messages (exactly one per partition: the attempt
   Spark's commit coordinator authorised);
2. makes the published manifests on the store agree with them: a manifest published by
   another attempt of the same task (one denied the commit, or a zombie) is replaced, and
   manifests of tasks that are not part of the job are removed. A later resume
   (``amcommit commit-job``) or rollback (``abort()``) reads the store's manifests, so they
   must name exactly the files being committed;
3. runs the asynchronous job commit on those manifests (no re-listing): renames under the
   job-commit journal, ``_SUCCESS``, cleanup of every attempt directory, including those
   of failed and denied attempts.

What is atomic: each rename (on stores with atomic rename); the job commit as a whole is
all-or-nothing through the journal: if ``commit()`` fails, Spark calls ``abort()``, which
rolls back a commit that had not reached its point of no return, and completes one that
had (the destination is then fully committed although Spark reports the job as failed).

``abort_write`` is idempotent and safe at any point: before any task ran, after failed
tasks, and after a ``commit()`` that failed midway.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from amcommit.committer.job import abort_job, commit_job
from amcommit.committer.layout import MANIFEST_SUFFIX, JobLayout
from amcommit.committer.report import JobReport
from amcommit.committer.sync import run_blocking
from amcommit.errors import CommitError, NotFound
from amcommit.manifest import TaskManifest, encode_json
from amcommit.spark.options import WritePlan
from amcommit.spark.task import TaskResult, decode_manifest
from amcommit.spark.testing import parse_driver_faults, wrap_driver_store
from amcommit.store.base import PutMode, Store
from amcommit.store.urls import open_location

log = logging.getLogger("amcommit.spark")


def _open(plan: WritePlan, phase: str) -> tuple[Store, str]:
    store, dest = open_location(plan.url, **plan.store_options)
    faults = parse_driver_faults(plan.testing.get("driver_faults"))
    return wrap_driver_store(store, faults, phase), dest


async def sync_published_manifests(
    store: Store, layout: JobLayout, manifests: Sequence[TaskManifest], etags: Sequence[str | None]
) -> int:
    """Make ``layout``'s published manifests exactly ``manifests``; return how many were
    rewritten or removed. A manifest whose published etag equals the one its task saw
    after publishing is left alone (the common case: nothing is written)."""
    published: dict[str, str | None] = {}
    try:
        async for info in store.list(layout.manifests_dir, recursive=False):
            if not info.is_dir and info.path.endswith(MANIFEST_SUFFIX):
                published[info.path] = info.etag
    except NotFound:
        pass
    changed = 0
    wanted = set()
    for m, etag in zip(manifests, etags, strict=True):
        path = layout.manifest_path(m.task_id)
        wanted.add(path)
        if path in published and etag is not None and published[path] == etag:
            continue
        await store.put(path, encode_json(m), mode=PutMode.OVERWRITE)
        changed += 1
    for path in published.keys() - wanted:
        try:
            await store.delete(path)
        except NotFound:
            pass
        changed += 1
    return changed


def decode_results(results: Sequence[TaskResult | None]) -> tuple[list[TaskManifest], list[str | None]]:
    manifests: list[TaskManifest] = []
    etags: list[str | None] = []
    for i, r in enumerate(results):
        if r is None:
            raise CommitError(f"no commit message for task {i}: cannot commit the job", stage="commit_job")
        manifests.append(decode_manifest(r.manifest))
        etags.append(r.manifest_etag)
    return manifests, etags


def commit_write(plan: WritePlan, results: Sequence[TaskResult | None]) -> JobReport:
    """Commit the job (see module docstring). Blocking; returns the job report."""
    manifests, etags = decode_results(results)
    config = plan.config()

    async def main() -> JobReport:
        store, dest = _open(plan, "commit")
        try:
            layout = JobLayout(dest, plan.job_id)
            fixed = await sync_published_manifests(store, layout, manifests, etags)
            if fixed:
                log.warning(
                    "job %s: %d published manifest(s) replaced by the authorised ones", plan.job_id, fixed
                )
            return await commit_job(store, dest, plan.job_id, config=config, manifests=manifests)
        finally:
            await store.aclose()

    report = run_blocking(main)
    log.info(
        "job %s committed: %d files, %d bytes, %.0f renames/s, %d recovered renames",
        report.job_id,
        report.files,
        report.bytes,
        report.rename_rate,
        report.recovered_renames,
    )
    return report


def abort_write(plan: WritePlan) -> JobReport:
    """Abort the job: roll back or clean up; completes a commit past its point of no return."""
    config = plan.config()

    async def main() -> JobReport:
        store, dest = _open(plan, "abort")
        try:
            return await abort_job(store, dest, plan.job_id, config=config)
        finally:
            await store.aclose()

    report = run_blocking(main)
    if report.success:
        log.warning(
            "job %s: the failed commit had passed its point of no return; abort completed it "
            "(the destination holds the job's complete output)",
            plan.job_id,
        )
    return report


__all__ = ["abort_write", "commit_write", "decode_results", "sync_published_manifests"]
