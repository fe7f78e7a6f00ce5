"""Hudi's archived timeline (table version 6): log files of ``HoodieArchivedMetaEntry`` records.

Hudi 0.x moves instants out of the active timeline (``.hoodie/``) into log files under
``.hoodie/archived/`` named ``.commits_.archive.<version>_<write token>`` (a log file of file
id ``commits``, no base instant, extension ``.archive``). Each file holds log blocks; each
block here is one Avro data block (block type 3) whose records are ``HoodieArchivedMetaEntry``
(namespace ``org.apache.hudi.avro.model``): one record per instant file archived, with
``commitTime``, ``actionType``, ``actionState`` (``REQUESTED``/``INFLIGHT``/``COMPLETED``)
and, for completed instants, their metadata as Avro (``hoodieCommitMetadata``,
``hoodieReplaceCommitMetadata``, ``hoodieCleanMetadata``; rollbacks carry none here).

The byte layout of a block is that of ``/work/shared/MOR.md`` ("Log block bytes", reproduced
against Java-written blocks): magic ``#HUDI#``, int64 length of what follows, int32 log
format version 1, int32 block type, the header map (int32 count; per entry int32 key,
int32 length, UTF-8 value: the ``SCHEMA`` key (2) holds the writer schema), int64 content
length, content (int32 version 3, int32 record count, per record int32 length + Avro
binary datum), the footer map (empty), int64 total length (magic + 8 + length - 8).

The schemas below are written from the field names and types of Hudi's
``HoodieArchivedMetaEntry.avsc``, ``HoodieCommitMetadata.avsc``,
``HoodieReplaceCommitMetadata.avsc`` and ``HoodieWriteStat.avsc``, with the subset of fields
amcommit's commit metadata has (every other field of Java's reader schema has a default, so
Avro schema resolution fills it). This is a minimal encoder of its own, kept replaceable:
a general log-block codec (:mod:`amcommit.table.format.logblock`, for Merge-on-Read) may
take its place. Pure (no I/O).
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import fastavro
import msgspec

from amcommit.errors import ManifestError
from amcommit.table.format.avro_meta import CLEAN_METADATA_SCHEMA
from amcommit.table.format.logblock import (
    BlockType,
    HeaderKey,
    encode_avro_records,
    encode_block,
    read_blocks,
)
from amcommit.table.format.model import Action, CommitMetadata, Instant, State, decode_commit_metadata

__all__ = [
    "ARCHIVED_ENTRY_SCHEMA",
    "ARCHIVE_DIR",
    "ArchivedEntry",
    "archive_file_name",
    "archive_file_version",
    "decode_archive",
    "encode_archive_block",
    "newest_archived",
]

ARCHIVE_DIR = ".hoodie/archived"
"""Where Hudi 0.x keeps the archived timeline (``hoodie.archivelog.folder`` default)."""

CONTENT_VERSION = 3
HEADER_SCHEMA = 2
WRITE_TOKEN = "1-0-1"
"""The write token of archive files Hudi's archiver writes (``HoodieLogFormat``'s default)."""
NAMESPACE = "org.apache.hudi.avro.model"

_NAME = re.compile(r"^\.commits_\.archive\.(\d+)_[0-9]+-[0-9]+-[0-9]+$")


def archive_file_name(version: int) -> str:
    """The name of archive log file ``version`` (>= 1) in :data:`ARCHIVE_DIR`."""
    if version < 1:
        raise ValueError(f"archive file version must be >= 1, got {version}")
    return f".commits_.archive.{version}_{WRITE_TOKEN}"


def archive_file_version(name: str) -> int | None:
    """The version of an archive log file name; None for any other name."""
    m = _NAME.match(name)
    return int(m.group(1)) if m else None


def _opt(t: Any, default: Any = None) -> dict[str, Any]:
    return {"type": ["null", t], "default": default}


_LONGS = ("numWrites", "numDeletes", "numUpdateWrites", "numInserts", "totalWriteBytes", "totalWriteErrors")
_WRITE_STAT: dict[str, Any] = {
    "type": "record",
    "name": "HoodieWriteStat",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "fileId", **_opt("string")},
        {"name": "path", **_opt("string")},
        {"name": "prevCommit", **_opt("string")},
        *({"name": n, **_opt("long")} for n in _LONGS),
        {"name": "partitionPath", **_opt("string")},
        {"name": "fileSizeInBytes", **_opt("long")},
    ],
}
_STATS_MAP: dict[str, Any] = {"type": "map", "values": {"type": "array", "items": "HoodieWriteStat"}}
_COMMIT_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCommitMetadata",
    "namespace": NAMESPACE,
    "fields": [
        {
            "name": "partitionToWriteStats",
            "type": ["null", {"type": "map", "values": {"type": "array", "items": _WRITE_STAT}}],
            "default": None,
        },
        {"name": "extraMetadata", **_opt({"type": "map", "values": "string"})},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "operationType", **_opt("string")},
    ],
}
_REPLACE_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieReplaceCommitMetadata",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "partitionToWriteStats", **_opt(_STATS_MAP)},
        {"name": "extraMetadata", **_opt({"type": "map", "values": "string"})},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "operationType", **_opt("string")},
        {
            "name": "partitionToReplaceFileIds",
            **_opt({"type": "map", "values": {"type": "array", "items": "string"}}),
        },
    ],
}
ARCHIVED_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieArchivedMetaEntry",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "hoodieCommitMetadata", **_opt(_COMMIT_METADATA)},
        {"name": "hoodieCleanMetadata", **_opt(CLEAN_METADATA_SCHEMA)},
        {"name": "commitTime", **_opt("string")},
        {"name": "actionType", **_opt("string")},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "actionState", **_opt("string")},
        {"name": "hoodieReplaceCommitMetadata", **_opt(_REPLACE_METADATA)},
    ],
}
_PARSED = fastavro.parse_schema(ARCHIVED_ENTRY_SCHEMA)
_SCHEMA_TEXT = json.dumps(ARCHIVED_ENTRY_SCHEMA, separators=(",", ":"))

_STATE_NAMES = {State.REQUESTED: "REQUESTED", State.INFLIGHT: "INFLIGHT", State.COMPLETED: "COMPLETED"}
_STATES = {v: k for k, v in _STATE_NAMES.items()}


@dataclass(frozen=True, slots=True)
class ArchivedEntry:
    """One archived instant file: its instant and, for a completed write, its metadata; for
    a completed clean, the clean metadata record (as :mod:`~amcommit.table.format.avro_meta`
    decodes it, a dict)."""

    instant: Instant
    commit: CommitMetadata | None = None
    clean: dict[str, Any] | None = None


def _stats_to_avro(meta: CommitMetadata) -> dict[str, list[dict[str, Any]]]:
    raw = cast(dict[str, Any], msgspec.to_builtins(meta))
    out: dict[str, list[dict[str, Any]]] = {}
    for part, stats in (raw.get("partitionToWriteStats") or {}).items():
        out[part] = [{f["name"]: s.get(f["name"]) for f in _WRITE_STAT["fields"]} for s in stats]
    return out


def entry_record(entry: ArchivedEntry) -> dict[str, Any]:
    """The ``HoodieArchivedMetaEntry`` record (a dict) of one archived instant file. Pure."""
    i = entry.instant
    rec: dict[str, Any] = {
        "hoodieCommitMetadata": None,
        "hoodieCleanMetadata": None,
        "commitTime": i.time,
        "actionType": i.action,
        "version": 1,
        "actionState": _STATE_NAMES[i.state],
        "hoodieReplaceCommitMetadata": None,
    }
    if entry.commit is not None:
        m = entry.commit
        body: dict[str, Any] = {
            "partitionToWriteStats": _stats_to_avro(m),
            "extraMetadata": dict(m.extra_metadata),
            "version": 1,
            "operationType": m.operation_type,
        }
        if i.action == Action.REPLACE_COMMIT.value:
            body["partitionToReplaceFileIds"] = dict(m.partition_to_replace_file_ids or {})
            rec["hoodieReplaceCommitMetadata"] = body
        else:
            rec["hoodieCommitMetadata"] = body
    if entry.clean is not None:
        rec["hoodieCleanMetadata"] = entry.clean
    return rec


def encode_archive_block(entries: Sequence[ArchivedEntry]) -> bytes:
    """One Avro data log block holding ``entries`` (the whole of one archive file as
    amcommit writes it: files are written whole, never appended to), framed by the log
    block codec (:mod:`amcommit.table.format.logblock`). Pure."""
    return encode_block(
        BlockType.AVRO_DATA,
        ((HeaderKey.SCHEMA, _SCHEMA_TEXT),),
        encode_avro_records(_SCHEMA_TEXT, [entry_record(e) for e in entries]),
    )


class _Reader:
    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.pos, self.where = data, 0, where

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ManifestError(f"{self.where}: truncated archive log block at byte {self.pos}")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def map(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for _ in range(self.int32()):
            key = self.int32()
            out[key] = self.take(self.int32()).decode()
        return out


def _blocks(data: bytes, where: str) -> Iterator[tuple[dict[int, str], bytes]]:
    """The header and content of each Avro data block (the codec checks the frames as
    Java does; a corrupt one is refused, naming ``where`` and its offset)."""
    for block in read_blocks(data, path=where, strict=True).blocks:
        if block.type == BlockType.AVRO_DATA:
            yield {int(k): v for k, v in block.header}, block.content


def _commit_of(rec: dict[str, Any], where: str) -> CommitMetadata | None:
    body = rec.get("hoodieReplaceCommitMetadata") or rec.get("hoodieCommitMetadata")
    if body is None:
        return None
    stats = {
        part: [{k: v for k, v in s.items() if v is not None} for s in items]
        for part, items in (body.get("partitionToWriteStats") or {}).items()
    }
    doc: dict[str, Any] = {
        "partitionToWriteStats": stats,
        "extraMetadata": body.get("extraMetadata") or {},
        "operationType": body.get("operationType") or "UNKNOWN",
    }
    if rec.get("hoodieReplaceCommitMetadata") is not None:
        doc["partitionToReplaceFileIds"] = body.get("partitionToReplaceFileIds") or {}
    return decode_commit_metadata(json.dumps(doc).encode(), where=where)


def newest_archived(data: bytes, *, where: str = "archive file") -> str | None:
    """The time of the newest instant an archive log file holds (entries are written oldest
    first: the last record of the last block), decoding that one record only; None for a
    file without records. Pure."""
    last: tuple[dict[int, str], bytes] | None = None
    for header, content in _blocks(data, where):
        last = (header, content)
    if last is None:
        return None
    header, content = last
    r = _Reader(content, where)
    if r.int32() != CONTENT_VERSION:
        raise ManifestError(f"{where}: unknown Avro data block version")
    datum = b""
    for _ in range(r.int32()):
        datum = r.take(r.int32())
    if not datum:
        return None
    try:
        schema = fastavro.parse_schema(json.loads(header[HEADER_SCHEMA]))
        rec = cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(datum), schema, _PARSED))
    except Exception as e:  # fastavro raises several types for corrupt input
        raise ManifestError(f"{where}: not an archived instant ({type(e).__name__})") from None
    t = rec.get("commitTime")
    return t if isinstance(t, str) else None


def decode_archive(data: bytes, *, where: str = "archive file") -> list[ArchivedEntry]:
    """Every entry of an archive log file, in file order (ManifestError, one line, if it is
    not one: bad magic, lengths that disagree, a record that is not an archived entry).
    Pure."""
    out: list[ArchivedEntry] = []
    for header, content in _blocks(data, where):
        try:
            schema = fastavro.parse_schema(json.loads(header[HEADER_SCHEMA]))
        except (KeyError, ValueError, fastavro.schema.SchemaParseException) as e:
            raise ManifestError(f"{where}: archive block without a usable schema ({e})") from None
        r = _Reader(content, where)
        if r.int32() != CONTENT_VERSION:
            raise ManifestError(f"{where}: unknown Avro data block version")
        for _ in range(r.int32()):
            datum = r.take(r.int32())
            try:
                rec = cast(dict[str, Any], fastavro.schemaless_reader(io.BytesIO(datum), schema, _PARSED))
            except Exception as e:  # fastavro raises several types for corrupt input
                raise ManifestError(f"{where}: not an archived instant ({type(e).__name__})") from None
            t, action, state = rec.get("commitTime"), rec.get("actionType"), rec.get("actionState")
            if not t or not action or state not in _STATES:
                raise ManifestError(f"{where}: archived entry without time, action or state")
            instant = Instant(t, action, _STATES[state])
            out.append(
                ArchivedEntry(instant, _commit_of(rec, f"{where} ({t})"), rec.get("hoodieCleanMetadata"))
            )
    return out
