"""The Python Data Source ``amcommit``: ``df.write.format("amcommit")``.

Where each piece runs (PySpark 4 Python Data Source API):

* :meth:`AmcommitDataSource.writer` runs once per write in a Python worker on the driver
  host. It validates every option against the DataFrame's schema (bad options fail here,
  before anything is written), checks the destination is reachable, creates the job id and
  sets the job up (``_temporary/manifest_<jobId>/``). The writer object is then pickled
  once and the same bytes reach every task and the job commit.
* :meth:`AmcommitWriter.write` runs in executor Python workers, once per task attempt, with
  pyarrow RecordBatches (:mod:`amcommit.spark.task`).
* :meth:`AmcommitWriter.commit` / :meth:`AmcommitWriter.abort` run in a Python worker on the
  driver host (:mod:`amcommit.spark.driver`). ``abort`` also follows a failed ``commit``.

Save modes: ``append`` (conflict mode ``append``, or ``fail`` with
``option("conflict_mode", "fail")``), ``overwrite`` (the whole destination is replaced;
with ``option("partitionOverwriteMode", "dynamic")`` or the session's
``spark.sql.sources.partitionOverwriteMode=dynamic`` only the partitions written: the tasks
see the session setting and report it in their commit messages, see
:mod:`amcommit.spark.sqlconf`). Spark
rejects the other save modes and ``.partitionBy()`` for Python data sources before they get
here: partition columns are given as ``option("partitionBy", "a,b")``.

Streaming: :meth:`AmcommitDataSource.streamWriter` (:mod:`amcommit.spark.stream`) reuses
the task side unchanged with one table instant per micro-batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from amcommit.errors import AmcommitError, BucketNotFound, ConfigError, NotFound
from amcommit.messages import for_user

if TYPE_CHECKING:
    import pyarrow as pa

    from amcommit.spark.options import WritePlan
    from amcommit.spark.reader import FilePart, ReadPlan
    from amcommit.spark.task import TaskResult
    from amcommit.table.format.properties import TableProperties

# Spark starts a Python process to look this source up (``name()``) and one to create it for
# each streaming query, before the one that plans its writer: the engine, pyarrow and the
# write and read paths load only in the methods that use them (:mod:`amcommit.spark`).
SOURCE_NAME = "amcommit"
"""``format("amcommit")`` (:data:`amcommit.spark.options.SOURCE_NAME`)."""


@dataclass
class AmcommitCommitMessage(WriterCommitMessage):
    """Commit message of one task attempt: its manifest (msgspec MessagePack) and counts."""

    result: TaskResult


class AmcommitWriter(DataSourceArrowWriter):
    """Writer of one job: pickled once after ``writer()``, then used by every task and by
    the job commit. Holds only the :class:`~amcommit.spark.options.WritePlan`."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def __repr__(self) -> str:
        return f"AmcommitWriter(job_id={self.plan.job_id!r}, url={self.plan.url!r})"

    def _empty_schema(self) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        from amcommit.spark.parquet import nullable_voids

        schema = StructType.fromJson(nullable_voids(json.loads(self.plan.data_schema_json)))
        return to_arrow_schema(schema, timezone="UTC")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AmcommitCommitMessage:
        """Write this task attempt's rows and commit the task (manifest published)."""
        from pyspark import TaskContext

        from amcommit.spark.sqlconf import SESSION_KEYS
        from amcommit.spark.task import run_task

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        # the session's SQL settings (spark.conf.set) reach tasks only, as local properties
        session = {k: ctx.getLocalProperty(k) for k in SESSION_KEYS} if ctx is not None else {}
        # amcommit's own errors leave without their inner frames and chained causes (the
        # traceback Spark shows its user is then one frame and the message); paths in the
        # message read as the user wrote the destination
        try:
            result = run_task(
                self.plan,
                iterator,
                partition=partition,
                attempt=attempt,
                empty_schema=self._empty_schema,
                session=session,
            )
        except AmcommitError as e:
            raise for_user(e, self.plan.url) from None
        return AmcommitCommitMessage(result)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Job commit on the authorised attempts' manifests; writes ``_SUCCESS``."""
        from amcommit.spark.driver import commit_write

        try:
            commit_write(
                self.plan, [m.result if isinstance(m, AmcommitCommitMessage) else None for m in messages]
            )
        except AmcommitError as e:
            raise for_user(e, self.plan.url) from None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Roll back (or complete, past the point of no return) and clean up."""
        from amcommit.spark.driver import abort_write

        try:
            abort_write(self.plan)
        except AmcommitError as e:
            raise for_user(e, self.plan.url) from None


class TablePartition(InputPartition):
    """One input partition of a table read: the files it reads."""

    def __init__(self, part: FilePart) -> None:
        super().__init__(part.files)
        self.part = part


class TableReader(DataSourceReader):
    """Reader of one table query, planned on the driver (pickled to the tasks)."""

    def __init__(self, plan: ReadPlan, schema_json: str, parts: list[FilePart]) -> None:
        self.plan, self.schema_json, self.parts = plan, schema_json, parts

    def __repr__(self) -> str:
        return f"TableReader(url={self.plan.url!r}, query={self.plan.query!r}, partitions={len(self.parts)})"

    def partitions(self) -> list[InputPartition]:
        return [TablePartition(p) for p in self.parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of the partition's files, as Arrow batches of the table's schema."""
        from pyspark.sql.pandas.types import to_arrow_schema

        from amcommit.spark.reader import read_files

        assert isinstance(partition, TablePartition)
        schema = to_arrow_schema(StructType.fromJson(json.loads(self.schema_json)), timezone="UTC")
        try:
            yield from read_files(self.plan, partition.part, schema)
        except AmcommitError as e:
            raise for_user(e, self.plan.url) from None


def _check_destination(plan: WritePlan) -> TableProperties | None:
    """Open the store and list the destination once: bad URLs, options and credentials fail
    on the driver before any task starts. Messages never contain option values. Returns
    the destination's table properties if it holds a Hudi table (``.hoodie/hoodie.properties``)."""
    from amcommit.loop import run_blocking
    from amcommit.paths import basename, join
    from amcommit.spark.driver import open_driver_store
    from amcommit.table.format.naming import HOODIE_DIR, PROPERTIES_FILE

    async def probe() -> tuple[TableProperties | None, bool]:
        store, dest = open_driver_store(plan, "check")
        async with store:
            try:
                held = False  # anything but a (half-created) .hoodie folder
                async for info in store.list(dest, recursive=False):
                    if basename(info.path.rstrip("/")) != HOODIE_DIR:
                        held = True
                        break
                path = join(dest, PROPERTIES_FILE)
                try:
                    data = await store.get(path)
                except NotFound:
                    return None, held
                from amcommit.table.format.properties import decode_properties

                return decode_properties(data, where=path), held
            except BucketNotFound:
                raise
            except NotFound:
                return None, False  # a destination that does not exist yet

    try:
        props, held = run_blocking(probe)
    except AmcommitError as e:
        raise ConfigError(f"cannot use destination {plan.url!r}: {for_user(e, plan.url)}") from None
    if props is None and held and plan.table is not None:
        # Hudi's readers list partition folders: a plain write's files would be read as
        # table files (or break every read)
        raise ConfigError(
            f"{plan.url!r} already holds files but no Hudi table: create a table in an empty destination"
        )
    return props


def _continue_table(
    options: dict[str, Any], plan: WritePlan, props: TableProperties, rebuild: Any
) -> WritePlan:
    """The plan of a write into an existing table: its partition fields and record key
    fields are the table's (partitionBy / recordKey may be left out, or must agree)."""
    given = [
        c.strip().strip("`")
        for c in str(options.get("partitionBy", options.get("partitionby", ""))).split(",")
    ]
    given = [c for c in given if c]
    fields = props.partition_fields
    if given and [c.lower() for c in given] != [c.lower() for c in fields]:
        raise ConfigError(
            f"partitionBy {','.join(given)!r} differs from the table's partition fields {','.join(fields) or '(none)'!r}"
        )
    opts = {k: v for k, v in options.items() if k.lower() != "partitionby"}
    columns = {c.lower() for c in (*plan.data_columns, *plan.partition_columns)}
    for f in fields if not given else ():
        if f.lower() not in columns:
            raise ConfigError(
                f"the table's partition column {f!r} is not in the DataFrame (columns: "
                f"{', '.join((*plan.data_columns, *plan.partition_columns))})"
            )
    if fields:
        opts["partitionBy"] = ",".join(fields)
    key = str(options.get("recordKey", options.get("recordkey", ""))).strip()
    if key and [k.strip().lower() for k in key.split(",")] != [k.lower() for k in props.record_key_fields]:
        raise ConfigError(
            f"recordKey {key!r} differs from the table's record key fields "
            f"{','.join(props.record_key_fields) or '(generated)'!r}"
        )
    opts = {k: v for k, v in opts.items() if k.lower() != "recordkey"}
    keys = [k for k in props.record_key_fields if k != "_hoodie_record_key"]
    if keys:
        opts["recordKey"] = ",".join(keys)
    new_plan: WritePlan = rebuild(opts, existing_table=True)
    assert new_plan.table is not None
    return replace(new_plan, table=replace(new_plan.table, name=props.name or new_plan.table.name))


def _setup_job(plan: WritePlan) -> None:
    """Create the job directory (once, on the driver). Tasks refuse to write once its marker
    is gone: after the job was committed or aborted."""
    from amcommit.api import setup_job
    from amcommit.loop import run_blocking
    from amcommit.store.schemes import open_location

    async def setup() -> None:
        store, dest = open_location(plan.url, **plan.store_options)
        async with store:
            # origin "spark": only the driver's commit() knows which tasks make the job
            # complete, so a later commit-job from the store alone refuses it
            await setup_job(store, dest, plan.job_id, origin="spark")

    run_blocking(setup)


def refuse_operation(options: dict[str, Any], *, streaming: bool) -> None:
    """ConfigError (one line, on the driver before any task runs) for ``option("operation",
    "upsert" | "delete")``: the Python data source API gives each write task only its own
    rows and the job commit no Spark session, so nothing of it can join the records with
    the table (and a merge in ``commit()`` would hold them all in one process). The line
    names what does it: ``amcommit.spark.upsert`` / ``delete``, or ``foreachBatch`` with
    ``write_batch(..., operation=...)`` for a stream."""
    for k, v in options.items():
        op = str(v).strip().lower()
        if str(k).lower() == "hoodie.datasource.write.operation" and op in ("insert", "bulk_insert"):
            continue  # Hudi's name of what format("amcommit") writes
        if str(k).lower() not in ("operation", "hoodie.datasource.write.operation"):
            continue
        if op not in ("upsert", "delete"):
            raise ConfigError(
                f"option operation={op!r}: format('amcommit') writes inserts; "
                "use amcommit.spark.upsert or amcommit.spark.delete"
            )
        if streaming:
            raise ConfigError(
                f"writeStream.format('amcommit') cannot {op}: use foreachBatch with "
                f"amcommit.spark.write_batch(df, batch_id, dest, operation={op!r})"
            )
        raise ConfigError(
            f"df.write.format('amcommit') cannot {op}: use amcommit.spark.{op}(df, dest, **options)"
        )


class AmcommitDataSource(DataSource):
    """``format("amcommit")``: Parquet through amcommit's manifest committer.

    ``session_conf`` holds Spark conf defaults (``spark.amcommit.*``, Hadoop committer keys)
    captured by :func:`register`; options given to the writer take precedence.
    """

    session_conf: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """The table's schema: that of its newest committed files (meta columns first)."""
        from amcommit.spark.reader import build_read_plan, load_plan

        try:
            schema_json, _ = load_plan(build_read_plan(dict(self.options)))
        except AmcommitError as e:
            raise for_user(e, self.options.get("path")) from None
        return StructType.fromJson(json.loads(schema_json))

    def reader(self, schema: StructType) -> TableReader:
        """Plan the query (snapshot, time travel or incremental) on the driver."""
        from amcommit.spark.reader import build_read_plan, load_plan

        try:
            plan = build_read_plan(dict(self.options))
            schema_json, parts = load_plan(plan)
        except AmcommitError as e:
            raise for_user(e, self.options.get("path")) from None
        return TableReader(plan, schema.json() if schema is not None else schema_json, parts)

    def writer(self, schema: StructType, overwrite: bool) -> AmcommitWriter:
        try:
            refuse_operation(dict(self.options), streaming=False)
            return self.build_writer(schema, overwrite)
        except AmcommitError as e:
            raise for_user(e, self.options.get("path")) from None

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        """``writeStream.format("amcommit")``: one instant per micro-batch, committed once
        per (query id, batch id) label (:mod:`amcommit.spark.stream`)."""
        from amcommit.spark.stream import stream_writer

        try:
            refuse_operation(dict(self.options), streaming=True)
        except AmcommitError as e:
            raise for_user(e, self.options.get("path")) from None
        return stream_writer(self, schema, overwrite)

    def build_writer(self, schema: StructType, overwrite: bool, begin: bool = True) -> AmcommitWriter:
        """The checked plan; ``begin=False``: a table write's instant is not allocated yet
        (the streaming sink allocates it later, :mod:`amcommit.spark.stream`)."""
        import pyspark

        from amcommit.spark.driver import begin_table_write
        from amcommit.spark.options import build_plan, check_table_options
        from amcommit.spark.parquet import unwritable_column

        plan = build_plan(
            dict(self.options),
            schema,
            overwrite,
            session_conf=self.session_conf,
            spark_version=pyspark.__version__,
            table_options_checked=False,  # judged once we know whether a table is there
        )
        column = unwritable_column(plan.data_schema_json)
        if column is not None:
            raise ConfigError(
                f"column {column!r} is a map with void keys (e.g. map()), which amcommit cannot "
                "write as Parquet; cast it to a typed map first"
            )
        props = _check_destination(plan)
        if props is not None:
            props.check_supported(plan.url)

            def rebuild(options: dict[str, Any], existing_table: bool) -> WritePlan:
                return build_plan(
                    options,
                    schema,
                    overwrite,
                    session_conf=self.session_conf,
                    spark_version=pyspark.__version__,
                    existing_table=existing_table,
                )

            plan = _continue_table(dict(self.options), plan, props, rebuild)
        check_table_options(plan)
        if plan.table is not None:
            return AmcommitWriter(begin_table_write(plan, properties=props) if begin else plan)
        _setup_job(plan)
        return AmcommitWriter(plan)


def _conf_snapshot(spark: Any) -> dict[str, str]:
    conf: dict[str, str] = {}
    try:
        conf.update(dict(spark.sparkContext.getConf().getAll()))
    except Exception:  # Spark Connect: no SparkContext
        pass
    try:
        conf.update(dict(spark.conf.getAll))
    except Exception:
        pass
    return {k: v for k, v in conf.items() if k.startswith(("spark.amcommit.", "spark.hadoop.mapreduce."))}


def register(spark: Any) -> type[AmcommitDataSource]:
    """Register ``format("amcommit")`` with ``spark``, with the session's ``spark.amcommit.*``
    and ``spark.hadoop.mapreduce.manifest.committer.*`` settings as defaults.

    Python data sources never see the Spark conf themselves, so the conf is captured now:
    call ``register`` again after changing it. Without ``register`` the auto-registered
    source (module ``pyspark_amcommit``) uses ``.option()`` values only.
    """
    conf = _conf_snapshot(spark)
    cls = type(
        "SessionAmcommitDataSource",
        (AmcommitDataSource,),
        {"session_conf": conf, "__module__": __name__, "__qualname__": "SessionAmcommitDataSource"},
    )
    spark.dataSource.register(cls)
    return cls


__all__ = ["AmcommitCommitMessage", "AmcommitDataSource", "AmcommitWriter", "register"]
