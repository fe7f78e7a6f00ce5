"""Apache Hudi's write option names, accepted as aliases of amcommit's (issue 36).

Hudi users bring their options with them. :data:`HUDI_WRITE_NAMES` maps each Hudi name
(``HoodieWriteConfig``, ``DataSourceWriteOptions``, ``HoodieIndexConfig``,
``HoodieCleanConfig``, ``HoodieStorageConfig``) whose setting amcommit has, with the same
meaning, to amcommit's name in the engine (:func:`amcommit.table.mutate.engine.upsert` keyword
arguments, ``config`` fields) and in Spark (``format("amcommit")`` / ``upsert()`` options).
:func:`resolve` rewrites a mapping of options:

* a Hudi name amcommit has is replaced by amcommit's name (values as Hudi spells them:
  ``org.apache.hudi.common.model.DefaultHoodieRecordPayload`` -> the payload's name);
* a Hudi name whose setting amcommit lacks (or lacks on that side) is refused in one line
  saying amcommit does not support it; so is any other ``hoodie.`` name;
* ``hoodie.datasource.write.table.type`` / ``hoodie.table.type``: amcommit's
  ``table_type`` (engine) / ``tableType`` (Spark), ``COPY_ON_WRITE`` or ``MERGE_ON_READ``
  (anything else refused);
* two names of one setting with different values are refused in one line naming both.

Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Literal

from amcommit.errors import ConfigError

__all__ = ["HUDI_WRITE_NAMES", "resolve", "spark_table_type"]

Side = Literal["engine", "spark"]

_TABLE_TYPES = ("COPY_ON_WRITE", "MERGE_ON_READ")

HUDI_WRITE_NAMES: dict[str, tuple[str | None, str | None]] = {
    "hoodie.datasource.write.recordkey.field": ("record_key", "recordKey"),
    "hoodie.datasource.write.partitionpath.field": ("partition_by", "partitionBy"),
    "hoodie.datasource.write.precombine.field": ("precombine_field", "precombineField"),
    "hoodie.datasource.write.operation": ("operation", "operation"),
    "hoodie.datasource.write.payload.class": ("payload", "payload"),
    "hoodie.table.name": ("table_name", "tableName"),
    "hoodie.datasource.write.table.name": ("table_name", "tableName"),
    "hoodie.datasource.write.table.type": ("table_type", "tableType"),
    "hoodie.table.type": ("table_type", "tableType"),
    "hoodie.write.set.null.for.missing.columns": (None, "allowMissingColumns"),
    "hoodie.index.bloom.num_entries": ("bloom.num_entries", None),
    "hoodie.index.bloom.fpp": ("bloom.fpp", None),
    "hoodie.bloom.index.filter.dynamic.max.entries": ("bloom.max_entries", None),
    "hoodie.bloom.index.filter.type": ("bloom.type_code", None),
    "hoodie.clean.commits.retained": ("clean_retain_commits", "clean_retain_commits"),
    "hoodie.cleaner.commits.retained": ("clean_retain_commits", "clean_retain_commits"),
    "hoodie.keep.max.commits": ("keep_max_commits", "keep_max_commits"),
    "hoodie.keep.min.commits": ("keep_min_commits", "keep_min_commits"),
    "hoodie.archive.automatic": ("archive", "archive"),
    "hoodie.parquet.small.file.limit": ("small_file_limit", None),
    "hoodie.compact.inline.max.delta.commits": ("compact_every", "compact_every"),
    "hoodie.compaction.target.io": ("compaction_target_io", "compaction_target_io"),
    "hoodie.parquet.max.file.size": ("max_file_size", "maxFileBytes"),
}
"""Hudi's name (lowercase) -> (amcommit's name in the engine, in Spark); None: not on that
side. ``bloom.<field>``: a field of :class:`~amcommit.table.format.bloom.BloomSettings` (Spark
writes use Hudi's defaults: refused there)."""

_WHERE = {"engine": "the engine's upsert/delete", "spark": "Spark writes"}


def _value(name: str, v: Any) -> Any:
    if name == "payload" and isinstance(v, str):
        return v.strip().rsplit(".", 1)[-1]
    if name.lower() in ("table_type", "tabletype") and isinstance(v, str):
        return v.strip().upper()
    if name in ("operation", "bloom.type_code") and isinstance(v, str):
        return v.strip().lower() if name == "operation" else v.strip().upper()
    return v


def _same(a: Any, b: Any) -> bool:
    return str(a).strip().lower() == str(b).strip().lower()


def resolve(options: Mapping[str, Any], side: Side) -> dict[str, Any]:
    """``options`` with Hudi's names replaced by amcommit's on ``side`` (module doc);
    ConfigError (one line) for a Hudi name amcommit does not support, a table type other
    than ``COPY_ON_WRITE`` / ``MERGE_ON_READ``, or two names of one setting with different values. Names are
    matched case-insensitively; amcommit's own names are compared case-insensitively in
    Spark (Spark lowercases them), exactly in the engine."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # amcommit's name (as compared) -> the name the user gave
    vals: dict[str, Any] = {}

    def fold(k: str) -> str:
        return k.lower() if side == "spark" else k

    for key, value in options.items():
        if not key.lower().startswith("hoodie."):
            out[key] = value
            spelled.setdefault(fold(key), key)
            vals.setdefault(fold(key), value)
    for key, value in options.items():
        low = key.lower()
        if not low.startswith("hoodie."):
            continue
        names = HUDI_WRITE_NAMES.get(low)
        if names is None:
            close = difflib.get_close_matches(low, list(HUDI_WRITE_NAMES), n=1, cutoff=0.85)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"amcommit does not support Hudi option {key!r}{hint} (docs/configuration.md: Hudi's option names)"
            )
        ours = names[0] if side == "engine" else names[1]
        if ours is None:
            raise ConfigError(f"amcommit does not support Hudi option {key!r} in {_WHERE[side]}")
        value = _value(ours, value)
        if ours in ("table_type", "tableType") and value not in _TABLE_TYPES:
            raise ConfigError(f"option {key!r}: table type {value!r} is not one of {', '.join(_TABLE_TYPES)}")
        k = fold(ours)
        if k in spelled:
            if not _same(_value(ours, vals[k]), value):
                raise ConfigError(
                    f"options {spelled[k]!r} and {key!r} name one setting with different values: give one"
                )
            continue
        out[ours] = value
        spelled[k], vals[k] = key, value
    return out


def spark_table_type(options: dict[str, Any]) -> None:
    """Take Spark's ``tableType`` option (any case) out of ``options``: ``COPY_ON_WRITE`` is
    what Spark writes; ``MERGE_ON_READ`` is refused in one line (ConfigError): Spark writes
    of Merge-on-Read tables are not built yet (the engine's upsert/delete write them)."""
    for k in [k for k in options if str(k).lower() == "tabletype"]:
        value = str(options.pop(k)).strip().upper()
        if value == "MERGE_ON_READ":
            raise ConfigError(
                f"option {k!r}: Spark writes MERGE_ON_READ tables not yet; use "
                "amcommit.table.mutate.upsert/delete(table_type='MERGE_ON_READ')"
            )
        if value not in _TABLE_TYPES:
            raise ConfigError(f"option {k!r}: table type {value!r} is not one of {', '.join(_TABLE_TYPES)}")
