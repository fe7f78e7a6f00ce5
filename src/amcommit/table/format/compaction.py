"""The compaction plan, Hudi's ``HoodieCompactionPlan`` as Avro (table version 6; pure, no I/O).

``<t>.compaction.requested`` (and ``.inflight``) hold one Avro *object container file* record of
``HoodieCompactionPlan``: per file slice to compact one ``HoodieCompactionOperation``
(``baseInstantTime``, ``deltaFilePaths``, ``dataFilePath``, ``fileId``, ``partitionPath``,
``metrics``, ``bootstrapFilePath``), ``extraMetadata`` and ``version``. Version 2 (what Hudi
0.14 writes, ``CompactionUtils.LATEST_COMPACTION_METADATA_VERSION``) stores file *names*
(relative to the partition); version 1 stored full paths, which are read back as names.

The schema below is written here from the field names, types and defaults of Apache Hudi's
``HoodieCompactionOperation.avsc`` (namespace ``org.apache.hudi.avro.model``), so a Java
reader resolving its own schema against ours finds every field. A compaction completes as a
``<t>.commit`` whose commit metadata says ``"compacted": true`` (:mod:`.model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import fastavro

from amcommit.errors import ManifestError
from amcommit.table.format.avro_meta import avro_container, one_avro_record

__all__ = [
    "COMPACTION_PLAN_SCHEMA",
    "PLAN_VERSION",
    "CompactionOperation",
    "CompactionPlan",
    "decode_compaction_plan",
    "encode_compaction_plan",
]

NAMESPACE = "org.apache.hudi.avro.model"
PLAN_VERSION = 2


def _nullable(t: Any) -> list[Any]:
    return ["null", t]


COMPACTION_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCompactionPlan",
    "namespace": NAMESPACE,
    "fields": [
        {
            "name": "operations",
            "type": _nullable(
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieCompactionOperation",
                        "fields": [
                            {"name": "baseInstantTime", "type": _nullable("string")},
                            {
                                "name": "deltaFilePaths",
                                "type": _nullable({"type": "array", "items": "string"}),
                                "default": None,
                            },
                            {"name": "dataFilePath", "type": _nullable("string"), "default": None},
                            {"name": "fileId", "type": _nullable("string")},
                            {"name": "partitionPath", "type": _nullable("string"), "default": None},
                            {
                                "name": "metrics",
                                "type": _nullable({"type": "map", "values": "double"}),
                                "default": None,
                            },
                            {"name": "bootstrapFilePath", "type": _nullable("string"), "default": None},
                        ],
                    },
                }
            ),
            "default": None,
        },
        {
            "name": "extraMetadata",
            "type": _nullable({"type": "map", "values": "string"}),
            "default": None,
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

_PLAN = fastavro.parse_schema(COMPACTION_PLAN_SCHEMA)


@dataclass(frozen=True, slots=True)
class CompactionOperation:
    """One file slice to compact: its base file (``data_file``, a file name; None for a
    log-only group), its log files (``delta_files``, names, oldest first) and Hudi's metrics
    (``TOTAL_LOG_FILES``, ``TOTAL_LOG_FILES_SIZE``, ``TOTAL_IO_MB``, ...)."""

    file_id: str
    partition: str
    base_instant: str
    delta_files: tuple[str, ...] = ()
    data_file: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    bootstrap_file: str | None = None


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """The operations of one compaction, and the plan's ``extraMetadata``."""

    operations: tuple[CompactionOperation, ...]
    extra: Mapping[str, str] = field(default_factory=dict)
    version: int = PLAN_VERSION


def encode_compaction_plan(plan: CompactionPlan) -> bytes:
    """Avro container bytes of ``HoodieCompactionPlan`` (the content of
    ``<t>.compaction.requested``)."""
    record = {
        "operations": [
            {
                "baseInstantTime": op.base_instant,
                "deltaFilePaths": list(op.delta_files),
                "dataFilePath": op.data_file,
                "fileId": op.file_id,
                "partitionPath": op.partition,
                "metrics": {k: float(v) for k, v in op.metrics.items()},
                "bootstrapFilePath": op.bootstrap_file,
            }
            for op in plan.operations
        ],
        "extraMetadata": dict(plan.extra),
        "version": plan.version,
    }
    return avro_container(_PLAN, record)


def _name(path: str | None) -> str | None:
    return None if path is None else path.rsplit("/", 1)[-1]


def decode_compaction_plan(data: bytes, *, where: str = "compaction plan") -> CompactionPlan:
    """The plan in ``data`` (Avro container, read in the writer's schema). Version-1 full
    paths come back as file names. Raises :class:`~amcommit.errors.ManifestError` (one line
    naming ``where``) for bytes that are no plan."""
    r = one_avro_record(data, where, "compaction plan")
    ops = []
    for o in r.get("operations") or []:
        if not o.get("fileId") or o.get("baseInstantTime") is None:
            raise ManifestError(f"{where}: an operation without fileId or baseInstantTime")
        ops.append(
            CompactionOperation(
                file_id=str(o["fileId"]),
                partition=str(o.get("partitionPath") or ""),
                base_instant=str(o["baseInstantTime"]),
                delta_files=tuple(cast(str, _name(p)) for p in (o.get("deltaFilePaths") or [])),
                data_file=_name(o.get("dataFilePath")),
                metrics=dict(o.get("metrics") or {}),
                bootstrap_file=o.get("bootstrapFilePath"),
            )
        )
    version = r.get("version")
    return CompactionPlan(
        tuple(ops), dict(r.get("extraMetadata") or {}), int(version) if version is not None else 1
    )
