"""Executor side of a write: one Spark task attempt writes its rows and commits its task.

Per attempt (``task_<job>_m_<partition:06d>`` / ``attempt_<job>_m_<partition:06d>_<n>``):

1. check that the job is still active (the driver set it up in ``writer()``; its marker is
   deleted when the job is committed or aborted), set up the attempt (its id is single-use:
   a retried stage whose attempt numbers start again at 0 gets ``n = k << 16 | attempt``,
   as Spark's own file writer numbers them);
2. write Parquet (:mod:`amcommit.spark.parquet`) straight into the attempt directory for a
   local destination, or to local temporary files uploaded with ``store.put`` (a few at
   once, overlapping with encoding; each file is read into memory for its upload, as the
   store has no streaming upload yet, hence ``maxFileBytes``) for a cloud one;
   a table write with ``table_commit=direct`` (the default; :mod:`amcommit.table.write.direct`)
   writes its base files to their final names in the table instead, each after its Hudi
   marker, and checks the instant after each file (a write decided meanwhile fails the
   attempt, its file removed); the inserts of an upsert or delete still stage theirs
   (``staged``), as that write's rewrite tasks do (:mod:`amcommit.spark.mutate`);
   each table file's Parquet footer is checked against the write's schema (its job
   marker's, read once per attempt) before it is uploaded or kept: a file whose own schema
   differs fails the attempt with SchemaMismatch naming the file and the column;
3. commit the task: the manifest is built, saved and published (an atomic rename where the
   store has one); the manifest travels to the driver inside the commit message, with the
   published manifest's etag so the driver can tell whether the store holds this attempt's
   manifest or another one's.

On any error the attempt deletes everything it created (``abort_task`` and its attempt
marker) before the error goes back to Spark: Spark has no per-task abort hook for Python
data sources. Spark calls the job's ``abort()`` as soon as one task has failed for good,
while other attempts may still run until they are killed: such a zombie finds the job
marker gone (one stat before each file it creates on local files, after each upload
elsewhere, :func:`check_before_file` / :func:`put_in_attempt`; and after its task commit)
and then removes what it wrote and what is left of the job directory.
Files of attempts that die without cleaning up (killed executors) or are denied the commit
by Spark stay in their own attempt directory, are never renamed (only manifests Spark hands
to the driver are committed) and are deleted by the job commit's cleanup; a zombie killed
after the job's directory was removed leaves a *leftover* job directory without a marker,
which the next commit or abort into the destination (or ``amcommit jobs --remove-leftovers``)
deletes (:mod:`amcommit.committer.leftovers`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import pyarrow as pa
from anyio.from_thread import BlockingPortal

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.committer.spool import attempt_spool_dir, remove_stale_spools
from amcommit.committer.task import abort_task, commit_task, setup_task
from amcommit.errors import CommitError, NotFound
from amcommit.loop import kept_portal
from amcommit.loop import running as running_loop
from amcommit.manifest import TaskManifest
from amcommit.paths import join
from amcommit.spark import hooks
from amcommit.spark.options import WritePlan
from amcommit.spark.parquet import META_COLUMNS, HudiMeta, PartitionedParquetWriter
from amcommit.spark.sqlconf import task_settings
from amcommit.store.base import Store, local_os_path
from amcommit.store.schemes import open_location
from amcommit.table.format.naming import base_file_name, new_file_id, write_token
from amcommit.table.settings import Placement, table_settings
from amcommit.table.write.direct import (
    AttemptMarkers,
    IOType,
    commit_direct_task,
    upload_stays,
    write_in_place,
)
from amcommit.table.write.staging import table_layout
from amcommit.table.write.task import read_marker, write_schema

UPLOADS_IN_FLIGHT = 4
"""Finished files uploaded concurrently by one task (each is held in memory meanwhile)."""
UPLOAD_BYTES_IN_FLIGHT = 256 * 1024 * 1024
"""Bytes of finished files held in memory for uploads by one task (at least one file)."""

_manifest_encoder = msgspec.msgpack.Encoder()
_manifest_decoder = msgspec.msgpack.Decoder(TaskManifest)


def encode_manifest(m: TaskManifest) -> bytes:
    """MessagePack transport of a manifest (commit messages)."""
    return _manifest_encoder.encode(m)


def decode_manifest(data: bytes) -> TaskManifest:
    return _manifest_decoder.decode(data)


@dataclass(frozen=True)
class TaskResult:
    """What one committed task attempt reports to the driver."""

    manifest: bytes
    """The task manifest, msgspec MessagePack."""
    manifest_etag: str | None
    """Etag of the manifest as published on the store (None if unknown)."""
    task_attempt_id: str
    rows: int
    files: int
    bytes: int
    seconds: float
    overwrite_mode: str | None = None
    """The partition overwrite mode this task saw (option or session setting; ``static`` /
    ``dynamic``), None for an append: the driver commits with it."""


def job_layout(plan: WritePlan, dest: str) -> JobLayout:
    """The job's layout: a table write stages under ``.hoodie/.aux/amcommit/<instant>/``."""
    if plan.table is not None:
        return table_layout(dest, plan.job_id)
    return JobLayout(dest, plan.job_id)


def footer_schema_json(plan: WritePlan) -> str:
    """The Spark schema stored in each file's footer: for a table, the five meta columns
    (nullable strings) first, then every column."""
    if plan.table is None:
        return plan.data_schema_json
    schema = json.loads(plan.data_schema_json)
    meta = [{"name": c, "type": "string", "nullable": True, "metadata": {}} for c in META_COLUMNS]
    return json.dumps({"type": "struct", "fields": [*meta, *schema["fields"]]}, separators=(",", ":"))


def task_ids(job_id: str, partition: int, attempt: int) -> tuple[str, str]:
    """Hadoop-style ``(task id, task attempt id)`` for a Spark partition and attempt number."""
    base = f"{job_id}_m_{partition:06d}"
    return f"task_{base}", f"attempt_{base}_{attempt}"


async def _open(plan: WritePlan) -> tuple[Store, str]:
    return open_location(plan.url, **plan.store_options)


async def job_active(store: Store, layout: JobLayout) -> bool:
    """True while the job is set up and neither committed nor aborted (its marker exists)."""
    try:
        await store.stat(layout.job_marker)
    except NotFound:
        return False
    return True


async def check_job_active(store: Store, layout: JobLayout) -> None:
    if not await job_active(store, layout):
        raise CommitError(
            f"job {layout.job_id} is not active (already committed or aborted): this task attempt "
            "is a leftover and writes nothing",
            stage="setup_task",
        )


def job_over(layout: JobLayout, attempt_id: str) -> CommitError:
    """A plain attempt that found its job over (its marker gone) while it was writing."""
    return CommitError(
        f"job {layout.job_id} was committed or aborted while task attempt {attempt_id} was "
        "still writing: its files were removed",
        stage="commit_task",
    )


async def put_in_attempt(store: Store, layout: JobLayout, attempt_id: str, rel: str, data: bytes) -> None:
    """A plain attempt's upload of one finished file into its attempt directory, then one
    stat of the job marker (as a direct table attempt checks its instant after each upload,
    :func:`~amcommit.table.write.direct.upload_stays`): if the job is over meanwhile (a zombie
    attempt; the abort or commit removed the job directory, which this upload recreated),
    the upload is deleted again and :func:`job_over` raised (the attempt then discards the
    rest). Cost: one metadata request per uploaded file. Not atomic: an attempt killed
    between the upload and its removal leaves the file, which the next commit, abort or
    ``amcommit jobs --remove-leftovers`` of the destination removes
    (:mod:`amcommit.committer.leftovers`)."""
    path = join(layout.task_attempt_dir(attempt_id), rel)
    await store.put(path, data)
    if not await job_active(store, layout):
        await store.delete(path)
        raise job_over(layout, attempt_id)


async def check_before_file(store: Store, layout: JobLayout, attempt_id: str) -> None:
    """A plain attempt writing straight into its attempt directory (local files) checks the
    job marker before it creates each file (one stat): a zombie attempt never recreates
    the job directory with a new file; it fails with :func:`job_over` instead."""
    if not await job_active(store, layout):
        raise job_over(layout, attempt_id)


async def keep_alive(store: Store, layout: JobLayout, ttl: float) -> None:
    """Keep a table write's writer alive while this task writes (a task may run longer than
    ``writer_ttl`` between the beats of task setups and commits; a later writer would then
    roll the instant back): beat every ``ttl / 4`` while the job is active. Runs until
    cancelled; a zombie task of a finished job stops beating."""
    from amcommit.table.timeline.heartbeat import try_beat

    while True:
        await anyio.sleep(ttl / 4)
        if not await job_active(store, layout):
            return
        await try_beat(store, layout.dest, layout.job_id)


async def discard_attempt(store: Store, layout: JobLayout, attempt_id: str) -> None:
    """Delete everything this attempt created. If the job is over meanwhile (a zombie
    attempt: Spark aborted or committed the job while it ran), also delete what is left of
    the job directory, and ``_temporary`` if that is then empty. Errors are ignored."""
    with contextlib.suppress(Exception):
        await abort_task(store, layout, attempt_id)
    with contextlib.suppress(Exception):
        await store.delete(layout.task_attempt_marker(attempt_id))
    with contextlib.suppress(Exception):
        if not await job_active(store, layout):
            await store.delete(layout.job_dir, recursive=True)
            with contextlib.suppress(Exception):
                await store.delete(layout.temp_root)  # only if empty


async def setup_attempt(
    store: Store, layout: JobLayout, partition: int, attempt: int, config: CommitterConfig = DEFAULT_CONFIG
) -> tuple[str, str]:
    """Set up the attempt; returns ``(task attempt id, work dir)``."""
    for k in range(64):
        n = (k << 16) | attempt
        _, attempt_id = task_ids(layout.job_id, partition, n)
        try:
            return attempt_id, await setup_task(store, layout, attempt_id, config=config)
        except CommitError:  # this id was used by an earlier stage attempt
            continue
    raise CommitError(f"no free task attempt id for partition {partition}", stage="setup_task")


class _Uploads:
    """Finished local files uploaded in the background through the portal's event loop:
    at most :data:`UPLOADS_IN_FLIGHT` files and :data:`UPLOAD_BYTES_IN_FLIGHT` bytes (one
    file always) are held in memory at once."""

    def __init__(
        self,
        portal: BlockingPortal,
        store: Store,
        work: str,
        put: Callable[[str, bytes], Awaitable[Any]] | None = None,
    ) -> None:
        self.portal, self.store, self.work = portal, store, work
        self.put = put  # None: into the attempt directory (``work``)
        self.pending: deque[tuple[Future[Any], int]] = deque()
        self.in_flight = 0

    def _wait_oldest(self) -> None:
        fut, size = self.pending.popleft()
        self.in_flight -= size
        fut.result()

    def __call__(self, rel: str, local: str) -> None:
        size = os.path.getsize(local)
        while self.pending and (
            len(self.pending) >= UPLOADS_IN_FLIGHT or self.in_flight + size > UPLOAD_BYTES_IN_FLIGHT
        ):
            self._wait_oldest()
        with open(local, "rb") as f:
            data = f.read()
        os.unlink(local)
        if self.put is not None:
            fut = self.portal.start_task_soon(self.put, rel, data)
        else:
            fut = self.portal.start_task_soon(self.store.put, join(self.work, rel), data)
        self.pending.append((fut, size))
        self.in_flight += size

    def wait(self) -> None:
        while self.pending:
            self._wait_oldest()

    def cancel(self) -> None:
        while self.pending:
            fut, _ = self.pending.popleft()
            fut.cancel()
            with contextlib.suppress(BaseException):
                fut.result()
        self.in_flight = 0


def run_task(
    plan: WritePlan,
    batches: Iterable[pa.RecordBatch],
    *,
    partition: int,
    attempt: int,
    empty_schema: Callable[[], pa.Schema] | None = None,
    session: Mapping[str, str | None] | None = None,
    stage: int = 0,
) -> TaskResult:
    """Write ``batches`` as task attempt ``attempt`` of ``partition`` and commit the task.

    ``empty_schema`` gives the Arrow schema when partition 0 of an unpartitioned write
    receives no rows at all: a file with the schema and no rows is written, so an empty
    job stays readable (as with Spark's own writer).

    ``session``: the session's SQL settings the task saw (``TaskContext`` local properties
    of :data:`~amcommit.spark.sqlconf.SESSION_KEYS`), applied as Spark's writer does.

    For a table (``plan.table``), files are named ``<fileId>_<writeToken>_<instant>.parquet``
    (the write token from ``partition``, ``stage`` and ``attempt``), carry the meta columns
    first and keep the partition columns; their row counts go to the job commit in the
    manifest's ``extra_data["hudi.rows"]``. An empty task writes no file.

    Blocking; runs its own event loop in a helper thread for the store calls (uvloop where
    installed and not turned off: :mod:`amcommit.loop`).
    """
    t0 = time.perf_counter()
    remove_stale_spools()  # of attempts killed earlier (their owner provably dead)
    settings = task_settings(plan, session or {})
    config = plan.config()
    # the worker process's kept loop: Spark reuses Python workers task after task
    with contextlib.nullcontext(kept_portal()) as portal:
        store, dest = portal.call(_open, plan)
        try:
            layout = job_layout(plan, dest)
            portal.call(check_job_active, store, layout)
            attempt_id, work = portal.call(setup_attempt, store, layout, partition, attempt, config)
            task_id, _ = task_ids(plan.job_id, partition, 0)
            beats = (
                portal.start_task_soon(keep_alive, store, layout, table_settings(config).writer_ttl)
                if plan.table is not None
                else None
            )
            tmp: str | None = None
            uploads: _Uploads | None = None
            # table_commit=direct: base files go straight to their final names under Hudi's
            # direct markers (amcommit.table.write.direct); the manifest lists them as before. The
            # inserts of an upsert or delete too: its rewrite tasks (spark/mutate.py) follow
            # the same setting, and a write is direct or staged as a whole
            direct = plan.table is not None and table_settings(config).placement is Placement.DIRECT
            placed: dict[str, tuple[int, str | None]] = {}  # direct: rel -> (size, etag)
            # direct: the attempt's one marker file (MARKERS<n>), rewritten before each upload
            markers = (
                AttemptMarkers(store, dest, plan.table.instant, attempt_id, config)
                if direct and plan.table is not None
                else None
            )

            async def put_in_place(rel: str, data: bytes) -> None:
                assert plan.table is not None
                got = await write_in_place(
                    store, dest, plan.table.instant, rel, data, config=config, markers=markers
                )
                if got is None:
                    raise _decided(plan.table.instant, attempt_id)
                placed[rel] = (got.size, got.etag)

            async def put_in_work(rel: str, data: bytes) -> None:
                await put_in_attempt(store, layout, attempt_id, rel, data)

            if plan.remote or local_os_path(store, work) is None:
                tmp = attempt_spool_dir(attempt_id)
                tmp_dir = tmp
                uploads = _Uploads(portal, store, work, put_in_place if direct else put_in_work)

                def local_path(rel: str) -> str:
                    return os.path.join(tmp_dir, rel)

                on_closed: Any = uploads
            elif direct:
                assert plan.table is not None
                instant = plan.table.instant
                assert markers is not None
                marks = markers

                def local_path(rel: str) -> str:
                    portal.call(lambda: marks.mark(rel, IOType.CREATE))
                    os_path = local_os_path(store, join(dest, rel))
                    assert os_path is not None
                    return os_path

                def on_closed(rel: str, local: str) -> None:
                    if not portal.call(upload_stays, store, dest, instant):
                        os.unlink(local)
                        portal.call(lambda: marks.unmark(rel, IOType.CREATE))
                        raise _decided(instant, attempt_id)
                    placed[rel] = (os.path.getsize(local), None)
            else:

                def local_path(rel: str) -> str:
                    portal.call(check_before_file, store, layout, attempt_id)  # not a zombie
                    os_path = local_os_path(store, join(work, rel))
                    assert os_path is not None
                    return os_path

                def on_closed(rel: str, local: str) -> None:
                    pass

            if plan.table is not None:  # each file's footer against the write's schema
                marker = portal.call(read_marker, store, layout)
                on_closed = _schema_checked(
                    on_closed, write_schema(marker), unlink=direct and uploads is None
                )

            table = plan.table
            meta = None if table is None else HudiMeta(table.instant, partition, table.record_key_fields)
            token = write_token(partition, stage, attempt)

            def file_name(n: int) -> str:
                if table is None:
                    return plan.file_name(partition, n)
                return base_file_name(new_file_id(), token, table.instant)

            writer = PartitionedParquetWriter(
                partition_columns=plan.partition_columns,
                partition_dir_names=plan.partition_dir_names,
                int96_timestamps=settings.int96_timestamps,
                keep_partition_columns=table is not None,
                meta=meta,
                file_name=file_name,
                local_path=local_path,
                on_closed=on_closed,
                compression=settings.compression,
                compression_level=plan.compression_level,
                row_group_rows=plan.row_group_rows,
                row_group_bytes=plan.row_group_bytes,
                max_records_per_file=settings.max_records_per_file,
                max_file_bytes=plan.max_file_bytes,
                max_open_files=plan.max_open_files,
                spark_schema_json=footer_schema_json(plan),
                spark_version=plan.spark_version,
            )
            finish = _finisher(writer, uploads)
            try:
                schema: pa.Schema | None = None
                for batch in batches:
                    schema = batch.schema
                    writer.write(batch)
                    hooks.current.task_rows(partition, attempt, writer.stats.rows, False, finish)
                hooks.current.task_rows(partition, attempt, writer.stats.rows, True, finish)
                stats = writer.close()
                if stats.files == 0 and partition == 0 and not plan.partition_columns and table is None:
                    if schema is None and empty_schema is not None:
                        schema = empty_schema()
                    if schema is not None:
                        writer.write_empty_file(schema)
                if uploads is not None:
                    uploads.wait()
                extra = {
                    "rows": str(stats.rows),
                    "spark.partition": str(partition),
                    "event_loop": portal.call(_running_loop),
                }
                if table is not None:
                    extra["hudi.rows"] = json.dumps(stats.file_rows, separators=(",", ":"))
                manifest: TaskManifest
                if direct:
                    files = [
                        (rel, size, etag, stats.file_rows[rel])
                        for rel, (size, etag) in sorted(placed.items())
                    ]
                    manifest = portal.call(
                        lambda: commit_direct_task(store, layout, task_id, attempt_id, files, config=config)
                    )
                else:
                    manifest = portal.call(
                        lambda: commit_task(
                            store, layout, task_id, attempt_id, config=config, extra_data=extra
                        )
                    )
                info = portal.call(store.stat, layout.manifest_path(task_id))
                portal.call(check_job_active, store, layout)  # not a zombie of a finished job
            except BaseException:
                writer.abort()
                if uploads is not None:
                    uploads.cancel()
                with contextlib.suppress(BaseException):
                    portal.call(discard_attempt, store, layout, attempt_id)
                raise
            finally:
                if beats is not None:
                    beats.cancel()
                if tmp is not None:
                    shutil.rmtree(tmp, ignore_errors=True)
        finally:
            with contextlib.suppress(Exception):
                portal.call(store.aclose)
    return TaskResult(
        manifest=encode_manifest(manifest),
        manifest_etag=info.etag,
        task_attempt_id=attempt_id,
        rows=stats.rows,
        files=stats.files,
        bytes=stats.bytes,
        seconds=time.perf_counter() - t0,
        overwrite_mode=settings.overwrite_mode,
    )


def _schema_checked(
    on_closed: Callable[[str, str], None], schema: str | None, *, unlink: bool
) -> Callable[[str, str], None]:
    """``on_closed`` preceded by the check of the closed file's Parquet footer (only the
    footer is read) against the write's Avro ``schema``
    (:func:`~amcommit.table.format.schema.check_footer`): a file whose own schema differs fails the
    attempt with SchemaMismatch naming the file and the column before it is uploaded or
    kept; ``unlink``: the file was written in place (direct, local) and is deleted first."""
    from amcommit.table.format.schema import check_footer

    def closed(rel: str, local: str) -> None:
        try:
            check_footer(rel, local, schema)
        except BaseException:
            if unlink:
                with contextlib.suppress(OSError):
                    os.unlink(local)
            raise
        on_closed(rel, local)

    return closed


def _decided(instant: str, attempt_id: str) -> CommitError:
    """A direct write's attempt that finished an upload after its write was decided."""
    return CommitError(
        f"table write {instant} was committed or rolled back while task attempt {attempt_id} "
        "was still writing: its files were removed",
        stage="commit_task",
    )


def _finisher(writer: PartitionedParquetWriter, uploads: _Uploads | None) -> Callable[[], None]:
    """For the task hook (:mod:`amcommit.spark.hooks`): close the attempt's files and wait
    for their uploads."""

    def finish() -> None:
        writer.close()
        if uploads is not None:
            uploads.wait()

    return finish


__all__ = [
    "TaskResult",
    "check_before_file",
    "decode_manifest",
    "encode_manifest",
    "footer_schema_json",
    "job_layout",
    "job_over",
    "put_in_attempt",
    "run_task",
    "setup_attempt",
    "task_ids",
]


async def _running_loop() -> str:
    """The event loop the task's store calls run on (recorded in its manifest)."""
    return running_loop()
