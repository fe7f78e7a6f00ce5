"""Input checks of an upsert or delete (pure): columns present, key types, partition paths
and record keys as Hudi forms them. Each refusal is one line naming the bad thing
(:class:`~amcommit.table.errors.MutationError`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
from amcommit.table.errors import MutationError

# -- input checks (pure) ------------------------------------------------------------------


def _names(v: str | Sequence[str]) -> tuple[str, ...]:
    """Column names: a sequence, or one string of comma-separated names (``"a,b"``: two
    columns, as the Spark source's ``recordKey`` / ``partitionBy`` and Hudi's
    ``hoodie.datasource.write.recordkey.field`` read it)."""
    names = [c.strip() for c in v.split(",")] if isinstance(v, str) else list(v)
    return tuple(c for c in names if c)


def check_columns(
    data: pa.Table, record_key: tuple[str, ...], partition_by: tuple[str, ...], precombine_field: str | None
) -> None:
    """MutationError (one line) for a key, partition or precombine column the data lacks, or
    a null precombine value."""
    cols = set(data.column_names)
    for what, names in (("record key", record_key), ("partition", partition_by)):
        for c in names:
            if c not in cols:
                raise MutationError(
                    f"{what} column {c!r} is not in the data (columns: {', '.join(data.column_names)})"
                )
    if precombine_field is not None:
        if precombine_field not in cols:
            raise MutationError(
                f"precombine column {precombine_field!r} is not in the data (columns: {', '.join(data.column_names)})"
            )
        if data.column(precombine_field).null_count:
            raise MutationError(
                f"precombine column {precombine_field!r} is null in a row: every row needs a value"
            )


def check_key_types(
    table_schema: str | None, data: pa.Table, record_key: tuple[str, ...], table: str
) -> tuple[str, ...]:
    """MutationError if a key column's type differs from the table's (its committed schema),
    except an ``int`` column of a ``long`` key (Hudi promotes it: the key strings are the
    same). Returns the key columns to cast to ``long`` (pure)."""
    if not table_schema:
        return ()
    from amcommit.table.format.schema import _split_null, avro_schema, type_name

    stored = {f["name"]: f["type"] for f in json.loads(table_schema).get("fields", [])}
    mine = {
        f["name"]: f["type"]
        for f in json.loads(avro_schema(data.select(list(record_key)).schema, table))["fields"]
    }
    widen: list[str] = []
    for c in record_key:
        if c not in stored:
            continue
        a, b = _split_null(stored[c])[0], _split_null(mine[c])[0]
        if (type_name(a), type_name(b)) == ("long", "int"):
            widen.append(c)
        elif type_name(a) != type_name(b):
            raise MutationError(
                f"record key column {c!r} is {type_name(b)} in the data but {type_name(a)} in the table"
            )
    return tuple(widen)


def partition_paths(data: pa.Table, partition_by: tuple[str, ...]) -> list[str]:
    from amcommit.table.format.keys import partition_dir

    if not partition_by:
        return [""] * data.num_rows
    if len(partition_by) == 1 and data.num_rows:  # one folder name per distinct value
        enc = data.column(partition_by[0]).combine_chunks().dictionary_encode()
        if enc.indices.null_count == 0:
            dirs = [partition_dir(partition_by, (v,)) for v in enc.dictionary.to_pylist()]
            return [dirs[i] for i in enc.indices.to_numpy().tolist()]
    cols = [data.column(c).to_pylist() for c in partition_by]
    cache: dict[tuple[Any, ...], str] = {}
    out = []
    for values in zip(*cols, strict=True):
        p = cache.get(values)
        if p is None:
            p = cache[values] = partition_dir(partition_by, values)
        out.append(p)
    return out


def record_key_strings(data: pa.Table, record_key: tuple[str, ...]) -> list[str]:
    from amcommit.table.format.keys import RecordKeyError, record_keys

    try:
        arr = (
            record_keys(data.select(list(record_key)).combine_chunks().to_batches()[0], record_key)
            if data.num_rows
            else None
        )
    except RecordKeyError as e:
        raise MutationError(str(e)) from None
    return [] if arr is None else arr.to_pylist()
