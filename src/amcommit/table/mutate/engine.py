"""Record-level upsert and delete of a Copy-on-Write table, without Spark (engine API).

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
  (:attr:`MutateReport.key_columns_read`).
- **Concurrency** (Hudi's ``SimpleConcurrentFileWritesConflictResolutionStrategy``): the
  commit fails with :class:`~amcommit.table.errors.WriteConflict` (one line, nothing
  published, the write rolled back) if a file group it rewrites got a newer version, or
  was replaced, by an instant that completed after this write read it. As in Hudi, two
  writers *inserting* the same new key at once conflict only if they fill the same small
  file group; into new file groups both insert it and the key is then held twice (a later
  upsert or delete of it acts on every copy).

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

import dataclasses
import enum
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.report import JobReport
from amcommit.errors import AmcommitError, ConfigError
from amcommit.parallel import run_parallel
from amcommit.paths import basename, join
from amcommit.store.base import Store, local_os_path
from amcommit.table.commit.labels import Label
from amcommit.table.format.bloom import (
    DEFAULT_SETTINGS,
    BloomSettings,
    FooterIndex,
    beyond_bmp,
    build_footer,
    parse_footer,
)
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import (
    META_COLUMNS,
    base_file_name,
    commit_seqno,
    new_file_id,
    write_token,
)
from amcommit.table.report import table_report
from amcommit.table.settings import table_settings
from amcommit.table.timeline.instants import FileVersion, snapshot
from amcommit.table.timeline.reader import Timeline

if TYPE_CHECKING:
    import pyarrow as pa

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

KEY_COLUMN = META_COLUMNS[2]
MUTATION_TASKS = 1
"""The tasks of an upsert or delete through this module (one, task 0): the count recorded
in its job marker (``expectedTasks``), which a commit from the store alone checks
(:mod:`amcommit.committer.completeness`)."""


class Payload(enum.StrEnum):
    """How an incoming record merges with the stored one of the same key (module doc)."""

    OVERWRITE_WITH_LATEST = "OverwriteWithLatestAvroPayload"
    DEFAULT = "DefaultHoodieRecordPayload"


class MutationError(ConfigError):
    """Bad input to :func:`upsert` / :func:`delete` (one line naming the bad thing);
    raised before anything is written."""


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
    footers_read: int = 0
    key_columns_read: int = 0
    candidates: int = 0
    """Files the footers could not rule out (their key column was read)."""
    index_bytes_read: int = 0
    """Bytes the index lookup read from object stores (footers and key columns; 0 on local
    files, which are read in place)."""
    job: JobReport | None = None
    """The job commit's report (label, skipped_label, timings)."""

    @property
    def skipped_label(self) -> str | None:
        """The instant that committed this write's label before: the write was rolled back
        instead of committed (the counts above are what it would have done)."""
        return None if self.job is None else table_report(self.job).skipped_label


# -- pure planning ----------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """The incoming rows reduced to one per (partition path, key): ``rows`` indexes into the
    input table, in input order of the winners."""

    keys: list[str]
    partitions: list[str]
    rows: list[int]
    dropped: int


def precombine_key(value: Any) -> Any:
    """A precombine value as it orders (pure): itself, except a float, which orders as
    Java's ``Double.compareTo`` orders it (Hudi compares precombine values with
    ``compareTo``): NaN above every value (+inf included), ``-0.0`` below ``0.0``."""
    if isinstance(value, float):
        if math.isnan(value):
            return (1, 0.0, 0.0)
        return (0, value, math.copysign(1.0, value))
    return value


def reduce_batch(keys: Sequence[str], partitions: Sequence[str], order: Sequence[Any] | None) -> Batch:
    """One row per (partition, key): the greatest ``order`` (precombine) value wins, the
    later row on a tie; without ``order`` the later row wins. Floats order as
    :func:`precombine_key` says (NaN greatest, ``-0.0 < 0.0``). Pure."""
    best: dict[tuple[str, str], int] = {}
    key = None if order is None else [precombine_key(v) for v in order]
    for i, k in enumerate(keys):
        pk = (partitions[i], k)
        j = best.get(pk)
        if j is None or key is None or not key[j] > key[i]:
            best[pk] = i
    rows = sorted(best.values())
    return Batch([keys[i] for i in rows], [partitions[i] for i in rows], rows, len(keys) - len(rows))


def plan_candidates(
    wanted: Mapping[str, Sequence[str]], files: Sequence[tuple[FileVersion, FooterIndex]]
) -> dict[str, list[str]]:
    """Per file path, the incoming keys of its partition its footer cannot rule out (key
    range, then bloom filter); files without any are left out. Pure."""
    ordered = {p: sorted(ks) for p, ks in wanted.items()}
    odd = {p: beyond_bmp(ks) for p, ks in ordered.items()}
    out: dict[str, list[str]] = {}
    for f, idx in files:
        keys = ordered.get(f.partition)
        if not keys:
            continue
        maybe = idx.may_hold_sorted(keys, odd[f.partition])
        if maybe:
            out[f.path] = maybe
    return out


@dataclass
class FileRewrite:
    """A file group to rewrite: its current version and what changes in it."""

    version: FileVersion
    updates: dict[str, int] = field(default_factory=dict)
    """Key -> row of the input table."""
    deletes: set[str] = field(default_factory=set)
    inserts: list[int] = field(default_factory=list)
    """Rows of the input table inserted into this (small) file group."""


@dataclass
class MutationPlan:
    rewrites: dict[str, FileRewrite] = field(default_factory=dict)
    """By the current version's path."""
    inserts: dict[str, list[int]] = field(default_factory=dict)
    """Partition -> rows of the input table to insert as new file groups."""
    absent_deletes: int = 0


def plan_mutation(
    batch: Batch, located: Mapping[tuple[str, str], Sequence[FileVersion]], *, delete: bool
) -> MutationPlan:
    """Which file groups to rewrite and what to insert, from the reduced ``batch`` and the
    files that hold each of its (partition, key)s (``located``). A key held by several files
    of its partition (plain inserts of one key twice) is updated, or deleted, in each. Pure."""
    plan = MutationPlan()
    for key, part, row in zip(batch.keys, batch.partitions, batch.rows, strict=True):
        held = located.get((part, key))
        if not held:
            if delete:
                plan.absent_deletes += 1
            else:
                plan.inserts.setdefault(part, []).append(row)
            continue
        for f in held:
            rw = plan.rewrites.get(f.path)
            if rw is None:
                rw = plan.rewrites[f.path] = FileRewrite(f)
            if delete:
                rw.deletes.add(key)
            else:
                rw.updates[key] = row
    return plan


SMALL_FILE_LIMIT = 104_857_600
"""Hudi's ``hoodie.parquet.small.file.limit`` (100 MiB): base files below it take inserts."""
MAX_FILE_SIZE = 125_829_120
"""Hudi's ``hoodie.parquet.max.file.size`` (120 MiB): how far a small file is filled."""
RECORD_SIZE_ESTIMATE = 1024
"""Hudi's ``hoodie.copyonwrite.record.size.estimate``: bytes per record without better data."""


def assign_inserts(
    plan: MutationPlan,
    files: Sequence[FileVersion],
    *,
    small_file_limit: int = SMALL_FILE_LIMIT,
    max_file_size: int = MAX_FILE_SIZE,
) -> None:
    """Hudi's small-file handling (``UpsertPartitioner.assignInserts``), in ``plan``: each
    partition's inserts go first into its file groups smaller than ``small_file_limit``
    (smallest first), each up to ``max_file_size`` at the partition's average record size
    (bytes / rows of its files; ``RECORD_SIZE_ESTIMATE`` without rows); the rest stay
    inserts into new file groups. ``small_file_limit`` 0 turns it off. Pure."""
    if small_file_limit <= 0:
        return
    by_part: dict[str, list[FileVersion]] = {}
    for f in files:
        by_part.setdefault(f.partition, []).append(f)
    for part in sorted(plan.inserts):
        rows = plan.inserts[part]
        mine = by_part.get(part, [])
        total_rows = sum(f.rows for f in mine)
        avg = max(1, sum(f.size for f in mine) // total_rows) if total_rows else RECORD_SIZE_ESTIMATE
        for f in sorted(mine, key=lambda f: (f.size, f.path)):
            if not rows:
                break
            if f.size >= small_file_limit:
                continue
            room = (max_file_size - f.size) // avg
            if room <= 0:
                continue
            take, rows = rows[:room], rows[room:]
            rw = plan.rewrites.get(f.path)
            if rw is None:
                rw = plan.rewrites[f.path] = FileRewrite(f)
            rw.inserts.extend(take)
        if rows:
            plan.inserts[part] = rows
        else:
            del plan.inserts[part]


def _meta_columns(
    n: int, keys: Any, instant: str, task: int, first_seq: int, partition: str, name: str
) -> dict[str, Any]:
    import pyarrow as pa

    s = pa.string()
    return {
        META_COLUMNS[0]: pa.repeat(pa.scalar(instant, s), n),
        META_COLUMNS[1]: pa.array([commit_seqno(instant, task, first_seq + i) for i in range(n)], s),
        META_COLUMNS[2]: keys,
        META_COLUMNS[3]: pa.repeat(pa.scalar(partition, s), n),
        META_COLUMNS[4]: pa.repeat(pa.scalar(name, s), n),
    }


def _widens(stored: pa.DataType, incoming: pa.DataType) -> bool:
    """True if ``incoming`` is a widening of ``stored`` that Hudi's schema-on-write rules
    accept (:data:`amcommit.table.format.schema.PROMOTIONS`, e.g. a ``double`` precombine column
    written into a ``long`` one): the new file version then holds the wider type (its stored
    rows cast up), as the commit's recorded schema does. Pure."""
    from amcommit.table.format.schema import PROMOTIONS, _type

    if stored.equals(incoming):
        return False
    try:
        a, b = _type(stored, False, "c", ""), _type(incoming, False, "c", "")
    except AmcommitError:
        return False
    return isinstance(a, str) and isinstance(b, str) and b in PROMOTIONS.get(a, frozenset())


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` with ``schema``'s columns in its order (absent ones null), cast to its types."""
    import pyarrow as pa

    cols = []
    for f in schema:
        i = t.schema.get_field_index(f.name)
        if i < 0:
            cols.append(pa.nulls(t.num_rows, f.type))
        else:
            c = t.column(i)
            cols.append(c if c.type.equals(f.type) else c.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def with_meta(
    data: pa.Table, keys: Sequence[str], instant: str, task: int, first_seq: int, partition: str, name: str
) -> pa.Table:
    """``data`` (the data columns) led by Hudi's meta columns for this write. Pure."""
    import pyarrow as pa

    meta = _meta_columns(
        data.num_rows, pa.array(list(keys), pa.string()), instant, task, first_seq, partition, name
    )
    out = pa.table(meta)
    for f, c in zip(data.schema, data.columns, strict=True):
        out = out.append_column(f, c)
    return out


def merge_file(
    stored: pa.Table,
    incoming: pa.Table,
    incoming_keys: Sequence[str],
    deletes: set[str],
    *,
    precombine_field: str | None,
    payload: Payload,
    appended: pa.Table | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """The new version of a file group: ``stored`` (the current base file, meta columns
    first) without the ``deletes``, its records of ``incoming_keys`` replaced by the rows of
    ``incoming`` (already led by this write's meta columns), unless ``payload`` keeps a
    stored record with a greater precombine value. Unchanged rows keep their meta columns
    except ``_hoodie_file_name`` (set by the caller). Returns the table (stored rows in
    their order, then the updated ones) and counts ``kept``/``updated``/``deleted``/
    ``kept_stored``. ``appended``: rows inserted into the group (new keys, with their meta
    columns), after the others. Pure."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = stored.num_rows
    stored_keys = stored.column(KEY_COLUMN)
    # the row of ``incoming`` of each stored record (null: not updated), by one hash lookup
    # per stored record (vectorised); a key given twice maps to its last row, as a dict would
    pos = {k: i for i, k in enumerate(incoming_keys)}
    rows_in = pa.array(list(pos.values()), pa.int64())
    if pos and n:
        found = pc.index_in(stored_keys, value_set=pa.array(list(pos), pa.string()))
        j = pc.take(rows_in, found)
    else:
        j = pa.nulls(n, pa.int64())
    is_del = (
        pc.is_in(stored_keys, value_set=pa.array(list(deletes), pa.string()))
        if deletes and n
        else pa.repeat(pa.scalar(False), n)
    )
    hit = pc.and_(pc.is_valid(j), pc.invert(is_del))
    keep_stored: Any = pa.repeat(pa.scalar(False), n)
    if payload is Payload.DEFAULT and precombine_field and precombine_field in stored.column_names and n:
        order_stored = stored.column(precombine_field)
        order_in = pc.take(incoming.column(precombine_field), pc.fill_null(j, 0)) if len(pos) else None
        if order_in is not None:
            newer = precombine_greater(order_stored, order_in)
            keep_stored = pc.and_(hit, pc.fill_null(newer, False))
    replaced = pc.and_(hit, pc.invert(keep_stored))
    keep = pc.invert(pc.or_(is_del, replaced))
    deleted = pc.sum(is_del).as_py() or 0
    kept_stored = pc.sum(keep_stored).as_py() or 0
    # a key held twice in the file: its copies become one record
    take_incoming: list[int] = sorted(set(pc.filter(j, replaced).to_pylist())) if n else []
    kept = stored.filter(keep) if n else stored
    schema = stored.schema.remove_metadata()
    for t in (incoming, appended):
        if t is None:
            continue
        for f in t.schema:
            at = schema.get_field_index(f.name)
            if at < 0:
                schema = schema.append(f.with_nullable(True))
            elif _widens(schema.field(at).type, f.type):  # the table's column becomes wider
                schema = schema.set(at, schema.field(at).with_type(f.type))
    parts = [_conform(kept.replace_schema_metadata(None), schema)]
    if take_incoming:
        parts.append(_conform(incoming.take(pa.array(take_incoming, pa.int64())), schema))
    if appended is not None and appended.num_rows:
        parts.append(_conform(appended, schema))
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return out, {
        "kept": kept.num_rows - kept_stored,
        "updated": len(take_incoming),
        "deleted": deleted,
        "kept_stored": kept_stored,
        "inserted": 0 if appended is None else appended.num_rows,
    }


def precombine_greater(a: Any, b: Any) -> Any:
    """Element-wise ``a > b`` of two precombine columns (Arrow arrays of equal length) as
    Hudi's ``compareTo`` orders them (:func:`precombine_key`: a float NaN above every value,
    ``-0.0 < 0.0``); null where either is null. Pure."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_floating(a.type) or pa.types.is_floating(b.type):
        x, y = pc.cast(a, pa.float64(), safe=False), pc.cast(b, pa.float64(), safe=False)
        nan_x, nan_y = pc.is_nan(x), pc.is_nan(y)
        # -0.0 against 0.0: equal for IEEE comparison, ordered by the sign for compareTo
        zeros = pc.and_(pc.equal(x, 0.0), pc.equal(y, 0.0))
        sign_gt = pc.greater(pc.divide(1.0, x), pc.divide(1.0, y))  # +inf > -inf
        ieee = pc.if_else(zeros, sign_gt, pc.greater(x, y))
        return pc.if_else(pc.or_(nan_x, nan_y), pc.and_(nan_x, pc.invert(nan_y)), ieee)
    try:
        return pc.greater(a, b)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # types arrow cannot compare
        xs, ys = a.to_pylist(), b.to_pylist()
        return pa.array(
            [None if u is None or v is None else u > v for u, v in zip(xs, ys, strict=True)], pa.bool_()
        )


def set_file_name(t: pa.Table, name: str) -> pa.Table:
    import pyarrow as pa

    i = t.schema.get_field_index(META_COLUMNS[4])
    return t.set_column(i, t.schema.field(i), pa.repeat(pa.scalar(name, pa.string()), t.num_rows))


def parquet_with_index(t: pa.Table, bloom: BloomSettings = DEFAULT_SETTINGS) -> bytes:
    """Parquet bytes of a base file ``t`` (meta columns first) with Hudi's footer index."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    with pq.ParquetWriter(buf, t.schema, compression="snappy") as w:
        w.write_table(t)
        w.add_key_value_metadata(build_footer(t.column(KEY_COLUMN).to_pylist(), bloom))
    return buf.getvalue()


def rewrite_group(
    version: FileVersion,
    stored: pa.Table,
    updates: pa.Table,
    update_keys: Sequence[str],
    deletes: set[str],
    *,
    instant: str,
    task: int,
    first_seq: int,
    token: str,
    precombine_field: str | None,
    payload: Payload,
    inserts: pa.Table | None = None,
    insert_keys: Sequence[str] = (),
    bloom: BloomSettings = DEFAULT_SETTINGS,
) -> tuple[str, bytes, int, dict[str, int]]:
    """The new base file of the file group ``version`` (its current rows ``stored``):
    ``(file name, Parquet bytes with the footer index, rows, counts)``; the bytes are empty
    when nothing changes in it (no new version). ``updates``: the data columns of the
    incoming records of ``update_keys`` (in that order); ``deletes``: keys removed;
    ``inserts`` (``insert_keys``): new records put into this group. The new records' seqnos
    are ``<instant>_<task>_<first_seq + i>``; counts as :func:`merge_file`'s."""
    name = base_file_name(version.file_id, token, instant)
    incoming = with_meta(updates, update_keys, instant, task, first_seq, version.partition, name)
    appended = None
    if inserts is not None and inserts.num_rows:
        first = first_seq + len(update_keys)
        appended = with_meta(inserts, insert_keys, instant, task, first, version.partition, name)
    merged, counts = merge_file(
        stored,
        incoming,
        update_keys,
        deletes,
        precombine_field=precombine_field,
        payload=payload,
        appended=appended,
    )
    if not (counts["updated"] or counts["deleted"] or counts["inserted"]):
        return name, b"", 0, counts
    merged = set_file_name(merged, name)
    return name, parquet_with_index(merged, bloom), merged.num_rows, counts


# -- input checks (pure) ------------------------------------------------------------------


def _names(v: str | Sequence[str]) -> tuple[str, ...]:
    """Column names: a sequence, or one string of comma-separated names (``"a,b"``: two
    columns, as the Spark source's ``recordKey`` / ``partitionBy`` and Hudi's
    ``hoodie.datasource.write.recordkey.field`` read it)."""
    names = [c.strip() for c in v.split(",")] if isinstance(v, str) else list(v)
    return tuple(c for c in names if c)


def check_columns(
    data: pa.Table, record_key: tuple[str, ...], partition_by: tuple[str, ...], precombine_field: str | None
) -> None:
    """MutationError (one line) for a key, partition or precombine column the data lacks, or
    a null precombine value."""
    cols = set(data.column_names)
    for what, names in (("record key", record_key), ("partition", partition_by)):
        for c in names:
            if c not in cols:
                raise MutationError(
                    f"{what} column {c!r} is not in the data (columns: {', '.join(data.column_names)})"
                )
    if precombine_field is not None:
        if precombine_field not in cols:
            raise MutationError(
                f"precombine column {precombine_field!r} is not in the data (columns: {', '.join(data.column_names)})"
            )
        if data.column(precombine_field).null_count:
            raise MutationError(
                f"precombine column {precombine_field!r} is null in a row: every row needs a value"
            )


def check_key_types(
    table_schema: str | None, data: pa.Table, record_key: tuple[str, ...], table: str
) -> tuple[str, ...]:
    """MutationError if a key column's type differs from the table's (its committed schema),
    except an ``int`` column of a ``long`` key (Hudi promotes it: the key strings are the
    same). Returns the key columns to cast to ``long`` (pure)."""
    if not table_schema:
        return ()
    from amcommit.table.format.schema import _split_null, avro_schema, type_name

    stored = {f["name"]: f["type"] for f in json.loads(table_schema).get("fields", [])}
    mine = {
        f["name"]: f["type"]
        for f in json.loads(avro_schema(data.select(list(record_key)).schema, table))["fields"]
    }
    widen: list[str] = []
    for c in record_key:
        if c not in stored:
            continue
        a, b = _split_null(stored[c])[0], _split_null(mine[c])[0]
        if (type_name(a), type_name(b)) == ("long", "int"):
            widen.append(c)
        elif type_name(a) != type_name(b):
            raise MutationError(
                f"record key column {c!r} is {type_name(b)} in the data but {type_name(a)} in the table"
            )
    return tuple(widen)


def partition_paths(data: pa.Table, partition_by: tuple[str, ...]) -> list[str]:
    from amcommit.table.format.keys import partition_dir

    if not partition_by:
        return [""] * data.num_rows
    if len(partition_by) == 1 and data.num_rows:  # one folder name per distinct value
        enc = data.column(partition_by[0]).combine_chunks().dictionary_encode()
        if enc.indices.null_count == 0:
            dirs = [partition_dir(partition_by, (v,)) for v in enc.dictionary.to_pylist()]
            return [dirs[i] for i in enc.indices.to_numpy().tolist()]
    cols = [data.column(c).to_pylist() for c in partition_by]
    cache: dict[tuple[Any, ...], str] = {}
    out = []
    for values in zip(*cols, strict=True):
        p = cache.get(values)
        if p is None:
            p = cache[values] = partition_dir(partition_by, values)
        out.append(p)
    return out


def record_key_strings(data: pa.Table, record_key: tuple[str, ...]) -> list[str]:
    from amcommit.table.format.keys import RecordKeyError, record_keys

    try:
        arr = (
            record_keys(data.select(list(record_key)).combine_chunks().to_batches()[0], record_key)
            if data.num_rows
            else None
        )
    except RecordKeyError as e:
        raise MutationError(str(e)) from None
    return [] if arr is None else arr.to_pylist()


# -- I/O --------------------------------------------------------------------------------


TAIL_GUESS = 64 * 1024
"""Bytes first read from a base file's end to get its footer in one request: amcommit's
footers hold a bloom filter sized to the file's keys (~7.2 Base64 bytes a key at fpp 1e-9:
a file of up to ~8,000 keys). A longer footer (Hudi's writers', and amcommit's before it
sized filters: ~432 KB with the default filter) costs one more read, of exactly the footer,
and raises :attr:`IndexReader.tail_guess` for the files read after it (a table of such files
costs one read a footer after the first)."""


def key_chunks(md: Any, column: str) -> list[tuple[int, int]]:
    """``(start, length)`` of every column chunk of ``column`` in a Parquet file's metadata
    (dictionary page first where there is one). Pure."""
    out = []
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        for j in range(group.num_columns):
            c = group.column(j)
            if c.path_in_schema != column:
                continue
            start = c.data_page_offset
            if (
                c.has_dictionary_page
                and c.dictionary_page_offset is not None
                and c.dictionary_page_offset > 0
            ):
                start = min(start, c.dictionary_page_offset)
            out.append((start, c.total_compressed_size))
    return out


@dataclass
class IndexReader:
    """Reads base files of the table. Local files: the footer, or the key column, straight
    from the file. Elsewhere: the footer by a ranged read of the file's end, the key column
    by ranged reads of its column chunks (:func:`~amcommit.store.base.read_range`; a store
    without ranged reads answers with whole objects). ``bytes_read`` counts what came back."""

    store: Store
    dest: str
    config: CommitterConfig
    footers: dict[str, tuple[Any, bytes, int]] = field(default_factory=dict)
    """Path -> (FileMetaData, footer bytes with its length and magic, file size)."""
    key_columns: dict[str, pa.ChunkedArray] = field(default_factory=dict)
    """Path -> its key column as :meth:`key_array` read it, until :meth:`table` reads the
    rest of the file (the key column is not decoded twice)."""
    bytes_read: int = 0
    tail_guess: int = TAIL_GUESS
    """Bytes read from a file's end for its footer: :data:`TAIL_GUESS`, raised to the
    longest footer met so far (a table's files tend to have footers of one size)."""

    def _local(self, rel: str) -> str | None:
        return local_os_path(self.store, join(self.dest, rel))

    async def _range(self, rel: str, start: int, length: int) -> bytes:
        from amcommit.store.retry import RetryingStore

        data = await RetryingStore.of(self.store, self.config).get_range(join(self.dest, rel), start, length)
        self.bytes_read += len(data)
        return data

    async def _size(self, rel: str, known: int) -> int:
        if known > 0:
            return known
        from amcommit.store.retry import RetryingStore

        return (await RetryingStore.of(self.store, self.config).stat(join(self.dest, rel))).size

    async def footer(self, rel: str, size: int = 0) -> FooterIndex:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from amcommit.errors import ManifestError

        local = self._local(rel)
        if local is not None:
            import anyio

            md = await anyio.to_thread.run_sync(pq.read_metadata, local)
            return parse_footer(md.metadata, where=rel)
        size = await self._size(rel, size)
        guess = self.tail_guess
        tail = await self._range(rel, max(0, size - guess), min(size, guess))
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise ManifestError(f"{rel}: not a Parquet file (no footer)")
        n = int.from_bytes(tail[-8:-4], "little") + 8
        if n > len(tail):
            tail = await self._range(rel, size - n, n)
        footer = tail[-n:]
        md = pq.read_metadata(pa.BufferReader(footer))
        self.tail_guess = max(self.tail_guess, n)  # a footer that parsed: its length is real
        self.footers[rel] = (md, footer, size)
        return parse_footer(md.metadata, where=rel)

    async def keys(self, rel: str) -> list[str]:
        col: list[str] = (await self.key_array(rel)).to_pylist()
        return col

    async def key_array(self, rel: str) -> pa.ChunkedArray:
        """The file's ``_hoodie_record_key`` column (only that column is read)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        local = self._local(rel)
        if local is not None:
            import anyio

            t = await anyio.to_thread.run_sync(lambda: pq.read_table(local, columns=[KEY_COLUMN]))
            self.key_columns[rel] = t.column(0)
            return t.column(0)
        if rel not in self.footers:
            await self.footer(rel)
        md, footer, size = self.footers[rel]
        # a file of the same size holding only the footer and the key column's chunks:
        # Parquet's reader reads nothing else for one column
        sparse = bytearray(size)
        sparse[size - len(footer) :] = footer
        for start, length in key_chunks(md, KEY_COLUMN):
            sparse[start : start + length] = await self._range(rel, start, length)
        col = pq.read_table(pa.BufferReader(bytes(sparse)), columns=[KEY_COLUMN]).column(0)
        self.key_columns[rel] = col
        return col

    async def table(self, rel: str) -> pa.Table:
        """The whole base file (decoded in a worker thread; its key column taken from
        :attr:`key_columns` if :meth:`key_array` read it)."""
        import anyio
        import pyarrow as pa

        keys = self.key_columns.pop(rel, None)
        local = self._local(rel)
        if local is not None:
            return await anyio.to_thread.run_sync(_read_base_file, local, keys)
        from amcommit.store.retry import RetryingStore

        data = await RetryingStore.of(self.store, self.config).get(join(self.dest, rel))
        self.bytes_read += len(data)
        return await anyio.to_thread.run_sync(_read_base_file, pa.BufferReader(data), keys)


def _read_base_file(source: Any, keys: pa.ChunkedArray | None) -> pa.Table:
    """A base file as a table; with ``keys`` (its key column, already read) the other
    columns only are decoded and ``keys`` put in its place."""
    import pyarrow.parquet as pq

    if keys is None:
        return pq.read_table(source)
    f = pq.ParquetFile(source)
    names = f.schema_arrow.names
    if KEY_COLUMN not in names:
        return f.read()
    at = names.index(KEY_COLUMN)
    t = f.read(columns=[n for n in names if n != KEY_COLUMN])
    return t.add_column(at, f.schema_arrow.field(at), keys)


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
) -> MutateReport:
    import pyarrow as pa

    from amcommit.table.format.schema import avro_schema
    from amcommit.table.format.writestats import MutationFields
    from amcommit.table.timeline.heartbeat import heartbeat
    from amcommit.table.write.task import (
        TableSpec,
        begin_write,
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
    props = await read_properties(store, dest, config)
    if props is not None:
        name = props.name
        if not props.record_key_fields:
            raise MutationError(
                f"table {dest!r} has generated record keys: it cannot be upserted or deleted by key"
            )
    elif delete_op:
        raise MutationError(f"{dest!r} is not a Hudi table (no .hoodie/hoodie.properties): nothing to delete")
    timeline = Timeline(store, dest, config=config)  # this upsert's one listing of .hoodie/
    instants = await timeline.files() if props is not None else []
    table_schema = await committed_schema(store, dest, latest_write(instants), config) if props else None
    for c in check_key_types(table_schema, data, keys_f, name):
        data = data.set_column(data.schema.get_field_index(c), c, data.column(c).cast(pa.int64()))
    keys = record_key_strings(data, keys_f)
    partitions = partition_paths(data, parts_f)
    order = data.column(precombine_field).to_pylist() if precombine_field else None
    batch = reduce_batch(keys, partitions, order)
    if delete_op:
        schema_json = table_schema
        if not schema_json:
            raise MutationError(f"table {dest!r} holds no committed write: nothing to delete")
    else:
        schema_json = avro_schema(data.schema, name)
    spec = TableSpec(name, partition_fields=parts_f, record_key_fields=keys_f)
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
        timeline=timeline,
    )
    instant = w.instant
    report = MutateReport(instant=instant, operation=operation.value, duplicates_dropped=batch.dropped)
    try:
        # the writer stays alive (its heartbeat) while it reads and writes, however long
        async with heartbeat(store, dest, instant, ttl=table_settings(config).writer_ttl):
            commits = await timeline.commits_held()
            snap = snapshot(commits)
            wanted: dict[str, list[str]] = {}
            for k, p in zip(batch.keys, batch.partitions, strict=True):
                wanted.setdefault(p, []).append(k)
            reader = IndexReader(store, dest, config)
            files = [f for f in snap if f.partition in wanted]
            footers: dict[str, FooterIndex] = {}

            async def footer(f: FileVersion) -> None:
                footers[f.path] = await reader.footer(f.path, f.size)

            await run_parallel(files, footer, config.io_threads)
            report.footers_read = len(files)
            cands = plan_candidates(wanted, [(f, footers[f.path]) for f in files])
            report.candidates = len(cands)
            by_path = {f.path: f for f in files}
            located: dict[tuple[str, str], list[FileVersion]] = {}

            async def confirm(rel: str) -> None:
                import pyarrow.compute as pc

                held = await reader.key_array(rel)
                f = by_path[rel]
                asked = cands[rel]
                found = pc.is_in(pa.array(asked, pa.string()), value_set=held).to_numpy(zero_copy_only=False)
                for i in found.nonzero()[0].tolist():
                    located.setdefault((f.partition, asked[i]), []).append(f)

            await run_parallel(list(cands), confirm, config.io_threads)
            report.key_columns_read = len(cands)
            report.index_bytes_read = reader.bytes_read
            plan = plan_mutation(batch, located, delete=delete_op)
            assign_inserts(plan, files, small_file_limit=small_file_limit, max_file_size=max_file_size)
            report.absent_deletes = plan.absent_deletes
            # -- write the task's files --------------------------------------------------------
            task = 0
            attempt = f"attempt_{instant}_m_{task:06d}_0"
            # staged (in the attempt directory) or direct (in place, under Hudi's markers:
            # MERGE for a file group's new version, CREATE for a new group), as table_commit says
            tt = await setup_table_task(store, w, f"task_{instant}_m_{task:06d}", attempt, config=config)
            token = write_token(task, 0, 0)
            seq = 0
            data_cols = data.select([c for c in data.column_names if c not in META_COLUMNS])

            # each new base file gets its own range of seqnos, fixed before any is written
            jobs: list[tuple[int, str, FileRewrite | None, list[int]]] = []
            for rel, rw in sorted(plan.rewrites.items()):
                jobs.append((seq, rel, rw, []))
                seq += len(rw.updates) + len(rw.inserts)
            for part, rows_idx in sorted(plan.inserts.items()):
                step = max(1, max_file_rows)
                for start in range(0, len(rows_idx), step):
                    chunk = rows_idx[start : start + step]
                    jobs.append((seq, part, None, chunk))
                    seq += len(chunk)

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
                )
                return data, n, counts

            def created(first: int, part: str, chunk: list[int]) -> tuple[str, bytes]:
                fname = base_file_name(new_file_id(), token, instant)
                ks = [keys[i] for i in chunk]
                t = with_meta(
                    data_cols.take(pa.array(chunk, pa.int64())), ks, instant, task, first, part, fname
                )
                return fname, parquet_with_index(t, bloom)

            async def one(job: tuple[int, str, FileRewrite | None, list[int]]) -> None:
                import anyio

                first, where, rw, chunk = job
                if rw is not None:  # a new version of a file group
                    f = rw.version
                    stored = await reader.table(where)
                    body, n, counts = await anyio.to_thread.run_sync(rewritten, first, stored, rw)
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
                    await tt.put(new_rel, body, rows=n, new_version=True, mutation=mutation)
                    report.updated += counts["updated"]
                    report.deleted += counts["deleted"]
                    report.inserted += counts["inserted"]
                    report.files_rewritten += 1
                else:  # a new file group
                    fname, body = await anyio.to_thread.run_sync(created, first, where, chunk)
                    new_rel = f"{where}/{fname}" if where else fname
                    await tt.put(
                        new_rel, body, rows=len(chunk), mutation=MutationFields(num_inserts=len(chunk))
                    )
                    report.inserted += len(chunk)
                    report.files_created += 1

            # a few at a time: each holds a file group's rows in memory while it is rewritten
            await run_parallel(jobs, one, max(1, min(config.io_threads, 8)))
            await tt.commit()
        if commit:
            report.job = await _commit(store, dest, instant, config)
    except BaseException:
        await _abort(store, dest, instant, config)
        raise
    return report


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

    async def commit(self) -> MutateReport:
        try:
            self.report.job = await _commit(self.store, self.dest, self.report.instant, self.config)
        except BaseException:
            await _abort(self.store, self.dest, self.report.instant, self.config)
            raise
        return self.report

    async def abort(self) -> None:
        await _abort(self.store, self.dest, self.report.instant, self.config)


_DEFAULTS: dict[str, Any] = {
    "record_key": (),
    "partition_by": (),
    "precombine_field": None,
    "payload": Payload.OVERWRITE_WITH_LATEST,
    "table_name": None,
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
            raise MutationError(f"unknown option {k!r}{suggest(k, [*_DEFAULTS, 'label', 'config', 'bloom'])}")
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
        elif k in ("clean_retain_commits", "keep_max_commits", "keep_min_commits", "archive"):
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
        ),
    )
    report = await _mutate(store, dest, data, **kw)
    return PreparedMutation(store, dest, report, kw["config"])


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
    label: Label | None = None,
    config: CommitterConfig = DEFAULT_CONFIG,
    bloom: BloomSettings = DEFAULT_SETTINGS,
    **hudi_options: Any,
) -> MutateReport:
    """Delete the records whose (partition, key) the rows of ``data`` name (``data`` holds
    at least the key and partition columns); absent keys are counted no-ops. See the module
    doc."""
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
                payload=Payload.OVERWRITE_WITH_LATEST,
                label=label,
                config=config,
                table_name=None,
                bloom=bloom,
                max_file_rows=1_000_000,
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
