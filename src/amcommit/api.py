"""The front door: ``setup_job`` / ``commit_job`` / ``abort_job`` of any destination.

It picks the destination's job kind (:class:`~amcommit.committer.kind.JobKind`): one probe of
``.hoodie/hoodie.properties`` (a Hudi table: :class:`~amcommit.table.commit.kind.TableKind`, else plain
files, :data:`~amcommit.committer.kind.FILES`), skipped when the caller names the kind
(``kind="files"`` / ``"table"`` or a kind object), and runs the engine
(:mod:`amcommit.committer.job`) with it. The engine knows no table; this module is the one
place that knows both.

What is atomic is the engine's to say (:mod:`amcommit.committer.job`); the probe only reads.

It also re-exports what an embedding program needs beside them, so examples import from one
public place: :func:`open_location` / :func:`open_store` (a store for a URL),
:class:`CommitterConfig`, and the task calls :func:`setup_task`, :func:`commit_task`,
:func:`abort_task` (:mod:`amcommit.committer.task`, where what is atomic is stated).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.job import abort_with, commit_with, resolve_layout, setup_with
from amcommit.committer.jobs import DestinationJobs
from amcommit.committer.kind import FILES, JobKind
from amcommit.committer.layout import JobLayout
from amcommit.committer.leftovers import LeftoverSweep
from amcommit.committer.leftovers import remove_leftovers as _remove_leftovers
from amcommit.committer.report import JobReport, ProgressCallback
from amcommit.committer.task import abort_task, commit_task, setup_task
from amcommit.errors import ConfigError
from amcommit.manifest import TaskManifest
from amcommit.store.base import Store
from amcommit.store.limits import Limiter
from amcommit.store.schemes import open_location, open_store
from amcommit.table.commit.kind import TableKind, is_table
from amcommit.table.commit.labels import Label
from amcommit.table.format.naming import is_instant
from amcommit.table.write.staging import is_table_layout

__all__ = [
    "CommitterConfig",
    "JobReport",
    "KindName",
    "LeftoverSweep",
    "abort_job",
    "abort_task",
    "commit_job",
    "commit_task",
    "kind_of",
    "list_jobs",
    "open_location",
    "open_store",
    "remove_leftovers",
    "setup_job",
    "setup_task",
]

KindName = Literal["files", "table"]
"""A kind named by the caller: ``"files"`` (a plain destination) or ``"table"`` (Hudi)."""


async def kind_of(
    store: Store,
    dest: str,
    config: CommitterConfig = DEFAULT_CONFIG,
    *,
    kind: JobKind | KindName | None = None,
    label: Label | None = None,
    operation: str | None = None,
) -> JobKind:
    """The kind of ``dest``: ``kind`` as named, else a table if ``dest`` holds
    ``.hoodie/hoodie.properties`` (one retried probe), else plain files. ``label`` and
    ``operation`` (table writes only) go into a table's kind; ConfigError for plain files."""
    if kind is None:
        kind = "table" if await is_table(store, dest, config) else "files"
    if kind == "table":
        return TableKind(label=label, operation=operation)
    if kind == "files":
        kind = FILES
    if isinstance(kind, str):
        raise ConfigError(f"unknown job kind {kind!r}: 'files' or 'table'")
    if kind is FILES:
        if label is not None:
            raise ConfigError(
                f"{dest!r} is not a Hudi table: labels (exactly-once commits) need a table write"
            )
        if operation is not None:
            raise ConfigError(
                f"operation={operation!r} applies to table writes only; {dest!r} is not a table"
            )
    return kind


async def setup_job(
    store: Store,
    dest: str,
    job_id: str,
    *,
    job_attempt: int = 0,
    expected_tasks: int | None = None,
    origin: str = "api",
    kind: JobKind | KindName | None = None,
) -> JobLayout:
    """Create the job directory of a plain job (:func:`~amcommit.committer.job.setup_with`).
    CommitError if this job was set up before, or if ``dest`` holds a Hudi table (a plain job
    would put a ``_temporary`` folder and plain files into it)."""
    picked = await kind_of(store, dest, kind=kind)
    return await setup_with(
        picked, store, dest, job_id, job_attempt=job_attempt, expected_tasks=expected_tasks, origin=origin
    )


async def commit_job(
    store: Store,
    dest: str,
    job_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    manifests: Sequence[TaskManifest] | None = None,
    manifest_etags: Sequence[str | None] | None = None,
    progress: ProgressCallback | None = None,
    job_attempt: int = 0,
    limiter: Limiter | None = None,
    allow_partial: bool = False,
    label: Label | None = None,
    operation: str | None = None,
    kind: JobKind | KindName | None = None,
) -> JobReport:
    """Commit (or resume committing) job ``job_id`` into ``dest`` holding the destination
    lock (:mod:`amcommit.committer.lock`: one commit or abort per destination at a time;
    a half-done commit left by a dead holder is completed first). See
    :func:`~amcommit.committer.job.commit_held`.

    ``label``: table writes only (:mod:`amcommit.table.commit.labels`: each label commits once).
    ``operation`` (table writes only; a :class:`~amcommit.table.format.model.Operation` value):
    the operation to commit if it differs from the one given to ``begin_write`` (same
    action only), settled before anything is published
    (:func:`~amcommit.table.write.task.set_operation`). ConfigError for a plain destination.
    ``kind``: the destination's kind if the caller knows it (no probe).
    """
    picked = await kind_of(store, dest, config, kind=kind, label=label, operation=operation)
    return await commit_with(
        picked,
        store,
        dest,
        job_id,
        config=config,
        manifests=manifests,
        manifest_etags=manifest_etags,
        progress=progress,
        job_attempt=job_attempt,
        limiter=limiter,
        allow_partial=allow_partial,
    )


async def abort_job(
    store: Store,
    dest: str,
    job_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    progress: ProgressCallback | None = None,
    job_attempt: int = 0,
    limiter: Limiter | None = None,
    kind: JobKind | KindName | None = None,
) -> JobReport:
    """Abort job ``job_id`` (see :func:`~amcommit.committer.job.abort_with`): the
    destination ends as it was before the job, unless its commit had passed its point of no
    return (then the commit is completed). Idempotent. Without ``kind``, a job found in a
    table's staging folder is a table write, a plain job directory a plain job, and only a
    job with neither is probed for (an instant time in a table)."""
    if kind is None:
        layout = await resolve_layout(store, dest, job_id, job_attempt, config=config, kind=TableKind())
        if layout is not None:  # (the table's layouts hold the plain ones too)
            kind = "table" if is_table_layout(layout) else "files"
        elif not is_instant(job_id):
            kind = "files"
    picked = await kind_of(store, dest, config, kind=kind)
    return await abort_with(
        picked,
        store,
        dest,
        job_id,
        config=config,
        progress=progress,
        job_attempt=job_attempt,
        limiter=limiter,
    )


async def list_jobs(
    store: Store,
    dest: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    kind: JobKind | KindName | None = None,
) -> DestinationJobs:
    """What ``amcommit jobs`` shows of ``dest``, as its kind lists it
    (:meth:`~amcommit.committer.kind.JobKind.list_jobs`: a table's pending instants, or the
    plain jobs under ``_temporary``). Reads only; NotFound if nothing exists at ``dest``."""
    if kind is None:
        kind = "table"  # the table's listing probes hoodie.properties itself (else plain)
    picked = await kind_of(store, dest, config, kind=kind)
    return await picked.list_jobs(store, dest, config)


async def remove_leftovers(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> LeftoverSweep:
    """What ``amcommit jobs --remove-leftovers`` does: delete what task attempts left under
    ``$dest/_temporary`` after their job was over (committed or aborted), and report which
    jobs it removed and which it kept (a job whose marker exists, or whose lock is held, is
    kept whole). Not atomic: each attempt directory is deleted on its own; a crash leaves
    the rest for the next call. Idempotent."""
    return await _remove_leftovers(store, dest, config=config)
