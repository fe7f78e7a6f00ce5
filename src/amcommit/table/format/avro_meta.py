"""Clean instants' content as Avro, the way Hudi's Java timeline reads it (table version 6).

Hudi stores the metadata of ``clean`` instants as an Avro *object container file*
(``Obj\\x01`` header, the writer's schema embedded, one record):

- ``<t>.clean.requested`` and ``<t>.clean.inflight``: ``HoodieCleanerPlan`` (version 2:
  ``filePathsToBeDeletedPerPartition`` holds full paths), and
- ``<t>.clean``: ``HoodieCleanMetadata`` (version 2: file *names* per partition).

The schemas below are written here from the field names, types and defaults of Apache Hudi's
``HoodieCleanerPlan.avsc``, ``HoodieCleanMetadata.avsc`` and ``HoodieCleanPartitionMetadata.avsc``
(namespace ``org.apache.hudi.avro.model``), so a Java reader resolving its own schema against
ours finds every field. Pure (no I/O).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, cast

import fastavro

from amcommit.errors import ManifestError

__all__ = [
    "CLEANER_PLAN_SCHEMA",
    "CLEAN_METADATA_SCHEMA",
    "CleanMetadata",
    "CleanPartition",
    "CleanerPlan",
    "decode_clean_metadata",
    "decode_cleaner_plan",
    "encode_clean_metadata",
    "encode_cleaner_plan",
]

NAMESPACE = "org.apache.hudi.avro.model"
POLICY = "KEEP_LATEST_COMMITS"
PLAN_VERSION = 2
METADATA_VERSION = 2


def _nullable(t: Any) -> list[Any]:
    return ["null", t]


CLEANER_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanerPlan",
    "namespace": NAMESPACE,
    "fields": [
        {
            "name": "earliestInstantToRetain",
            "type": _nullable(
                {
                    "type": "record",
                    "name": "HoodieActionInstant",
                    "fields": [
                        {"name": "timestamp", "type": "string"},
                        {"name": "action", "type": "string"},
                        {"name": "state", "type": "string"},
                    ],
                }
            ),
            "default": None,
        },
        {"name": "policy", "type": "string"},
        {
            "name": "filesToBeDeletedPerPartition",
            "type": _nullable({"type": "map", "values": {"type": "array", "items": "string"}}),
            "default": None,
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "filePathsToBeDeletedPerPartition",
            "type": _nullable(
                {
                    "type": "map",
                    "values": {
                        "type": "array",
                        "items": {
                            "type": "record",
                            "name": "HoodieCleanFileInfo",
                            "fields": [
                                {"name": "filePath", "type": ["null", "string"], "default": None},
                                {"name": "isBootstrapBaseFile", "type": ["null", "boolean"], "default": None},
                            ],
                        },
                    },
                }
            ),
            "default": None,
        },
        {
            "name": "partitionsToBeDeleted",
            "type": _nullable({"type": "array", "items": "string"}),
            "default": None,
        },
    ],
}

_PARTITION_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanPartitionMetadata",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "partitionPath", "type": "string"},
        {"name": "policy", "type": "string"},
        {"name": "deletePathPatterns", "type": {"type": "array", "items": "string"}},
        {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
        {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}},
        {"name": "isPartitionDeleted", "type": ["null", "boolean"], "default": None},
    ],
}

CLEAN_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanMetadata",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "policy", "type": "string", "default": ""},
        {"name": "startCleanTime", "type": "string"},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "earliestCommitToRetain", "type": "string"},
        {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
        {"name": "partitionMetadata", "type": {"type": "map", "values": _PARTITION_METADATA}},
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "bootstrapPartitionMetadata",
            "type": _nullable({"type": "map", "values": f"{NAMESPACE}.HoodieCleanPartitionMetadata"}),
            "default": None,
        },
    ],
}

_PLAN = fastavro.parse_schema(CLEANER_PLAN_SCHEMA)
_META = fastavro.parse_schema(CLEAN_METADATA_SCHEMA)


@dataclass(frozen=True)
class CleanerPlan:
    """What a clean will delete: ``files`` maps a partition path to table-relative file paths.

    ``earliest_retained`` is the earliest commit whose snapshot the clean keeps whole
    (``earliestInstantToRetain``; its action is ``earliest_action``).
    """

    earliest_retained: str
    earliest_action: str
    files: dict[str, list[str]] = field(default_factory=dict)
    last_completed: str = ""
    """The latest completed write instant when the clean was planned (amcommit keeps it in
    the plan's path list only implicitly; stored in the completed metadata)."""

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.files.values())


@dataclass(frozen=True)
class CleanPartition:
    partition: str
    deleted: list[str]
    """File names (no folder) deleted, or found already gone."""
    failed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CleanMetadata:
    """A completed clean: ``HoodieCleanMetadata``."""

    start_clean_time: str
    time_taken_ms: int
    earliest_retained: str
    last_completed: str
    partitions: list[CleanPartition]

    @property
    def total_deleted(self) -> int:
        return sum(len(p.deleted) for p in self.partitions)


def avro_container(schema: Any, record: dict[str, Any]) -> bytes:
    """``record`` as an Avro container file of one record in ``schema`` (how Hudi writes
    its Avro instant files: clean, rollback, compaction plans). Pure."""
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [record])
    return buf.getvalue()


def one_avro_record(data: bytes, where: str, what: str = "clean instant") -> dict[str, Any]:
    """The one record of an Avro container file, read in the writer's schema;
    :class:`~amcommit.errors.ManifestError` (one line naming ``where`` and ``what`` it
    should be) for bytes that are not one."""
    try:
        records = list(fastavro.reader(io.BytesIO(data)))
    except Exception as e:  # fastavro raises several types for corrupt input
        raise ManifestError(f"{where}: not an Avro {what} ({type(e).__name__}: {e})") from None
    if len(records) != 1 or not isinstance(records[0], dict):
        raise ManifestError(f"{where}: expected one Avro record, found {len(records)}")
    return cast(dict[str, Any], records[0])


def _dir_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def encode_cleaner_plan(plan: CleanerPlan, *, root_uri: str) -> bytes:
    """Avro container bytes of ``HoodieCleanerPlan`` v2. Paths are written as full URIs
    under ``root_uri`` (the table's URI, as Hudi's planner writes them)."""
    base = root_uri.rstrip("/")
    record: dict[str, Any] = {
        "earliestInstantToRetain": {
            "timestamp": plan.earliest_retained,
            "action": plan.earliest_action,
            "state": "COMPLETED",
        },
        "policy": POLICY,
        "filesToBeDeletedPerPartition": None,
        "version": PLAN_VERSION,
        "filePathsToBeDeletedPerPartition": {
            part: [{"filePath": f"{base}/{rel}", "isBootstrapBaseFile": False} for rel in rels]
            for part, rels in plan.files.items()
        },
        "partitionsToBeDeleted": [],
    }
    return avro_container(_PLAN, record)


def decode_cleaner_plan(data: bytes, *, root_uri: str, where: str = "clean plan") -> CleanerPlan:
    """The plan in ``data``; full paths are turned back into table-relative ones."""
    r = one_avro_record(data, where)
    base = root_uri.rstrip("/") + "/"
    files: dict[str, list[str]] = {}
    for part, infos in (r.get("filePathsToBeDeletedPerPartition") or {}).items():
        rels = []
        for info in infos:
            p = info.get("filePath") or ""
            if not p.startswith(base):
                raise ManifestError(f"{where}: path {p!r} is outside the table {root_uri!r}")
            rels.append(p[len(base) :])
        files[part] = rels
    for part, names in (r.get("filesToBeDeletedPerPartition") or {}).items():  # version 1
        files.setdefault(part, []).extend(f"{part}/{n}" if part else n for n in names)
    e = r.get("earliestInstantToRetain") or {}
    return CleanerPlan(
        earliest_retained=str(e.get("timestamp", "")), earliest_action=str(e.get("action", "")), files=files
    )


def encode_clean_metadata(meta: CleanMetadata) -> bytes:
    """Avro container bytes of ``HoodieCleanMetadata`` v2 (file names per partition)."""
    parts = {
        p.partition: {
            "partitionPath": p.partition,
            "policy": POLICY,
            "deletePathPatterns": list(p.deleted) + list(p.failed),
            "successDeleteFiles": list(p.deleted),
            "failedDeleteFiles": list(p.failed),
            "isPartitionDeleted": False,
        }
        for p in meta.partitions
    }
    record = {
        "policy": POLICY,
        "startCleanTime": meta.start_clean_time,
        "timeTakenInMillis": int(meta.time_taken_ms),
        "totalFilesDeleted": meta.total_deleted,
        "earliestCommitToRetain": meta.earliest_retained,
        "lastCompletedCommitTimestamp": meta.last_completed,
        "partitionMetadata": parts,
        "version": METADATA_VERSION,
        "bootstrapPartitionMetadata": {},
    }
    return avro_container(_META, record)


def decode_clean_metadata(data: bytes, *, where: str = "clean metadata") -> CleanMetadata:
    r = one_avro_record(data, where)
    parts = [
        CleanPartition(
            partition=str(p["partitionPath"]),
            deleted=list(p.get("successDeleteFiles") or []),
            failed=list(p.get("failedDeleteFiles") or []),
        )
        for p in (r.get("partitionMetadata") or {}).values()
    ]
    return CleanMetadata(
        start_clean_time=str(r.get("startCleanTime", "")),
        time_taken_ms=int(r.get("timeTakenInMillis", 0)),
        earliest_retained=str(r.get("earliestCommitToRetain", "")),
        last_completed=str(r.get("lastCompletedCommitTimestamp", "")),
        partitions=parts,
    )


def file_name(rel: str) -> str:
    """The last segment of a table-relative path."""
    return rel.rsplit("/", 1)[-1]


def partition_of(rel: str) -> str:
    """The partition path (folder) of a table-relative file path."""
    return _dir_of(rel)
