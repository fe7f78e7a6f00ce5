"""Hudi v6 log blocks, the bytes of Merge-on-Read log files (pure: no store, no I/O).

A log file (``.<fileId>_<baseInstant>.log.<version>_<token>``) is a sequence of blocks. Each
block is framed as Hudi's Java writer (``HoodieLogFormatWriter``, log format version 1) frames
it, all integers big-endian:

====================  =======================================================================
magic ``#HUDI#``      6 bytes
block length          8 bytes: every byte after this field, the trailing total included
format version        4 bytes, ``1``
block type            4 bytes, the ordinal of :class:`BlockType`
header                a map: int32 count, then per entry int32 key, int32 length, UTF-8 value
content length        8 bytes
content               the block's payload (below)
footer                a map as the header (Java writes an empty one)
total length          8 bytes: magic + 8 + (block length - 8), the bytes before this field
====================  =======================================================================

Java's corruption check, kept here: the block length must fit in the file, must equal the
trailing total minus 6, and the bytes right after the block must be the next magic or the
end of the file. A corrupt block is reported as a :class:`CorruptRegion` (or raised as
:class:`~amcommit.table.errors.CorruptLogBlock`, naming the file and the offset, with
``strict=True``) and reading goes on at the next magic, as Java's reader does.

Contents:

- ``AVRO_DATA``: int32 version 3, int32 record count, then per record an int32 length and the
  Avro binary datum in the header's ``SCHEMA`` (:func:`encode_avro_records`,
  :func:`decode_avro_records`).
- ``PARQUET_DATA``: a complete Parquet file (:func:`decode_parquet_records`).
- ``DELETE``: int32 version 3, int32 byte length, then the Avro binary datum of
  ``HoodieDeleteRecordList``; a record's ``orderingVal`` is a union of *wrapper records*
  (``IntWrapper{value}``, ...), as Java writes it (:func:`encode_delete_records`,
  :func:`decode_delete_records`).
- ``COMMAND``: empty; the header's ``COMMAND_BLOCK_TYPE`` ``"0"`` is a rollback of the
  instant in ``TARGET_INSTANT_TIME`` (:func:`rollback_block`).

Every function here is pure and thread-safe; nothing is atomic because nothing is written.
"""

from __future__ import annotations

import functools
import io
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from typing import Any

import fastavro

from amcommit.table.errors import CorruptLogBlock

__all__ = [
    "DELETE_RECORD_LIST_SCHEMA",
    "MAGIC",
    "BlockType",
    "CorruptRegion",
    "DeleteRecord",
    "HeaderKey",
    "LogBlock",
    "LogFileBlocks",
    "avro_data_block",
    "decode_avro_columns",
    "decode_avro_records",
    "decode_block",
    "decode_delete_records",
    "decode_parquet_records",
    "delete_block",
    "encode_avro_records",
    "encode_block",
    "encode_delete_records",
    "read_blocks",
    "rollback_block",
]

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
CONTENT_VERSION = 3
"""The version prefix of Avro data and delete block contents (Hudi v6 writes 3)."""
ROLLBACK_COMMAND = "0"
"""``COMMAND_BLOCK_TYPE`` of a rollback command block."""

_NAMESPACE = "org.apache.hudi.avro.model"


class BlockType(IntEnum):
    """Hudi's ``HoodieLogBlockType``, by ordinal."""

    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE = 4
    PARQUET_DATA = 5
    CDC = 6


class HeaderKey(IntEnum):
    """Hudi's ``HeaderMetadataType``, by ordinal (keys from 7 on need table version 8)."""

    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6


Header = tuple[tuple[int, str], ...]
"""A header or footer map, in the order its entries are written (Java's map order is kept
when a block is decoded, so it re-encodes byte for byte)."""


@dataclass(frozen=True, slots=True)
class LogBlock:
    """One decoded block. ``offset`` is where its magic starts in the file (-1: not read
    from a file); ``size`` is its whole length in bytes."""

    type: BlockType
    header: Header = ()
    content: bytes = b""
    footer: Header = ()
    offset: int = -1
    size: int = 0

    def get(self, key: HeaderKey) -> str | None:
        """The header value of ``key`` (None when absent)."""
        for k, v in self.header:
            if k == key:
                return v
        return None

    @property
    def instant(self) -> str:
        """The instant that wrote the block (``INSTANT_TIME``; "" when absent)."""
        return self.get(HeaderKey.INSTANT_TIME) or ""

    @property
    def target_instant(self) -> str:
        """A command block's target (``TARGET_INSTANT_TIME``; "" when absent)."""
        return self.get(HeaderKey.TARGET_INSTANT_TIME) or ""

    @property
    def schema(self) -> str:
        """The writer's Avro schema, as JSON text ("" when absent)."""
        return self.get(HeaderKey.SCHEMA) or ""

    @property
    def is_rollback(self) -> bool:
        """A command block that rolls back ``target_instant``."""
        return self.type == BlockType.COMMAND and self.get(HeaderKey.COMMAND_BLOCK_TYPE) == ROLLBACK_COMMAND


@dataclass(frozen=True, slots=True)
class CorruptRegion:
    """Bytes of a log file that are no valid block: ``[offset, offset + size)``."""

    offset: int
    size: int
    reason: str


@dataclass(frozen=True, slots=True)
class LogFileBlocks:
    """The blocks of one log file in file order, and its corrupt regions (a torn tail of a
    killed writer is one)."""

    blocks: tuple[LogBlock, ...]
    corrupt: tuple[CorruptRegion, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteRecord:
    """One key of a delete block. ``ordering`` is the ordering value (None: none written);
    ``ordering_type`` names its wrapper (``"IntWrapper"``, ...), Java's ``IntWrapper(0)``
    being the "natural order" of a SQL delete (the delete always wins)."""

    record_key: str | None
    partition_path: str | None
    ordering: Any = None
    ordering_type: str | None = field(default=None)


# --- the frame -----------------------------------------------------------------------------


def _encode_map(entries: Header) -> bytes:
    out = [struct.pack(">i", len(entries))]
    for k, v in entries:
        raw = v.encode("utf-8")
        out.append(struct.pack(">ii", int(k), len(raw)))
        out.append(raw)
    return b"".join(out)


def encode_block(block_type: BlockType, header: Header, content: bytes, footer: Header = ()) -> bytes:
    """The bytes of one block, framed as Java frames it (log format version 1)."""
    body = b"".join(
        [
            struct.pack(">ii", LOG_FORMAT_VERSION, int(block_type)),
            _encode_map(header),
            struct.pack(">q", len(content)),
            content,
            _encode_map(footer),
        ]
    )
    block_length = len(body) + 8
    total = len(MAGIC) + 8 + len(body)
    return b"".join([MAGIC, struct.pack(">q", block_length), body, struct.pack(">q", total)])


class _Bad(Exception):
    """A block that does not decode (internal; turned into a region or a typed error)."""


def _read_map(data: bytes, pos: int, end: int) -> tuple[Header, int]:
    if pos + 4 > end:
        raise _Bad("map count runs past the block")
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    if count < 0 or count > (end - pos) // 8:
        raise _Bad(f"map count {count} is impossible")
    entries = []
    for _ in range(count):
        if pos + 8 > end:
            raise _Bad("map entry runs past the block")
        key, length = struct.unpack_from(">ii", data, pos)
        pos += 8
        if length < 0 or pos + length > end:
            raise _Bad(f"map value length {length} runs past the block")
        try:
            value = data[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"map value of key {key} is not UTF-8") from None
        entries.append((key, value))
        pos += length
    return tuple(entries), pos


def _check_frame(data: bytes, offset: int) -> int:
    """Java's corruption check of the block starting at ``offset``; its end offset."""
    if data[offset : offset + len(MAGIC)] != MAGIC:
        raise _Bad("no magic #HUDI#")
    len_at = offset + len(MAGIC)
    if len_at + 8 > len(data):
        raise _Bad("block length field cut off")
    (block_length,) = struct.unpack_from(">q", data, len_at)
    body_at = len_at + 8
    end: int = body_at + block_length
    if block_length < 8 + 8 or end > len(data):
        raise _Bad(f"block length {block_length} runs past the end of the file")
    (total,) = struct.unpack_from(">q", data, end - 8)
    if block_length != total - len(MAGIC):
        raise _Bad(f"block length {block_length} does not match the trailing total {total}")
    if end != len(data) and data[end : end + len(MAGIC)] != MAGIC:
        raise _Bad("the bytes after the block are neither a block nor the end of the file")
    return end


def decode_block(data: bytes, offset: int = 0) -> LogBlock:
    """The block starting at ``offset`` of ``data``. Raises :class:`_Bad` (internal)."""
    end = _check_frame(data, offset)
    pos = offset + len(MAGIC) + 8
    stop = end - 8
    if pos + 8 > stop:
        raise _Bad("block too short")
    version, type_ordinal = struct.unpack_from(">ii", data, pos)
    pos += 8
    if version != LOG_FORMAT_VERSION:
        raise _Bad(f"log format version {version} (only {LOG_FORMAT_VERSION} is read)")
    try:
        block_type = BlockType(type_ordinal)
    except ValueError:
        raise _Bad(f"unknown block type {type_ordinal}") from None
    header, pos = _read_map(data, pos, stop)
    if pos + 8 > stop:
        raise _Bad("content length cut off")
    (content_length,) = struct.unpack_from(">q", data, pos)
    pos += 8
    if content_length < 0 or pos + content_length > stop:
        raise _Bad(f"content length {content_length} runs past the block")
    content = bytes(data[pos : pos + content_length])
    pos += content_length
    footer, pos = _read_map(data, pos, stop)
    if pos != stop:
        raise _Bad(f"{stop - pos} unexplained bytes before the trailing total")
    return LogBlock(block_type, header, content, footer, offset, end - offset)


def read_blocks(data: bytes, *, path: str = "log file", strict: bool = False) -> LogFileBlocks:
    """Every block of a log file's bytes, in file order.

    A block that fails Java's corruption check or does not decode becomes a
    :class:`CorruptRegion` reaching to the next magic (or the end), and reading goes on
    there, as Java's reader does; with ``strict`` it raises
    :class:`~amcommit.table.errors.CorruptLogBlock` naming ``path`` and the offset instead.
    """
    blocks: list[LogBlock] = []
    corrupt: list[CorruptRegion] = []
    pos = 0
    while pos < len(data):
        try:
            block = decode_block(data, pos)
        except _Bad as e:
            if strict:
                raise CorruptLogBlock.make(path, pos, str(e)) from None
            nxt = data.find(MAGIC, pos + 1)
            stop = len(data) if nxt < 0 else nxt
            corrupt.append(CorruptRegion(pos, stop - pos, str(e)))
            pos = stop
            continue
        blocks.append(block)
        pos += block.size
    return LogFileBlocks(tuple(blocks), tuple(corrupt))


# --- Avro data blocks ----------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _parse_schema_text(schema: str) -> Any:
    """The parsed form of a schema string, parsed once per string (every block of a
    write carries the same SCHEMA header). fastavro's parsed schemas are not changed by
    reading or writing, so one may be shared between threads."""
    return fastavro.parse_schema(json.loads(schema))


def _parse_schema(schema: str | dict[str, Any]) -> Any:
    if isinstance(schema, str):
        return _parse_schema_text(schema)
    return fastavro.parse_schema(schema)


def encode_avro_records(schema: str | dict[str, Any], records: Iterable[dict[str, Any]] | Any) -> bytes:
    """An Avro data block's content: version 3, the count, each record's length and datum.

    ``records``: dicts, or a ``pyarrow.Table`` (its columns found by name), which is encoded
    column by column (:func:`amcommit.table.format.avro_columns.encode_columns`) when the
    schema's fields are all flat, and else as ``records.to_pylist()`` (the bytes are the
    same either way)."""
    if hasattr(records, "column_names") and hasattr(records, "to_pylist"):  # a pyarrow.Table
        from amcommit.table.format import avro_columns

        text = schema if isinstance(schema, str) else json.dumps(schema)
        fast = avro_columns.encode_columns(text, records)
        if fast is not None:
            return fast
        records = records.to_pylist()
    parsed = _parse_schema(schema)
    out: list[bytes] = []
    n = 0
    for r in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, r)
        raw = buf.getvalue()
        out.append(struct.pack(">i", len(raw)))
        out.append(raw)
        n += 1
    return struct.pack(">ii", CONTENT_VERSION, n) + b"".join(out)


def decode_avro_records(block: LogBlock, *, path: str = "log file") -> list[dict[str, Any]]:
    """The records of an ``AVRO_DATA`` block, decoded in the header's schema."""
    if block.type != BlockType.AVRO_DATA:
        raise CorruptLogBlock.make(
            path, block.offset, f"expected an AVRO_DATA block, found {block.type.name}"
        )
    if not block.schema:
        raise CorruptLogBlock.make(path, block.offset, "Avro data block without a SCHEMA header")
    data = block.content
    try:
        parsed = _parse_schema(block.schema)
        version, count = struct.unpack_from(">ii", data, 0)
        if version != CONTENT_VERSION:
            raise ValueError(f"content version {version} (only {CONTENT_VERSION} is read)")
        pos = 8
        records: list[dict[str, Any]] = []
        for _ in range(count):
            (length,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if length < 0 or pos + length > len(data):
                raise ValueError(f"record length {length} runs past the content")
            rec = fastavro.schemaless_reader(io.BytesIO(data[pos : pos + length]), parsed, None)
            records.append(rec)  # type: ignore[arg-type]
            pos += length
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} bytes after the last record")
    except CorruptLogBlock:
        raise
    except Exception as e:  # struct, json and fastavro raise several types for bad bytes
        raise CorruptLogBlock.make(
            path, block.offset, f"Avro data does not decode ({type(e).__name__}: {e})"
        ) from None
    return records


def decode_avro_columns(blocks: Sequence[LogBlock]) -> Any:
    """The records of ``AVRO_DATA`` blocks all written in one schema, in order, as one
    ``pyarrow.Table``, decoded column by column
    (:func:`amcommit.table.format.avro_columns.decode_columns`: every field nullable, Arrow
    types as ``amcommit.table.query.merge.arrow_schema_of_avro`` maps them). None when the
    column path does not take them (a schema with nested or decimal fields, blocks of
    several schemas, or bytes that do not decode): then decode each with
    :func:`decode_avro_records`, which names what is wrong."""
    from amcommit.table.format import avro_columns

    if not blocks or any(b.type != BlockType.AVRO_DATA or b.schema != blocks[0].schema for b in blocks):
        return None
    if not blocks[0].schema:
        return None
    return avro_columns.decode_columns(blocks[0].schema, [b.content for b in blocks])


def avro_data_block(
    instant: str, schema: str, records: Iterable[dict[str, Any]] | Any, *, header: Header | None = None
) -> bytes:
    """A whole ``AVRO_DATA`` block of ``records`` (dicts or a ``pyarrow.Table``:
    :func:`encode_avro_records`) written by ``instant`` in ``schema`` (JSON text, the full
    writer schema with the meta fields, stored in the header as given)."""
    head = header if header is not None else ((HeaderKey.INSTANT_TIME, instant), (HeaderKey.SCHEMA, schema))
    return encode_block(BlockType.AVRO_DATA, head, encode_avro_records(schema, records))


# --- Parquet data blocks -------------------------------------------------------------------


def decode_parquet_records(block: LogBlock, *, path: str = "log file") -> Any:
    """The rows of a ``PARQUET_DATA`` block as a ``pyarrow.Table`` (the content is a whole
    Parquet file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if block.type != BlockType.PARQUET_DATA:
        raise CorruptLogBlock.make(
            path, block.offset, f"expected a PARQUET_DATA block, found {block.type.name}"
        )
    try:
        return pq.read_table(pa.BufferReader(block.content))
    except Exception as e:  # pyarrow raises several types for bad bytes
        raise CorruptLogBlock.make(
            path, block.offset, f"Parquet data does not decode ({type(e).__name__}: {e})"
        ) from None


# --- delete blocks -------------------------------------------------------------------------

_WRAPPERS: list[tuple[str, Any]] = [
    ("BooleanWrapper", "boolean"),
    ("IntWrapper", "int"),
    ("LongWrapper", "long"),
    ("FloatWrapper", "float"),
    ("DoubleWrapper", "double"),
    ("BytesWrapper", "bytes"),
    ("StringWrapper", "string"),
    ("DateWrapper", "int"),
    ("DecimalWrapper", {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15}),
    ("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
    ("TimestampMicrosWrapper", "long"),
]

DELETE_RECORD_LIST_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": _NAMESPACE,
    "fields": [
        {
            "name": "deleteRecordList",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieDeleteRecord",
                    "fields": [
                        {"name": "recordKey", "type": ["null", "string"], "default": None},
                        {"name": "partitionPath", "type": ["null", "string"], "default": None},
                        {
                            "name": "orderingVal",
                            "type": [
                                "null",
                                *(
                                    {
                                        "type": "record",
                                        "name": name,
                                        "namespace": _NAMESPACE,
                                        "fields": [{"name": "value", "type": t}],
                                    }
                                    for name, t in _WRAPPERS
                                ),
                            ],
                            "default": None,
                        },
                    ],
                },
            },
        }
    ],
}
"""Hudi's ``HoodieDeleteRecordList`` as Java 0.14 writes it: ``orderingVal`` is a union of
wrapper records (not of primitives, as hudi-rs's copy of the schema says)."""

_DELETE_PARSED = fastavro.parse_schema(DELETE_RECORD_LIST_SCHEMA)
_WRAPPER_NAMES = {name for name, _ in _WRAPPERS}


def _wrapper_for(value: Any) -> str:
    if isinstance(value, bool):
        return "BooleanWrapper"
    if isinstance(value, int):
        return "IntWrapper" if -(2**31) <= value < 2**31 else "LongWrapper"
    if isinstance(value, float):
        return "DoubleWrapper"
    if isinstance(value, bytes):
        return "BytesWrapper"
    if isinstance(value, str):
        return "StringWrapper"
    if isinstance(value, Decimal):
        return "DecimalWrapper"
    raise ValueError(f"ordering value of type {type(value).__name__} has no Hudi wrapper")


def encode_delete_records(records: Sequence[DeleteRecord]) -> bytes:
    """A delete block's content: version 3, the datum's length, the ``HoodieDeleteRecordList``
    datum. An ordering value without ``ordering_type`` is wrapped by its Python type
    (``int`` in 32 bits: ``IntWrapper``; wider: ``LongWrapper``; ``float``: ``DoubleWrapper``)."""
    items = []
    for r in records:
        ordering: Any = None
        if r.ordering is not None or r.ordering_type is not None:
            name = r.ordering_type or _wrapper_for(r.ordering)
            if name not in _WRAPPER_NAMES:
                raise ValueError(f"unknown ordering wrapper {name!r}")
            ordering = (f"{_NAMESPACE}.{name}", {"value": r.ordering})
        items.append({"recordKey": r.record_key, "partitionPath": r.partition_path, "orderingVal": ordering})
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _DELETE_PARSED, {"deleteRecordList": items})
    raw = buf.getvalue()
    return struct.pack(">ii", CONTENT_VERSION, len(raw)) + raw


def decode_delete_records(block: LogBlock, *, path: str = "log file") -> list[DeleteRecord]:
    """The keys of a ``DELETE`` block."""
    if block.type != BlockType.DELETE:
        raise CorruptLogBlock.make(path, block.offset, f"expected a DELETE block, found {block.type.name}")
    data = block.content
    try:
        version, length = struct.unpack_from(">ii", data, 0)
        if version != CONTENT_VERSION:
            raise ValueError(f"content version {version} (only {CONTENT_VERSION} is read)")
        if length < 0 or 8 + length != len(data):
            raise ValueError(f"datum length {length} does not match the content ({len(data) - 8} bytes)")
        rec: Any = fastavro.schemaless_reader(
            io.BytesIO(data[8:]),
            _DELETE_PARSED,
            None,
            return_record_name=True,
            return_record_name_override=False,
        )
        out = []
        for item in rec["deleteRecordList"]:
            o = item.get("orderingVal")
            if o is None:
                out.append(DeleteRecord(item.get("recordKey"), item.get("partitionPath")))
            else:
                name, inner = o
                out.append(
                    DeleteRecord(
                        item.get("recordKey"),
                        item.get("partitionPath"),
                        inner["value"],
                        str(name).rsplit(".", 1)[-1],
                    )
                )
    except Exception as e:  # struct and fastavro raise several types for bad bytes
        raise CorruptLogBlock.make(
            path, block.offset, f"delete block does not decode ({type(e).__name__}: {e})"
        ) from None
    return out


def delete_block(
    instant: str, schema: str, records: Sequence[DeleteRecord], *, header: Header | None = None
) -> bytes:
    """A whole ``DELETE`` block of ``records`` written by ``instant`` (Java puts the
    writer's schema in its header too; by default in the order of the Java-written vector)."""
    head = header if header is not None else ((HeaderKey.SCHEMA, schema), (HeaderKey.INSTANT_TIME, instant))
    return encode_block(BlockType.DELETE, head, encode_delete_records(records))


# --- command blocks ------------------------------------------------------------------------


def rollback_block(instant: str, target: str) -> bytes:
    """A rollback command block: ``instant`` (the rollback's) cancels the blocks ``target``
    wrote in this file slice. Header in the order Java wrote the vector."""
    header: Header = (
        (HeaderKey.INSTANT_TIME, instant),
        (HeaderKey.COMMAND_BLOCK_TYPE, ROLLBACK_COMMAND),
        (HeaderKey.TARGET_INSTANT_TIME, target),
    )
    return encode_block(BlockType.COMMAND, header, b"")
