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

Schema on write (:func:`evolve_schema`, pure): the schema a write records, from the table's
latest committed schema and the write's own, by Hudi's rules (its Spark writer's
``deduceWriterSchema``: the new schema must read every row the table holds, Avro's
reader/writer compatibility as Hudi's ``AvroSchemaCompatibility`` checks it):

- a column of both keeps its type when the types are equal; a widening Hudi accepts
  (:data:`PROMOTIONS`: ``int`` -> ``long``/``float``/``double``, ``long`` ->
  ``float``/``double``, ``float`` -> ``double``, ``string`` -> ``bytes``) makes the table's
  type the write's; a write narrower than the table by the same rules (an ``int`` into a
  ``long`` column, a ``string`` into a ``bytes`` one) keeps the table's type (Hudi casts
  such a write up; readers cast the file's column when they read it). Anything else is
  refused (:class:`~amcommit.table.errors.SchemaMismatch`, one line naming the column, the
  table's type and the write's). Logical types must be equal (Hudi's Avro check ignores
  them, so it would let a ``date`` become a ``long``; amcommit does not), and a ``bytes``
  column never becomes ``string`` although Avro allows it (a byte string that is not UTF-8
  then reads as null in hudi-rs, measured): it stays ``bytes``;
- a column only in the write is added, always nullable with default null (older files
  read as null; a non-nullable new column would make hudi-rs refuse every older file);
- a column only in the table is refused, unless the write allows missing columns (Hudi's
  ``hoodie.write.set.null.for.missing.columns``): it then stays in the schema, nullable,
  and reads as null for the write's rows;
- nullability: a column nullable on either side is nullable; nested records, arrays and
  maps follow the same rules field by field; the table's column order is kept, new
  columns come last.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

from amcommit.errors import ConfigError
from amcommit.table.errors import SchemaMismatch
from amcommit.table.format.naming import META_COLUMNS

__all__ = [
    "PROMOTIONS",
    "avro_schema",
    "check_file_schema",
    "check_footer",
    "evolve_schema",
    "record_name",
    "type_name",
]

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


PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
}
"""Avro type -> the wider types a column of it may become (Avro's promotions, which Hudi's
schema-on-write check accepts, without ``bytes`` -> ``string``: see the module doc)."""

_WIDENINGS = "int -> long -> float -> double, int/long -> double, string -> bytes"


def _split_null(t: Any) -> tuple[Any, bool]:
    """``(type without "null", nullable)`` of an Avro type."""
    if t == "null":
        return "null", True
    if isinstance(t, list):
        rest = [b for b in t if b != "null"]
        if len(rest) == 1:
            return rest[0], len(rest) < len(t)
        return (rest, True) if len(rest) < len(t) else (t, False)
    return t, False


def _kind(t: Any) -> str:
    if isinstance(t, dict):
        return str(t.get("type"))
    if isinstance(t, list):
        return "union"
    return str(t)


def _logical(t: Any) -> str | None:
    return t.get("logicalType") if isinstance(t, dict) else None


def type_name(t: Any) -> str:
    """A short readable name of an Avro type (``long``, ``decimal(12,2)``, ``date``,
    ``array<string>``, ``struct``) for messages; nullability is not shown."""
    base, _ = _split_null(t)
    kind = _kind(base)
    logical = _logical(base)
    if logical == "decimal":
        return f"decimal({base.get('precision')},{base.get('scale', 0)})"
    if logical:
        return str(logical)
    if kind == "array":
        return f"array<{type_name(base.get('items'))}>"
    if kind == "map":
        return f"map<string,{type_name(base.get('values'))}>"
    if kind == "record":
        return "struct"
    if kind == "union":
        return "union<" + ",".join(type_name(b) for b in base) + ">"
    return kind


def _same_atom(t: Any, n: Any) -> bool:
    """Equal primitive / logical types (names and namespaces of fixed types aside)."""
    if _kind(t) != _kind(n) or _logical(t) != _logical(n):
        return False
    if _kind(t) == "fixed" or _logical(t) == "decimal":
        keys = ("size", "precision", "scale")
        return all(t.get(k) == n.get(k) for k in keys)
    if isinstance(t, dict) and isinstance(n, dict):
        return all(t.get(k) == n.get(k) for k in ("precision", "scale", "size"))
    return True


def _mismatch(path: str, t: Any, n: Any) -> SchemaMismatch:
    return SchemaMismatch(
        f"column {path!r}: the table's type is {type_name(t)}, the write's is {type_name(n)}; "
        f"Hudi's schema-on-write rules accept only the same type or a widening ({_WIDENINGS})",
        column=path,
    )


def _nullable(t: Any) -> Any:
    base, nullable = _split_null(t)
    if nullable:
        return t
    return ["null", base]


def _merge_type(t: Any, n: Any, path: str, allow_missing: bool) -> Any:
    tb, tn = _split_null(t)
    nb, nn = _split_null(n)
    if tb == "null":  # a column of nulls only (Spark's void) takes the other side's type
        return _nullable(n)
    if nb == "null":
        return _nullable(t)
    base = _merge_base(tb, nb, path, allow_missing)
    if tn or nn:
        return ["null", base] if not isinstance(base, list) else ["null", *base]
    return base


def _merge_base(t: Any, n: Any, path: str, allow_missing: bool) -> Any:
    kt, kn = _kind(t), _kind(n)
    if kt == kn == "record":
        return _merge_record(t, n, path, allow_missing)
    if kt == kn == "array":
        items = _merge_type(t.get("items"), n.get("items"), f"{path}.element", allow_missing)
        return {**t, "items": items}
    if kt == kn == "map":
        values = _merge_type(t.get("values"), n.get("values"), f"{path}.value", allow_missing)
        return {**t, "values": values}
    if kt == "union" or kn == "union":
        if t == n:
            return t
        raise _mismatch(path, t, n)
    if kt in ("record", "array", "map") or kn in ("record", "array", "map"):
        raise _mismatch(path, t, n)
    if _same_atom(t, n):
        return t
    if _logical(t) is None and _logical(n) is None:
        if kn in PROMOTIONS.get(kt, ()):
            return n  # a widening: the table's type becomes the write's
        if kt in PROMOTIONS.get(kn, ()):
            return t  # the write is narrower: readers cast its files up
    raise _mismatch(path, t, n)


def _missing(path: str, t: Any, renamed: str | None) -> SchemaMismatch:
    if renamed is not None:
        why = f"the write has {renamed!r} (Hudi's column names are case-sensitive)"
    else:
        why = "the write leaves it out"
    return SchemaMismatch(
        f"column {path!r} ({type_name(t)}) of the table is missing from the write: {why}; refused, as "
        "Hudi does, unless the write allows missing columns (Spark option allowMissingColumns=true, "
        "begin_write(allow_missing_columns=True)): the column then reads as null for its rows",
        column=path,
    )


def _merge_record(t: dict[str, Any], n: dict[str, Any], path: str, allow_missing: bool) -> dict[str, Any]:
    prefix = f"{path}." if path else ""
    new_fields = {f["name"]: f for f in n.get("fields", [])}
    table_names = {f["name"] for f in t.get("fields", [])}
    out: list[dict[str, Any]] = []
    for f in t.get("fields", []):
        name = f["name"]
        g = new_fields.get(name)
        if g is None:
            if name in META_COLUMNS:
                out.append(f)
                continue
            if not allow_missing:
                renamed = next(
                    (k for k in new_fields if k.lower() == name.lower() and k not in table_names), None
                )
                raise _missing(prefix + name, f["type"], renamed)
            merged = _nullable(f["type"])
        else:
            merged = _merge_type(f["type"], g["type"], prefix + name, allow_missing)
        entry = {**f, "type": merged}
        if _split_null(merged)[1] and "default" not in entry:
            entry["default"] = None
        out.append(entry)
    for name, g in new_fields.items():
        if name in table_names:
            continue
        entry = {k: v for k, v in g.items() if k != "default"}
        entry["type"] = _nullable(g["type"])
        entry["default"] = None
        out.append(entry)
    return {**t, "fields": out}


def evolve_schema(table_schema: str | None, write_schema: str, *, allow_missing: bool = False) -> str:
    """The Avro schema (JSON) a write records in its commit, from the table's latest
    committed schema (None: the table has none yet; the write's is taken as it is) and the
    write's own (:func:`avro_schema`), by the rules of the module doc. Pure.

    Returns ``table_schema`` itself (the same string) when the write changes nothing.
    :class:`~amcommit.table.errors.SchemaMismatch` (one line naming the column) when the
    write breaks the rules; ConfigError if either is not an Avro record schema."""
    if table_schema is None:
        return write_schema
    try:
        t = json.loads(table_schema)
        n = json.loads(write_schema)
    except ValueError:
        raise ConfigError("a table or write schema is not JSON (an Avro schema)") from None
    if _kind(t) != "record" or _kind(n) != "record":
        raise ConfigError("a table or write schema is not an Avro record schema")
    merged = _merge_record(t, n, "", allow_missing)
    if merged == t:
        return table_schema
    return json.dumps(merged, separators=(",", ":"))


_TIMESTAMPS = frozenset(
    {"timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"}
)


def _bare(t: Any) -> Any:
    """An Avro type without nullability, defaults, names and namespaces (for comparing a
    file's column with the write's): a timestamp of any unit or zone is one kind (the
    footer of a file written with INT96 timestamps reads back without its zone)."""
    base, _ = _split_null(t)
    if isinstance(base, list):
        return ["union", *[_bare(b) for b in base]]
    if not isinstance(base, dict):
        return base
    kind = _kind(base)
    if kind == "record":
        return ["record", *[[f["name"], _bare(f["type"])] for f in base.get("fields", [])]]
    if kind == "array":
        return ["array", _bare(base.get("items"))]
    if kind == "map":
        return ["map", _bare(base.get("values"))]
    if _logical(base) in _TIMESTAMPS:
        return "timestamp"
    return {k: v for k, v in base.items() if k not in ("name", "namespace", "default", "doc")}


def _at(t: Any, path: str) -> Any:
    """The type of nested field ``path`` (dotted, first part the column itself) in ``t``
    (``element``/``value`` step into arrays and maps); None if there is none. Pure."""
    for part in path.split(".")[1:]:
        base, _ = _split_null(t)
        kind = _kind(base)
        if kind == "array" and part == "element":
            t = base.get("items")
        elif kind == "map" and part == "value":
            t = base.get("values")
        elif kind == "record":
            t = next((f["type"] for f in base.get("fields", []) if f["name"] == part), None)
        else:
            return None
    return t


def _file_mismatch(where: str, column: str, why: str) -> SchemaMismatch:
    return SchemaMismatch(
        f"base file {where!r}: column {column!r} {why}; refused before it is published (a base file "
        "must hold the write's schema, or a narrower type Hudi's readers cast up)",
        column=column,
    )


def check_file_schema(where: str, file_schema: pa.Schema, write_schema: str) -> None:
    """Check a base file's own schema (``file_schema``, from its Parquet footer) against the
    Avro schema its write records (``write_schema``, JSON). Pure.

    Each data column of the file (meta columns aside) must be a column of the write's schema
    with the same type, or one narrower by the widenings of :data:`PROMOTIONS` (readers cast
    it up; nested fields alike; nullability and timestamp units are not compared); a
    non-nullable column of the write's schema must be in the file. Anything else raises
    :class:`~amcommit.table.errors.SchemaMismatch`, one line naming the file and the column."""
    try:
        mine = json.loads(avro_schema(file_schema, "file"))
    except ConfigError as e:
        raise SchemaMismatch(f"base file {where!r}: {e}") from None
    try:
        theirs = json.loads(write_schema)
    except ValueError:
        raise ConfigError("the write's schema is not JSON (an Avro schema)") from None
    wanted = {f["name"]: f["type"] for f in theirs.get("fields", [])}
    present = set()
    for g in mine.get("fields", []):
        name = g["name"]
        present.add(name)
        t = wanted.get(name)
        if t is None:
            raise _file_mismatch(where, name, "is not in the write's schema")
        why = f"is {type_name(g['type'])} in the file but {type_name(t)} in the write's schema"
        if _bare(t) == _bare(g["type"]):
            continue
        try:
            merged = _merge_type(t, g["type"], name, True)
        except SchemaMismatch as e:
            col = e.column or name
            if col != name:  # a nested field: name its own types
                inner_t, inner_g = _at(t, col), _at(g["type"], col)
                why = f"is {type_name(inner_g)} in the file but {type_name(inner_t)} in the write's schema"
            raise _file_mismatch(where, col, why) from None
        if _bare(merged) != _bare(t):  # the file's type is wider than the write's
            raise _file_mismatch(where, name, why)
    for name, t in wanted.items():
        if name not in present and name not in META_COLUMNS and not _split_null(t)[1]:
            raise _file_mismatch(where, name, f"({type_name(t)}, not nullable) is missing from the file")


def check_footer(where: str, source: bytes | str, write_schema: str | None) -> None:
    """:func:`check_file_schema` of a base file given as its bytes or a local path: only its
    Parquet footer is read. Nothing is checked when ``write_schema`` is None (a write that
    declared no schema: its commit derives one from a file). SchemaMismatch naming the file
    when its bytes are not Parquet."""
    if not write_schema:
        return
    import pyarrow.parquet as pq

    try:
        file_schema = pq.read_schema(pa.BufferReader(source) if isinstance(source, bytes) else source)
    except (pa.ArrowException, OSError) as e:
        raise SchemaMismatch(f"base file {where!r}: not a Parquet file ({e})") from None
    check_file_schema(where, file_schema, write_schema)
