"""The session's SQL settings that Spark's own Parquet writer honours, honoured the same way.

A Python data source's driver-side ``writer()`` and ``commit()`` never see the session's
SQL conf, but its tasks do: every setting changed on the session (``spark.conf.set`` or the
builder's ``.config``) reaches ``write()`` as a ``TaskContext`` local property; settings
left at their default are absent (Spark's default applies). So each task reads them,
applies those that shape its files (codec, records per file) and reports the effective
partition overwrite mode to the driver in its commit message; the driver commits with that
mode (:func:`job_conflict_mode`).

Precedence is Spark's: a write option (``.option("compression", ...)``, also given as
``spark.amcommit.<option>`` through :func:`amcommit.spark.register`) beats the session
setting, which beats the default. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from amcommit.committer.config import ConflictMode
from amcommit.errors import CommitError, ConfigError
from amcommit.spark.options import COMPRESSIONS, WritePlan

PARTITION_OVERWRITE_MODE = "spark.sql.sources.partitionOverwriteMode"
PARQUET_CODEC = "spark.sql.parquet.compression.codec"
MAX_RECORDS_PER_FILE = "spark.sql.files.maxRecordsPerFile"
OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
SESSION_KEYS = (PARTITION_OVERWRITE_MODE, PARQUET_CODEC, MAX_RECORDS_PER_FILE, OUTPUT_TIMESTAMP_TYPE)
"""The session settings read from the task's local properties."""


@dataclass(frozen=True)
class TaskSettings:
    """What one task writes with, after option > session > default."""

    compression: str | None
    max_records_per_file: int
    overwrite_mode: str | None
    """``"static"`` or ``"dynamic"`` for an overwrite, None for an append."""
    int96_timestamps: bool = True
    """Timestamps as INT96, Spark's default ``outputTimestampType``; False for
    ``TIMESTAMP_MICROS`` / ``TIMESTAMP_MILLIS`` (written as INT64 microseconds)."""


def _given(plan: WritePlan, option: str) -> bool:
    return option in plan.explicit


def task_settings(plan: WritePlan, props: Mapping[str, str | None]) -> TaskSettings:
    """The settings a task uses, from the plan and the task's local properties ``props``."""
    compression = plan.compression
    codec = props.get(PARQUET_CODEC)
    if codec and not _given(plan, "compression"):
        name = codec.strip().lower()
        if name not in COMPRESSIONS:
            raise ConfigError(  # (the value is not shown: it may be anything, a secret too)
                f"the session's {PARQUET_CODEC} is not one amcommit supports "
                f"({', '.join(sorted(COMPRESSIONS))}); set .option('compression', ...)"
            )
        compression = COMPRESSIONS[name]
    max_records = plan.max_records_per_file
    raw = props.get(MAX_RECORDS_PER_FILE)
    if raw and not _given(plan, "maxrecordsperfile"):
        try:
            max_records = max(0, int(raw))  # Spark: zero or negative means no limit
        except ValueError:
            raise ConfigError(f"the session's {MAX_RECORDS_PER_FILE} must be an integer") from None
    mode: str | None = None
    if plan.overwrite:
        mode = "dynamic" if plan.conflict_mode == "replace" else "static"
        session_mode = props.get(PARTITION_OVERWRITE_MODE)
        if session_mode and not (_given(plan, "partitionoverwritemode") or _given(plan, "conflict_mode")):
            mode = session_mode.strip().lower()
            if mode not in ("static", "dynamic"):
                raise ConfigError(f"the session's {PARTITION_OVERWRITE_MODE} must be static or dynamic")
    ts_type = (props.get(OUTPUT_TIMESTAMP_TYPE) or "INT96").strip().upper()
    if ts_type not in ("INT96", "TIMESTAMP_MICROS", "TIMESTAMP_MILLIS"):
        raise ConfigError(
            f"the session's {OUTPUT_TIMESTAMP_TYPE} must be INT96, TIMESTAMP_MICROS or TIMESTAMP_MILLIS"
        )
    return TaskSettings(
        compression=compression,
        max_records_per_file=max_records,
        overwrite_mode=mode,
        int96_timestamps=ts_type == "INT96",
    )


class _HasMode(Protocol):
    @property
    def overwrite_mode(self) -> str | None: ...


def job_conflict_mode(plan: WritePlan, results: Sequence[_HasMode]) -> ConflictMode:
    """The conflict mode of the job commit: the plan's, unless this is an overwrite whose
    partition overwrite mode was left to the session; then the one every task reported.

    Refuses (:class:`~amcommit.errors.CommitError`, before anything is changed) when the
    tasks disagree or when no task ran, rather than guess and wipe partitions."""
    if not plan.overwrite or _given(plan, "partitionoverwritemode") or _given(plan, "conflict_mode"):
        return plan.conflict_mode
    modes = {r.overwrite_mode for r in results}
    if not modes:
        raise CommitError(
            "no task ran, so the session's spark.sql.sources.partitionOverwriteMode is unknown and "
            "an overwrite could wipe partitions it should keep; nothing was changed "
            "(set .option('partitionOverwriteMode', 'static' or 'dynamic'))",
            stage="commit_job",
        )
    if len(modes) != 1 or None in modes:
        raise CommitError(
            f"the tasks saw different partition overwrite modes ({sorted(str(m) for m in modes)}); "
            "nothing was changed (set .option('partitionOverwriteMode', ...))",
            stage="commit_job",
        )
    return "replace" if modes.pop() == "dynamic" else "overwrite"


__all__ = [
    "MAX_RECORDS_PER_FILE",
    "OUTPUT_TIMESTAMP_TYPE",
    "PARQUET_CODEC",
    "PARTITION_OVERWRITE_MODE",
    "SESSION_KEYS",
    "TaskSettings",
    "job_conflict_mode",
    "task_settings",
]
