"""Rollback instants' content as Avro, the way Hudi's Java timeline writes it (table version 6).

A rollback of a failed write ``T`` is the instant ``R`` (later than every instant on the
timeline) recorded in three files:

- ``<R>.rollback.requested``: ``HoodieRollbackPlan`` (the instant to roll back and the
  requests: per partition the files to delete, full paths);
- ``<R>.rollback.inflight``: empty (as Java writes it);
- ``<R>.rollback``: ``HoodieRollbackMetadata`` (files deleted per partition, full paths, the
  instant rolled back).

The schemas are those of Apache Hudi's ``HoodieRollbackPlan.avsc`` and
``HoodieRollbackMetadata.avsc`` (namespace ``org.apache.hudi.avro.model``), checked against the
Java-written ``v6_nonpartitioned_rollback`` table (``tests/data/hudi-java/mor-v6``). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fastavro

from amcommit.errors import ManifestError
from amcommit.table.format.avro_meta import avro_container, one_avro_record

__all__ = [
    "ROLLBACK_METADATA_SCHEMA",
    "ROLLBACK_PLAN_SCHEMA",
    "RollbackMetadata",
    "RollbackPlan",
    "decode_rollback_metadata",
    "decode_rollback_plan",
    "encode_rollback_metadata",
    "encode_rollback_plan",
]

NAMESPACE = "org.apache.hudi.avro.model"

_INSTANT_INFO: dict[str, Any] = {
    "type": "record",
    "name": "HoodieInstantInfo",
    "namespace": NAMESPACE,
    "fields": [{"name": "commitTime", "type": "string"}, {"name": "action", "type": "string"}],
}

ROLLBACK_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackPlan",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "instantToRollback", "type": ["null", _INSTANT_INFO], "default": None},
        {
            "name": "RollbackRequests",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieRollbackRequest",
                        "fields": [
                            {"name": "partitionPath", "type": "string"},
                            {"name": "fileId", "type": ["null", "string"], "default": None},
                            {"name": "latestBaseInstant", "type": ["null", "string"], "default": None},
                            {
                                "name": "filesToBeDeleted",
                                "type": {"type": "array", "items": "string"},
                                "default": [],
                            },
                            {
                                "name": "logBlocksToBeDeleted",
                                "type": ["null", {"type": "map", "values": "long"}],
                                "default": None,
                            },
                        ],
                    },
                },
            ],
            "default": None,
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

ROLLBACK_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackMetadata",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "startRollbackTime", "type": "string"},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "commitsRollback", "type": {"type": "array", "items": "string"}},
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "HoodieRollbackPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": "string"},
                        {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
                        {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}},
                        {
                            "name": "rollbackLogFiles",
                            "type": ["null", {"type": "map", "values": "long"}],
                            "default": None,
                        },
                        {
                            "name": "logFilesFromFailedCommit",
                            "type": ["null", {"type": "map", "values": "long"}],
                            "default": None,
                        },
                    ],
                },
            },
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "instantsRollback", "type": {"type": "array", "items": _INSTANT_INFO}, "default": []},
    ],
}

_PLAN = fastavro.parse_schema(ROLLBACK_PLAN_SCHEMA)
_META = fastavro.parse_schema(ROLLBACK_METADATA_SCHEMA)


@dataclass(frozen=True)
class RollbackPlan:
    """What a rollback will delete: ``files`` by partition (table-relative paths)."""

    target: str
    """The instant rolled back."""
    action: str
    """Its action (``deltacommit``, ``commit``...)."""
    files: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class RollbackMetadata:
    """A completed rollback: ``deleted`` by partition (table-relative paths)."""

    instant: str
    target: str
    action: str
    time_taken_ms: int
    deleted: dict[str, list[str]] = field(default_factory=dict)


def _rel(path: str, base: str, where: str) -> str:
    if not path.startswith(base):
        raise ManifestError(f"{where}: path {path!r} is outside the table {base.rstrip('/')!r}")
    return path[len(base) :]


def encode_rollback_plan(plan: RollbackPlan, *, root_uri: str) -> bytes:
    """Avro container bytes of ``HoodieRollbackPlan`` v1: one request per partition whose
    ``filesToBeDeleted`` are full paths under ``root_uri`` (as Java's marker-based planner
    writes the requests of files it deletes: no file id, no base instant)."""
    base = root_uri.rstrip("/")
    record: dict[str, Any] = {
        "instantToRollback": {"commitTime": plan.target, "action": plan.action},
        "RollbackRequests": [
            {
                "partitionPath": part,
                "fileId": "",
                "latestBaseInstant": "",
                "filesToBeDeleted": [f"{base}/{rel}" for rel in rels],
                "logBlocksToBeDeleted": {},
            }
            for part, rels in sorted(plan.files.items())
        ],
        "version": 1,
    }
    return avro_container(_PLAN, record)


def decode_rollback_plan(data: bytes, *, root_uri: str, where: str = "rollback plan") -> RollbackPlan:
    """The plan in ``data`` (ManifestError, one line, if it is not one); full paths are
    turned back into table-relative ones (a path outside the table is refused)."""
    r = one_avro_record(data, where, "rollback instant")
    base = root_uri.rstrip("/") + "/"
    target = r.get("instantToRollback") or {}
    files: dict[str, list[str]] = {}
    for req in r.get("RollbackRequests") or []:
        rels = [_rel(p, base, where) for p in req.get("filesToBeDeleted") or []]
        if rels:
            files.setdefault(str(req.get("partitionPath", "")), []).extend(rels)
    return RollbackPlan(str(target.get("commitTime", "")), str(target.get("action", "")), files)


def encode_rollback_metadata(meta: RollbackMetadata, *, root_uri: str) -> bytes:
    """Avro container bytes of ``HoodieRollbackMetadata`` v1 (deleted files as full paths)."""
    base = root_uri.rstrip("/")
    record: dict[str, Any] = {
        "startRollbackTime": meta.instant,
        "timeTakenInMillis": meta.time_taken_ms,
        "totalFilesDeleted": sum(len(v) for v in meta.deleted.values()),
        "commitsRollback": [meta.target],
        "partitionMetadata": {
            part: {
                "partitionPath": part,
                "successDeleteFiles": [f"{base}/{rel}" for rel in rels],
                "failedDeleteFiles": [],
                "rollbackLogFiles": {},
                "logFilesFromFailedCommit": {},
            }
            for part, rels in sorted(meta.deleted.items())
        },
        "version": 1,
        "instantsRollback": [{"commitTime": meta.target, "action": meta.action}],
    }
    return avro_container(_META, record)


def decode_rollback_metadata(
    data: bytes, *, root_uri: str, where: str = "rollback metadata"
) -> RollbackMetadata:
    """The metadata in ``data`` (ManifestError, one line, if it is not one)."""
    r = one_avro_record(data, where, "rollback instant")
    base = root_uri.rstrip("/") + "/"
    infos = r.get("instantsRollback") or [{}]
    commits = r.get("commitsRollback") or [""]
    deleted = {
        str(part): [_rel(p, base, where) for p in pm.get("successDeleteFiles") or []]
        for part, pm in (r.get("partitionMetadata") or {}).items()
    }
    return RollbackMetadata(
        instant=str(r.get("startRollbackTime", "")),
        target=str(commits[0]),
        action=str(infos[0].get("action", "")),
        time_taken_ms=int(r.get("timeTakenInMillis", 0)),
        deleted=deleted,
    )
