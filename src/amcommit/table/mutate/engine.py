"""Record-level upsert and delete of a Copy-on-Write or Merge-on-Read table, without Spark (engine API).

::

    report = await upsert(store, dest, rows, record_key="id", partition_by=("p",), precombine_field="ts")
    report = await delete(store, dest, keys, record_key="id", partition_by=("p",))
    upsert_blocking("gs://bucket/table", rows, record_key="id", ...)   # any store URL

Hudi's semantics (version 0.14 / 0.15 defaults), followed here:

- **Keys.** A record is identified by its record key *and* its partition path (Hudi's
  default, non-global bloom index): keys are unique per partition path. A key whose
  partition value changes is an *insert* into the new partition; the record in the old
  partition stays (delete it there explicitly).
- **Duplicates within one batch** are reduced first by the precombine field: the greatest
  value wins (``OverwriteWithLatestAvroPayload.preCombine``); on a tie the later row of
  the batch wins. A null precombine value is refused.
- **Stored vs incoming** (``payload``): ``OverwriteWithLatestAvroPayload`` (Hudi 0.x's
  default ``hoodie.datasource.write.payload.class``): the incoming record replaces the
  stored one. ``DefaultHoodieRecordPayload`` (ordering-aware, 1.x's default): a stored
  record whose precombine value is greater than the incoming one stays.
- **Deletes** of absent keys are no-ops, counted (:attr:`MutateReport.absent_deletes`).
- **Only what changed is rewritten**: a file group holding updated or deleted keys gets a
  new base file (same fileId, new write token, this instant; write stat ``prevCommit`` =
  its previous instant, ``numUpdateWrites``, ``numDeletes``); its unchanged records keep
  their ``_hoodie_commit_time`` and ``_hoodie_commit_seqno`` (``_hoodie_file_name`` names
  the new file), so incremental reads return just the changed records. A group whose every
  record is deleted gets an empty base file (a version with no rows). Inserts go to
  existing small file groups first, as Hudi's small-file handling does (:func:`assign_inserts`:
  groups below ``small_file_limit``, 100 MiB, filled up to ``max_file_size``, 120 MiB, at the
  partition's average record size; such a group is rewritten with its new records), then new
  file groups, one per partition (split at ``max_file_rows``).
- **Index** (:mod:`amcommit.table.format.bloom`): the files of the latest snapshot in the
  partitions of the incoming keys are candidates for a key when their footer's key range
  holds it and their bloom filter says maybe (only footers are read: on local files just
  the footer, elsewhere a ranged read of the object's end, :data:`TAIL_GUESS`;
  :attr:`MutateReport.footers_read`); a candidate is
  confirmed by reading only its ``_hoodie_record_key`` column
  (:attr:`MutateReport.key_columns_read`); on object stores a candidate of a Copy-on-Write
  table whose bloom filter holds a key (a hit but for fpp 1e-9) is read whole instead, once,
  for its rewrite too (:data:`~amcommit.table.file_group.index.WHOLE_READ_BUDGET` at once).
- **Pipeline**: the lookup runs file by file in partition order; each partition is planned
  (:func:`~amcommit.table.mutate.plan.plan_partition`: Arrow joins of its keys to its file
  groups) as soon as its last file is confirmed, and its file groups are written while
  later partitions are still looked up. The CPU work (batch reduction, bloom hashes, joins,
  plans, rewrites) runs in worker threads, not on the event loop. At most 8 file groups
  are rewritten at once (their rows in memory); encoded files upload within
  :data:`UPLOAD_BUDGET` bytes. New records' ``_hoodie_commit_seqno`` are unique within the
  write, each partition numbered from its own range
  (:func:`~amcommit.table.mutate.plan.seq_bases`; not contiguous across partitions).
- **Concurrency** (Hudi's ``SimpleConcurrentFileWritesConflictResolutionStrategy``): the
  commit fails with :class:`~amcommit.table.errors.WriteConflict` (one line, nothing
  published, the write rolled back) if a file group it rewrites got a newer version, or
  was replaced, by an instant that completed after this write read it. As in Hudi, two
  writers *inserting* the same new key at once conflict only if they fill the same small
  file group; into new file groups both insert it and the key is then held twice (a later
  upsert or delete of it acts on every copy).

**Merge-on-Read** (``table_type="MERGE_ON_READ"`` on the table's first write; Hudi's
``hoodie.datasource.write.table.type``; ``hoodie.properties`` then records the type, the
payload class and the precombine field): every upsert or delete is a ``deltacommit``.
Inserts go to new file groups (base files with their footer index; small-file handling is
off: no base file is ever rewritten by a deltacommit). The updates and deletes of a file
group go to **one new log file** of its latest slice,
``.<fileId>_<baseInstant>.log.<next version>_<task>-<instant>-0`` (a token holding the
instant: no two writes share a name, and the file is created, never put over another):
an Avro data block of the incoming records (meta fields as Hudi's Java writer fills them,
``_hoodie_file_name`` = the file id) and a delete block. A delete's ordering value is
``IntWrapper(0)``, Hudi's "natural order" (the delete wins), unless the table's payload is
``DefaultHoodieRecordPayload`` and the delete's rows hold the table's precombine field: then
each deleted key carries its value in Hudi's wrapper of the field's type (``LongWrapper``
for a ``long``...), and a stored record whose precombine value (in its base file or a log,
as readers merge the slice) is greater stays: :attr:`MutateReport.kept_stored` counts it,
:attr:`MutateReport.deleted` does not (the slice is read for that). Readers merge the blocks
with the base file by the table's payload (an update older than the stored record loses on
read); until the deltacommit completes they skip its blocks. The log files are
written in place under Hudi's ``APPEND`` markers; a rollback (or a reconcile) deletes a
log file only when its write created it whole (:func:`~amcommit.table.format.naming.own_log_file`).
The conflict check also fails a write whose file slice got a log file it did not see.
Merge-on-Read needs ``table_commit=direct`` (the default).

What is atomic: the commit (the completed instant, published last by the job commit,
:mod:`amcommit.table.commit.table_commit`). Before it, nothing a reader sees changes: the new base files
are stamped with the inflight instant and are either staged under
``.hoodie/.aux/amcommit/<instant>/`` (``table_commit=staged``: the job commit renames them) or written in place under Hudi's
direct markers (``direct``, :class:`~amcommit.table.write.task.TableTask`: ``MERGE`` for a file
group's new version, ``CREATE`` for a new group; the job commit renames nothing, a rollback
removes every marked file). Bad input (missing
key, partition or precombine column; null keys; a key column of another type than the
table's) is refused with one line before anything is written. Any failure after the write
began rolls it back (``abort_job``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.report import JobReport
from amcommit.errors import AmcommitError
from amcommit.parallel import first_error, run_parallel
from amcommit.paths import basename
from amcommit.store.base import Store
from amcommit.table.commit.labels import Label
from amcommit.table.file_group.model import FileVersion
from amcommit.table.format.bloom import (
    DEFAULT_SETTINGS,
    BloomSettings,
)
from amcommit.table.format.model import Instant, Operation
from amcommit.table.format.naming import (
    META_COLUMNS,
    base_file_name,
    log_file_name,
    new_file_id,
    write_token,
)
from amcommit.table.format.properties import TableProperties, new_properties
from amcommit.table.report import table_report
from amcommit.table.settings import Placement, table_settings
from amcommit.table.timeline.instants import file_groups, snapshot
from amcommit.table.timeline.reader import Timeline

if TYPE_CHECKING:
    import pyarrow as pa

    from amcommit.table.commit.compaction import CompactionReport
from amcommit.table.errors import MutationError
from amcommit.table.file_group.index import IndexReader
from amcommit.table.file_group.merge import (
    KEY_COLUMN,
    Payload,
    merge_file,
    parquet_with_index,
    rewrite_group,
    set_file_name,
    with_meta,
)
from amcommit.table.mutate.checks import (
    _names,
    check_columns,
    check_key_types,
    partition_paths,
    record_key_strings,
)
from amcommit.table.mutate.plan import (
    MAX_FILE_SIZE,
    SMALL_FILE_LIMIT,
    FileRewrite,
    MutationPlan,
    PartitionBatch,
    assign_inserts,
    confirm_keys,
    file_candidates,
    partition_batches,
    plan_candidates,
    plan_mutation,
    plan_partition,
    reduce_batch,
    reduce_batch_columns,
    seq_bases,
)

__all__ = [
    "FileRewrite",
    "IndexReader",
    "MutateReport",
    "MutationError",
    "MutationPlan",
    "Payload",
    "PreparedMutation",
    "assign_inserts",
    "delete",
    "delete_blocking",
    "merge_file",
    "partition_paths",
    "plan_candidates",
    "plan_mutation",
    "prepare",
    "record_key_strings",
    "reduce_batch",
    "rewrite_group",
    "set_file_name",
    "upsert",
    "upsert_blocking",
]


LOG_SLOTS = 64
"""Log files a Merge-on-Read upsert or delete writes at once (within ``io_threads``)."""

UPLOAD_BUDGET = 256 * 1024 * 1024
"""Bytes of encoded files an upsert or delete uploads at once (their rows already released)."""


def _nothing() -> None:
    return None


def _look_up_local(local: str, rel: str, part: PartitionBatch) -> tuple[list[str], Any, Any] | None:
    """The index lookup of a base file on local files (``local``: its OS path) in one call:
    the keys of ``part`` its footer cannot rule out, then, if any, ``(those keys, its key
    column, the keys it holds)``; None when the footer rules every key out. Its bloom
    filter is probed only for few keys (:func:`file_candidates` with ``rows``). Reads only."""
    import pyarrow.parquet as pq

    from amcommit.table.format.bloom import parse_footer

    md = pq.read_metadata(local)
    asked = file_candidates(part, parse_footer(md.metadata, where=rel), rows=md.num_rows)
    if not asked:
        return None
    held = pq.read_table(local, columns=[KEY_COLUMN]).column(0)
    return asked, held, confirm_keys(asked, held)


class ByteBudget:
    """At most ``limit`` bytes held at once by :meth:`hold` (a holder of more than
    ``limit`` goes alone): a bound on the memory of uploads in flight, not on their number."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._freed: Any = None

    @contextlib.asynccontextmanager
    async def hold(self, n: int) -> AsyncIterator[None]:
        import anyio

        while self.held and self.held + n > self.limit:
            if self._freed is None:
                self._freed = anyio.Event()
            await self._freed.wait()
        self.held += n
        try:
            yield
        finally:
            self.held -= n
            if self._freed is not None:  # every waiter checks again
                self._freed.set()
                self._freed = None


MUTATION_TASKS = 1
"""The tasks of an upsert or delete through this module (one, task 0): the count recorded
in its job marker (``expectedTasks``), which a commit from the store alone checks
(:mod:`amcommit.committer.completeness`)."""


@dataclass
class MutateReport:
    """What an upsert or delete did."""

    instant: str
    operation: str
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    absent_deletes: int = 0
    """Deletes of keys the table does not hold (no-ops)."""
    duplicates_dropped: int = 0
    """Rows of the batch reduced away by the precombine field."""
    kept_stored: int = 0
    """Updates not applied because the stored record was newer (``DefaultHoodieRecordPayload``)."""
    files_rewritten: int = 0
    files_created: int = 0
    files_logged: int = 0
    """Log files written (a Merge-on-Read table's updates and deletes; no base file is
    rewritten there)."""
    footers_read: int = 0
    key_columns_read: int = 0
    candidates: int = 0
    """Files the footers could not rule out (their key column was read)."""
    index_bytes_read: int = 0
    """Bytes the index lookup read from object stores (footers and key columns; 0 on local
    files, which are read in place)."""
    job: JobReport | None = None
    """The job commit's report (label, skipped_label, timings)."""
    compaction: CompactionReport | None = None
    """The inline compaction run after this deltacommit (``compact_every``), if it was due."""
    compaction_error: str | None = None
    """Why the inline compaction failed (the deltacommit is committed all the same)."""
    merge_on_read: bool = False
    """The table is a Merge-on-Read table (this write is a deltacommit)."""

    @property
    def skipped_label(self) -> str | None:
        """The instant that committed this write's label before: the write was rolled back
        instead of committed (the counts above are what it would have done)."""
        return None if self.job is None else table_report(self.job).skipped_label


def log_write_token(instant: str, task: int) -> str:
    """The write token of a deltacommit's log files: ``<task>-<instant>-0`` (Hudi's
    ``<partition>-<stage>-<attempt>`` shape, the instant as the stage). Unique per write, so
    a log file (whose name carries the slice's base instant, not the writing instant) is
    never another write's: two writers adding the same log version of one file slice
    write two files. Pure."""
    return f"{int(task)}-{instant}-0"


def with_meta_schema(schema_json: str) -> str:
    """The Avro schema (JSON) ``schema_json`` led by Hudi's five meta fields (nullable
    strings), as the header of a log block holds the writer's schema. Pure."""
    import json

    obj = json.loads(schema_json)
    fields = [f for f in obj.get("fields", []) if f.get("name") not in META_COLUMNS]
    meta = [{"name": c, "type": ["null", "string"], "doc": "", "default": None} for c in META_COLUMNS]
    return json.dumps({**obj, "fields": [*meta, *fields]}, separators=(",", ":"))


def _default_name(dest: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", basename(dest.rstrip("/")) or "table")
    return name if name[:1].isalpha() else f"t_{name}"


async def _mutate(
    store: Store,
    dest: str,
    data: pa.Table,
    *,
    operation: Operation,
    record_key: str | Sequence[str],
    partition_by: str | Sequence[str],
    precombine_field: str | None,
    payload: Payload | str,
    label: Label | None,
    config: CommitterConfig,
    table_name: str | None,
    bloom: BloomSettings,
    max_file_rows: int,
    small_file_limit: int = SMALL_FILE_LIMIT,
    max_file_size: int = MAX_FILE_SIZE,
    commit: bool = True,
    table_type: str | None = None,
) -> MutateReport:
    import anyio
    import pyarrow as pa

    from amcommit.table.format.properties import MERGE_ON_READ
    from amcommit.table.format.schema import avro_schema
    from amcommit.table.format.writestats import MutationFields
    from amcommit.table.timeline.heartbeat import heartbeat
    from amcommit.table.write.task import (
        TableSpec,
        TableTask,
        begin_write,
        check_table_type,
        committed_schema,
        latest_write,
        read_properties,
        setup_table_task,
    )

    if not isinstance(data, pa.Table):
        raise MutationError(f"data must be a pyarrow.Table, got {type(data).__name__}")
    payload = Payload(payload)
    keys_f, parts_f = _names(record_key), _names(partition_by)
    if not keys_f:
        raise MutationError("record_key names no column: upsert and delete need the table's record key")
    delete_op = operation is Operation.DELETE
    check_columns(data, keys_f, parts_f, precombine_field)
    if payload is Payload.DEFAULT and not precombine_field:
        raise MutationError("payload DefaultHoodieRecordPayload needs a precombine_field")
    name = table_name or _default_name(dest)
    timeline = Timeline(store, dest, config=config)  # this upsert's one listing of .hoodie/
    # The properties and the timeline are read at the same time (one round trip, not two);
    # the listing is used only if the properties say there is a table. A listing made
    # before the properties read sees what one made right after it would: the properties
    # are written when the table is created, before any instant, and any instant that
    # completes after the listing is one that could complete after a later listing too
    # (the job commit's checks under the lock judge those).
    props: TableProperties | None = None
    listed: list[list[Instant]] = []
    unlisted: list[AmcommitError] = []

    async def props_of() -> None:
        nonlocal props
        props = await read_properties(store, dest, config)

    async def listing() -> None:
        try:
            listed.append(await timeline.files())
        except AmcommitError as e:  # (no table yet, NotATable: judged below, with the properties)
            unlisted.append(e)

    await run_parallel([props_of, listing], lambda step: step(), 2)
    if props is not None:
        check_table_type(props, table_type, dest)  # before anything is written
        name = props.name
        if not props.record_key_fields:
            raise MutationError(
                f"table {dest!r} has generated record keys: it cannot be upserted or deleted by key"
            )
    elif delete_op:
        raise MutationError(f"{dest!r} is not a Hudi table (no .hoodie/hoodie.properties): nothing to delete")
    elif table_type is not None:
        check_table_type(new_properties("t", table_type=str(table_type).strip().upper()), table_type, dest)
    mor = props.merge_on_read if props is not None else str(table_type or "").strip().upper() == MERGE_ON_READ
    if mor and table_settings(config).placement is not Placement.DIRECT:
        raise MutationError(
            "a Merge-on-Read table's log files are written in place: table_commit must be 'direct'"
        )
    if props is not None and unlisted:
        raise unlisted[0]
    if props is None:  # no table: the write creates it; its handle lists afresh when asked
        timeline = Timeline(store, dest, config=config)
    instants = listed[0] if props is not None else []
    table_schema = (
        await committed_schema(store, dest, latest_write(instants), config, timeline=timeline)
        if props
        else None
    )
    for c in check_key_types(table_schema, data, keys_f, name):
        data = data.set_column(data.schema.get_field_index(c), c, data.column(c).cast(pa.int64()))
    keys = record_key_strings(data, keys_f)
    partitions = partition_paths(data, parts_f)
    batch = reduce_batch_columns(
        keys, partitions, data.column(precombine_field) if precombine_field else None
    )
    if delete_op:
        schema_json = table_schema
        if not schema_json:
            raise MutationError(f"table {dest!r} holds no committed write: nothing to delete")
    else:
        schema_json = avro_schema(data.schema, name)
    spec = TableSpec(
        name,
        partition_fields=parts_f,
        record_key_fields=keys_f,
        table_type=None if table_type is None else str(table_type).strip().upper(),
        payload_class=payload.value if mor else None,
        precombine_field=precombine_field if mor else None,
    )
    # the write's one task completes it (task 0 below): recorded, so that a commit from the
    # store alone (``amcommit commit-job`` after this process died) refuses the write until
    # its task committed, instead of publishing an empty instant (and using up its label)
    w = await begin_write(
        store,
        dest,
        operation=operation,
        spec=spec,
        avro_schema=schema_json,
        config=config,
        label=label,
        expected_tasks=MUTATION_TASKS,
        merge_on_read=mor,
        timeline=timeline,
        properties=props,  # read above for this very write: not read again
    )
    instant = w.instant
    report = MutateReport(
        instant=instant, operation=operation.value, duplicates_dropped=batch.dropped, merge_on_read=mor
    )
    try:
        # the writer stays alive (its heartbeat) while it reads and writes, however long
        async with heartbeat(store, dest, instant, ttl=table_settings(config).writer_ttl):
            task = 0
            attempt = f"attempt_{instant}_m_{task:06d}_0"
            setup: dict[str, TableTask] = {}

            async def set_up() -> None:
                # staged (in the attempt directory) or direct (in place, under Hudi's markers:
                # MERGE for a file group's new version, CREATE for a new group), as table_commit
                # says. Made while the timeline is read (below): the task's records are this
                # write's own, and no file is written before both are done.
                # A direct attempt's MARKERS.type is created at the same time (its first mark
                # then writes only its MARKERS<n> file): after the write's instant files, so a
                # kill leaves a pending write whose MARKERS.type alone its rollback removes
                # (the state an attempt killed between its first two marker puts left before)
                from amcommit.table.write.direct import AttemptMarkers

                markers = (
                    AttemptMarkers(store, dest, instant, attempt, config)
                    if table_settings(config).placement is Placement.DIRECT
                    else None
                )

                async def task_setup() -> None:
                    setup["tt"] = await setup_table_task(
                        store, w, f"task_{instant}_m_{task:06d}", attempt, config=config
                    )

                async def marker_type() -> None:
                    if markers is not None:
                        await markers.prepare()

                await run_parallel([task_setup, marker_type], lambda step: step(), 2)
                if markers is not None:
                    setup["tt"].markers = markers

            async def read_timeline() -> None:
                if mor:  # its log files go to the slices a pending compaction makes: complete it first
                    from amcommit.table.commit.compaction import (
                        finish_pending_compactions,
                        pending_compactions,
                    )

                    # listed again after this write's own instant is on the timeline: a compaction
                    # planned before it is seen here (and completed first); one planned after it
                    # sees this write pending and waits for it (amcommit.table.commit.compaction)
                    listed = (await timeline.refresh()).files
                    if pending_compactions(listed):
                        await finish_pending_compactions(store, dest, config, instants=listed)
                        # completed here or by its compactor meanwhile: the slices to write against
                        await timeline.refresh()
                await timeline.commits_held()

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(set_up)
                    tg.start_soon(read_timeline)
            except BaseExceptionGroup as eg:
                raise first_error(eg) from None
            tt = setup["tt"]
            commits = await timeline.commits_held()
            snap = snapshot(commits)
            parts = await anyio.to_thread.run_sync(partition_batches, batch)
            files_of: dict[str, list[FileVersion]] = {}
            for f in snap:
                if f.partition in parts:
                    files_of.setdefault(f.partition, []).append(f)
            files = [f for p in sorted(files_of) for f in files_of[p]]
            report.footers_read = len(files)
            reader = IndexReader(store, dest, config)
            slices = {(g.partition, g.file_id): g.latest for g in file_groups(commits)} if mor else {}
            ordered = (
                _delete_ordering(data, keys, partitions, props, None if mor else (payload, precombine_field))
                if delete_op and props is not None
                else None
            )
            trusted = {c.instant.time for c in commits}
            # -- write the task's files --------------------------------------------------------
            token = write_token(task, 0, 0)
            data_cols = data.select([c for c in data.column_names if c not in META_COLUMNS])
            uploads = ByteBudget(UPLOAD_BUDGET)
            # the CPU-bound worker-thread calls, a few at once (more only contend for the GIL)
            cpu = anyio.CapacityLimiter(max(2, os.cpu_count() or 2))
            # each partition's new records get their own range of seqnos, fixed before any
            # partition is planned (partitions are written in the order they are planned)
            bases = seq_bases(parts, files_of)

            def rewritten(first: int, stored: pa.Table, rw: FileRewrite) -> tuple[bytes, int, dict[str, int]]:
                up_keys = list(rw.updates)
                rows = pa.array([rw.updates[k] for k in up_keys], pa.int64())
                inserts = data_cols.take(pa.array(rw.inserts, pa.int64())) if rw.inserts else None
                _, data, n, counts = rewrite_group(
                    rw.version,
                    stored,
                    data_cols.take(rows),
                    up_keys,
                    rw.deletes,
                    instant=instant,
                    task=task,
                    first_seq=first,
                    token=token,
                    precombine_field=precombine_field,
                    payload=payload,
                    inserts=inserts,
                    insert_keys=[keys[i] for i in rw.inserts],
                    bloom=bloom,
                    delete_order=None
                    if ordered is None
                    else {k: ordered.values.get((rw.version.partition, k)) for k in rw.deletes},
                )
                return data, n, counts

            def created(first: int, part: str, chunk: list[int]) -> tuple[str, bytes]:
                fname = base_file_name(new_file_id(), token, instant)
                ks = [keys[i] for i in chunk]
                t = with_meta(
                    data_cols.take(pa.array(chunk, pa.int64())), ks, instant, task, first, part, fname
                )
                return fname, parquet_with_index(t, bloom)

            log_schema = with_meta_schema(schema_json) if mor else ""

            def logged(first: int, rw: FileRewrite) -> tuple[bytes, int]:
                """The log blocks of ``rw``'s file group: its updates (one Avro data block,
                meta fields filled as Hudi's Java writer fills them: ``_hoodie_file_name``
                holds the file id) and its deletes (one delete block)."""
                from amcommit.table.format.logblock import avro_data_block, delete_block

                f = rw.version
                blocks: list[bytes] = []
                up_keys = list(rw.updates)
                if up_keys:
                    rows = data_cols.take(pa.array([rw.updates[k] for k in up_keys], pa.int64()))
                    t = with_meta(rows, up_keys, instant, task, first, f.partition, f.file_id)
                    blocks.append(avro_data_block(instant, log_schema, t))
                if rw.deletes:
                    blocks.append(
                        delete_block(instant, log_schema, _delete_records(f.partition, rw.deletes, ordered))
                    )
                return b"".join(blocks), len(up_keys)

            async def one_log(first: int, rw: FileRewrite) -> None:
                import anyio

                f = rw.version
                sl = slices.get((f.partition, f.file_id))
                logs = [] if sl is None else [lg for lg in sl.logs if lg.base_instant == f.instant]
                version = max([lg.version for lg in logs], default=0) + 1
                # the token holds the instant: two writers' log files never share a name
                # (a log file's name, unlike a base file's, does not carry the instant)
                name = log_file_name(f.file_id, f.instant, version, log_write_token(instant, task))
                rel = f"{f.partition}/{name}" if f.partition else name
                body, n = await anyio.to_thread.run_sync(logged, first, rw, limiter=cpu)
                mutation = MutationFields(
                    prev_commit=f.instant,
                    num_inserts=0,
                    num_update_writes=n,
                    num_deletes=len(rw.deletes),
                    file_id=f.file_id,
                    log_version=version,
                    base_file=basename(f.path),
                    log_files=[*(basename(lg.path) for lg in logs), name],
                )
                stays = 0
                if ordered is not None and rw.deletes and sl is not None:
                    # ordering-aware: a stored record newer than its delete stays (readers agree)
                    stays = await _kept_by_order(store, dest, sl, rw, ordered, trusted)
                await tt.put_log(rel, body, rows=n, mutation=mutation)
                report.updated += n
                report.deleted += len(rw.deletes) - stays
                report.kept_stored += stays
                report.files_logged += 1

            async def one(
                job: tuple[int, str, FileRewrite | None, list[int]], encoded: Callable[[], None] = _nothing
            ) -> None:
                """Write one job's file; ``encoded`` is called once its bytes are made (its
                rows no longer held: the upload waits for the byte budget, not a slot)."""
                import anyio

                first, where, rw, chunk = job
                if rw is not None and mor:  # a new log version of the file group's slice
                    await one_log(first, rw)
                elif rw is not None:  # a new version of a file group
                    f = rw.version
                    # read (or decoded, if read ahead) and rewritten in one worker-thread call
                    body, n, counts = await reader.apply(
                        where, functools.partial(rewritten, first, rw=rw), limiter=cpu
                    )
                    encoded()
                    report.kept_stored += counts["kept_stored"]
                    if not body:
                        return
                    new_rel = tt.new_file(f.partition, f.file_id, token)
                    mutation = MutationFields(
                        prev_commit=f.instant,
                        num_inserts=counts["inserted"],
                        num_update_writes=counts["updated"],
                        num_deletes=counts["deleted"],
                    )
                    async with uploads.hold(len(body)):
                        await tt.put(new_rel, body, rows=n, new_version=True, mutation=mutation)
                    report.updated += counts["updated"]
                    report.deleted += counts["deleted"]
                    report.inserted += counts["inserted"]
                    report.files_rewritten += 1
                else:  # a new file group
                    fname, body = await anyio.to_thread.run_sync(created, first, where, chunk, limiter=cpu)
                    encoded()
                    new_rel = f"{where}/{fname}" if where else fname
                    async with uploads.hold(len(body)):
                        await tt.put(
                            new_rel, body, rows=len(chunk), mutation=MutationFields(num_inserts=len(chunk))
                        )
                    report.inserted += len(chunk)
                    report.files_created += 1

            def partition_jobs(
                part: str, plan: MutationPlan
            ) -> list[tuple[int, str, FileRewrite | None, list[int]]]:
                """The writes of one partition's plan, each with the first seqno of its records."""
                seq = bases[part]
                jobs: list[tuple[int, str, FileRewrite | None, list[int]]] = []
                for rel, rw in sorted(plan.rewrites.items()):
                    jobs.append((seq, rel, rw, []))
                    seq += len(rw.updates) + len(rw.inserts)
                for p, rows_idx in sorted(plan.inserts.items()):
                    step = max(1, max_file_rows)
                    for start in range(0, len(rows_idx), step):
                        chunk = rows_idx[start : start + step]
                        jobs.append((seq, p, None, chunk))
                        seq += len(chunk)
                return jobs

            # -- the pipeline: the index lookup of each base file (footer, candidates, key
            # column, confirmation), in partition order; each partition planned as soon as
            # its last file is confirmed, and its file groups written while the next
            # partitions are looked up. The CPU work (bloom hashes, joins, the plan, the
            # rewrites) runs in worker threads, never on the event loop.
            found: dict[str, list[tuple[FileVersion, Any]]] = {p: [] for p in parts}
            left = {p: len(files_of.get(p, ())) for p in parts}
            ready_send, ready = anyio.create_memory_object_stream[str](max(1, len(parts)))

            async def index_one(f: FileVersion) -> None:
                local = reader.local_path(f.path)
                if local is not None:  # footer, candidates, key column, confirmed: one call
                    looked = await anyio.to_thread.run_sync(
                        _look_up_local, local, f.path, parts[f.partition], limiter=cpu
                    )
                    asked: list[str] = []
                    if looked is not None:
                        asked, held, got = looked
                        reader.key_columns[f.path] = held  # not decoded again by the rewrite
                else:
                    idx = await reader.footer(f.path, f.size)
                    asked = await anyio.to_thread.run_sync(
                        file_candidates, parts[f.partition], idx, limiter=cpu
                    )
                    if asked:
                        # a filter's "maybe" is almost surely a hit (fpp 1e-9): the file is read
                        # whole now, not again for its rewrite (MoR rewrites none)
                        held = await reader.key_array(f.path, whole=idx.has_bloom and not mor)
                        got = await anyio.to_thread.run_sync(confirm_keys, asked, held, limiter=cpu)
                if asked:
                    report.candidates += 1
                    if len(got):
                        found[f.partition].append((f, got))
                    else:  # the filter's false positives only: the file is not rewritten
                        reader.whole.pop(f.path, None)
                        reader.key_columns.pop(f.path, None)
                left[f.partition] -= 1
                if not left[f.partition]:
                    ready_send.send_nowait(f.partition)

            async def look_up() -> None:
                with ready_send:
                    for p in sorted(parts):
                        if not left[p]:  # no base file: all inserts (or absent deletes)
                            ready_send.send_nowait(p)
                    await run_parallel(files, index_one, config.io_threads)

            async def write() -> None:
                # a few at a time: each holds a file group's rows in memory while it is
                # rewritten; its upload then waits for the byte budget instead (latency bound).
                # A Merge-on-Read write holds no base file, only its updates' log blocks (a
                # small share of the batch): more at once, so that on an object store the
                # marker, upload and check of many log files overlap
                slots = anyio.Semaphore(max(1, min(config.io_threads, LOG_SLOTS if mor else 8)))

                async def run(job: tuple[int, str, FileRewrite | None, list[int]]) -> None:
                    held = True

                    def release() -> None:
                        nonlocal held
                        if held:
                            held = False
                            slots.release()

                    try:
                        await one(job, release)
                    finally:
                        release()

                async with anyio.create_task_group() as tg:
                    with ready:
                        async for p in ready:
                            plan = await anyio.to_thread.run_sync(
                                functools.partial(
                                    plan_partition,
                                    parts[p],
                                    found.pop(p),
                                    files_of.get(p, []),
                                    delete=delete_op,
                                    small_file_limit=small_file_limit,
                                    max_file_size=max_file_size,
                                    # on Merge-on-Read no deltacommit rewrites a base file
                                    fill_small_files=not mor,
                                )
                            )
                            report.absent_deletes += plan.absent_deletes
                            for job in partition_jobs(p, plan):
                                await slots.acquire()
                                tg.start_soon(run, job)

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(look_up)
                    tg.start_soon(write)
            except BaseExceptionGroup as eg:
                raise first_error(eg) from None
            report.key_columns_read = report.candidates
            report.index_bytes_read = reader.index_bytes_read
            await tt.commit()
            if commit:
                # inside this block: the job commit's own heartbeat block nests in it, so this
                # process stays the write's keeper throughout (no withdraw and new claim of
                # the keeper record between the task and the job commit: four requests)
                report.job = await _commit(store, dest, instant, config)
    except BaseException:
        await _abort(store, dest, instant, config)
        raise
    if commit and mor:
        await _inline_compaction(store, dest, config, report)
    return report


_ORDERING_WRAPPERS: dict[str, str] = {
    "bool": "BooleanWrapper",
    "int8": "IntWrapper",
    "int16": "IntWrapper",
    "int32": "IntWrapper",
    "int64": "LongWrapper",
    "float": "FloatWrapper",
    "double": "DoubleWrapper",
    "string": "StringWrapper",
    "large_string": "StringWrapper",
}
"""Hudi's ordering value wrapper of a precombine column, by its Arrow type (the wrapper of
the field's Avro type, as Java's writer picks it); other types: none (natural order)."""


@dataclass(frozen=True)
class DeleteOrdering:
    """The ordering values of a Merge-on-Read delete under ``DefaultHoodieRecordPayload``."""

    field: str
    wrapper: str
    values: dict[tuple[str, str], Any]
    """(partition, key) -> the delete's ordering value (the greatest of its rows; None: no
    value, the delete is in natural order)."""


def _delete_ordering(
    data: pa.Table,
    keys: Sequence[str],
    parts: Sequence[str],
    props: Any,
    given: tuple[Payload, str | None] | None = None,
) -> DeleteOrdering | None:
    """The ordering of a delete: when the table's payload is ``DefaultHoodieRecordPayload``
    and the delete's rows hold the table's precombine field (of a type with a Hudi
    wrapper), each deleted key carries the greatest value of its rows; otherwise None
    (Hudi's natural order, ``IntWrapper(0)``: the delete always wins, as Java's Spark SQL
    DELETE writes it). A Merge-on-Read table's payload and precombine field are its
    properties'; a Copy-on-Write table records neither: ``given`` (the call's) then. Pure."""
    from amcommit.table.format.properties import PAYLOAD_CLASS, PRECOMBINE_FIELD
    from amcommit.table.mutate.plan import precombine_key
    from amcommit.table.query.merge import payload_of

    if given is not None:
        payload, field = given
    else:
        payload, field = (
            payload_of(props.values.get(PAYLOAD_CLASS)),
            props.values.get(PRECOMBINE_FIELD) or None,
        )
    if payload is not Payload.DEFAULT or not field:
        return None
    if field not in data.column_names:
        return None
    wrapper = _ORDERING_WRAPPERS.get(str(data.schema.field(field).type))
    if wrapper is None:
        return None
    col = data.column(field).to_pylist()
    values: dict[tuple[str, str], Any] = {}
    for k, p, v in zip(keys, parts, col, strict=True):
        old = values.get((p, k))
        if v is not None and (old is None or precombine_key(v) > precombine_key(old)):
            values[(p, k)] = v
        else:
            values.setdefault((p, k), old)
    return DeleteOrdering(field, wrapper, values)


def _delete_records(partition: str, keys: set[str], ordered: DeleteOrdering | None) -> list[Any]:
    """The delete block's records of ``keys`` (sorted): each with its ordering value in its
    wrapper, or ``IntWrapper(0)`` (natural order). Pure."""
    from amcommit.table.format.logblock import DeleteRecord

    out = []
    for k in sorted(keys):
        v = None if ordered is None else ordered.values.get((partition, k))
        if v is None or ordered is None:
            out.append(DeleteRecord(k, partition, 0, "IntWrapper"))
        else:
            out.append(DeleteRecord(k, partition, v, ordered.wrapper))
    return out


async def _kept_by_order(
    store: Store, dest: str, sl: Any, rw: FileRewrite, ordered: DeleteOrdering, trusted: set[str]
) -> int:
    """How many of ``rw``'s deleted keys keep their stored record: its current value in the
    slice ``sl`` (base file merged with its completed log blocks, as readers merge it) has a
    greater precombine value than the delete's. Reads the slice's base file and logs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amcommit.paths import join
    from amcommit.table.format import logblock as lb
    from amcommit.table.query.merge import LogBytes, SliceRecipe, live_blocks, merge_slice

    base = None
    if sl.base is not None:
        base = pq.read_table(pa.BufferReader(await store.get(join(dest, sl.base.path))))
    logs = [LogBytes(lg.path, await store.get(join(dest, lg.path))) for lg in sl.logs]
    recipe = SliceRecipe(key_fields=(), payload=Payload.DEFAULT, precombine=ordered.field)
    state = merge_slice(base, live_blocks(logs, trusted.__contains__), recipe)
    if state is None or not state.num_rows:
        return 0
    block = lb.decode_block(
        lb.delete_block("0", "", _delete_records(rw.version.partition, rw.deletes, ordered))
    )
    after = merge_slice(state, [("delete", block)], recipe)
    left = set() if after is None else set(after.column("_hoodie_record_key").to_pylist())
    return len(rw.deletes & left)


async def _inline_compaction(store: Store, dest: str, config: CommitterConfig, report: MutateReport) -> None:
    """After a deltacommit committed: compact if ``compact_every`` deltacommits are due
    (:func:`amcommit.table.commit.compaction.compact_if_due`). The deltacommit stays
    committed whatever happens here; a failure is logged and kept in
    ``report.compaction_error`` (a later write or compaction completes what it left)."""
    import logging

    from amcommit.table.commit.compaction import compact_if_due

    try:
        report.compaction = await compact_if_due(store, dest, config)
    except AmcommitError as e:
        report.compaction_error = str(e)
        logging.getLogger(__name__).warning("inline compaction after %s failed: %s", report.instant, e)


async def _commit(store: Store, dest: str, instant: str, config: CommitterConfig) -> JobReport:
    """The job commit of the write (the table's kind: no probe)."""
    from amcommit.committer.job import commit_with
    from amcommit.table.commit.kind import TableKind

    return await commit_with(TableKind(), store, dest, instant, config=config)


async def _abort(store: Store, dest: str, instant: str, config: CommitterConfig) -> None:
    import anyio

    from amcommit.committer.job import abort_with
    from amcommit.table.commit.kind import TableKind

    with anyio.CancelScope(shield=True):
        try:
            await abort_with(TableKind(), store, dest, instant, config=config)
        except AmcommitError:
            pass


@dataclass
class PreparedMutation:
    """An upsert or delete whose files are written and task committed, not yet committed
    (:func:`prepare`): :meth:`commit` publishes it (or fails, rolled back, with
    :class:`~amcommit.table.errors.WriteConflict`), :meth:`abort` rolls it back."""

    store: Store
    dest: str
    report: MutateReport
    config: CommitterConfig
    merge_on_read: bool = False

    async def commit(self) -> MutateReport:
        try:
            self.report.job = await _commit(self.store, self.dest, self.report.instant, self.config)
        except BaseException:
            await _abort(self.store, self.dest, self.report.instant, self.config)
            raise
        if self.merge_on_read:
            await _inline_compaction(self.store, self.dest, self.config, self.report)
        return self.report

    async def abort(self) -> None:
        await _abort(self.store, self.dest, self.report.instant, self.config)


_DEFAULTS: dict[str, Any] = {
    "record_key": (),
    "partition_by": (),
    "precombine_field": None,
    "payload": Payload.OVERWRITE_WITH_LATEST,
    "table_name": None,
    "table_type": None,
    "small_file_limit": SMALL_FILE_LIMIT,
    "max_file_size": MAX_FILE_SIZE,
}


def _with_hudi(hudi_options: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` (the keyword arguments of :func:`upsert` / :func:`delete` / :func:`prepare`)
    with the options given by Hudi's names (:mod:`amcommit.table.format.hudi_names`); MutationError
    for any other unknown keyword (with "did you mean"). Pure."""
    if not hudi_options:
        return kw
    from amcommit.options import suggest
    from amcommit.table.format.hudi_names import resolve
    from amcommit.table.settings import TableConfig

    for k in hudi_options:
        if not k.lower().startswith("hoodie."):
            known = [*_DEFAULTS, "label", "config", "bloom", "max_file_rows"]
            if k in known:  # a name of upsert() given to a call that does not take it
                raise MutationError(f"{kw['operation'].value.lower()}() takes no option {k!r}")
            raise MutationError(f"unknown option {k!r}{suggest(k, known)}")
    op = Operation(kw["operation"])
    given = {k: v for k, v in kw.items() if k in _DEFAULTS and v != _DEFAULTS[k]}
    given["operation"] = op.value.lower()
    out = dict(kw)
    for k, v in resolve({**given, **hudi_options}, "engine").items():
        if k == "operation":
            if str(v).lower() != op.value.lower():
                raise MutationError(f"option operation={v!r} given to {op.value.lower()}()")
        elif k.startswith("bloom."):
            field = k[len("bloom.") :]
            typed = float(v) if field == "fpp" else (str(v) if field == "type_code" else int(v))
            out["bloom"] = dataclasses.replace(out["bloom"], **{field: typed})
        elif k in (
            "clean_retain_commits",
            "compact_every",
            "compaction_target_io",
            "keep_max_commits",
            "keep_min_commits",
            "archive",
        ):
            base = out["config"]
            mapping = {**base.given(), k: v} if isinstance(base, TableConfig) else None
            out["config"] = TableConfig.from_mapping(mapping or {k: v})
        elif k in ("small_file_limit", "max_file_size"):
            out[k] = int(v)
        else:
            out[k] = v
    return out


async def prepare(
    store: Store,
    dest: str,
    data: pa.Table,
    *,
    operation: Operation | str,
    record_key: str | Sequence[str] = (),
    partition_by: str | Sequence[str] = (),
    precombine_field: str | None = None,
    payload: Payload | str = Payload.OVERWRITE_WITH_LATEST,
    label: Label | None = None,
    config: CommitterConfig = DEFAULT_CONFIG,
    table_name: str | None = None,
    bloom: BloomSettings = DEFAULT_SETTINGS,
    max_file_rows: int = 1_000_000,
    small_file_limit: int = SMALL_FILE_LIMIT,
    max_file_size: int = MAX_FILE_SIZE,
    table_type: str | None = None,
    **hudi_options: Any,
) -> PreparedMutation:
    """:func:`upsert` (``operation`` UPSERT) or :func:`delete` (DELETE) up to, not including,
    the job commit: the instant is begun, the files written and the task committed. The
    write reads the table when it is prepared: a commit that rewrites one of its file groups
    in between makes its :meth:`~PreparedMutation.commit` fail (module doc)."""
    op = Operation(operation)
    if op not in (Operation.UPSERT, Operation.DELETE):
        raise MutationError(f"operation {op.value}: prepare takes UPSERT or DELETE")
    kw = _with_hudi(
        hudi_options,
        dict(
            operation=op,
            record_key=record_key,
            partition_by=partition_by,
            precombine_field=precombine_field,
            payload=payload if op is Operation.UPSERT else Payload.OVERWRITE_WITH_LATEST,
            label=label,
            config=config,
            table_name=table_name,
            bloom=bloom,
            max_file_rows=max_file_rows,
            small_file_limit=small_file_limit,
            max_file_size=max_file_size,
            commit=False,
            table_type=table_type,
        ),
    )
    report = await _mutate(store, dest, data, **kw)
    return PreparedMutation(store, dest, report, kw["config"], report.merge_on_read)


async def upsert(
    store: Store,
    dest: str,
    data: pa.Table,
    *,
    record_key: str | Sequence[str] = (),
    partition_by: str | Sequence[str] = (),
    precombine_field: str | None = None,
    payload: Payload | str = Payload.OVERWRITE_WITH_LATEST,
    label: Label | None = None,
    config: CommitterConfig = DEFAULT_CONFIG,
    table_name: str | None = None,
    bloom: BloomSettings = DEFAULT_SETTINGS,
    max_file_rows: int = 1_000_000,
    small_file_limit: int = SMALL_FILE_LIMIT,
    max_file_size: int = MAX_FILE_SIZE,
    table_type: str | None = None,
    **hudi_options: Any,
) -> MutateReport:
    """Upsert the rows of ``data`` into the table at ``dest`` (created on the first write,
    named ``table_name`` or after ``dest``'s last folder). ``record_key`` / ``partition_by``:
    column names, or one string of comma-separated names. ``hudi_options``: Hudi's write
    option names for these arguments (``**{"hoodie.datasource.write.recordkey.field": "id"}``,
    :mod:`amcommit.table.format.hudi_names`). See the module doc for the semantics, what is atomic,
    and the errors."""
    return await _mutate(
        store,
        dest,
        data,
        **_with_hudi(
            hudi_options,
            dict(
                operation=Operation.UPSERT,
                record_key=record_key,
                partition_by=partition_by,
                precombine_field=precombine_field,
                payload=payload,
                label=label,
                config=config,
                table_name=table_name,
                bloom=bloom,
                max_file_rows=max_file_rows,
                small_file_limit=small_file_limit,
                max_file_size=max_file_size,
                table_type=table_type,
            ),
        ),
    )


async def delete(
    store: Store,
    dest: str,
    data: pa.Table,
    *,
    record_key: str | Sequence[str] = (),
    partition_by: str | Sequence[str] = (),
    precombine_field: str | None = None,
    payload: Payload | str = Payload.OVERWRITE_WITH_LATEST,
    label: Label | None = None,
    config: CommitterConfig = DEFAULT_CONFIG,
    bloom: BloomSettings = DEFAULT_SETTINGS,
    table_type: str | None = None,
    **hudi_options: Any,
) -> MutateReport:
    """Delete the records whose (partition, key) the rows of ``data`` name (``data`` holds
    at least the key and partition columns); absent keys are counted no-ops. With
    ``payload="DefaultHoodieRecordPayload"`` and a ``precombine_field`` column in ``data``,
    a delete older than the stored record (a smaller ordering value) leaves it in place
    (counted in ``kept_stored``). See the module doc."""
    return await _mutate(
        store,
        dest,
        data,
        **_with_hudi(
            hudi_options,
            dict(
                operation=Operation.DELETE,
                record_key=record_key,
                partition_by=partition_by,
                precombine_field=precombine_field,
                payload=payload,
                label=label,
                config=config,
                table_name=None,
                bloom=bloom,
                max_file_rows=1_000_000,
                table_type=table_type,
            ),
        ),
    )


def _blocking(fn: Any, url: str, data: pa.Table, store_options: dict[str, Any], **kw: Any) -> MutateReport:
    from amcommit.loop import run_blocking
    from amcommit.store.schemes import open_location

    async def main() -> MutateReport:
        store, dest = open_location(url, **store_options)
        async with store:
            out: MutateReport = await fn(store, dest, data, **kw)
            return out

    return run_blocking(main)


def upsert_blocking(
    url: str, data: pa.Table, *, store_options: dict[str, Any] | None = None, **kwargs: Any
) -> MutateReport:
    """:func:`upsert` into the table at store URL ``url`` (``file://``, ``abfs[s]://``,
    ``gs://``, plain paths) from synchronous code; ``store_options`` open the store."""
    return _blocking(upsert, url, data, store_options or {}, **kwargs)


def delete_blocking(
    url: str, data: pa.Table, *, store_options: dict[str, Any] | None = None, **kwargs: Any
) -> MutateReport:
    """:func:`delete` from the table at store URL ``url`` from synchronous code."""
    return _blocking(delete, url, data, store_options or {}, **kwargs)
