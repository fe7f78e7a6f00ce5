"""The column-wise Avro codec (amcommit.table.format.avro_columns) against fastavro, the
record-by-record path it replaces: byte-identical encodes and equal decodes for random flat
tables in every type ``format/schema.py`` maps a flat Arrow column to (nulls, unicode, empty
strings, extreme longs), for every Avro data block of the Java-written tables, and the
fallback to fastavro for schemas and bytes the column path does not take."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from amcommit.table.errors import CorruptLogBlock
from amcommit.table.file_group.merge import Payload
from amcommit.table.format import avro_columns as ac
from amcommit.table.format import logblock as lb
from amcommit.table.format.naming import META_COLUMNS, parse_log_file_name
from amcommit.table.format.schema import avro_schema
from amcommit.table.query.merge import SliceRecipe, arrow_schema_of_avro, merge_slice

DATA = Path(__file__).resolve().parent.parent / "data" / "hudi-java"

TYPES: list[pa.DataType] = [
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint32(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.binary(),
    pa.date32(),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("ms", tz="UTC"),
    pa.timestamp("us"),
    pa.timestamp("ms"),
]
WORDS = ["", "a", "é", "ünïcødé", "日本語", "emoji \U0001f600", "x" * 300, "tab\tnew\nline", "\x00"]


def _column(t: pa.DataType, n: int, rng: np.random.Generator, nulls: bool) -> pa.Array:
    mask = (rng.random(n) < 0.3) if nulls else np.zeros(n, bool)
    if pa.types.is_boolean(t):
        vals: Any = rng.random(n) < 0.5
    elif pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t):
        info = np.iinfo(t.to_pandas_dtype()) if pa.types.is_integer(t) else None
        lo, hi = (int(info.min), int(info.max)) if info is not None else (-(2**40), 2**40)
        if pa.types.is_date(t):
            lo, hi = -700_000, 2_900_000  # inside the dates Python's datetime.date holds
        extremes = np.array([lo, hi, 0, -1, 1, 63, -64, 64, -65, 127, 128], np.int64)
        vals = np.where(
            rng.random(n) < 0.2,
            rng.choice(extremes, n),
            rng.integers(lo, hi, n, dtype=np.int64, endpoint=True),
        )
        vals = vals.astype(np.int32 if pa.types.is_date(t) else np.int64)
        if pa.types.is_integer(t):
            vals = vals.astype(t.to_pandas_dtype())
        else:
            return pa.array(vals, pa.int32() if pa.types.is_date(t) else pa.int64(), mask=mask).view(t)
    elif pa.types.is_floating(t):
        vals = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
        vals[rng.random(n) < 0.1] = 0.0
        vals = vals.astype(t.to_pandas_dtype())
    elif pa.types.is_string(t):
        return pa.array(
            [
                None if m else rng.choice(WORDS) + str(int(rng.integers(0, 10**6))) * int(rng.integers(0, 2))
                for m in mask
            ],
            t,
        )
    else:
        return pa.array([None if m else rng.bytes(int(rng.integers(0, 40))) for m in mask], t)
    return pa.array(vals, t, mask=mask)


def _random_table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([0, 1, 2, 7, 130, 1000]))
    fields = [pa.field(c, pa.string()) for c in META_COLUMNS]
    cols = [_column(pa.string(), n, rng, nulls=bool(seed % 2)) for _ in META_COLUMNS]
    for i in range(int(rng.integers(1, 9))):
        t = TYPES[int(rng.integers(0, len(TYPES)))]
        nullable = bool(rng.random() < 0.7)
        fields.append(pa.field(f"c{i}", t, nullable=nullable))
        cols.append(_column(t, n, rng, nulls=nullable))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _fastavro_encode(schema: str, t: pa.Table) -> bytes:
    return lb.encode_avro_records(schema, t.to_pylist())


def _fastavro_decode(schema: str, contents: list[bytes]) -> pa.Table:
    records: list[dict[str, Any]] = []
    for c in contents:
        block = lb.LogBlock(lb.BlockType.AVRO_DATA, ((lb.HeaderKey.SCHEMA, schema),), c)
        records += lb.decode_avro_records(block)
    return pa.Table.from_pylist(records, schema=arrow_schema_of_avro(schema))


@pytest.mark.parametrize("seed", range(40))
def test_random_flat_tables_encode_and_decode_as_fastavro_does(seed: int) -> None:
    t = _random_table(seed)
    schema = avro_schema(t.schema, "tbl", include_meta=True)
    assert ac.plan_of(schema) is not None, schema
    want = _fastavro_encode(schema, t)
    got = ac.encode_columns(schema, t)
    assert got == want
    assert lb.encode_avro_records(schema, t) == want  # the Arrow table through logblock
    # decode: one block, and several blocks at once (sliced at a random row)
    expected = _fastavro_decode(schema, [want])
    decoded = ac.decode_columns(schema, [want])
    assert decoded is not None
    assert decoded.equals(expected)
    cut = t.num_rows // 3
    parts = [_fastavro_encode(schema, t.slice(0, cut)), _fastavro_encode(schema, t.slice(cut))]
    again = ac.decode_columns(schema, parts)
    assert again is not None and again.equals(expected)
    # sliced and chunked columns (offsets into shared buffers) encode the same bytes
    for piece in (t.slice(cut), pa.concat_tables([t.slice(0, cut), t.slice(cut)])):
        assert ac.encode_columns(schema, piece) == _fastavro_encode(schema, piece)


def test_extreme_values_byte_for_byte() -> None:
    schema = json.dumps(
        {
            "type": "record",
            "name": "r",
            "fields": [
                {"name": "l", "type": "long"},
                {"name": "i", "type": ["int", "null"]},  # null second: branch 1
                {"name": "s", "type": ["null", "string"], "default": None},
                {"name": "n", "type": "null"},
                {"name": "d", "type": {"type": "double"}},
                {"name": "f", "type": "float"},
            ],
        }
    )
    longs = [-(2**63), 2**63 - 1, 0, -1, 1, -64, 63, 64, 2**35, -(2**35)]
    ints = [-(2**31), 2**31 - 1, None, 0, -1, 1, None, 300, -300, 5]
    strs = ["", None, "é" * 1000, "\U0001f600", "a", "", None, "z" * 128, "q", "日本"]
    doubles = [0.0, -0.0, 1e308, -1e-308, float("inf"), float("-inf"), 5e-324, 1.5, -2.25, 3.0]
    floats = np.array([0.0, -0.0, 3.4e38, -1.2e-38, np.inf, 1.5, 2.0, 0.1, -7.0, 1e-45], np.float32)
    t = pa.table(
        {
            "l": pa.array(longs, pa.int64()),
            "i": pa.array(ints, pa.int32()),
            "s": pa.array(strs, pa.string()),
            "n": pa.nulls(10),
            "d": pa.array(doubles, pa.float64()),
            "f": pa.array(floats, pa.float32()),
            "extra": pa.array(range(10)),  # a column the schema does not name: left out
        }
    )
    want = _fastavro_encode(schema, t)
    assert ac.encode_columns(schema, t) == want
    decoded = ac.decode_columns(schema, [want])
    assert decoded is not None and decoded.equals(_fastavro_decode(schema, [want]))
    assert decoded.column("l").to_pylist() == longs
    assert decoded.column("s").to_pylist() == strs


def _java_avro_blocks() -> list[tuple[str, lb.LogBlock]]:
    out = []
    files = [(p.name, p.read_bytes()) for p in (DATA / "log-blocks").rglob("*") if ".log." in p.name]
    for z in sorted((DATA / "mor-v6").glob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            for n in zf.namelist():
                base = n.rsplit("/", 1)[-1]
                if "__MACOSX" not in n and parse_log_file_name(base) is not None:
                    files.append((f"{z.stem}/{base}", zf.read(n)))
    for name, data in files:
        for b in lb.read_blocks(data, path=name).blocks:
            if b.type == lb.BlockType.AVRO_DATA:
                out.append((name, b))
    return out


def test_every_java_written_avro_block_decodes_and_reencodes_column_wise() -> None:
    blocks = _java_avro_blocks()
    taken = 0
    for name, b in blocks:
        expected = _fastavro_decode(b.schema, [b.content])
        got = lb.decode_avro_columns([b])
        if ac.plan_of(b.schema) is None:
            assert got is None
            continue
        taken += 1
        assert got is not None and got.equals(expected), name
        assert ac.encode_columns(b.schema, got) == b.content, name
        assert lb.encode_avro_records(b.schema, got) == b.content, name
    assert len(blocks) >= 2 and taken == len(blocks), (len(blocks), taken)  # both Java schemas are flat


NESTED = {
    "type": "record",
    "name": "r",
    "fields": [
        {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
        {"name": "v", "type": ["null", "long"], "default": None},
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}], "default": None},
    ],
}


@pytest.mark.parametrize(
    "field",
    [
        {"name": "tags", "type": ["null", {"type": "array", "items": "string"}], "default": None},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {"name": "s", "type": {"type": "record", "name": "s", "fields": [{"name": "a", "type": "int"}]}},
        {
            "name": "dec",
            "type": {
                "type": "fixed",
                "name": "fx",
                "size": 5,
                "logicalType": "decimal",
                "precision": 10,
                "scale": 2,
            },
        },
        {"name": "e", "type": {"type": "enum", "name": "en", "symbols": ["A", "B"]}},
        {"name": "u", "type": ["null", "string", "long"]},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    ],
)
def test_schemas_the_column_path_does_not_take_fall_back_to_fastavro(field: dict[str, Any]) -> None:
    schema = json.dumps({"type": "record", "name": "r", "fields": [{"name": "k", "type": "string"}, field]})
    assert ac.plan_of(schema) is None
    assert ac.decode_columns(schema, [struct.pack(">ii", 3, 0)]) is None
    assert ac.encode_columns(schema, pa.table({"k": ["a"]})) is None


def test_a_nested_schema_merges_through_fastavro() -> None:
    text = json.dumps(NESTED)
    recs = [
        {"_hoodie_record_key": "a", "v": 1, "tags": ["x", "y"]},
        {"_hoodie_record_key": "b", "v": None, "tags": None},
    ]
    block = lb.decode_block(lb.avro_data_block("20250101000000000", text, recs))
    assert lb.decode_avro_columns([block]) is None
    out = merge_slice(None, [("f.log", block)], SliceRecipe(("k",), Payload.OVERWRITE_WITH_LATEST, None))
    assert out is not None and out.to_pylist() == recs
    # an Arrow table in a nested schema is encoded through to_pylist: the same bytes
    t = pa.Table.from_pylist(recs, schema=arrow_schema_of_avro(text))
    assert lb.encode_avro_records(text, t) == lb.encode_avro_records(text, recs)


FLAT = json.dumps(
    {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "k", "type": "string"},
            {"name": "v", "type": ["null", "long"], "default": None},
            {"name": "b", "type": "boolean"},
        ],
    }
)


def _content(records: list[bytes]) -> bytes:
    return struct.pack(">ii", 3, len(records)) + b"".join(struct.pack(">i", len(r)) + r for r in records)


@pytest.mark.parametrize(
    ("records", "why"),
    [
        ([b"\x02a\x02\x02\x01", b"\x02b\x00\x01"], "ok"),
        ([b"\x02a\x02\x02\x01\x00"], "trailing byte in a record"),  # fastavro ignores it
        ([b"\x02a\x04\x02\x01"], "union branch 2"),
        ([b"\x02a\x02\x02\x05"], "boolean byte 5"),
        ([b"\x02\xff\x00\x01"], "string not UTF-8"),
        ([b"\x0ca\x00\x01"], "string longer than its record"),
        ([b"\x02a\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"], "varint of 12 bytes"),
        ([b"\x02a\x02"], "record cut short"),
    ],
)
def test_bad_bytes_fall_back_to_fastavro_and_its_errors(records: list[bytes], why: str) -> None:
    content = _content(records)
    block = lb.LogBlock(lb.BlockType.AVRO_DATA, ((lb.HeaderKey.SCHEMA, FLAT),), content)
    try:
        want: pa.Table | None = _fastavro_decode(FLAT, [content])
    except (CorruptLogBlock, pa.ArrowException):
        want = None
    got = ac.decode_columns(FLAT, [content])
    if why == "ok":
        assert got is not None and want is not None and got.equals(want)
        return
    assert got is None, why  # anything unexpected: the fastavro path decides
    if want is None:
        with pytest.raises(CorruptLogBlock):
            merge_slice(None, [("f.log", block)], SliceRecipe(("k",), Payload.OVERWRITE_WITH_LATEST, None))


@pytest.mark.parametrize(
    "content",
    [
        b"",
        struct.pack(">ii", 2, 0),
        struct.pack(">ii", 3, 2) + struct.pack(">i", 1) + b"\x00",
        _content([b"\x00\x00\x00"]) + b"x",
    ],
)
def test_bad_framing_falls_back(content: bytes) -> None:
    assert ac.decode_columns(FLAT, [content]) is None


def test_columns_of_other_types_fall_back_to_fastavro() -> None:
    # a large_string column, a float64 column for a float field, a null in a non-null field
    for t in (
        pa.table({"k": pa.array(["a"], pa.large_string()), "v": [1], "b": [True]}),
        pa.table({"k": ["a"], "v": pa.array([1.0]), "b": [True]}),
        pa.table({"k": pa.array([None], pa.string()), "v": [1], "b": [True]}),
        pa.table({"v": [1], "b": [True]}),
    ):
        assert ac.encode_columns(FLAT, t) is None
    t = pa.table({"k": pa.array(["a"], pa.large_string()), "v": pa.array([1], pa.int8()), "b": [True]})
    assert lb.encode_avro_records(FLAT, t) == lb.encode_avro_records(FLAT, t.to_pylist())
