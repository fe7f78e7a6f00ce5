"""``foreachBatch`` with ``write_batch``: a micro-batch written into a table exactly once,
from the caller's own driver process (the tasks through the DataFrame's session, the commit
here), with the same labels and the same commit as ``writeStream.format("amcommit")``
(:mod:`amcommit.spark.stream`). A module of its own so that the streaming sink and the data
source (:mod:`amcommit.spark.source`, which builds the write's plan) do not import each other.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from amcommit.committer.report import JobReport
from amcommit.errors import AmcommitError, ConfigError
from amcommit.liveness import driver_id, local_process, this_process
from amcommit.messages import for_user
from amcommit.spark.driver import abort_write
from amcommit.spark.mutate import MutationSpec, begin_kwargs, on_driver, prepare_mutation, run_mutation
from amcommit.spark.options import WritePlan
from amcommit.spark.source import AmcommitDataSource
from amcommit.spark.stream import (
    QUERY_ID_KEY,
    RUN_ID_KEY,
    AmcommitStreamWriter,
    StreamIds,
    _no_query_id,
    _stream_options,
    begin_batch,
    commit_batch,
)
from amcommit.spark.stream_state import checkpoint_app
from amcommit.spark.task import TaskResult
from amcommit.table.format.model import Operation

__all__ = ["write_batch"]


def write_batch(df: Any, batch_id: int, dest: str, **options: Any) -> JobReport:
    """``foreachBatch`` sink: write ``df`` (micro-batch ``batch_id``) into the table at
    ``dest`` exactly once, with the label ``(query id, batch_id)``. The query id is the
    session's ``sql.streaming.queryId`` local property (else the ``checkpointLocation``
    option's key); the options are those of ``format("amcommit")`` plus ``mode``
    (``append``, or ``overwrite`` to replace the table), or ``operation`` ``"upsert"`` /
    ``"delete"`` (with the options of :func:`amcommit.spark.upsert`: ``precombineField``,
    ``payload``): the batch is upserted into, or deleted from, the table
    (:mod:`amcommit.spark.mutate`), with the same label.

    Runs in the caller's process (foreachBatch functions run on the driver): the instant is
    allocated here, the tasks write through ``mapInArrow`` and the commit runs here; an
    upsert or delete of at most ``driverBatchRows`` rows is written by the engine on this
    driver instead, as :func:`amcommit.spark.upsert` does (:func:`_batch_on_driver`). A
    replayed batch whose label is committed is skipped by the commit (its files removed);
    ``report.skipped_label`` then names the instant that had committed it.

    The query's lease (``leaseTtl``) is renewed every ``leaseTtl / 4`` seconds while the
    batch's tasks run: by each task of an insert, by this driver for an upsert or delete.

    Atomic: the batch's instant is published at once or not at all. Blocking.
    """
    import json

    spark = df.sparkSession
    sc = spark.sparkContext
    query = sc.getLocalProperty(QUERY_ID_KEY)
    run = sc.getLocalProperty(RUN_ID_KEY)
    opts = {str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in options.items()}
    mode = str(opts.pop("mode", "append")).lower()
    if mode not in ("append", "overwrite"):
        raise ConfigError("write_batch: option 'mode' must be 'append' or 'overwrite'")
    operation = str(opts.pop("operation", "insert")).strip().lower()
    if operation not in ("insert", "upsert", "delete"):
        raise ConfigError("write_batch: option 'operation' must be 'insert', 'upsert' or 'delete'")
    if operation != "insert" and mode == "overwrite":
        raise ConfigError(f"write_batch: operation {operation!r} takes no mode 'overwrite'")
    rest, checkpoint, ttl = _stream_options(opts)
    ck = checkpoint_app(checkpoint) if checkpoint else None
    app = query or ck
    if not app:
        raise _no_query_id()
    ids = StreamIds(app, run, ck)
    rest["path"] = dest
    op: Operation | None = None
    spec: MutationSpec | None = None
    try:
        if operation == "insert":
            plan = AmcommitDataSource(rest).build_writer(df.schema, mode == "overwrite", begin=False).plan
        else:
            op = Operation.UPSERT if operation == "upsert" else Operation.DELETE
            plan, spec = prepare_mutation(df, dest, op, rest)
            if on_driver(plan, spec):
                assert op is not None
                return _batch_on_driver(plan, spec, op, ids, int(batch_id), checkpoint, ttl)
        plan = begin_batch(
            plan,
            checkpoint,
            app=app,
            driver=driver_id(local_process(os.getpid())),
            batch=int(batch_id),
            operation=op,
            schema_json=None if spec is None else spec.schema_json,
            table_kw=None if spec is None else begin_kwargs(spec),
        )
    except AmcommitError as e:
        raise for_user(e, dest) from None
    writer = AmcommitStreamWriter(plan, checkpoint, ttl)
    writer.driver = writer.driver or this_process()  # the Python driver, unless under a JVM
    try:
        writer._claim(ids)
        if spec is None:
            results = _run_tasks(df, writer, ids, int(batch_id))
        else:
            # the mutation's Spark jobs run from here: this driver renews the query's lease
            # while they run (the insert's tasks renew it themselves, _run_tasks)
            with writer._renewing(ids):
                results, _ = run_mutation(df, plan, spec)
        job = commit_batch(plan, results, ids, int(batch_id), ttl, writer.driver, operation=op)
    except BaseException:
        with contextlib.suppress(Exception):
            abort_write(plan)
        raise
    if spec is not None and spec.merge_on_read and job.success:
        # a Merge-on-Read batch: inline compaction once compact_every deltacommits are due,
        # as upsert/delete do (a failure is logged; the batch stays committed)
        from amcommit.spark.mutate import compact_if_due_after

        compact_if_due_after(plan, plan.job_id)
    return job


def _run_tasks(
    df: Any, writer: AmcommitStreamWriter, ids: StreamIds, batch_id: int
) -> list[TaskResult | None]:
    """Every partition of ``df`` written as one task (``rdd.mapPartitions``: ``mapInArrow``
    needs pandas); the results of the attempts Spark kept, in partition order."""
    import pickle

    from pyspark.sql.pandas.types import to_arrow_schema

    from amcommit.spark.task import run_task

    plan = writer.plan
    arrow = to_arrow_schema(df.schema, timezone="UTC")

    def task(rows: Iterator[Any]) -> Iterator[tuple[int, bytes]]:
        from pyspark import TaskContext

        def batches() -> Iterator[pa.RecordBatch]:
            chunk: list[dict[str, Any]] = []
            for r in rows:
                chunk.append(r.asDict(recursive=True))
                if len(chunk) >= 10_000:
                    yield pa.RecordBatch.from_pylist(chunk, schema=arrow)
                    chunk = []
            if chunk:
                yield pa.RecordBatch.from_pylist(chunk, schema=arrow)

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        try:
            with writer._renewing(ids):
                result = run_task(
                    plan, writer._watch(batches(), batch_id), partition=partition, attempt=attempt
                )
        except AmcommitError as e:
            raise for_user(e, plan.url) from None
        yield partition, pickle.dumps(result)

    got = df.rdd.mapPartitions(task).collect()
    return [pickle.loads(r) for _, r in sorted(got, key=lambda x: x[0])]


def _batch_on_driver(
    plan: WritePlan,
    spec: MutationSpec,
    operation: Operation,
    ids: StreamIds,
    batch_id: int,
    checkpoint: str | None,
    ttl: float,
) -> JobReport:
    """An upsert or delete micro-batch whose rows :func:`prepare_mutation` collected (at
    most ``driverBatchRows``): the query's lease taken first (a run fenced out writes
    nothing), then the engine's :func:`~amcommit.table.mutate.engine.prepare` on this driver
    (the instant begun with the batch's label, the files written and task committed, while
    this driver renews the lease), the instant's owner recorded, and the batch committed as
    every batch is (:func:`commit_batch`: lease, dead runs rolled back, committed once per
    label: a replay is skipped and its files removed). A failure before the commit's point
    of no return rolls the instant back. Blocking."""
    from dataclasses import replace

    from amcommit.loop import run_blocking
    from amcommit.spark import hooks
    from amcommit.spark.driver import open_driver_store
    from amcommit.spark.mutate import compact_if_due_after, engine_kwargs
    from amcommit.spark.stream import batch_label
    from amcommit.table.mutate import engine

    data = spec.data
    assert data is not None and plan.table is not None
    writer = AmcommitStreamWriter(plan, checkpoint, ttl)
    writer.driver = writer.driver or this_process()  # the Python driver, unless under a JVM
    kw = engine_kwargs(plan, spec, operation, batch_label(ids.app, batch_id))

    async def write() -> engine.MutateReport:
        store, root = open_driver_store(plan, "commit")
        async with store:
            prepared = await engine.prepare(store, root, data, operation=operation, **kw)
            return prepared.report

    try:
        writer._claim(ids, owner=False)  # the lease (no instant yet)
        with writer._renewing(ids):
            report = run_blocking(write)
    except AmcommitError as e:
        raise for_user(e, plan.url) from None
    plan = replace(
        plan,
        job_id=report.instant,
        partition_dir_names=(),
        table=replace(plan.table, instant=report.instant, operation=operation.value),
    )
    writer.plan = plan
    try:
        writer._claim(ids)  # the instant's owner: a later run rolls it back if this one dies
        hooks.current.stream_begun(batch_id, checkpoint)
        job = commit_batch(plan, None, ids, batch_id, ttl, writer.driver, operation=operation)
    except BaseException:
        with contextlib.suppress(Exception):
            abort_write(plan)
        raise
    if report.merge_on_read and job.success:
        compact_if_due_after(plan, plan.job_id)  # as upsert/delete do (a failure is logged)
    return job
