"""The snapshot of one file slice: its base file's rows merged with its log blocks (pure).

As Hudi's Java log reader (``AbstractHoodieLogRecordReader``) and hudi-rs merge a slice:

- the log files are read in version order, their blocks in file order; corrupt bytes are
  skipped (:func:`amcommit.table.format.logblock.read_blocks`);
- a data or delete block counts only if the instant that wrote it is trusted (completed on
  the timeline, not after the time-travel instant: ``trusts``);
- a rollback command block cancels the blocks its target instant wrote before it;
- the blocks left are applied in order: a data block's records (Avro or Parquet) update the
  stored record of their key or add one, by the table's payload (``OverwriteWithLatest``:
  the log record wins; ``DefaultHoodieRecordPayload``: the stored record stays when its
  precombine value is greater); a delete block deletes its keys, the delete losing only to a
  stored record whose precombine value is greater than the delete's ordering value under
  ``DefaultHoodieRecordPayload`` (an ordering value of 0 or none is the "natural order":
  the delete wins), as Java's merged log scanner does.

Records keep the meta columns they were written with (a log record's ``_hoodie_file_name``
is its file id, as Java writes it). Nothing here does I/O.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from amcommit.table.file_group.merge import Payload, merge_file, precombine_greater
from amcommit.table.format import logblock as lb
from amcommit.table.format.keys import record_keys
from amcommit.table.format.naming import META_COLUMNS

__all__ = ["LogBytes", "SliceRecipe", "arrow_schema_of_avro", "live_blocks", "merge_slice", "payload_of"]

KEY_COLUMN = META_COLUMNS[2]

_PAYLOADS = {
    "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload": Payload.OVERWRITE_WITH_LATEST,
    "org.apache.hudi.common.model.DefaultHoodieRecordPayload": Payload.DEFAULT,
}


def payload_of(value: str | None) -> Payload:
    """The payload of ``hoodie.compaction.payload.class`` (unset: Hudi 0.x's default,
    ``OverwriteWithLatestAvroPayload``; an unknown class merges as that one too, as hudi-rs
    does for every class but ``DefaultHoodieRecordPayload``)."""
    if not value:
        return Payload.OVERWRITE_WITH_LATEST
    short = value.rsplit(".", 1)[-1]
    return (
        Payload.DEFAULT
        if short == Payload.DEFAULT.value
        else _PAYLOADS.get(value, Payload.OVERWRITE_WITH_LATEST)
    )


@dataclass(frozen=True, slots=True)
class LogBytes:
    """One log file of a slice: its table-relative path and its bytes."""

    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class SliceRecipe:
    """How to merge: the record key (``_hoodie_record_key``, or the key fields of a table
    without meta fields), the payload and the precombine field (None: none)."""

    key_fields: tuple[str, ...]
    payload: Payload
    precombine: str | None
    meta_fields: bool = True


# --- Avro -> Arrow ---------------------------------------------------------------------------


def _arrow_type(t: Any) -> pa.DataType:
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        return _arrow_type(rest[0]) if len(rest) == 1 else pa.string()
    if isinstance(t, str):
        return {
            "boolean": pa.bool_(),
            "int": pa.int32(),
            "long": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "bytes": pa.binary(),
            "string": pa.string(),
            "null": pa.null(),
        }.get(t, pa.string())
    logical = t.get("logicalType")
    base = t.get("type")
    if logical == "decimal":
        return pa.decimal128(int(t["precision"]), int(t.get("scale", 0)))
    if logical == "date":
        return pa.date32()
    if logical in ("timestamp-micros", "timestamp-millis"):
        return pa.timestamp("us" if logical == "timestamp-micros" else "ms", tz="UTC")
    if logical in ("local-timestamp-micros", "local-timestamp-millis"):
        return pa.timestamp("us" if logical.endswith("micros") else "ms")
    if base == "record":
        return pa.struct([pa.field(f["name"], _arrow_type(f["type"])) for f in t["fields"]])
    if base == "array":
        return pa.list_(_arrow_type(t["items"]))
    if base == "map":
        return pa.map_(pa.string(), _arrow_type(t["values"]))
    if base == "enum":
        return pa.string()
    if base == "fixed":
        return pa.binary(int(t["size"]))
    return _arrow_type(base)


def arrow_schema_of_avro(schema: str | dict[str, Any]) -> pa.Schema:
    """The Arrow schema of an Avro record schema (as Hudi's readers map the types); a
    schema string is converted once (:func:`_arrow_schema_of_text`)."""
    if isinstance(schema, str):
        return _arrow_schema_of_text(schema)
    return pa.schema([pa.field(f["name"], _arrow_type(f["type"])) for f in schema["fields"]])


@functools.lru_cache(maxsize=256)
def _arrow_schema_of_text(schema: str) -> pa.Schema:
    """The Arrow schema of an Avro schema string, converted once per string (every block
    of a write carries the same SCHEMA header; Arrow schemas are immutable)."""
    return arrow_schema_of_avro(json.loads(schema))


@functools.lru_cache(maxsize=256)
def _map_columns(schema: pa.Schema) -> tuple[str, ...]:
    return tuple(f.name for f in schema if pa.types.is_map(f.type))


def _fit(t: pa.Table, like: pa.Schema | None) -> pa.Table:
    """``t`` cast column by column to the types of ``like`` where both have the column."""
    if like is None:
        return t
    cols = []
    fields = []
    for f, c in zip(t.schema, t.columns, strict=True):
        i = like.get_field_index(f.name)
        if i >= 0 and not like.field(i).type.equals(f.type):
            try:
                c = c.cast(like.field(i).type)
                f = f.with_type(like.field(i).type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass
        cols.append(c)
        fields.append(f)
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _map_values(records: list[dict[str, Any]], schema: pa.Schema) -> list[dict[str, Any]]:
    """Avro maps decode as dicts; Arrow builds a map column from (key, value) pairs."""
    maps = _map_columns(schema)
    if not maps:
        return records
    out = []
    for r in records:
        r = dict(r)
        for m in maps:
            v = r.get(m)
            if isinstance(v, dict):
                r[m] = list(v.items())
        out.append(r)
    return out


def _block_table(block: lb.LogBlock, path: str, like: pa.Schema | None) -> pa.Table:
    if block.type == lb.BlockType.PARQUET_DATA:
        t: pa.Table = lb.decode_parquet_records(block, path=path)
        return _fit(t.replace_schema_metadata(None), like)
    return _avro_table([(path, block)], like)


def _avro_table(blocks: Sequence[tuple[str, lb.LogBlock]], like: pa.Schema | None) -> pa.Table:
    """The records of Avro data blocks written in one schema, in order, as one table
    (one conversion to Arrow for all of them): column by column when the schema is flat
    (:func:`~amcommit.table.format.logblock.decode_avro_columns`), else record by record."""
    fast = lb.decode_avro_columns([b for _, b in blocks])
    if fast is not None:
        return _fit(fast, like)
    records: list[dict[str, Any]] = []
    for path, block in blocks:
        records += lb.decode_avro_records(block, path=path)
    schema = arrow_schema_of_avro(blocks[0][1].schema)
    t = pa.Table.from_pylist(_map_values(records, schema), schema=schema)
    return _fit(t, like)


# --- the blocks that count -------------------------------------------------------------------


def live_blocks(logs: Sequence[LogBytes], trusts: Callable[[str], bool]) -> list[tuple[str, lb.LogBlock]]:
    """The data and delete blocks of ``logs`` that count, in the order they apply, each
    with the path of its file: blocks of untrusted instants are left out, and a rollback
    command block removes the blocks its target wrote before it. Pure."""
    queue: list[tuple[str, lb.LogBlock]] = []
    for log in logs:
        for block in lb.read_blocks(log.data, path=log.path).blocks:
            if block.type == lb.BlockType.COMMAND:
                if block.is_rollback:
                    target = block.target_instant
                    queue = [(p, b) for p, b in queue if b.instant != target]
                continue
            if block.type not in (lb.BlockType.AVRO_DATA, lb.BlockType.PARQUET_DATA, lb.BlockType.DELETE):
                continue  # HFILE and CDC blocks are not written to v6 data tables
            if not trusts(block.instant):
                continue
            queue.append((log.path, block))
    return queue


# --- the merge ----------------------------------------------------------------------------


def _keys(t: pa.Table, recipe: SliceRecipe) -> list[str]:
    if not t.num_rows:
        return []
    if recipe.meta_fields and KEY_COLUMN in t.column_names:
        return [str(k) for k in t.column(KEY_COLUMN).to_pylist()]
    fields = recipe.key_fields
    return [
        str(k)
        for k in record_keys(t.select(list(fields)).combine_chunks().to_batches()[0], fields).to_pylist()
    ]


def _with_key(t: pa.Table, keys: list[str]) -> pa.Table:
    """``t`` with a ``_hoodie_record_key`` column (a table without meta fields gets a
    temporary one, dropped at the end)."""
    if KEY_COLUMN in t.column_names:
        return t
    return t.append_column(KEY_COLUMN, pa.array(keys, pa.string()))


def _last_per_key(t: pa.Table, keys: list[str]) -> tuple[pa.Table, list[str]]:
    last = {k: i for i, k in enumerate(keys)}
    if len(last) == len(keys):
        return t, keys
    idx = sorted(last.values())
    return t.take(pa.array(idx, pa.int64())), [keys[i] for i in idx]


def _deleted_keys(state: pa.Table, recs: list[lb.DeleteRecord], recipe: SliceRecipe) -> set[str]:
    keys = {r.record_key for r in recs if r.record_key is not None}
    if (
        recipe.payload is not Payload.DEFAULT
        or not recipe.precombine
        or recipe.precombine not in state.column_names
    ):
        return keys
    ordered = [r for r in recs if r.record_key is not None and r.ordering is not None and r.ordering != 0]
    if not ordered or not state.num_rows:
        return keys
    stored_keys = state.column(KEY_COLUMN)
    wanted = pa.array([r.record_key for r in ordered], pa.string())
    at = pc.index_in(wanted, value_set=stored_keys)
    stored_order = pc.take(state.column(state.schema.get_field_index(recipe.precombine)), at)
    try:
        delete_order = pa.array([r.ordering for r in ordered]).cast(stored_order.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return keys  # ordering values of another type than the column's: natural order
    older = precombine_greater(stored_order, delete_order).to_pylist()
    return keys - {r.record_key for r, o in zip(ordered, older, strict=True) if o}


def _runs(
    blocks: Sequence[tuple[str, lb.LogBlock]], recipe: SliceRecipe, like: pa.Schema | None
) -> list[tuple[str, lb.LogBlock, pa.Table]]:
    """The blocks as merge steps: a delete block alone; a data block with its records.
    Under ``OverwriteWithLatest`` consecutive data blocks are one step (their records
    concatenated: the last copy of a key wins either way), so a slice with many blocks is
    merged with its base rows once per run, not once per block."""
    out: list[tuple[str, lb.LogBlock, pa.Table]] = []
    joinable = False
    overwrite = recipe.payload is Payload.OVERWRITE_WITH_LATEST
    i = 0
    while i < len(blocks):
        path, block = blocks[i]
        i += 1
        if block.type == lb.BlockType.DELETE:
            out.append((path, block, pa.table({})))
            joinable = False
            continue
        if block.type == lb.BlockType.AVRO_DATA and overwrite:
            # the Avro blocks that follow in the same schema: decoded into one table at once
            same = [(path, block)]
            while (
                i < len(blocks)
                and blocks[i][1].type == lb.BlockType.AVRO_DATA
                and blocks[i][1].schema == block.schema
            ):
                same.append(blocks[i])
                i += 1
            t = _avro_table(same, like)
        else:
            t = _block_table(block, path, like)
        if joinable and recipe.payload is Payload.OVERWRITE_WITH_LATEST:
            p0, b0, t0 = out[-1]
            out[-1] = (p0, b0, pa.concat_tables([t0, t], promote_options="permissive"))
        else:
            out.append((path, block, t))
        joinable = True
    return out


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    return len(a) == len(b) and {f.name: f.type for f in a} == {f.name: f.type for f in b}


def _mask(keep: npt.NDArray[np.bool_]) -> pa.Array:
    """A boolean Arrow array of ``keep`` (bits packed by numpy: no per-value conversion)."""
    bits = np.packbits(keep, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(keep), [None, pa.py_buffer(bits)])


def _merge_run(state: pa.Table, incoming: pa.Table, recipe: SliceRecipe) -> pa.Table | None:
    """One data step of a slice in a few vectorised passes (no per-record Python): ``incoming``
    (with its ``_hoodie_record_key``) deduplicated to the last row of each key, the stored
    rows of its keys found with one ``index_in``, replaced unless the payload keeps a stored
    record with a greater precombine value, and the rows of new keys appended. The result is
    :func:`~amcommit.table.file_group.merge.merge_file`'s (the stored rows kept, in order;
    then the replacing rows; then the new ones, each in incoming order). None when the two
    tables' columns differ or a key is null (the caller then takes ``merge_file``'s general
    path, which also evolves the schema)."""
    if not _same_columns(state.schema, incoming.schema):
        return None
    in_keys = incoming.column(KEY_COLUMN)
    stored_keys = state.column(KEY_COLUMN)
    if in_keys.null_count or stored_keys.null_count or not pa.types.is_string(in_keys.type):
        return None
    n_in = incoming.num_rows
    # a key written twice: its last row counts. In the reversed keys, a row is the first of
    # its key (index_in gives the first index of a value) exactly when it is the last one.
    rev = in_keys.combine_chunks()[::-1] if isinstance(in_keys, pa.ChunkedArray) else in_keys[::-1]
    first_rev = np.asarray(pc.index_in(rev, value_set=rev).to_numpy(zero_copy_only=False), np.int64)
    is_last_rev = first_rev == np.arange(n_in, dtype=np.int64)
    if not is_last_rev.all():
        last = np.sort(n_in - 1 - np.flatnonzero(is_last_rev))
        incoming = incoming.take(pa.array(last, pa.int64()))
        in_keys = incoming.column(KEY_COLUMN)
        n_in = incoming.num_rows
    if isinstance(stored_keys, pa.ChunkedArray):  # one chunk looks up twice as fast as a chunked one
        stored_keys = stored_keys.combine_chunks()
    found = pc.index_in(stored_keys, value_set=in_keys)
    at = np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), np.int64)
    hit = at >= 0
    replaced = hit
    if (
        recipe.payload is Payload.DEFAULT
        and recipe.precombine
        and recipe.precombine in state.column_names
        and hit.any()
    ):
        stored_order = state.column(recipe.precombine)
        in_order = pc.take(incoming.column(recipe.precombine), pa.array(np.where(hit, at, 0)))
        newer = pc.fill_null(precombine_greater(stored_order, in_order), False)
        keep_stored = hit & np.asarray(newer.to_numpy(zero_copy_only=False), bool)
        replaced = hit & ~keep_stored
    touched = np.zeros(n_in, bool)
    touched[at[hit]] = True
    updated = np.unique(at[replaced])
    new = np.flatnonzero(~touched)
    schema = state.schema

    def rows(idx: npt.NDArray[np.int64]) -> pa.Table:
        t = incoming.take(pa.array(idx, pa.int64()))
        return pa.Table.from_arrays([t.column(f.name) for f in schema], schema=schema)

    parts = [state.filter(_mask(~replaced)) if replaced.any() else state]
    if updated.size:
        parts.append(rows(updated))
    if new.size:
        parts.append(rows(new))
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def merge_slice(
    base: pa.Table | None,
    blocks: Sequence[tuple[str, lb.LogBlock]],
    recipe: SliceRecipe,
    *,
    like: pa.Schema | None = None,
) -> pa.Table | None:
    """The records of a slice: ``base`` (its base file's rows; None: a log-only slice)
    with ``blocks`` (:func:`live_blocks`) applied in order. ``like``: the schema to cast
    log records to (the table's). None when there is nothing at all. Pure."""
    state = base
    if state is not None:
        state = _with_key(
            state.replace_schema_metadata(None), _keys(state, recipe) if not recipe.meta_fields else []
        )
    like = like if like is not None else (base.schema if base is not None else None)
    for path, block, incoming in _runs(blocks, recipe, like):
        if block.type == lb.BlockType.DELETE:
            if state is None or not state.num_rows:
                continue
            gone = _deleted_keys(state, lb.decode_delete_records(block, path=path), recipe)
            if gone:
                keep = pc.invert(
                    pc.is_in(state.column(KEY_COLUMN), value_set=pa.array(list(gone), pa.string()))
                )
                state = state.filter(keep)
            continue
        if not incoming.num_rows:
            continue
        if state is not None and state.num_rows and KEY_COLUMN in incoming.column_names:
            merged = _merge_run(state, incoming, recipe)
            if merged is not None:
                state = merged
                continue
        keys = _keys(incoming, recipe)
        incoming, keys = _last_per_key(_with_key(incoming, keys), keys)
        if state is None:
            state = incoming
            continue
        is_new = pc.invert(pc.is_in(pa.array(keys, pa.string()), value_set=state.column(KEY_COLUMN)))
        appended = incoming.filter(is_new) if pc.any(is_new).as_py() else None
        state, _ = merge_file(
            state,
            incoming,
            keys,
            set(),
            precombine_field=recipe.precombine,
            payload=recipe.payload,
            appended=appended,
        )
    if state is not None and not recipe.meta_fields and KEY_COLUMN in state.column_names:
        state = state.drop_columns([KEY_COLUMN])  # the temporary key of a table without meta fields
    return state
