"""The merge of records in one file group: how an incoming record meets the stored one
(:class:`Payload`), the meta columns a written record carries, and the rewrite of a file group's
base file (pure: Arrow tables in, Parquet bytes with Hudi's footer index out)."""

from __future__ import annotations

import enum
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from amcommit.errors import AmcommitError
from amcommit.table.file_group.model import FileVersion
from amcommit.table.format.bloom import (
    DEFAULT_SETTINGS,
    BloomSettings,
    build_footer,
)
from amcommit.table.format.naming import (
    META_COLUMNS,
    base_file_name,
    commit_seqno,
)

if TYPE_CHECKING:
    import pyarrow as pa


KEY_COLUMN = META_COLUMNS[2]


class Payload(enum.StrEnum):
    """How an incoming record merges with the stored one of the same key (module doc)."""

    OVERWRITE_WITH_LATEST = "OverwriteWithLatestAvroPayload"
    DEFAULT = "DefaultHoodieRecordPayload"


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
    delete_order: Mapping[str, Any] | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """The new version of a file group: ``stored`` (the current base file, meta columns
    first) without the ``deletes``, its records of ``incoming_keys`` replaced by the rows of
    ``incoming`` (already led by this write's meta columns), unless ``payload`` keeps a
    stored record with a greater precombine value. Unchanged rows keep their meta columns
    except ``_hoodie_file_name`` (set by the caller). Returns the table (stored rows in
    their order, then the updated ones) and counts ``kept``/``updated``/``deleted``/
    ``kept_stored``. ``appended``: rows inserted into the group (new keys, with their meta
    columns), after the others. ``delete_order``: a delete's ordering value by key (None,
    or a key without one: the delete always wins); with the Default payload a stored
    record whose precombine value is greater than its delete's stays (counted in
    ``kept_stored``), as a Merge-on-Read delete block is merged. Pure."""
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
    ordered = payload is Payload.DEFAULT and precombine_field and precombine_field in stored.column_names
    kept_deletes: Any = None
    if ordered and delete_order and deletes and n:
        # each stored record's delete value (null: not deleted, or no value: natural order)
        values = [delete_order.get(k) if k in deletes else None for k in stored_keys.to_pylist()]
        order_del = pa.array(values, stored.column(precombine_field).type)
        kept_deletes = pc.and_(
            is_del, pc.fill_null(precombine_greater(stored.column(precombine_field), order_del), False)
        )
        is_del = pc.and_(is_del, pc.invert(kept_deletes))
    hit = pc.and_(pc.is_valid(j), pc.invert(is_del))
    keep_stored: Any = pa.repeat(pa.scalar(False), n)
    if ordered and n:
        order_stored = stored.column(precombine_field)
        order_in = pc.take(incoming.column(precombine_field), pc.fill_null(j, 0)) if len(pos) else None
        if order_in is not None:
            newer = precombine_greater(order_stored, order_in)
            keep_stored = pc.and_(hit, pc.fill_null(newer, False))
    replaced = pc.and_(hit, pc.invert(keep_stored))
    keep = pc.invert(pc.or_(is_del, replaced))
    deleted = pc.sum(is_del).as_py() or 0
    kept_stored = pc.sum(keep_stored).as_py() or 0
    if kept_deletes is not None:
        kept_stored += pc.sum(kept_deletes).as_py() or 0
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
    delete_order: Mapping[str, Any] | None = None,
) -> tuple[str, bytes, int, dict[str, int]]:
    """The new base file of the file group ``version`` (its current rows ``stored``):
    ``(file name, Parquet bytes with the footer index, rows, counts)``; the bytes are empty
    when nothing changes in it (no new version). ``updates``: the data columns of the
    incoming records of ``update_keys`` (in that order); ``deletes``: keys removed;
    ``inserts`` (``insert_keys``): new records put into this group. The new records' seqnos
    are ``<instant>_<task>_<first_seq + i>``; ``delete_order``: the deletes' ordering
    values (:func:`merge_file`); counts as :func:`merge_file`'s."""
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
        delete_order=delete_order,
    )
    if not (counts["updated"] or counts["deleted"] or counts["inserted"]):
        return name, b"", 0, counts
    merged = set_file_name(merged, name)
    return name, parquet_with_index(merged, bloom), merged.num_rows, counts
