"""A column-wise Avro binary codec for the flat record schemas of Hudi log blocks (pure: no
store, no I/O).

fastavro decodes one record at a time into Python dicts (~5 µs a record); this module
decodes all the records of one or more ``AVRO_DATA`` blocks field by field straight into
Arrow arrays, with numpy doing the varint / zigzag decoding, the fixed-width reads and the
string gathers for every record at once, and encodes Arrow columns into the same record
bytes the same way.

Handled: a top-level record whose fields are each ``null``, ``boolean``, ``int``, ``long``,
``float``, ``double``, ``string``, ``bytes``, ``int``/``date``, ``long``/``timestamp-millis``,
``timestamp-micros``, ``local-timestamp-millis``, ``local-timestamp-micros`` (a type may be
written as ``{"type": T}``), or a two-branch union of ``null`` and one of them (either
order) -- every type Hudi's meta fields use and every flat column
:func:`amcommit.table.format.schema.avro_schema` maps Arrow types to, decimals, lists,
maps and structs excepted. :func:`plan_of` returns None for any other schema, and
:func:`decode_columns` / :func:`encode_columns` return None on anything unexpected (bad
bytes, a value out of range, a column of another type); callers then take the fastavro path,
which decodes or encodes the same bytes record by record (and raises its own errors). The
output is the same as fastavro's (the Arrow types are those
``amcommit.table.query.merge.arrow_schema_of_avro`` maps the schema to; every field
nullable) and the bytes encoded are byte for byte those ``fastavro.schemaless_writer``
writes.

Every function is pure and thread-safe; nothing is atomic because nothing is written.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["ColumnPlan", "Field", "decode_columns", "encode_columns", "plan_of"]

CONTENT_VERSION = 3
"""The version prefix of an Avro data block's content (as :mod:`logblock`)."""

_PRIMITIVE: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
}

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]


_INT32 = struct.Struct(">i")


class _Fallback(Exception):
    """Anything the column path does not do (internal: the caller takes the fastavro path)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its name, its Avro base type (a key of :data:`_PRIMITIVE`), its Arrow type,
    and, for a union with null, the branch index of null and of the value (``null_at`` -1: no
    union)."""

    name: str
    base: str
    arrow: pa.DataType
    null_at: int = -1
    value_at: int = -1


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """The fields of a record schema the column path handles, in schema order, and its Arrow
    schema (every field nullable, as ``pa.Table.from_pylist`` makes it)."""

    fields: tuple[Field, ...]
    schema: pa.Schema


def _atom(t: Any) -> tuple[str, pa.DataType] | None:
    if isinstance(t, str):
        return (t, _PRIMITIVE[t]) if t in _PRIMITIVE else None
    if isinstance(t, dict):
        base = t.get("type")
        if not isinstance(base, str) or base not in _PRIMITIVE:
            return None
        logical = t.get("logicalType")
        if logical is None:
            return base, _PRIMITIVE[base]
        arrow = _LOGICAL.get((base, str(logical)))
        return None if arrow is None else (base, arrow)
    return None


def _field(f: Any) -> Field | None:
    if not isinstance(f, dict) or not isinstance(f.get("name"), str):
        return None
    t = f.get("type")
    if isinstance(t, list):
        if len(t) != 2 or "null" not in t or t[0] == t[1]:
            return None
        null_at = t.index("null")
        atom = _atom(t[1 - null_at])
        if atom is None:
            return None
        return Field(f["name"], atom[0], atom[1], null_at, 1 - null_at)
    atom = _atom(t)
    return None if atom is None else Field(f["name"], atom[0], atom[1])


@functools.lru_cache(maxsize=256)
def plan_of(schema: str) -> ColumnPlan | None:
    """The column plan of a record schema (JSON text), or None when the column path does not
    handle it (the caller uses fastavro). Cached per schema string."""
    try:
        s = json.loads(schema)
    except ValueError:
        return None
    if not isinstance(s, dict) or s.get("type") != "record" or not isinstance(s.get("fields"), list):
        return None
    fields = []
    names = set()
    for f in s["fields"]:
        fd = _field(f)
        if fd is None or fd.name in names:
            return None
        names.add(fd.name)
        fields.append(fd)
    return ColumnPlan(tuple(fields), pa.schema([pa.field(f.name, f.arrow) for f in fields]))


# --- decode ----------------------------------------------------------------------------------


def _varints(buf: U8, pos: I64) -> tuple[I64, I64]:
    """The zigzag longs starting at ``pos`` (one per record): (values, positions after them)."""
    n = pos.shape[0]
    first = buf[pos]
    if not n or int(first.max()) < 0x80:  # every varint one byte (short strings, small values)
        small = first.astype(np.int64)
        return (small >> 1) ^ -(small & 1), pos + 1
    acc = np.zeros(n, np.uint64)
    p = pos.copy()
    active = np.arange(n)
    for k in range(10):
        b = buf[p[active]].astype(np.uint64)
        acc[active] |= (b & np.uint64(0x7F)) << np.uint64(7 * k)
        p[active] += 1
        active = active[(b & np.uint64(0x80)) != 0]
        if not active.size:
            break
    else:
        raise _Fallback("a varint longer than 10 bytes")
    values = (acc >> np.uint64(1)).astype(np.int64) ^ -((acc & np.uint64(1)).astype(np.int64))
    return values, p


def _gather(buf: U8, starts: I64, lengths: I64) -> tuple[U8, npt.NDArray[np.int64]]:
    """The bytes ``buf[starts[i] : starts[i] + lengths[i]]`` of every i, concatenated, and
    the offsets of each in the result (n + 1 of them)."""
    offsets = np.zeros(lengths.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if not total:
        return np.zeros(0, np.uint8), offsets
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lengths)
    return buf[idx], offsets


def _fixed(buf: U8, pos: I64, width: int, dtype: Any) -> Any:
    idx = pos[:, None] + np.arange(width, dtype=np.int64)
    return np.ascontiguousarray(buf[idx]).view(dtype).reshape(-1)


def _values(f: Field, buf: U8, pos: I64, end: I64) -> tuple[Any, I64]:
    """The values of ``f`` of the records whose field starts at ``pos``: numpy values (or,
    for strings and bytes, a (bytes, offsets) pair) and the positions after them."""
    if f.base == "null":
        return None, pos
    if f.base in ("int", "long"):
        v, p = _varints(buf, pos)
        if f.base == "int" and v.size and (v.min() < -(2**31) or v.max() >= 2**31):
            raise _Fallback("an int out of range")
        return v, p
    if f.base == "boolean":
        b = buf[pos]
        if b.size and b.max() > 1:
            raise _Fallback("a boolean byte neither 0 nor 1")
        return b.astype(bool), pos + 1
    if f.base in ("float", "double"):
        width = 4 if f.base == "float" else 8
        if pos.size and np.any(pos + width > end):
            raise _Fallback("a number runs past its record")
        return _fixed(buf, pos, width, "<f4" if width == 4 else "<f8"), pos + width
    # string, bytes
    lengths, p = _varints(buf, pos)
    if lengths.size and (lengths.min() < 0 or np.any(p + lengths > end)):
        raise _Fallback("a string runs past its record")
    data, offsets = _gather(buf, p, lengths)
    return (data, offsets), p + lengths


def _arrow(f: Field, n: int, valid: npt.NDArray[np.bool_] | None, vals: Any) -> pa.Array:
    """The Arrow array of ``f`` for ``n`` records: ``vals`` are the values of the valid ones
    (``valid`` None: all)."""
    if f.base == "null":
        return pa.nulls(n)
    bitmap = None if valid is None else pa.array(valid, pa.bool_()).buffers()[1]
    nulls = 0 if valid is None else n - int(np.count_nonzero(valid))
    if f.base in ("string", "bytes"):
        data, offsets = vals
        if valid is not None:
            lengths = np.zeros(n, np.int64)
            lengths[valid] = np.diff(offsets)
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] >= 2**31:
            raise _Fallback("more than 2 GiB of strings")
        arr = pa.Array.from_buffers(
            f.arrow,
            n,
            [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
            null_count=nulls,
        )
        if f.base == "string":
            try:
                arr.validate(full=True)  # UTF-8
            except pa.ArrowInvalid:
                raise _Fallback("a string that is not UTF-8") from None
        return arr
    if valid is not None:
        full = np.zeros(n, vals.dtype)
        full[valid] = vals
        vals = full
    if f.base == "boolean":
        return pa.array(vals, pa.bool_(), mask=None if valid is None else ~valid)
    storage = {"int": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64()}[f.base]
    arr = pa.Array.from_buffers(
        storage, n, [bitmap, pa.py_buffer(vals.astype(storage.to_pandas_dtype()))], nulls
    )
    return arr if f.arrow.equals(storage) else arr.view(f.arrow)


def _records(contents: Sequence[bytes]) -> tuple[U8, I64, I64]:
    """One buffer of every record of ``contents`` (Avro data block contents) and each
    record's start and end in it."""
    starts: list[int] = []
    lasts: list[tuple[int, int]] = []  # (the index of a content's last record, the content's end)
    base = 0
    unpack = _INT32.unpack_from
    for data in contents:
        if len(data) < 8:
            raise _Fallback("content too short")
        version, count = struct.unpack_from(">ii", data, 0)
        if version != CONTENT_VERSION or count < 0:
            raise _Fallback("content version or count")
        pos = 8
        try:
            for _ in range(count):  # the one walk per record: each length says where the next is
                (length,) = unpack(data, pos)
                if length < 0:
                    raise _Fallback("a negative record length")
                starts.append(base + pos + 4)
                pos += 4 + length
        except struct.error:
            raise _Fallback("record length cut off") from None
        if pos != len(data):
            raise _Fallback("the records do not fill the content")
        if count:
            lasts.append((len(starts) - 1, base + pos))
        base += len(data)
    joined = b"".join(contents) + bytes(16)  # padding: a varint read past the end stays in bounds
    start = np.array(starts, np.int64)
    end = np.empty_like(start)
    end[:-1] = start[1:] - 4  # a record ends where the next one's length field starts
    for i, e in lasts:  # the last record of a content ends with the content
        end[i] = e
    return np.frombuffer(joined, np.uint8), start, end


def decode_columns(schema: str, contents: Sequence[bytes]) -> pa.Table | None:
    """The records of Avro data block ``contents`` (version, count, length-prefixed datums)
    written in ``schema``, in order, as one Arrow table (:attr:`ColumnPlan.schema`). None
    when the column path does not handle the schema or the bytes (the caller decodes them
    with fastavro, which also names what is wrong)."""
    plan = plan_of(schema)
    if plan is None:
        return None
    try:
        buf, pos, end = _records(contents)
        n = pos.shape[0]
        cols = []
        for f in plan.fields:
            if f.null_at < 0:
                vals, pos = _values(f, buf, pos, end)
                cols.append(_arrow(f, n, None, vals))
            else:
                branch = buf[pos]
                if branch.size and not np.all((branch == 0) | (branch == 2)):
                    raise _Fallback("a union branch that is neither 0 nor 1")
                pos = pos + 1
                valid = branch == 2 * f.value_at
                if np.all(valid):
                    vals, pos = _values(f, buf, pos, end)
                    cols.append(_arrow(f, n, None, vals))
                else:
                    sel = np.flatnonzero(valid)
                    vals, after = _values(f, buf, pos[sel], end[sel])
                    pos[sel] = after
                    cols.append(_arrow(f, n, valid, vals))
            if n and np.any(pos > end):
                raise _Fallback("a field runs past its record")
        if n and not np.array_equal(pos, end):
            raise _Fallback("a record's fields do not fill it")
    except _Fallback:
        return None
    return pa.Table.from_arrays(cols, schema=plan.schema)


# --- encode ----------------------------------------------------------------------------------


def _varint_bytes(values: I64) -> tuple[U8, I64]:
    """The zigzag varints of ``values``, concatenated, and each one's length."""
    z = (values.astype(np.int64) << np.int64(1)) ^ (values.astype(np.int64) >> np.int64(63))
    u = z.view(np.uint64)
    lengths = np.ones(u.shape[0], np.int64)
    for k in range(1, 10):
        lengths += u >= np.uint64(1) << np.uint64(7 * k)
    offsets = np.zeros(u.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    rest = u.copy()
    for k in range(10):
        at = np.flatnonzero(lengths > k)
        if not at.size:
            break
        more = lengths[at] > k + 1
        byte = (rest[at] & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << np.uint8(7))
        out[offsets[at] + k] = byte
        rest[at] >>= np.uint64(7)
    return out, lengths


def _piece(f: Field, col: pa.Array) -> tuple[U8, I64]:
    """The bytes of field ``f`` of every record (in record order, concatenated) and their
    lengths per record."""
    n = len(col)
    if f.base == "null":  # a null is written as no bytes
        if col.null_count != n:
            raise _Fallback(f"a value in the null field {f.name!r}")
        return np.zeros(0, np.uint8), np.zeros(n, np.int64)
    valid = None
    if col.null_count:
        if f.null_at < 0:
            raise _Fallback(f"a null in the non-nullable field {f.name!r}")
        valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool)
    parts: list[tuple[U8, I64]] = []  # per kind of bytes, for the valid records
    c = col if valid is None else col.filter(pa.array(valid))
    if f.base in ("int", "long"):
        storage = pa.int32() if f.base == "int" else pa.int64()
        try:
            if c.type.equals(f.arrow):
                ints = c.view(storage)
            elif pa.types.is_integer(c.type) and f.arrow.equals(storage):
                ints = c.cast(storage)  # a safe cast: a value out of range falls back
            else:
                raise _Fallback(f"field {f.name!r} of type {c.type}")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise _Fallback(f"field {f.name!r} of type {c.type}") from None
        value_bytes, value_lengths = _varint_bytes(np.asarray(ints.to_numpy(zero_copy_only=False), np.int64))
    elif f.base == "boolean":
        if not pa.types.is_boolean(c.type):
            raise _Fallback(f"field {f.name!r} of type {c.type}")
        value_bytes = np.asarray(c.to_numpy(zero_copy_only=False), np.uint8)
        value_lengths = np.ones(len(c), np.int64)
    elif f.base in ("float", "double"):
        if not (pa.types.is_float32(c.type) or (f.base == "double" and pa.types.is_float64(c.type))):
            raise _Fallback(f"field {f.name!r} of type {c.type}")
        dt = "<f4" if f.base == "float" else "<f8"
        nums = np.asarray(c.to_numpy(zero_copy_only=False))
        value_bytes = np.ascontiguousarray(nums.astype(dt)).view(np.uint8)
        value_lengths = np.full(len(c), 4 if f.base == "float" else 8, np.int64)
    else:  # string, bytes
        ok = pa.types.is_string(c.type) if f.base == "string" else pa.types.is_binary(c.type)
        if not ok:
            raise _Fallback(f"field {f.name!r} of type {c.type}")
        bufs = c.buffers()
        offs = np.frombuffer(bufs[1], np.int32)[c.offset : c.offset + len(c) + 1].astype(np.int64)
        raw = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        raw = raw[offs[0] : offs[-1]] if len(offs) else raw[:0]
        lens = np.diff(offs)
        head, head_lengths = _varint_bytes(lens)
        parts.append((head, head_lengths))
        value_bytes, value_lengths = raw, lens
    parts.append((value_bytes, value_lengths))
    if f.null_at >= 0:
        branch_val = np.full(len(value_lengths), 2 * f.value_at, np.uint8)
        parts.insert(0, (branch_val, np.ones(len(value_lengths), np.int64)))
    # interleave the parts per valid record, then put nulls (one branch byte) in place
    lengths = np.zeros(len(value_lengths), np.int64)
    for _, ln in parts:
        lengths += ln
    rec_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=rec_offsets[1:])
    out = np.zeros(int(rec_offsets[-1]), np.uint8)
    at = rec_offsets[:-1].copy()
    for data, ln in parts:
        _scatter(out, at, data, ln)
        at += ln
    if valid is None:
        return out, lengths
    full_lengths = np.ones(n, np.int64)
    full_lengths[valid] = lengths + 0
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(full_lengths, out=offsets[1:])
    full = np.full(int(offsets[-1]), 2 * f.null_at, np.uint8)
    _scatter(full, offsets[:-1][valid], out, lengths)
    return full, full_lengths


def _scatter(out: U8, at: I64, data: U8, lengths: I64) -> None:
    """``out[at[i] : at[i] + lengths[i]] = `` the i-th run of ``data`` (runs consecutive)."""
    total = int(lengths.sum())
    if not total:
        return
    starts = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    idx = np.arange(total, dtype=np.int64) + np.repeat(at - starts, lengths)
    out[idx] = data[:total]


def encode_columns(schema: str, table: pa.Table) -> bytes | None:
    """An Avro data block's content (version 3, the count, each record's int32 length and
    datum) of the rows of ``table`` in ``schema``: byte for byte what fastavro writes for
    ``table.to_pylist()``. Columns are found by name (a column the schema names must be
    there). None when the column path does not handle the schema or a column (the caller
    encodes with fastavro)."""
    plan = plan_of(schema)
    if plan is None:
        return None
    n = table.num_rows
    try:
        pieces = []
        for f in plan.fields:
            if f.name not in table.column_names:
                raise _Fallback(f"no column {f.name!r}")
            col = table.column(f.name).combine_chunks()
            pieces.append(_piece(f, col))
        lengths = np.zeros(n, np.int64)
        for _, ln in pieces:
            lengths += ln
        if n and lengths.max() >= 2**31:
            raise _Fallback("a record of 2 GiB")
        rec = np.zeros(n + 1, np.int64)
        np.cumsum(lengths + 4, out=rec[1:])
        out = np.zeros(int(rec[-1]), np.uint8)
        prefix = np.ascontiguousarray(lengths.astype(">i4")).view(np.uint8)
        _scatter(out, rec[:-1], prefix, np.full(n, 4, np.int64))
        at = rec[:-1] + 4
        for data, ln in pieces:
            _scatter(out, at, data, ln)
            at = at + ln
    except _Fallback:
        return None
    return struct.pack(">ii", CONTENT_VERSION, n) + out.tobytes()
