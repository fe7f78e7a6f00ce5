"""Arrow schema -> Avro schema JSON, as Hudi's Spark writer makes it (pure, no I/O).

Hudi's Spark writer converts the DataFrame schema with spark-avro's rules and then Hudi's
``getAvroSchemaWithDefaults``; this module does the same from an Arrow schema:

- the top-level record is ``<table>_record`` in namespace ``hoodie.<table>``; a nested record
  is named after its field, in the namespace ``<parent namespace>.<parent record name>``
  (elements of lists and values of maps take the name of the field that holds them);
- a nullable type is the union ``["null", T]`` with ``"default": null``;
- int8/int16/int32 -> ``int``, int64 -> ``long``, float32 -> ``float``, float64 -> ``double``,
  string -> ``string``, binary -> ``bytes``, date32 -> ``int``/``date``, timestamps ->
  ``long``/``timestamp-micros`` (with a time zone) or ``local-timestamp-micros`` (without),
  ``timestamp-millis``/``local-timestamp-millis`` for second and millisecond units, decimals
  -> ``fixed`` named ``<namespace>.<field>.fixed`` with the ``decimal`` logical type,
  lists -> ``array``, maps with string keys -> ``map``, structs -> ``record``.

Hudi keeps the meta columns out of ``extraMetadata.schema`` (its readers add them), so
:func:`avro_schema` leaves them out unless asked.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from amcommit.errors import ConfigError
from amcommit.table.naming import META_COLUMNS

__all__ = ["avro_schema", "record_name"]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def record_name(table: str) -> tuple[str, str]:
    """``(name, namespace)`` of the top-level record for table ``table`` (characters Avro
    names cannot hold become ``_``, as Hudi sanitises them)."""
    t = re.sub(r"[^A-Za-z0-9_]", "_", table)
    if not t or t[0].isdigit():
        t = "_" + t
    return f"{t}_record", f"hoodie.{t}"


def _min_bytes_for_precision(precision: int) -> int:
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ConfigError(
            f"column {name!r} cannot be a Hudi (Avro) field name: use letters, digits and '_', "
            "not starting with a digit"
        )
    return name


def _type(t: pa.DataType, nullable: bool, name: str, namespace: str) -> Any:
    out: Any
    if pa.types.is_dictionary(t):
        return _type(t.value_type, nullable, name, namespace)
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_boolean(t):
        out = "boolean"
    elif pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        out = "int"
    elif pa.types.is_uint8(t) or pa.types.is_uint16(t):
        out = "int"
    elif pa.types.is_int64(t) or pa.types.is_uint32(t):
        out = "long"
    elif pa.types.is_float32(t) or pa.types.is_float16(t):
        out = "float"
    elif pa.types.is_float64(t):
        out = "double"
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        out = "string"
    elif (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        out = "bytes"
    elif pa.types.is_date32(t) or pa.types.is_date64(t):
        out = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(t):
        unit = "millis" if t.unit in ("s", "ms") else "micros"
        local = "" if t.tz is not None else "local-"
        out = {"type": "long", "logicalType": f"{local}timestamp-{unit}"}
    elif pa.types.is_decimal(t):
        out = {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}" if namespace else name,
            "size": _min_bytes_for_precision(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        vf = t.value_field
        out = {"type": "array", "items": _type(vf.type, vf.nullable, name, namespace)}
    elif pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise ConfigError(f"column {name!r}: a map's keys must be strings in a Hudi (Avro) schema")
        vf = t.item_field
        out = {"type": "map", "values": _type(vf.type, vf.nullable, name, namespace)}
    elif pa.types.is_struct(t):
        out = _record(list(t), name, namespace)
    else:
        raise ConfigError(f"column {name!r}: Arrow type {t} has no Hudi (Avro) equivalent")
    if nullable:
        return ["null", out]
    return out


def _record(fields: list[pa.Field], name: str, namespace: str) -> dict[str, Any]:
    child_ns = f"{namespace}.{name}" if namespace else name
    avro_fields = []
    for f in fields:
        entry: dict[str, Any] = {
            "name": _check_name(f.name),
            "type": _type(f.type, f.nullable, f.name, child_ns),
        }
        if f.nullable and not pa.types.is_null(f.type):
            entry["default"] = None
        avro_fields.append(entry)
    rec: dict[str, Any] = {"type": "record", "name": _check_name(name)}
    if namespace:
        rec["namespace"] = namespace
    rec["fields"] = avro_fields
    return rec


def avro_schema(schema: pa.Schema, table: str, *, include_meta: bool = False) -> str:
    """The Avro schema (JSON, compact) of rows with Arrow schema ``schema`` in table ``table``.

    Meta columns (``_hoodie_*``) are left out unless ``include_meta``. ConfigError naming the
    column for a name or type Avro cannot express.
    """
    name, namespace = record_name(table)
    fields = [f for f in schema if include_meta or f.name not in META_COLUMNS]
    return json.dumps(_record(fields, name, namespace), separators=(",", ":"))
