"""Exactly-once Structured Streaming into a Hudi table: ``writeStream.format("amcommit")``.

Each micro-batch is one instant of the table whose commit metadata carries the label
``(query id, batch id)`` (:class:`amcommit.table.commit.labels.Label`); the engine commits a label
once. Where each piece runs (PySpark 4 Python streaming data source API):

* :func:`stream_writer` (``DataSource.streamWriter``) runs once per micro-batch on the
  driver host: options are checked as for a batch write (the destination becomes a Hudi
  table on the first batch), and the batch's instant is allocated (``begin_write``) before
  any task writes, since it is in every file name and ``_hoodie_commit_time``.
* :meth:`AmcommitStreamWriter.write` runs in the tasks: they alone see the query id
  (``sql.streaming.queryId``, the same across restarts from one checkpoint) and the run id
  (``spark.jobGroup.id``, new on every restart) as local properties. A task takes or renews
  the query's lease (:mod:`amcommit.spark.stream_state`; a second run of the query at once
  fails with one line), records the owner of the instant, writes and commits its files as a
  batch-write task does, and carries the ids to ``commit()`` in its message.
* :meth:`AmcommitStreamWriter.commit` (a process with no session) first rolls back the
  inflight instants of the same query left by dead runs (recognised by their owner: the
  tasks' owner file, or what the driver recorded with the instant's claim, the checkpoint
  key and the driver process; no waiting for their heartbeat), then commits with the label.
  A label already committed (a replay: Spark calls ``commit()`` again for a batch whose
  ``commits/<batchId>`` it did not record) is skipped: the engine removes the re-written
  files and the skip is logged and counted. ``abort()`` rolls the batch's instant back, also
  when no task reported (a ``query.stop()`` mid batch): it is then the instant this driver
  process allocated for the query.

Diagnostics: with ``AMCOMMIT_STREAM_TIMINGS`` set to a file path in the driver's
environment (Spark's Python workers inherit it), every ``commit()`` appends one JSON line
to it: ``batch``, ``instant``, ``created`` (the commit-side writer made by
``streamWriter()``), ``entered`` (Spark handed the batch to ``commit()``), ``returned``
(epoch seconds), ``pid`` (the Python worker's) and ``frozen`` (the objects
:func:`settle_gc` froze in that worker). ``benchmarks/stream_commit.py`` splits
the commit latency with it. Nothing is recorded without it.

What is atomic: each instant's publication (one completed instant file). Batches commit in
order (instants are allocated per batch and complete in allocation order). Output mode
``append`` appends; ``complete`` replaces the table (``INSERT_OVERWRITE_TABLE``) each batch.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from amcommit.api import abort_job
from amcommit.committer.report import JobReport
from amcommit.errors import AmcommitError, ConfigError
from amcommit.liveness import ProcessId, driver_gone, driver_id, java_ancestor
from amcommit.loop import run_blocking, run_kept_loop
from amcommit.messages import for_user
from amcommit.parallel import run_parallel
from amcommit.spark import hooks
from amcommit.spark.driver import abort_write, commit_write
from amcommit.spark.options import WritePlan
from amcommit.spark.stream_state import (
    DEFAULT_LEASE_TTL,
    Owner,
    acquire_lease,
    checkpoint_app,
    dead_instants,
    driver_instants,
    owner_fields,
    read_owners,
    write_owner,
)
from amcommit.spark.task import TaskResult
from amcommit.store.base import Store
from amcommit.store.schemes import open_location
from amcommit.table.format.model import Operation
from amcommit.table.report import table_report

if TYPE_CHECKING:
    from amcommit.spark.source import AmcommitDataSource

log = logging.getLogger("amcommit.spark.stream")

QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"
RUN_ID_KEY = "spark.jobGroup.id"

TIMINGS_ENV = "AMCOMMIT_STREAM_TIMINGS"
"""Environment variable naming the file ``commit()`` appends its timings to (module doc)."""

STREAM_OPTIONS = frozenset({"checkpointlocation", "leasettl", "queryname", "outputmode"})
"""Options of the streaming sink that the batch writer does not know (lowercase)."""

__all__ = [
    "AmcommitStreamWriter",
    "StreamCommitMessage",
    "StreamIds",
    "batch_label",
    "driver_gone",
    "driver_id",
    "stream_writer",
]


@dataclass(frozen=True)
class StreamIds:
    """Who writes a micro-batch: label app id (query id, else the checkpoint key), run id."""

    app: str
    run: str | None
    checkpoint: str | None


@dataclass
class StreamCommitMessage(WriterCommitMessage):
    """One task's commit message: its manifest, the query's ids it saw, and the plan it
    wrote with (its instant: the commit-side writer has none)."""

    result: TaskResult
    ids: StreamIds
    plan: WritePlan


def batch_label(app: str, batch_id: int) -> Any:
    """The label of micro-batch ``batch_id`` of query ``app``."""
    from amcommit.table.commit.labels import Label

    return Label(app_id=app, version=int(batch_id))


def _no_query_id() -> ConfigError:
    return ConfigError(
        "no streaming query id: the tasks saw no sql.streaming.queryId and no "
        "option('checkpointLocation', ...) was given; amcommit needs one of them to commit "
        "each micro-batch exactly once"
    )


async def _open(plan: WritePlan) -> Store:
    store, _ = open_location(plan.url, **plan.store_options)
    return store


def _dest(plan: WritePlan) -> str:
    return open_location(plan.url, **plan.store_options)[1]


class AmcommitStreamWriter(DataSourceStreamArrowWriter):
    """The writer of one micro-batch (its instant is allocated): pickled to the tasks and to
    ``commit()`` / ``abort()``."""

    def __init__(self, plan: WritePlan, checkpoint: str | None, lease_ttl: float) -> None:
        self.plan, self.checkpoint, self.lease_ttl = plan, checkpoint, lease_ttl
        self.created = time.time()
        self.driver = java_ancestor()  # made on the driver host: the driver's JVM (the lease's)

    def __getstate__(self) -> dict[str, Any]:
        """Spark calls ``streamWriter()`` twice per micro-batch: once for the tasks (that
        writer is pickled to them) and once in the process that runs ``commit()`` /
        ``abort()`` (never pickled). The instant is allocated when the tasks' writer is
        pickled, so the commit-side writer allocates nothing; ``commit()`` takes the
        instant from the tasks' messages."""
        assert self.plan.table is not None
        if not self.plan.table.instant:
            self.plan = begin_batch(self.plan, self.checkpoint)
        settle_gc()
        return dict(self.__dict__)

    def __repr__(self) -> str:
        return f"AmcommitStreamWriter(instant={self.plan.job_id!r}, url={self.plan.url!r})"

    def _ids(self, ctx: Any) -> StreamIds:
        query = ctx.getLocalProperty(QUERY_ID_KEY) if ctx is not None else None
        run = ctx.getLocalProperty(RUN_ID_KEY) if ctx is not None else None
        app = query or (checkpoint_app(self.checkpoint) if self.checkpoint else None)
        if not app:
            raise _no_query_id()
        ck = checkpoint_app(self.checkpoint) if self.checkpoint else None
        return StreamIds(app=app, run=run, checkpoint=ck)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StreamCommitMessage:
        """Take the query's lease, record the instant's owner, write and commit the task."""
        from pyspark import TaskContext

        from amcommit.spark.sqlconf import SESSION_KEYS
        from amcommit.spark.task import run_task

        ctx = TaskContext.get()
        try:
            ids = self._ids(ctx)
            batch_text = ctx.getLocalProperty(BATCH_ID_KEY) if ctx is not None else None
            batch = int(batch_text) if batch_text and batch_text.lstrip("-").isdigit() else None
            self._claim(ids)
            partition = ctx.partitionId() if ctx is not None else 0
            attempt = ctx.attemptNumber() if ctx is not None else 0
            session = {k: ctx.getLocalProperty(k) for k in SESSION_KEYS} if ctx is not None else {}
            try:
                with self._renewing(ids):
                    result = run_task(
                        self.plan,
                        self._watch(iterator, batch),
                        partition=partition,
                        attempt=attempt,
                        session=session,
                    )
            except BaseException:
                self._drop_if_over()
                raise
        except AmcommitError as e:
            raise for_user(e, self.plan.url) from None
        settle_gc()
        return StreamCommitMessage(result, ids, self.plan)

    def _claim(self, ids: StreamIds, owner: bool = True) -> None:
        """Take or renew the query's lease; ``owner``: also record the instant's owner."""
        plan = self.plan

        async def claim() -> None:
            store, dest = open_location(plan.url, **plan.store_options)
            async with store:
                if ids.run is not None:
                    await acquire_lease(store, dest, ids.app, ids.run, self.lease_ttl, driver=self.driver)
                if owner:
                    await write_owner(store, dest, plan.job_id, Owner(ids.app, ids.run, ids.checkpoint))

        run_kept_loop(claim)  # the worker process's kept loop (tasks run on it too)

    def _drop_if_over(self) -> None:
        """After a failed task: if the batch already ended (aborted or committed before this
        task began), the owner file it wrote brought the instant's staging folder back:
        remove it, so no instant seems staged. Best effort."""
        from amcommit.spark.task import job_active, job_layout

        plan = self.plan

        async def drop() -> None:
            store, dest = open_location(plan.url, **plan.store_options)
            async with store:
                layout = job_layout(plan, dest)
                if not await job_active(store, layout):
                    await store.delete(layout.job_dir, recursive=True)

        with contextlib.suppress(Exception):
            run_kept_loop(drop)

    @contextlib.contextmanager
    def _renewing(self, ids: StreamIds) -> Iterator[None]:
        """Renew the query's lease every ``lease_ttl / 4`` seconds while the block runs (a
        background thread; a failed renewal is retried at the next turn). The owner file is
        not written again: a task still running after its batch ended (a ``stop()``) must
        not bring the rolled back instant's staging folder back."""
        if ids.run is None:
            yield
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.lease_ttl / 4):
                with contextlib.suppress(Exception):
                    self._claim(ids, owner=False)

        t = threading.Thread(target=loop, name="amcommit-lease", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(timeout=5)

    @staticmethod
    def _watch(batches: Iterator[pa.RecordBatch], batch: int | None) -> Iterator[pa.RecordBatch]:
        """The task's rows (the ``task_rows`` hook point is after the first)."""
        first = True
        for b in batches:
            yield b
            if first:
                first = False
                hooks.current.stream_point("task_rows", batch)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit micro-batch ``batchId`` with its label (skipped if already committed)."""
        entered = time.time()
        try:
            plan = self._plan_of(messages)
            if plan is None:
                raise ConfigError(f"micro-batch {batchId}: no task reported what it wrote; nothing to commit")
            report = commit_batch(
                plan, self._results(messages), self._ids_of(messages), batchId, self.lease_ttl, self.driver
            )
        except AmcommitError as e:
            raise for_user(e, self.plan.url) from None
        settle_gc()
        _record_timing(batchId, table_report(report).instant, entered, self.created)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Roll the micro-batch's instant back (or complete it, past the point of no return).
        Without any message (every task failed, or ``query.stop()`` mid batch) the instant
        is the one this driver process allocated for the query (:func:`abort_unreported`)."""
        plan = self._plan_of(messages)
        try:
            if plan is None:
                abort_unreported(self.plan, self.checkpoint, batchId)
            else:
                abort_write(plan)
        except AmcommitError as e:
            raise for_user(e, self.plan.url) from None

    @staticmethod
    def _plan_of(messages: list[WriterCommitMessage | None]) -> WritePlan | None:
        for m in messages:
            if isinstance(m, StreamCommitMessage):
                return m.plan
        return None

    @staticmethod
    def _results(messages: list[WriterCommitMessage | None]) -> list[TaskResult | None]:
        return [m.result if isinstance(m, StreamCommitMessage) else None for m in messages]

    def _ids_of(self, messages: list[WriterCommitMessage | None]) -> StreamIds:
        for m in messages:
            if isinstance(m, StreamCommitMessage):
                return m.ids
        if self.checkpoint:
            return StreamIds(checkpoint_app(self.checkpoint), None, checkpoint_app(self.checkpoint))
        raise _no_query_id()


def _record_timing(batch: int, instant: str | None, entered: float, created: float) -> None:
    """Append this ``commit()``'s timings to the file named by :data:`TIMINGS_ENV`, if set
    (best effort: diagnostics never fail a commit)."""
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        return
    line = json.dumps(
        {
            "batch": batch,
            "instant": instant,
            "created": created,
            "entered": entered,
            "returned": time.time(),
            "pid": os.getpid(),
            "frozen": gc.get_freeze_count(),
        }
    )
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


_gc_settled = 0
"""The pid of the process whose objects :func:`settle_gc` froze (0: none)."""


def settle_gc() -> None:
    """In a Python worker forked by Spark's daemon (``pyspark.daemon``, which reuses a
    worker micro-batch after micro-batch), take the objects alive now out of the garbage
    collector's scans, once per process: one full collection, then ``gc.freeze()``. The
    daemon runs a full collection after every task and every planner or commit call of a
    reused worker; with the imported modules (the engine, pyarrow, pandas) frozen it scans
    only what later calls allocate (each of the three workers of a batch otherwise spends
    30-200 ms of a busy 2-core host on it, competing with the batch's next step). Frozen
    objects were alive at the freeze (the collection ran first); one that becomes cyclic
    garbage later is not reclaimed (none of a worker's imports does). A no-op in any other
    process (a user's driver: ``foreachBatch``, tests)."""
    global _gc_settled
    pid = os.getpid()
    if _gc_settled == pid:
        return
    _gc_settled = pid
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(spec, "name", None) != "pyspark.daemon":
        return
    gc.collect()
    gc.freeze()


def abort_unreported(plan: WritePlan, checkpoint: str | None, batch_id: int) -> list[str]:
    """``abort()`` of micro-batch ``batch_id`` that no task reported to (``plan`` has no
    instant): roll back the instants this driver process (the JVM of this Python worker)
    allocated for this query (its checkpoint key; None if the option was not given), as
    recorded with their claim (:func:`~amcommit.spark.stream_state.driver_instants`).
    Returns them. Blocking.

    Not told apart: two queries of one Spark application into one table, both without the
    ``checkpointLocation`` option; a stop of one may then roll back the other's batch in
    progress, whose commit then fails (never a loss or a duplicate)."""
    ck = checkpoint_app(checkpoint) if checkpoint else None
    me = driver_id()

    async def main() -> list[str]:
        store, dest = open_location(plan.url, **plan.store_options)
        async with store:
            mine = driver_instants(await read_owners(store, dest), me, ck)
            for t in mine:
                await abort_job(store, dest, t, config=plan.config())
            return mine

    rolled = run_blocking(main)
    if rolled:
        log.warning(
            "micro-batch %d aborted before any task reported: its instant %s rolled back",
            batch_id,
            ", ".join(rolled),
        )
    else:
        log.warning(
            "micro-batch %d aborted before any task reported: no instant of it to roll back", batch_id
        )
    return rolled


async def _roll_back_dead(
    store: Store, dest: str, plan: WritePlan, ids: StreamIds, owners: dict[str, Owner] | None = None
) -> list[str]:
    """Roll back the earlier inflight instants of the same query, and those whose driver
    process (on this host) is gone: dead runs; ``owners``: :func:`read_owners` already
    done."""
    if owners is None:
        owners = await read_owners(store, dest, below=plan.job_id)
    gone = frozenset(d for o in owners.values() if (d := o.driver) is not None and driver_gone(d))
    dead = dead_instants(plan.job_id, owners, ids.app, ids.checkpoint, gone)
    for t in dead:
        report = await abort_job(store, dest, t, config=plan.config())
        log.warning(
            "query %s: instant %s of a dead run %s",
            ids.app,
            t,
            "completed (past its point of no return)" if report.success else "rolled back",
        )
    return dead


def commit_batch(
    plan: WritePlan,
    results: list[TaskResult | None] | None,
    ids: StreamIds,
    batch_id: int,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    driver: ProcessId | None = None,
    operation: Operation | None = None,
) -> JobReport:
    """The driver side of one micro-batch (see module doc): renew the query's lease (naming
    the run's ``driver`` process), roll back its dead runs' instants, commit with the
    batch's label; one store, one event loop. ``operation``: an upsert's or delete's
    (``write_batch``), else the save mode's; ``results`` None: its task ran on this driver
    (manifest read from the store). Blocking."""
    hooks.current.stream_point("before_commit", batch_id)

    async def before(store: Store, dest: str) -> None:
        # the lease and the owner files are read at the same time (one round trip less
        # per batch); dead runs are rolled back only once the lease is ours
        owners: dict[str, Owner] = {}

        async def lease() -> None:
            if ids.run is not None:
                await acquire_lease(store, dest, ids.app, ids.run, lease_ttl, driver=driver)

        async def read() -> None:
            owners.update(await read_owners(store, dest, below=plan.job_id))

        await run_parallel([lease, read], lambda step: step(), 2)  # errors unwrapped
        await _roll_back_dead(store, dest, plan, ids, owners)

    label = batch_label(ids.app, batch_id)
    wrap: Callable[[Store], Store] = lambda s: hooks.current.stream_store(s, batch_id)  # noqa: E731
    report = commit_write(
        plan, results, label=label, before=before, wrap=wrap, keep_loop=True, operation=operation
    )
    skipped = getattr(report, "skipped_label", None)
    if skipped:
        report.job_stats.incr("stream_batches_skipped")
        log.warning(
            "query %s batch %d was already committed by instant %s: this replay was skipped "
            "and its files removed",
            ids.app,
            batch_id,
            skipped,
        )
    else:
        log.info("query %s batch %d committed as instant %s", ids.app, batch_id, table_report(report).instant)
    hooks.current.stream_point("after_commit", batch_id)
    return report


def _stream_options(options: dict[str, Any]) -> tuple[dict[str, Any], str | None, float]:
    """Split the streaming options off: (batch writer options, checkpoint, lease ttl)."""
    checkpoint: str | None = None
    ttl = DEFAULT_LEASE_TTL
    rest: dict[str, Any] = {}
    for k, v in options.items():
        low = str(k).lower()
        if low == "checkpointlocation":
            checkpoint = str(v) or None
        elif low == "leasettl":
            try:
                ttl = float(v)
            except ValueError:
                raise ConfigError("option 'leaseTtl' must be a number of seconds > 0") from None
            if not ttl > 0:
                raise ConfigError("option 'leaseTtl' must be > 0 seconds")
        elif low in STREAM_OPTIONS:
            continue
        else:
            rest[k] = v
    if not any(str(k).lower() == "tableformat" for k in rest):
        rest["tableFormat"] = "hudi"  # the destination is a table (created by the first batch)
    return rest, checkpoint, ttl


def stream_writer(source: AmcommitDataSource, schema: Any, overwrite: bool) -> AmcommitStreamWriter:
    """``DataSource.streamWriter``: check the options (no instant yet, see
    :class:`AmcommitStreamWriter`)."""
    try:
        options, checkpoint, ttl = _stream_options(dict(source.options))
        plan = type(source)(options).build_writer(schema, overwrite, begin=False).plan
        if plan.table is None:  # pragma: no cover  (tableFormat is always set above)
            raise ConfigError("a streaming write needs a table destination")
        return AmcommitStreamWriter(plan, checkpoint, ttl)
    except AmcommitError as e:
        raise for_user(e, source.options.get("path")) from None


def begin_batch(
    plan: WritePlan,
    checkpoint: str | None,
    *,
    app: str | None = None,
    driver: str | None = None,
    batch: int | None = None,
    operation: Operation | None = None,
    schema_json: str | None = None,
    table_kw: Mapping[str, Any] | None = None,
) -> WritePlan:
    """Allocate a micro-batch's instant (``begin_write``) with its owner recorded in the
    claim itself (atomic with it): the query (``app``, when known here), its checkpoint
    key (when known) and the driver process (``driver``, default: this worker's JVM).
    ``operation`` / ``schema_json``: an upsert's or delete's (``begin_table_write``);
    ``table_kw``: its table type arguments (:func:`amcommit.spark.mutate.begin_kwargs`)."""
    from amcommit.spark.driver import begin_table_write

    ck = checkpoint_app(checkpoint) if checkpoint else None
    owner = Owner(app=app, checkpoint=ck, driver=driver or driver_id())
    plan = begin_table_write(
        plan,
        owner=owner_fields(owner),
        operation=operation,
        schema_json=schema_json,
        spare=True,
        **(table_kw or {}),
    )  # beaten by this worker's kept keep-alive process: a batch starts no process
    hooks.current.stream_begun(batch, checkpoint)
    return plan
