"""Upsert and delete through Spark: ``amcommit.spark.upsert(df, dest)`` and
``amcommit.spark.delete(df, dest)`` (and ``write_batch(..., operation="upsert")``).

Hudi's semantics, those of :mod:`amcommit.table.mutate.engine` (the engine path without Spark),
with its pure pieces (:func:`~amcommit.table.mutate.engine.plan_candidates`,
:func:`~amcommit.table.mutate.engine.merge_file`, :func:`~amcommit.table.mutate.engine.with_meta`, the footer
index, the input checks) and its readers of base files. Where each step runs:

driver (the caller's process, with the DataFrame's session)
    options and columns checked, the key columns' types against the table's committed
    schema, null keys and null precombine values counted (one line each,
    before any instant exists); the instant begun (``begin_table_write``, operation
    ``UPSERT`` / ``DELETE``); the snapshot's files of the batch's partitions listed and their
    footers read (key range and bloom filter, Hudi's index); the job commit
    (``commit_write``, the table kind: order, label and conflict checks, the instant
    published last).
tasks
    rows to ``(partition path, record key)`` with Hudi's key generators; duplicates
    reduced (``reduceByKey``: greatest precombine value, floats ordered as Hudi's
    ``Double.compareTo`` with NaN greatest, on a tie the later row of the DataFrame); each key tested against the footers of its partition's files (broadcast);
    the key column of each candidate file read by one task (only that column); the records
    joined to the file groups holding their keys; one task per rewritten file group merges
    it and writes its new base file (same fileId, new write token, this instant, with the
    footer index; staged, or with ``table_commit=direct`` in place under a ``MERGE`` marker,
    :mod:`amcommit.table.write.direct`); inserts written to new file groups by the table task writer
    (:func:`amcommit.spark.task.run_task`). Every task commits a manifest carrying its
    write stats (``numInserts``, ``numUpdateWrites``, ``numDeletes``, ``prevCommit``).

**Merge-on-Read** tables (created with option ``tableType`` / Hudi's
``hoodie.datasource.write.table.type`` ``MERGE_ON_READ``, or an existing one): the instant is a
``deltacommit``; instead of rewriting a file group, its task writes one new log file version of
the group's latest file slice (:func:`_log_one`: an Avro data block with the updates, meta
fields as Hudi's Java writer fills them, and a delete block for the deletes; the log blocks
built in the task), in place under Hudi's ``APPEND`` marker, named with the write token
``<task>-<instant>-0`` (:func:`amcommit.table.mutate.engine.log_write_token`: a retried attempt
writes the same bytes to the same name, never over another write's file). Inserts go to new
base files as on Copy-on-Write. Needs ``table_commit=direct`` (Spark's default). As the
engine's deltacommits (:mod:`amcommit.table.mutate.engine`).

**Where it runs.** A batch of at most ``driverBatchRows`` rows (option; default
:data:`DRIVER_BATCH_ROWS`) runs on the driver (:func:`_run_on_driver`; ``write_batch``:
:func:`amcommit.spark.foreach._batch_on_driver`): one Spark job collects at most
``driverBatchRows + 1`` rows as Arrow (``limit``, ``toArrow``; the table's properties,
timeline and committed schema are read on a thread meanwhile), the null checks and the
count are made on them (:func:`check_nulls_arrow`), and the engine's upsert or delete
runs there (index lookup with async I/O, the plan in Arrow, Hudi's small-file handling:
each partition's inserts fill its small file groups first, smallest first, then go to one
new file group per partition), written and committed as one task. A larger batch (or
``driverBatchRows=0``) runs in Spark tasks as described above (the rows collected to find
that out are dropped, and a Spark job checks the nulls); no record goes through the
driver then (it holds file lists, footers, counts), inserts are not put into existing small
file groups, and each partition path's inserts are written by one task (one new file group
per partition path and ``maxRecordsPerFile``, default :data:`INSERT_TASK_ROWS`, rows).

What is atomic: the commit (the instant is published last). A failure before it rolls the
write back (``abort_write``). A file group rewritten by an instant that completed after
this write read it fails the commit with ``WriteConflict`` (Hudi's optimistic check).
"""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pyarrow as pa

from amcommit.errors import AmcommitError, ConfigError
from amcommit.messages import for_user
from amcommit.spark.options import WritePlan
from amcommit.spark.task import TaskResult
from amcommit.table.commit.labels import Label
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import META_COLUMNS
from amcommit.table.mutate.engine import MutateReport, MutationError, Payload

__all__ = [
    "MutationSpec",
    "begin_kwargs",
    "delete",
    "log_blocks",
    "prepare_mutation",
    "run_mutation",
    "upsert",
]

_OWN_OPTIONS = ("precombinefield", "payload", "operation", "driverbatchrows")
_OWN_NAMES = {
    "precombinefield": "precombineField",
    "payload": "payload",
    "operation": "operation",
    "driverbatchrows": "driverBatchRows",
}

DRIVER_BATCH_ROWS = 1_000_000
"""Option ``driverBatchRows``'s default: an upsert or delete of at most this many rows is
collected to the driver (as Arrow) and planned and written there by the engine
(:func:`_run_on_driver`); a larger one runs in Spark tasks (:func:`run_mutation`)."""


@dataclass(frozen=True)
class MutationSpec:
    """What the tasks of an upsert or delete need besides the write plan. Picklable."""

    record_key: tuple[str, ...]
    partition_by: tuple[str, ...]
    precombine: str | None
    payload: Payload
    delete: bool
    arrow_schema: pa.Schema
    """The DataFrame's columns (meta columns left out)."""
    schema_json: str | None = None
    """Avro schema the instant records (a delete: the table's; None: the DataFrame's)."""
    merge_on_read: bool = False
    """The table is (or is created) Merge-on-Read: updates and deletes go to log files."""
    table_type: str | None = None
    """The table type the write names (option ``tableType``; None: none named)."""
    log_schema: str = ""
    """Merge-on-Read: the writer schema of the log blocks (the instant's, meta fields first)."""
    rows: int = -1
    """The DataFrame's rows (counted with the null checks; -1: not counted)."""
    driver_rows: int = DRIVER_BATCH_ROWS
    """Option ``driverBatchRows``: the most rows planned and written on the driver (0: none)."""
    data: pa.Table | None = field(default=None, compare=False, repr=False)
    """The batch's rows, collected on the driver (:func:`collect_arrow`) when they are at
    most ``driver_rows``; None: the batch runs in Spark tasks (left out of the pickled spec
    the tasks get)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["data"] = None  # the tasks never need the driver's copy of the rows
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)


def _split_options(options: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    from amcommit.table.format.hudi_names import resolve
    from amcommit.table.format.properties import TABLE_TYPES

    opts = {str(k): (v if isinstance(v, str) else json.dumps(v)) for k, v in options.items()}
    opts = {k: str(v) for k, v in resolve(opts, "spark").items()}
    table_type = None
    for k in [k for k in opts if k.lower() == "tabletype"]:  # upsert/delete write both types
        value = opts.pop(k)
        table_type = value.strip().upper()
        if table_type not in TABLE_TYPES:
            raise ConfigError(f"option {k!r}: table type {value!r} is not one of {', '.join(TABLE_TYPES)}")
    for k in opts:  # the engine's spellings of our own options
        if k.lower() not in _OWN_OPTIONS and k.lower().replace("_", "") in _OWN_OPTIONS:
            raise MutationError(
                f"unknown option {k!r}; did you mean {_OWN_NAMES[k.lower().replace('_', '')]!r}?"
            )
    own = {k.lower(): opts.pop(k) for k in list(opts) if k.lower() in _OWN_OPTIONS}
    if table_type is not None:
        own["tabletype"] = table_type
    return opts, own


def prepare_mutation(
    df: Any, dest: str, operation: Operation, options: dict[str, Any]
) -> tuple[WritePlan, MutationSpec]:
    """The checked plan of an upsert or delete (no instant yet) and its spec; MutationError /
    ConfigError (one line) for bad options or columns. Reads the table's properties and
    committed schema (on a thread, while this thread runs the Spark job: the two overlap);
    runs one Spark job: at most ``driverBatchRows + 1`` rows collected as Arrow
    (``spec.data`` when they fit, null checks made on them), else one more job counting the
    null keys and precombine values (:func:`_check_nulls`). Reads only: nothing is written."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql.pandas.types import to_arrow_schema

    from amcommit.loop import run_blocking
    from amcommit.spark.source import AmcommitDataSource
    from amcommit.store.schemes import open_location
    from amcommit.table.format.properties import MERGE_ON_READ, TableProperties
    from amcommit.table.format.schema import avro_schema
    from amcommit.table.mutate.checks import check_columns, check_key_types
    from amcommit.table.mutate.engine import with_meta_schema
    from amcommit.table.settings import table_settings
    from amcommit.table.write.task import check_table_type, committed_schema, latest_write, read_properties

    opts, own = _split_options(options)
    if "operation" in own and own["operation"].lower() != operation.value.lower():
        raise MutationError(f"option operation={own['operation']!r} given to {operation.value.lower()}()")
    try:
        payload = Payload(own.get("payload", Payload.OVERWRITE_WITH_LATEST.value))
    except ValueError:
        raise MutationError(
            f"payload {own['payload']!r}: use {Payload.OVERWRITE_WITH_LATEST.value} or {Payload.DEFAULT.value}"
        ) from None
    precombine = own.get("precombinefield") or None
    driver_rows = _driver_rows(own.get("driverbatchrows"))
    delete_op = operation is Operation.DELETE
    meta = [c for c in df.columns if c in META_COLUMNS]
    if meta:
        df = df.drop(*meta)
    if not any(k.lower() == "tableformat" for k in opts):
        opts["tableFormat"] = "hudi"
    opts["path"] = dest
    plan = AmcommitDataSource(opts).build_writer(df.schema, False, begin=False, merge_on_read=True).plan
    table = plan.table
    assert table is not None
    keys = tuple(k for k in table.record_key_fields if k not in META_COLUMNS)
    if not keys:
        raise MutationError(
            f"{operation.value.lower()} needs the table's record key: option recordKey (the table "
            "has generated keys, or none was given)"
        )
    if delete_op and table.new:
        raise MutationError(f"{dest!r} is not a Hudi table (no .hoodie/hoodie.properties): nothing to delete")
    if payload is Payload.DEFAULT and not precombine:
        raise MutationError("payload DefaultHoodieRecordPayload needs option precombineField")
    arrow = to_arrow_schema(df.schema, timezone="UTC")
    empty = arrow.empty_table()
    check_columns(empty, keys, plan.partition_columns, precombine)

    async def schema() -> tuple[TableProperties | None, str | None]:
        from amcommit.table.timeline.reader import timeline_files

        store, root = open_location(plan.url, **plan.store_options)
        async with store:
            props = await read_properties(store, root, plan.config())
            if props is None:
                return None, None
            instants = await timeline_files(store, root, config=plan.config())
            return props, await committed_schema(store, root, latest_write(instants), plan.config())

    # the table's reads run on a thread while this one runs the Spark job that collects the
    # rows (on a remote store they cost as much as the job); the rows are cast after both
    data: pa.Table | None = None
    collect = 0 < driver_rows and not table.allow_missing_columns
    with ThreadPoolExecutor(1, thread_name_prefix="amcommit-table-reads") as pool:
        reads = pool.submit(run_blocking, schema)
        if collect:
            # one Spark job: at most driverBatchRows + 1 rows collected as Arrow; a batch
            # that fits is checked (nulls, count) below and written by the engine on the driver
            data = collect_arrow(df.limit(driver_rows + 1), arrow)
        props, table_schema = reads.result()
    table_type = own.get("tabletype")
    if props is not None:
        check_table_type(props, table_type, dest)  # before anything is written
    mor = props.merge_on_read if props is not None else table_type == MERGE_ON_READ
    if mor and table_settings(plan.config()).table_commit != "direct":
        raise MutationError(
            "a Merge-on-Read table's log files are written in place: option tableCommit must be 'direct'"
        )
    widened = None
    for c in check_key_types(table_schema, empty, keys, table.name):
        # an int key column into a long-keyed table: promoted, as Hudi does (the tasks build
        # their rows with this schema; the instant records the promoted type)
        arrow = arrow.set(arrow.get_field_index(c), arrow.field(c).with_type(pa.int64()))
        widened = avro_schema(arrow, table.name)
    if delete_op and not table_schema:
        raise MutationError(f"table {dest!r} holds no committed write: nothing to delete")
    if data is not None:
        if data.num_rows > driver_rows:
            data = None  # too many rows for the driver: the Spark-task path
        else:
            if widened is not None:
                data = data.cast(arrow)  # a key column widened above
            check_nulls_arrow(data, keys, precombine)
    rows = data.num_rows if data is not None else _check_nulls(df, keys, precombine)
    schema_json = table_schema if delete_op else widened
    log_schema = ""
    if mor:
        log_schema = with_meta_schema(schema_json or _frame_avro(plan))
    spec = MutationSpec(
        record_key=keys,
        partition_by=plan.partition_columns,
        precombine=precombine,
        payload=payload,
        delete=delete_op,
        arrow_schema=arrow,
        schema_json=schema_json,
        merge_on_read=mor,
        table_type=table_type,
        log_schema=log_schema,
        rows=rows,
        driver_rows=driver_rows,
        data=data,
    )
    return plan, spec


def _driver_rows(value: str | None) -> int:
    """Option ``driverBatchRows`` (a count of rows, 0 or more); MutationError (one line) for
    anything else. Pure."""
    if value is None:
        return DRIVER_BATCH_ROWS
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise MutationError(
            f"option driverBatchRows={value!r}: give a count of rows (0: never on the driver)"
        )
    return n


def begin_kwargs(spec: MutationSpec) -> dict[str, Any]:
    """The table type arguments of :func:`amcommit.spark.driver.begin_table_write` for the
    write ``spec`` describes (a Merge-on-Read table created with its payload and precombine
    field, as the engine creates one). Pure."""
    return {
        "merge_on_read": spec.merge_on_read,
        "table_type": spec.table_type,
        "payload_class": spec.payload.value if spec.merge_on_read else None,
        "precombine_field": spec.precombine if spec.merge_on_read else None,
    }


def _frame_avro(plan: WritePlan) -> str:
    """The Avro schema the instant records for the DataFrame's columns (as
    :func:`amcommit.spark.driver.begin_table_write` derives it)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from amcommit.spark.parquet import nullable_voids
    from amcommit.table.format.schema import avro_schema

    assert plan.table is not None
    arrow = to_arrow_schema(
        StructType.fromJson(nullable_voids(json.loads(plan.data_schema_json))), timezone="UTC"
    )
    return avro_schema(arrow, plan.table.name)


def _check_nulls(df: Any, keys: tuple[str, ...], precombine: str | None) -> int:
    """One Spark job: MutationError if a key is null (or empty, for a single string key
    column, as Hudi's key generators refuse) or a precombine value null; else the rows of
    ``df`` (counted by the same job)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    def col(c: str) -> Any:
        return F.col("`" + c.replace("`", "``") + "`")

    aggs = []
    for c in keys:
        bad = col(c).isNull()
        if len(keys) == 1 and isinstance(df.schema[c].dataType, StringType):
            bad = bad | (col(c) == F.lit(""))
        aggs.append(F.sum(bad.cast("long")))
    if precombine is not None:
        aggs.append(F.sum(col(precombine).isNull().cast("long")))
    if len(keys) > 1:  # a composite key is refused only when every part is missing
        every = None
        for c in keys:
            gone = col(c).isNull() | (col(c).cast("string") == F.lit(""))
            every = gone if every is None else (every & gone)
        assert every is not None
        aggs.append(F.sum(every.cast("long")))
    aggs.append(F.count(F.lit(1)))
    row = df.agg(*aggs).collect()[0]
    total = int(row[len(aggs) - 1])
    aggs.pop()
    if len(keys) == 1 and row[0]:
        raise MutationError(
            f"record key column {keys[0]!r} is null or empty in {row[0]} row(s): every row needs a key"
        )
    if len(keys) > 1 and row[len(aggs) - 1]:
        raise MutationError(
            f"record key columns {', '.join(keys)} are all null or empty in {row[len(aggs) - 1]} row(s)"
        )
    if precombine is not None and row[len(keys)]:
        raise MutationError(
            f"precombine column {precombine!r} is null in {row[len(keys)]} row(s): every row needs a value"
        )
    return total


# -- the tasks -----------------------------------------------------------------------------


def _chunks(rows: Iterable[Any], n: int = 10_000) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for r in rows:
        chunk.append(r.asDict(recursive=True))
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _keyed(spec: MutationSpec) -> Any:
    """Task function: rows -> ``((partition path, key), (order, count, row))`` with Hudi's
    key generator and partition folders (the engine's own functions)."""
    names = spec.arrow_schema.names
    pre = spec.precombine

    def fn(
        index: int, rows: Iterable[Any]
    ) -> Iterator[tuple[tuple[str, str], tuple[Any, int, dict[str, Any]]]]:
        from amcommit.table.mutate.checks import partition_paths, record_key_strings
        from amcommit.table.mutate.plan import precombine_key

        pos = 0
        for chunk in _chunks(rows):
            chunk = [{k: d.get(k) for k in names} for d in chunk]
            t = pa.Table.from_pylist(chunk, schema=spec.arrow_schema)
            try:
                ks = record_key_strings(t, spec.record_key)
            except AmcommitError as e:  # pragma: no cover  (checked on the driver first)
                raise for_user(e, None) from None
            ps = partition_paths(t, spec.partition_by)
            for i, d in enumerate(chunk):
                # the later row of the DataFrame wins a tie (as reduce_batch's later row)
                at = (index, pos + i)
                # floats as Hudi's Double.compareTo orders them (NaN greatest, -0.0 < 0.0)
                order = (precombine_key(d[pre]), at) if pre is not None else (at,)
                yield (ps[i], ks[i]), (order, 1, d)
            pos += len(chunk)

    return fn


def _greater(
    a: tuple[Any, int, dict[str, Any]], b: tuple[Any, int, dict[str, Any]]
) -> tuple[Any, int, dict[str, Any]]:
    """Duplicates of one (partition, key): the greatest precombine value wins
    (``OverwriteWithLatestAvroPayload.preCombine``), then the later row; counts add up."""
    win = b if not a[0] > b[0] else a
    return win[0], a[1] + b[1], win[2]


def _in_task(plan: WritePlan, fn: Any, *args: Any) -> Any:
    """Run ``fn(store, dest, *args)`` (async) on the worker's kept event loop."""
    from amcommit.loop import kept_portal
    from amcommit.store.schemes import open_location

    portal = kept_portal()

    async def main() -> Any:
        store, dest = open_location(plan.url, **plan.store_options)
        async with store:
            return await fn(store, dest, *args)

    return portal.call(main)


def _rewrite_task(plan: WritePlan, spec: MutationSpec, versions: dict[str, Any]) -> Any:
    """Task function: the records of one file group (partition ``index`` of the shuffle by
    file) merged into its new base file, staged and task committed."""

    def fn(index: int, items: Iterable[tuple[str, tuple[str, dict[str, Any] | None]]]) -> Iterator[bytes]:
        from pyspark import TaskContext

        got = list(items)
        if not got:
            return
        rel = got[0][0]
        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        try:
            out = _in_task(plan, _rewrite_one, plan, spec, versions[rel], index, attempt, got)
        except AmcommitError as e:
            raise for_user(e, plan.url) from None
        yield pickle.dumps(out)

    return fn


@dataclass(frozen=True)
class _GroupAttempt:
    """A file group task's attempt (:func:`_group_attempt`)."""

    store: Any
    layout: Any
    attempt_id: str
    work: str
    task_id: str

    async def published(self) -> Any:
        """The committed manifest's info, after checking the job is still active (a job
        that ended meanwhile fails the attempt, which is then discarded)."""
        from amcommit.spark.task import check_job_active

        info = await self.store.stat(self.layout.manifest_path(self.task_id))
        await check_job_active(self.store, self.layout)
        return info


@contextlib.asynccontextmanager
async def _group_attempt(
    store: Any, dest: str, plan: WritePlan, config: Any, task: int, attempt: int
) -> AsyncIterator[_GroupAttempt]:
    """The attempt of a rewrite or log task (:func:`_rewrite_one`, :func:`_log_one`): set up
    once the job is found active; everything it created is discarded if the body fails
    (any exception, cancellation included), then the failure goes on."""
    from amcommit.spark.task import check_job_active, discard_attempt, job_layout, setup_attempt, task_ids

    layout = job_layout(plan, dest)
    await check_job_active(store, layout)
    attempt_id, work = await setup_attempt(store, layout, task, attempt, config)
    task_id, _ = task_ids(plan.job_id, task, 0)
    try:
        yield _GroupAttempt(store, layout, attempt_id, work, task_id)
    except BaseException:
        with contextlib.suppress(BaseException):
            await discard_attempt(store, layout, attempt_id)
        raise


async def _rewrite_one(
    store: Any,
    dest: str,
    plan: WritePlan,
    spec: MutationSpec,
    version: Any,
    task: int,
    attempt: int,
    items: list[tuple[str, tuple[str, dict[str, Any] | None]]],
) -> tuple[TaskResult, dict[str, int]]:
    import time

    import anyio

    from amcommit.committer.task import commit_task
    from amcommit.errors import CommitError
    from amcommit.paths import join
    from amcommit.spark.task import encode_manifest
    from amcommit.table.format.naming import write_token
    from amcommit.table.format.schema import check_footer
    from amcommit.table.format.tasknames import ROWS_KEY
    from amcommit.table.format.writestats import MUTATIONS_KEY, MutationFields
    from amcommit.table.mutate.engine import IndexReader, rewrite_group
    from amcommit.table.settings import Placement, table_settings
    from amcommit.table.write.direct import AttemptMarkers, IOType, commit_direct_task, write_in_place
    from amcommit.table.write.task import read_marker, write_schema

    t0 = time.perf_counter()
    config = plan.config()
    instant = plan.job_id
    async with _group_attempt(store, dest, plan, config, task, attempt) as a:
        layout, attempt_id, work, task_id = a.layout, a.attempt_id, a.work, a.task_id
        # table_commit=direct: the new version goes straight to its final name under a MERGE
        # marker (amcommit.table.write.direct); the write token then names this attempt alone (a
        # retried stage's attempt numbers start at 0 again: setup_attempt's n tells them apart)
        direct = table_settings(config).placement is Placement.DIRECT
        n_attempt = int(attempt_id.rpartition("_")[2])
        updates = {k: d for _, (k, d) in items if d is not None}
        deletes = {k for _, (k, d) in items if d is None}
        token = write_token(task, n_attempt >> 16, n_attempt & 0xFFFF)
        stored = await IndexReader(store, dest, config).table(version.path)

        def merge() -> tuple[str, bytes, int, dict[str, int]]:
            up_keys = sorted(updates)
            data = pa.Table.from_pylist([updates[k] for k in up_keys], schema=spec.arrow_schema)
            return rewrite_group(
                version,
                stored,
                data,
                up_keys,
                deletes,
                instant=instant,
                task=task,
                first_seq=0,
                token=token,
                precombine_field=spec.precombine,
                payload=spec.payload,
            )

        fname, body, n, counts = await anyio.to_thread.run_sync(merge)
        extra: dict[str, str] = {"spark.partition": str(task)}
        rel = ""
        placed: list[tuple[str, int, str | None, int]] = []
        fields = MutationFields(
            prev_commit=version.instant,
            num_inserts=0,
            num_update_writes=counts["updated"],
            num_deletes=counts["deleted"],
        )
        if body:
            rel = f"{version.partition}/{fname}" if version.partition else fname
            # the new version's footer against the write's schema, before it is uploaded
            check_footer(rel, body, write_schema(await read_marker(store, layout)))
            if direct:
                got = await write_in_place(
                    store,
                    dest,
                    instant,
                    rel,
                    body,
                    io_type=IOType.MERGE,
                    config=config,
                    markers=AttemptMarkers(store, dest, instant, attempt_id, config),
                )
                if got is None:
                    raise CommitError(
                        f"table write {instant} was committed or rolled back while task attempt "
                        f"{attempt_id} was still writing: its files were removed",
                        stage="commit_task",
                    )
                placed.append((rel, got.size, got.etag, n))
            else:
                await store.put(join(work, rel), body)
            extra[ROWS_KEY] = json.dumps({rel: n})
            extra[MUTATIONS_KEY] = msgspec.json.encode({rel: fields}).decode()
        if direct:
            manifest = await commit_direct_task(
                store,
                layout,
                task_id,
                attempt_id,
                placed,
                config=config,
                mutations={rel: fields} if rel else None,
            )
        else:
            manifest = await commit_task(store, layout, task_id, attempt_id, config=config, extra_data=extra)
        info = await a.published()
    counts["files"] = 1 if body else 0
    result = TaskResult(
        manifest=encode_manifest(manifest),
        manifest_etag=info.etag,
        task_attempt_id=attempt_id,
        rows=n,
        files=counts["files"],
        bytes=len(body),
        seconds=time.perf_counter() - t0,
    )
    return result, counts


def _log_task(
    plan: WritePlan, spec: MutationSpec, versions: dict[str, Any], logs: dict[str, list[Any]]
) -> Any:
    """Task function (Merge-on-Read): the records of one file group (partition ``index`` of
    the shuffle by file) written as one new log file version of its latest slice
    (:func:`_log_one`), task committed. ``logs``: per base file, the log files of its slice."""

    def fn(index: int, items: Iterable[tuple[str, tuple[str, dict[str, Any] | None]]]) -> Iterator[bytes]:
        from pyspark import TaskContext

        got = list(items)
        if not got:
            return
        rel = got[0][0]
        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        try:
            out = _in_task(plan, _log_one, plan, spec, versions[rel], logs[rel], index, attempt, got)
        except AmcommitError as e:
            raise for_user(e, plan.url) from None
        yield pickle.dumps(out)

    return fn


def log_blocks(
    spec: MutationSpec,
    instant: str,
    task: int,
    partition: str,
    file_id: str,
    updates: dict[str, dict[str, Any]],
    deletes: set[str],
) -> tuple[bytes, int]:
    """The log blocks of one file group's updates and deletes, as the engine writes them:
    one Avro data block of the updates (keys sorted; meta fields as Hudi's Java writer fills
    them: ``_hoodie_file_name`` holds the file id) and one delete block (ordering value
    ``IntWrapper(0)``: the delete wins, as a SQL delete). ``(bytes, updates written)``.
    Pure and deterministic: a retried attempt builds the same bytes."""
    from amcommit.table.file_group.merge import with_meta
    from amcommit.table.format.logblock import DeleteRecord, avro_data_block, delete_block

    blocks: list[bytes] = []
    up_keys = sorted(updates)
    if up_keys:
        rows = pa.Table.from_pylist([updates[k] for k in up_keys], schema=spec.arrow_schema)
        t = with_meta(rows, up_keys, instant, task, 0, partition, file_id)
        blocks.append(avro_data_block(instant, spec.log_schema, t))
    if deletes:
        dels = [DeleteRecord(k, partition, 0, "IntWrapper") for k in sorted(deletes)]
        blocks.append(delete_block(instant, spec.log_schema, dels))
    return b"".join(blocks), len(up_keys)


async def _log_one(
    store: Any,
    dest: str,
    plan: WritePlan,
    spec: MutationSpec,
    version: Any,
    slice_logs: list[Any],
    task: int,
    attempt: int,
    items: list[tuple[str, tuple[str, dict[str, Any] | None]]],
) -> tuple[TaskResult, dict[str, int]]:
    """One new log file of ``version``'s slice (Merge-on-Read), written in place under an
    ``APPEND`` marker, never over another file
    (:func:`amcommit.table.write.direct.write_in_place`), and the task's direct manifest
    with its write stat (``logVersion``, ``baseFile``, ``logFiles``)."""
    import time

    import anyio

    from amcommit.errors import CommitError
    from amcommit.paths import basename
    from amcommit.spark.task import encode_manifest
    from amcommit.table.format.naming import log_file_name
    from amcommit.table.format.writestats import MutationFields
    from amcommit.table.mutate.engine import log_write_token
    from amcommit.table.write.direct import IOType, commit_direct_task, write_in_place

    t0 = time.perf_counter()
    config = plan.config()
    instant = plan.job_id
    async with _group_attempt(store, dest, plan, config, task, attempt) as a:
        layout, attempt_id, task_id = a.layout, a.attempt_id, a.task_id
        updates = {k: d for _, (k, d) in items if d is not None}
        deletes = {k for _, (k, d) in items if d is None}
        body, n = await anyio.to_thread.run_sync(
            log_blocks, spec, instant, task, version.partition, version.file_id, updates, deletes
        )
        log_version = max([lg.version for lg in slice_logs], default=0) + 1
        # the token holds the instant and the task: two writers' log files never share a
        # name; a retried attempt of this task writes the same bytes to the same name
        name = log_file_name(version.file_id, version.instant, log_version, log_write_token(instant, task))
        rel = f"{version.partition}/{name}" if version.partition else name
        got = await write_in_place(store, dest, instant, rel, body, io_type=IOType.APPEND, config=config)
        if got is None:
            raise CommitError(
                f"table write {instant} was committed or rolled back while task attempt "
                f"{attempt_id} was still writing: its log file was removed",
                stage="commit_task",
            )
        fields = MutationFields(
            prev_commit=version.instant,
            num_inserts=0,
            num_update_writes=n,
            num_deletes=len(deletes),
            file_id=version.file_id,
            log_version=log_version,
            base_file=basename(version.path),
            log_files=[*(basename(lg.path) for lg in slice_logs), name],
        )
        manifest = await commit_direct_task(
            store,
            layout,
            task_id,
            attempt_id,
            [(rel, got.size, got.etag, n)],
            config=config,
            mutations={rel: fields},
        )
        info = await a.published()
    result = TaskResult(
        manifest=encode_manifest(manifest),
        manifest_etag=info.etag,
        task_attempt_id=attempt_id,
        rows=n,
        files=1,
        bytes=len(body),
        seconds=time.perf_counter() - t0,
    )
    return result, {"updated": n, "deleted": len(deletes), "kept_stored": 0, "files": 0, "logged": 1}


def _insert_task(plan: WritePlan, spec: MutationSpec, first: int) -> Any:
    """Task function: new records written as new file groups by the table task writer
    (task numbers from ``first`` on: after the rewrite tasks')."""

    def fn(index: int, rows: Iterable[dict[str, Any]]) -> Iterator[bytes]:
        from pyspark import TaskContext

        from amcommit.spark.task import run_task

        def batches() -> Iterator[pa.RecordBatch]:
            chunk: list[dict[str, Any]] = []
            for d in rows:
                chunk.append(d)
                if len(chunk) >= 10_000:
                    yield pa.RecordBatch.from_pylist(chunk, schema=spec.arrow_schema)
                    chunk = []
            if chunk:
                yield pa.RecordBatch.from_pylist(chunk, schema=spec.arrow_schema)

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx is not None else 0
        try:
            result = run_task(plan, batches(), partition=first + index, attempt=attempt)
        except AmcommitError as e:
            raise for_user(e, plan.url) from None
        yield pickle.dumps(result)

    return fn


INSERT_TASK_ROWS = 1_000_000
"""The most inserted rows of one partition path one insert task of the Spark path writes
(one new file group each; ``maxRecordsPerFile`` instead when given)."""


def _insert_buckets(absent: Any, per_task: int) -> Any:
    """The inserts (``((partition, key), ((order, count, row), None))`` pairs) shuffled so
    that each task holds the records of one partition path, at most about ``per_task`` of
    them (a partition of more is split by key hash): each task writes one new file group
    (the table task writer opens one file per partition it sees). One small Spark job counts
    the inserts per partition path."""
    counts = absent.map(lambda kv: (kv[0][0], 1)).reduceByKey(lambda a, b: a + b).collect()
    buckets: dict[str, tuple[int, int]] = {}
    n = 0
    for part, c in sorted(counts):
        k = max(1, -(-c // max(1, per_task)))
        buckets[part] = (n, k)
        n += k
    if not n:
        return absent.map(lambda kv: kv[1][0][2])

    def bucket(pk: tuple[str, str]) -> int:
        import zlib

        first, k = buckets[pk[0]]
        return first + (zlib.crc32(pk[1].encode("utf-8")) % k if k > 1 else 0)

    return absent.map(lambda kv: (kv[0], kv[1][0][2])).partitionBy(n, bucket).values()


def _candidates(index: Any) -> Any:
    """Task function: keys -> ``(file path, (partition, key))`` for every file of the key's
    partition whose footer cannot rule the key out (:func:`plan_candidates`)."""

    def fn(pks: Iterable[tuple[str, str]]) -> Iterator[tuple[str, tuple[str, str]]]:
        from amcommit.table.mutate.engine import plan_candidates

        files = index.value
        wanted: dict[str, list[str]] = {}
        n = 0
        for p, k in pks:
            wanted.setdefault(p, []).append(k)
            n += 1
            if n >= 100_000:
                yield from _emit(
                    plan_candidates(wanted, [x for p2 in wanted for x in files.get(p2, [])]), files
                )
                wanted, n = {}, 0
        if wanted:
            yield from _emit(plan_candidates(wanted, [x for p2 in wanted for x in files.get(p2, [])]), files)

    return fn


def _emit(cands: dict[str, list[str]], files: dict[str, list[Any]]) -> Iterator[tuple[str, tuple[str, str]]]:
    part_of = {f.path: f.partition for fs in files.values() for f, _ in fs}
    for path, ks in cands.items():
        for k in ks:
            yield path, (part_of[path], k)


def _confirm(plan: WritePlan) -> Any:
    """Task function: one candidate file's key column read (only that column); yields
    ``((partition, key), file path)`` for the candidate keys it holds."""

    def fn(items: Iterable[tuple[str, tuple[str, str]]]) -> Iterator[tuple[tuple[str, str], str]]:
        from amcommit.table.mutate.engine import IndexReader

        by_file: dict[str, list[tuple[str, str]]] = {}
        for path, pk in items:
            by_file.setdefault(path, []).append(pk)
        for path, pks in by_file.items():

            async def keys(store: Any, dest: str, rel: str = path) -> list[str]:
                return await IndexReader(store, dest, plan.config()).keys(rel)

            try:
                held = set(_in_task(plan, keys))
            except AmcommitError as e:
                raise for_user(e, plan.url) from None
            for pk in pks:
                if pk[1] in held:
                    yield pk, path

    return fn


def run_mutation(
    df: Any, plan: WritePlan, spec: MutationSpec
) -> tuple[list[TaskResult | None], MutateReport]:
    """The tasks of a begun upsert or delete (module doc): their results, in task order,
    for ``commit_write``, and the report (without the job)."""
    from pyspark import StorageLevel

    from amcommit.loop import run_blocking
    from amcommit.parallel import run_parallel
    from amcommit.store.schemes import open_location
    from amcommit.table.mutate.engine import IndexReader
    from amcommit.table.timeline.instants import file_groups, snapshot
    from amcommit.table.timeline.reader import Timeline

    sc = df.sparkSession.sparkContext
    report = MutateReport(
        instant=plan.job_id, operation=Operation.DELETE.value if spec.delete else Operation.UPSERT.value
    )
    meta = [c for c in df.columns if c in META_COLUMNS]
    if meta:
        df = df.drop(*meta)
    keyed = df.rdd.mapPartitionsWithIndex(_keyed(spec))
    reduced = keyed.reduceByKey(_greater).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # per partition path: (input rows, distinct keys) in one job
        totals = (
            reduced.map(lambda kv: (kv[0][0], (kv[1][1], 1)))
            .reduceByKey(lambda a, b: (a[0] + b[0], a[1] + b[1]))
            .collect()
        )
        parts = {p for p, _ in totals}
        report.duplicates_dropped = sum(n - d for _, (n, d) in totals)

        slice_logs: dict[str, list[Any]] = {}

        async def footers() -> dict[str, list[Any]]:
            store, dest = open_location(plan.url, **plan.store_options)
            async with store:
                if spec.merge_on_read:
                    # its log files go to the slices a pending compaction makes: complete it
                    # first, under the table's lock (this write is pending already, so no
                    # new compaction starts before it ends), as the engine's writes do
                    from amcommit.table.commit.compaction import finish_pending_compactions

                    await finish_pending_compactions(store, dest, plan.config())
                commits = await Timeline(store, dest, config=plan.config()).commits()
                files = [f for f in snapshot(commits) if f.partition in parts]
                if spec.merge_on_read:  # the log files of each base file's slice (its versions)
                    latest = {(g.partition, g.file_id): g.latest for g in file_groups(commits)}
                    for f in files:
                        sl = latest.get((f.partition, f.file_id))
                        slice_logs[f.path] = (
                            [] if sl is None else [lg for lg in sl.logs if lg.base_instant == f.instant]
                        )
                reader = IndexReader(store, dest, plan.config())
                out: dict[str, Any] = {}

                async def one(f: Any) -> None:
                    out[f.path] = await reader.footer(f.path, f.size)

                await run_parallel(files, one, plan.config().io_threads)
                by_part: dict[str, list[Any]] = {}
                for f in files:
                    by_part.setdefault(f.partition, []).append((f, out[f.path]))
                return by_part

        by_part = run_blocking(footers)
        report.footers_read = sum(len(v) for v in by_part.values())
        versions = {f.path: f for fs in by_part.values() for f, _ in fs}
        index = sc.broadcast(by_part)
        try:
            cands = reduced.keys().mapPartitions(_candidates(index)).persist(StorageLevel.MEMORY_AND_DISK)
            cand_files = sorted(cands.keys().distinct().collect())
            report.candidates = report.key_columns_read = len(cand_files)
            pos = {p: i for i, p in enumerate(cand_files)}
            if cand_files:
                located = cands.partitionBy(len(cand_files), lambda p: pos[p]).mapPartitions(_confirm(plan))
            else:
                located = sc.emptyRDD()
            joined = reduced.leftOuterJoin(located).persist(StorageLevel.MEMORY_AND_DISK)
        except BaseException:
            index.unpersist()
            raise
        try:
            changed = joined.filter(lambda kv: kv[1][1] is not None).map(
                lambda kv: (kv[1][1], (kv[0][1], None if spec.delete else kv[1][0][2]))
            )
            rewrite_files = sorted(changed.keys().distinct().collect())
            results: list[TaskResult | None] = []
            if rewrite_files:
                at = {p: i for i, p in enumerate(rewrite_files)}
                rw = {p: versions[p] for p in rewrite_files}
                task_fn = (
                    _log_task(plan, spec, rw, {p: slice_logs.get(p, []) for p in rewrite_files})
                    if spec.merge_on_read
                    else _rewrite_task(plan, spec, rw)
                )
                got = (
                    changed.partitionBy(len(rewrite_files), lambda p: at[p])
                    .mapPartitionsWithIndex(task_fn)
                    .collect()
                )
                for res, counts in sorted(
                    (pickle.loads(b) for b in got), key=lambda rc: rc[0].task_attempt_id
                ):
                    results.append(res)
                    report.updated += counts["updated"]
                    report.deleted += counts["deleted"]
                    report.kept_stored += counts["kept_stored"]
                    report.files_rewritten += counts["files"]
                    report.files_logged += counts.get("logged", 0)
            absent = joined.filter(lambda kv: kv[1][1] is None)
            if spec.delete:
                report.absent_deletes = absent.count()
            else:
                news = _insert_buckets(absent, plan.max_records_per_file or INSERT_TASK_ROWS)
                got = news.mapPartitionsWithIndex(_insert_task(plan, spec, len(rewrite_files))).collect()
                for r in (pickle.loads(b) for b in got):
                    results.append(r)
                    report.inserted += r.rows
                    report.files_created += r.files
        finally:
            joined.unpersist()
            cands.unpersist()
            index.unpersist()
    finally:
        reduced.unpersist()
    return results, report


# -- the user's functions ----------------------------------------------------------------


def _run(
    df: Any, dest: str, operation: Operation, label: Label | None, options: dict[str, Any]
) -> MutateReport:
    from amcommit.spark.driver import abort_write, begin_table_write, commit_write

    try:
        plan, spec = prepare_mutation(df, dest, operation, options)
    except AmcommitError as e:
        raise for_user(e, dest) from None
    if on_driver(plan, spec):
        return _run_on_driver(df, dest, operation, label, plan, spec)
    try:
        plan = begin_table_write(
            plan, operation=operation, schema_json=spec.schema_json, **begin_kwargs(spec)
        )
    except AmcommitError as e:
        raise for_user(e, dest) from None
    try:
        results, report = run_mutation(df, plan, spec)
        report.job = commit_write(plan, results, label=label, operation=operation)
    except BaseException as e:
        with contextlib.suppress(Exception):
            abort_write(plan)
        if isinstance(e, AmcommitError):
            raise for_user(e, dest) from None
        raise
    if spec.merge_on_read and report.job is not None and report.job.success:
        _inline_compaction(plan, report)
    return report


def on_driver(plan: WritePlan, spec: MutationSpec) -> bool:
    """Whether the write ``spec`` describes runs on the driver (:func:`_run_on_driver`): its
    rows were collected by :func:`prepare_mutation` (at most option ``driverBatchRows``,
    and the table takes no write with missing columns, ``allowMissingColumns``, which only
    the Spark path records). Pure."""
    return spec.data is not None


def collect_arrow(df: Any, schema: pa.Schema) -> pa.Table:
    """The rows of ``df`` (no meta columns) on the driver as one Arrow table of ``schema``
    (its columns' types: a key column widened). One Spark job (``toArrow``: the executors
    encode Arrow batches, no Python worker)."""
    got: pa.Table = df.toArrow()
    return got.cast(schema)


def check_nulls_arrow(data: pa.Table, keys: tuple[str, ...], precombine: str | None) -> None:
    """:func:`_check_nulls` on rows already on the driver: MutationError (one line, the same
    words) if a key is null (or empty, for a single string key column) or every part of a
    composite key is, or a precombine value is null. Pure."""
    import pyarrow.compute as pc

    def gone(c: str, empty: bool) -> pa.ChunkedArray:
        col = data.column(c)
        bad = pc.is_null(col)
        if empty:
            try:
                text = col if pa.types.is_string(col.type) else pc.cast(col, pa.string())
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
                return bad  # a type without a text form (never "")
            bad = pc.or_(bad, pc.fill_null(pc.equal(text, ""), False))
        return bad

    def count(bad: Any) -> int:
        return int(pc.sum(pc.cast(bad, pa.int64())).as_py() or 0)

    if len(keys) == 1:
        n = count(gone(keys[0], pa.types.is_string(data.column(keys[0]).type)))
        if n:
            raise MutationError(
                f"record key column {keys[0]!r} is null or empty in {n} row(s): every row needs a key"
            )
    elif keys:
        every = gone(keys[0], True)
        for c in keys[1:]:
            every = pc.and_(every, gone(c, True))
        n = count(every)
        if n:
            raise MutationError(f"record key columns {', '.join(keys)} are all null or empty in {n} row(s)")
    if precombine is not None:
        n = data.column(precombine).null_count
        if n:
            raise MutationError(
                f"precombine column {precombine!r} is null in {n} row(s): every row needs a value"
            )


def _run_on_driver(
    df: Any, dest: str, operation: Operation, label: Label | None, plan: WritePlan, spec: MutationSpec
) -> MutateReport:
    """An upsert or delete of a batch that fits the driver (:func:`on_driver`): its rows,
    collected as Arrow by :func:`prepare_mutation`, written by the engine's upsert or delete
    (:mod:`amcommit.table.mutate.engine`) on the driver: the index lookup with async I/O,
    the plan in Arrow (inserts into the partition's small file groups first, then one new
    file group per partition), the rewrites, log files and new file groups written and
    committed as one task, the instant published last (with ``label``: once per label).
    Same semantics and atomicity as the Spark path; no Spark task writes anything."""
    from amcommit.loop import run_blocking
    from amcommit.spark.driver import open_driver_store
    from amcommit.table.mutate import engine

    data = spec.data
    assert data is not None
    kw = engine_kwargs(plan, spec, operation, label)

    async def main() -> MutateReport:
        # the driver's store (its test hooks apply, as to the Spark path's begin and commit)
        store, root = open_driver_store(plan, "commit")
        async with store:
            if operation is Operation.UPSERT:
                return await engine.upsert(store, root, data, **kw)
            return await engine.delete(store, root, data, **kw)

    try:
        return run_blocking(main)
    except AmcommitError as e:
        raise for_user(e, dest) from None


def engine_kwargs(
    plan: WritePlan, spec: MutationSpec, operation: Operation, label: Label | None
) -> dict[str, Any]:
    """The keyword arguments of the engine's ``upsert`` / ``delete`` / ``prepare``
    (:mod:`amcommit.table.mutate.engine`) for the write ``plan`` and ``spec`` describe. Pure."""
    table = plan.table
    assert table is not None
    kw: dict[str, Any] = {
        "record_key": spec.record_key,
        "partition_by": spec.partition_by,
        "precombine_field": spec.precombine,
        "label": label,
        "config": plan.config(),
        "table_type": spec.table_type,
    }
    if operation is Operation.UPSERT:
        kw.update(
            payload=spec.payload,
            table_name=table.name,
            max_file_rows=plan.max_records_per_file or 1_000_000,
        )
    return kw


def _inline_compaction(plan: WritePlan, report: MutateReport) -> None:
    """After a Merge-on-Read deltacommit committed: compact if ``compact_every``
    deltacommits are due (:func:`amcommit.table.commit.compaction.compact_if_due`, as the
    engine's writes do). The deltacommit stays committed if it fails:
    ``report.compaction_error`` (a later write or compaction completes what it left)."""
    report.compaction, report.compaction_error = compact_if_due_after(plan, report.instant)


def compact_if_due_after(plan: WritePlan, instant: str) -> tuple[Any, str | None]:
    """Inline compaction after the Merge-on-Read deltacommit ``instant`` of ``plan``
    committed (``upsert``/``delete`` and ``write_batch``): ``(its report or None, the
    error's text or None)``; a failure is logged, never raised (the deltacommit stays)."""
    import logging

    from amcommit.loop import run_blocking
    from amcommit.store.schemes import open_location
    from amcommit.table.commit.compaction import CompactionReport, compact_if_due

    async def due() -> CompactionReport | None:
        store, dest = open_location(plan.url, **plan.store_options)
        async with store:
            return await compact_if_due(store, dest, plan.config())

    try:
        return run_blocking(due), None
    except AmcommitError as e:
        logging.getLogger(__name__).warning("inline compaction after %s failed: %s", instant, e)
        return None, str(e)


def upsert(df: Any, dest: str, *, label: Label | None = None, **options: Any) -> MutateReport:
    """Upsert the rows of ``df`` into the Hudi table at ``dest`` (created on the first
    write: give ``recordKey`` and ``partitionBy``), in Spark tasks with ``df``'s session.
    Options: those of ``format("amcommit")`` (store options too), ``precombineField``,
    ``payload`` (``OverwriteWithLatestAvroPayload``, the default, or
    ``DefaultHoodieRecordPayload``), ``tableType`` (``MERGE_ON_READ`` on the first write:
    a Merge-on-Read table, its updates and deletes in log files; module doc); ``label``
    commits the write once per label. Returns the
    report: counts, index counts (``footers_read``, ``key_columns_read``,
    ``files_rewritten``), the job report. Semantics, where each step runs and what is
    atomic: the module doc. Blocking."""
    return _run(df, dest, Operation.UPSERT, label, options)


def delete(df: Any, dest: str, *, label: Label | None = None, **options: Any) -> MutateReport:
    """Delete the records whose (partition, key) the rows of ``df`` name (at least the key
    and partition columns) from the table at ``dest``; absent keys are counted no-ops
    (``absent_deletes``). As :func:`upsert` otherwise. Blocking."""
    return _run(df, dest, Operation.DELETE, label, options)
