"""Partition folder names and record keys of a table's rows, as Spark and Hudi's key
generators write them (pure; pyarrow).

- Partition folders are Hive style, ``col=value`` per partition column, escaped as Spark's
  ``ExternalCatalogUtils.escapePathName`` escapes them (``%XX``), a null or empty value as
  ``__HIVE_DEFAULT_PARTITION__`` (:func:`partition_dir`).
- ``_hoodie_record_key`` is the value of a single key column (Hudi's ``SimpleKeyGenerator``)
  or ``f1:v1,f2:v2`` for several (``ComplexKeyGenerator``; ``__null__`` / ``__empty__`` for a
  null / empty value) (:func:`record_keys`).

Used by the Spark writer (:mod:`amcommit.spark.parquet`, which re-exports them) and by
record-level writes (:mod:`amcommit.table.mutate.engine`).
"""

from __future__ import annotations

import datetime
import decimal
import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from amcommit.errors import ConfigError

__all__ = [
    "EMPTY_KEY",
    "HIVE_DEFAULT_PARTITION",
    "NULL_KEY",
    "RecordKeyError",
    "escape_path_name",
    "partition_dir",
    "partition_value",
    "record_keys",
]

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# characters Spark's ExternalCatalogUtils.escapePathName escapes (besides controls)
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^")


def escape_path_name(s: str) -> str:
    """Escape a partition column name or value as Spark does (``%XX``)."""
    if not any(c in _ESCAPED or ord(c) < 0x20 for c in s):
        return s
    return "".join(f"%{ord(c):02X}" if (c in _ESCAPED or ord(c) < 0x20) else c for c in s)


def partition_value(v: Any) -> str:
    """A partition value as Spark prints it in a directory name (unescaped)."""
    if v is None:
        return HIVE_DEFAULT_PARTITION
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return repr(v)
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, datetime.datetime):
        s = v.strftime("%Y-%m-%d %H:%M:%S")
        if v.microsecond:
            s += f".{v.microsecond:06d}".rstrip("0")
        return s
    if isinstance(v, datetime.date):
        return v.isoformat()
    s = str(v)
    return s if s else HIVE_DEFAULT_PARTITION


def partition_dir(columns: tuple[str, ...], values: tuple[Any, ...]) -> str:
    """``a=1/b=x`` for the given partition values."""
    return "/".join(
        f"{escape_path_name(c)}={escape_path_name(partition_value(v))}"
        for c, v in zip(columns, values, strict=True)
    )


NULL_KEY = "__null__"
EMPTY_KEY = "__empty__"


class RecordKeyError(ConfigError):
    """A row whose record key column is null or empty (one line, names the column)."""


def _key_strings(arr: pa.Array) -> pa.Array:
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr.cast(pa.string())
    return pc.cast(arr, pa.string())


def record_keys(batch: pa.RecordBatch, fields: tuple[str, ...]) -> pa.Array:
    """``_hoodie_record_key`` of each row as Hudi's key generators format it: the value of a
    single key column (SimpleKeyGenerator; null or empty is an error), or
    ``f1:v1,f2:v2`` for several (ComplexKeyGenerator; ``__null__`` / ``__empty__`` for a
    null / empty value, an error when all are). Pure."""
    cols = [_key_strings(batch.column(batch.schema.get_field_index(f))) for f in fields]
    if len(fields) == 1:
        col = cols[0]
        if col.null_count or (len(col) and pc.any(pc.equal(col, "")).as_py()):
            raise RecordKeyError(
                f"record key column {fields[0]!r} is null or empty in a row: every row needs a key"
            )
        return col
    parts: list[pa.Array] = []
    missing: pa.Array | None = None
    for name, col in zip(fields, cols, strict=True):
        absent = pc.or_(pc.is_null(col), pc.equal(pc.fill_null(col, ""), ""))
        missing = absent if missing is None else pc.and_(missing, absent)
        value = pc.if_else(
            pc.is_null(col), NULL_KEY, pc.if_else(pc.equal(pc.fill_null(col, ""), ""), EMPTY_KEY, col)
        )
        parts.append(pc.binary_join_element_wise(pa.scalar(name + ":"), value, ""))
    if missing is not None and len(missing) and pc.any(missing).as_py():
        raise RecordKeyError(f"record key columns {', '.join(fields)} are all null or empty in a row")
    return pc.binary_join_element_wise(*parts, ",")
