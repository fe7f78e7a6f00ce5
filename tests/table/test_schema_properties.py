"""Arrow -> Avro schemas as Hudi's Spark writer names them; hoodie.properties encoding."""

from __future__ import annotations

import json
import re

import fastavro
import pyarrow as pa
import pytest

from amcommit.errors import CommitError, ConfigError
from amcommit.table.format.properties import checksum, decode_properties, encode_properties, new_properties
from amcommit.table.format.schema import avro_schema, record_name
from amcommit.table.format.tasknames import plan_names, task_write_token


def test_nested_schema_names_unions_and_logical_types() -> None:
    schema = pa.schema(
        [
            pa.field("_hoodie_commit_time", pa.string()),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("amount", pa.decimal128(12, 2)),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("local", pa.timestamp("us")),
            pa.field("day", pa.date32()),
            pa.field("s", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.list_(pa.string()))])),
            pa.field("m", pa.map_(pa.string(), pa.struct([pa.field("x", pa.float64())]))),
            pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
        ]
    )
    s = json.loads(avro_schema(schema, "my-table"))
    fastavro.parse_schema(s)  # a valid Avro schema
    assert (s["name"], s["namespace"]) == ("my_table_record", "hoodie.my_table")
    f = {x["name"]: x for x in s["fields"]}
    assert "_hoodie_commit_time" not in f  # Hudi keeps meta columns out of extraMetadata.schema
    assert f["id"] == {"name": "id", "type": "long"}
    assert f["amount"]["type"][0] == "null" and f["amount"]["default"] is None
    dec = f["amount"]["type"][1]
    assert dec == {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.my_table.my_table_record.amount",
        "size": 6,
        "logicalType": "decimal",
        "precision": 12,
        "scale": 2,
    }
    assert f["ts"]["type"][1] == {"type": "long", "logicalType": "timestamp-micros"}
    assert f["local"]["type"][1] == {"type": "long", "logicalType": "local-timestamp-micros"}
    assert f["day"]["type"][1] == {"type": "int", "logicalType": "date"}
    rec = f["s"]["type"][1]
    assert (rec["name"], rec["namespace"]) == ("s", "hoodie.my_table.my_table_record")
    assert rec["fields"][1]["type"] == ["null", {"type": "array", "items": ["null", "string"]}]
    mv = f["m"]["type"][1]["values"][1]
    assert (mv["name"], mv["namespace"]) == ("m", "hoodie.my_table.my_table_record")
    assert f["tags"]["type"][1] == {"type": "array", "items": "string"}
    assert "_hoodie_commit_time" in avro_schema(schema, "t", include_meta=True)
    assert record_name("2x") == ("_2x_record", "hoodie._2x")


def test_schema_refusals_name_the_column() -> None:
    with pytest.raises(ConfigError, match="'a b'"):
        avro_schema(pa.schema([pa.field("a b", pa.int32())]), "t")
    with pytest.raises(ConfigError, match=r"'m'.*strings"):
        avro_schema(pa.schema([pa.field("m", pa.map_(pa.int32(), pa.int32()))]), "t")


def test_properties_roundtrip_escapes_like_java() -> None:
    schema = '{"type":"record","name":"t_record","fields":[{"name":"é","type":"string"}]}'
    props = new_properties("t", partition_fields=("a", "b"), record_key_fields=("k",), create_schema=schema)
    data = encode_properties(props, now=0)
    text = data.decode("ascii")
    assert text.startswith("#Properties saved on ")
    assert 'hoodie.table.create.schema={"type"\\:"record"' in text
    assert "\\u00E9" in text
    assert "hoodie.table.keygenerator.class=org.apache.hudi.keygen.ComplexKeyGenerator" in text
    back = decode_properties(data)
    assert dict(back.values) == dict(props.values)
    assert back.partition_fields == ("a", "b") and back.record_key_fields == ("k",)
    assert back.create_schema == schema
    # known value: Hudi's checksum of a table named "t1" without a database
    assert checksum("t1") == 3609136688


def test_task_names() -> None:
    inst = "20261123100405678"
    names, rows, missing = plan_names(
        ["p=a/part-0.parquet", f"p=b/abc-0_1-2-3_{inst}.parquet"],
        inst,
        "attempt_x_m_000001_0",
        {"hudi.rows": '{"p=a/part-0.parquet": 4}'},
    )
    assert names[f"p=b/abc-0_1-2-3_{inst}.parquet"] == f"p=b/abc-0_1-2-3_{inst}.parquet"
    a = names["p=a/part-0.parquet"]
    assert a.startswith("p=a/") and a.endswith(f"_attempt-x-m-000001-0_{inst}.parquet")
    assert rows == {a: 4} and missing == [f"p=b/abc-0_1-2-3_{inst}.parquet"]
    for bad in [
        "p=a/x.csv",
        "p=a/.hidden.parquet",
        "_temporary/x.parquet",
        "p=a/abc-0_1-2-3_20200101000000000.parquet",
    ]:
        with pytest.raises(CommitError, match=re.escape(repr(bad))):
            plan_names([bad], inst, "a", None)
    assert "_" not in task_write_token("attempt_" + "x" * 300) and len(task_write_token("y" * 300)) <= 64
