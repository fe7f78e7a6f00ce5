"""Driver side of a write: the job commit and the job abort (run by Spark in a Python worker
on the driver host, with the commit messages of the tasks Spark authorised).

``commit_write``:

1. decodes the manifests carried by the messages (exactly one per partition: the attempt
   Spark's commit coordinator authorised);
2. runs the job commit with them; the engine first makes the published manifests on the
   store agree with them (a manifest published by another attempt of the same task, one
   denied the commit or a zombie, is replaced; manifests of tasks that are not part of the
   job are removed), because a later resume (``amcommit commit-job``) or rollback
   (``abort()``) reads the store's manifests;
3. the commit itself runs the asynchronous job commit on those manifests (no re-listing): renames under the
   job-commit journal, ``_SUCCESS``, cleanup of every attempt directory, including those
   of failed and denied attempts.

What is atomic: each rename (on stores with atomic rename); the job commit as a whole is
all-or-nothing through the journal: if ``commit()`` fails, Spark calls ``abort()``, which
rolls back a commit that had not reached its point of no return, and completes one that
had (the destination is then fully committed although Spark reports the job as failed).

``abort_write`` is idempotent and safe at any point: before any task ran, after failed
tasks, and after a ``commit()`` that failed midway. For a table write (job id = instant)
the abort removes the inflight instant and every file stamped with it (the engine's table
abort), so a failed Spark job leaves no trace on the timeline.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

from amcommit.api import KindName, abort_job, commit_job
from amcommit.committer.config import ConflictMode
from amcommit.committer.report import JobReport
from amcommit.errors import CommitError
from amcommit.liveness import write_processes
from amcommit.loop import run_blocking, run_kept_loop
from amcommit.manifest import TaskManifest
from amcommit.spark import hooks
from amcommit.spark.options import WritePlan
from amcommit.spark.sqlconf import job_conflict_mode
from amcommit.spark.task import TaskResult, decode_manifest
from amcommit.store.base import Store
from amcommit.store.schemes import open_location
from amcommit.table.commit.labels import Label
from amcommit.table.format.model import Operation
from amcommit.table.format.properties import TableProperties

log = logging.getLogger("amcommit.spark")


def open_driver_store(plan: WritePlan, phase: str) -> tuple[Store, str]:
    """The store and destination of one driver step (``phase``: ``"check"``, the
    destination probe; ``"begin"``, a table write's instant; ``"commit"``; ``"abort"``),
    through :meth:`~amcommit.spark.hooks.SparkHooks.driver_store` (a no-op in production)."""
    store, dest = open_location(plan.url, **plan.store_options)
    return hooks.current.driver_store(store, phase), dest


def decode_results(results: Sequence[TaskResult | None]) -> tuple[list[TaskManifest], list[str | None]]:
    manifests: list[TaskManifest] = []
    etags: list[str | None] = []
    for i, r in enumerate(results):
        if r is None:
            raise CommitError(f"no commit message for task {i}: cannot commit the job", stage="commit_job")
        manifests.append(decode_manifest(r.manifest))
        etags.append(r.manifest_etag)
    return manifests, etags


def table_operation(mode: ConflictMode) -> Operation:
    """The operation a table write commits, from the job's conflict mode (settled from what
    the tasks saw, :func:`~amcommit.spark.sqlconf.job_conflict_mode`): an append is an
    ``INSERT``, a static overwrite ``INSERT_OVERWRITE_TABLE``, a dynamic one
    ``INSERT_OVERWRITE`` (both replace commits, as the ``.requested`` instant says)."""
    if mode == "replace":
        return Operation.INSERT_OVERWRITE
    if mode == "overwrite":
        return Operation.INSERT_OVERWRITE_TABLE
    return Operation.INSERT


def keep_write_alive(plan: WritePlan, *, spare: bool = False) -> None:
    """Start the driver's keep-alive process of the table write ``plan.job_id`` (its
    instant): it beats until the write is committed or aborted, or the process that runs
    the write is gone (:func:`amcommit.liveness.write_processes`: the Spark driver's
    JVM, or the Python driver that began the write). If it cannot start, the begun write is aborted
    (rolled back) and CommitError raised: a write whose liveness cannot be kept is not run.
    ``spare``: more writes follow (a stream's batches): the write is handed to this
    process's kept keep-alive process, which serves them all, so a batch starts no process
    (:mod:`amcommit.table.timeline.beater`)."""
    from amcommit.table.timeline import beater

    try:
        beater.start(
            plan.url,
            dict(plan.store_options),
            plan.job_id,
            plan.config().writer_ttl,
            watch=write_processes(),
            spare=spare,
        )
    except CommitError:
        with contextlib.suppress(Exception):
            abort_write(plan)
        raise


def commit_write(
    plan: WritePlan,
    results: Sequence[TaskResult | None] | None,
    *,
    label: Label | None = None,
    before: Callable[[Store, str], Awaitable[None]] | None = None,
    wrap: Callable[[Store], Store] | None = None,
    keep_loop: bool = False,
    operation: Operation | None = None,
) -> JobReport:
    """Commit the job (see module docstring). Blocking; returns the job report.

    For a table the job id is the instant: the commit publishes the completed instant
    last, with the operation the tasks' overwrite mode settles (:func:`table_operation`).
    ``label`` (a :class:`amcommit.table.commit.labels.Label`, streaming): committed once per label,
    see ``commit_job``; ``before(store, dest)``: run first, on the same store and event loop
    (the streaming sink's lease and dead-run rollback); ``wrap``: applied to the commit's
    store (test hooks); ``keep_loop``: run on the process's kept event loop
    (:func:`~amcommit.loop.run_kept_loop`: the streaming sink commits every batch
    from one long-lived worker process); ``operation``: the table operation to commit
    (an upsert's or delete's, :mod:`amcommit.spark.mutate`) instead of the save mode's.
    ``results`` None: the write's tasks ran in this process (the engine's upsert or delete
    on the driver, ``write_batch``): their manifests are read from the store."""
    manifests: list[TaskManifest] | None = None
    etags: list[str | None] | None = None
    if results is not None:
        manifests, etags = decode_results(results)
    # the session's partitionOverwriteMode reached the tasks only: they report it
    mode = job_conflict_mode(plan, [r for r in results or () if r])
    config = plan.config().with_options(conflict_mode=mode)
    # a table's operation: the overwrite mode the tasks settled; commit_job records it in the
    # write's marker before it publishes anything (the action must match the .requested one)
    if plan.table is None:
        op_name = None
    else:
        op_name = (operation if operation is not None else table_operation(mode)).value

    async def main() -> JobReport:
        inner, dest = open_driver_store(plan, "commit")
        async with inner:
            if before is not None:
                await before(inner, dest)
            store = inner if wrap is None else wrap(inner)
            report = await commit_job(
                store,
                dest,
                plan.job_id,
                config=config,
                manifests=manifests,
                manifest_etags=etags,
                operation=op_name,
                label=label,
                kind=_kind(plan),
            )
            fixed = report.job_stats.counters.get("committer_manifests_republished", 0)
            if fixed:
                log.warning(
                    "job %s: %d published manifest(s) replaced by the authorised ones", plan.job_id, fixed
                )
            return report

    report = run_kept_loop(main) if keep_loop else run_blocking(main)
    log.info(
        "job %s committed: %d files, %d bytes, %.0f renames/s, %d recovered renames",
        report.job_id,
        report.files,
        report.bytes,
        report.rename_rate,
        report.recovered_renames,
    )
    return report


def _kind(plan: WritePlan) -> KindName | None:
    """The kind the driver knows: ``"table"`` for a table write (its instant was begun on
    a table: the front door's probe of ``hoodie.properties`` is skipped); None (probed, as
    before) for a plain write, whose destination a table may have appeared in meanwhile."""
    return "table" if plan.table is not None else None


def abort_write(plan: WritePlan) -> JobReport:
    """Abort the job: roll back or clean up; completes a commit past its point of no return."""
    config = plan.config()

    async def main() -> JobReport:
        store, dest = open_driver_store(plan, "abort")
        async with store:
            return await abort_job(store, dest, plan.job_id, config=config, kind=_kind(plan))

    report = run_blocking(main)
    if report.success:
        log.warning(
            "job %s: the failed commit had passed its point of no return; abort completed it "
            "(the destination holds the job's complete output)",
            plan.job_id,
        )
    return report


__all__ = ["abort_write", "commit_write", "decode_results", "keep_write_alive", "table_operation"]


def begin_table_write(
    plan: WritePlan,
    owner: Mapping[str, str] | None = None,
    *,
    operation: Operation | None = None,
    schema_json: str | None = None,
    properties: TableProperties | None = None,
    spare: bool = False,
    merge_on_read: bool = False,
    table_type: str | None = None,
    payload_class: str | None = None,
    precombine_field: str | None = None,
) -> WritePlan:
    """Allocate the write's instant (``begin_write``: ``.requested`` and ``.inflight`` on
    the timeline, staging under ``.hoodie/.aux/amcommit/<instant>/``); the plan then carries it.
    ``owner``: recorded in the write's marker with the claim (``begin_write(owner=)``).
    ``operation`` (an upsert's or delete's) replaces the one of the save mode;
    ``schema_json`` (Avro) the schema of the DataFrame (a delete writes the table's).
    ``properties``: the table's, as the driver read them for this write (the destination
    check): ``begin_write`` then does not read them again. ``spare``: more writes follow
    from this process (:func:`keep_write_alive`).
    ``merge_on_read``: the caller (an upsert or delete) writes Merge-on-Read tables (the
    instant is then a ``deltacommit``); ``table_type``, ``payload_class``,
    ``precombine_field``: those of a table this write creates (``TableSpec``)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from amcommit.spark.parquet import nullable_voids
    from amcommit.table.format.schema import avro_schema
    from amcommit.table.write.task import TableSpec, TableWrite, begin_write

    table = plan.table
    assert table is not None
    # the .requested action comes from the save mode alone: both overwrites are replace
    # commits; which one it is may be settled at job commit (the session's mode)
    operation = operation or (
        Operation.INSERT
        if not plan.overwrite
        else (
            Operation.INSERT_OVERWRITE
            if plan.conflict_mode == "replace"
            else Operation.INSERT_OVERWRITE_TABLE
        )
    )
    if schema_json is None:
        arrow = to_arrow_schema(
            StructType.fromJson(nullable_voids(json.loads(plan.data_schema_json))), timezone="UTC"
        )
        schema_json = avro_schema(arrow, table.name)
    avro = schema_json
    spec = (
        TableSpec(
            name=table.name,
            partition_fields=plan.partition_columns,
            record_key_fields=table.record_key_fields,
            table_type=table_type,
            payload_class=payload_class,
            precombine_field=precombine_field,
        )
        if table.new
        else None
    )

    async def begin() -> TableWrite:
        store, dest = open_driver_store(plan, "begin")
        async with store:
            return await begin_write(
                store,
                dest,
                operation=operation,
                spec=spec,
                avro_schema=avro,
                config=plan.config(),
                origin="spark",
                allow_missing_columns=table.allow_missing_columns,
                owner=owner,
                properties=properties,
                merge_on_read=merge_on_read,
            )

    write = run_blocking(begin)
    begun = replace(
        plan,
        job_id=write.instant,
        partition_dir_names=(),
        table=replace(table, instant=write.instant, operation=operation.value),
    )
    keep_write_alive(begun, spare=spare)  # the driver's beats until commit/abort (or the driver is gone)
    return begun
