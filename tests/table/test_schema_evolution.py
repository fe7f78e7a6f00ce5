"""Schema on write (issue 23 item 9): Hudi's rules, checked by begin_write and by the commit.

Pure rules (:func:`evolve_schema`); the engine refusing a write before anything is written
(begin_write) and a commit whose write conflicts with a schema committed meanwhile (under
the lock, before publishing: the store exact, abort_job rolls it back to the exact
listing) on every engine backend; what hudi-rs reads of a table whose schema evolved (a new
non-nullable column recorded nullable, a widened column, a column left out by opt-in); and
the Spark reader's schema as of the instant read.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.committer.task import commit_task, setup_task
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.errors import SchemaMismatch
from amcommit.table.format.model import Operation, decode_commit_metadata
from amcommit.table.format.naming import base_file_name, new_file_id, write_token
from amcommit.table.format.schema import avro_schema, evolve_schema
from amcommit.table.write.task import TableSpec, TableWrite, begin_write
from tests.backends import StoreUnderTest
from tests.table.writehelpers import listing, parquet_bytes

F = pa.field
BASE = pa.schema([F("id", pa.int64(), nullable=False), F("p", pa.string()), F("v", pa.string())])
SPEC = TableSpec("t1", partition_fields=("p",))


def _avro(*fields: pa.Field) -> str:
    return avro_schema(pa.schema(list(fields)), "t1")


def _fields(schema: str) -> dict[str, Any]:
    return {f["name"]: f for f in json.loads(schema)["fields"]}


# --- the rules (pure) ------------------------------------------------------------------------


def test_same_schema_is_kept_as_it_is() -> None:
    table = _avro(*BASE)
    assert evolve_schema(table, _avro(*BASE)) is table
    assert evolve_schema(None, table) is table
    # the write's columns in another order: the table's order is kept
    assert evolve_schema(table, _avro(BASE.field("v"), BASE.field("id"), BASE.field("p"))) is table


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (pa.int32(), pa.int64()),
        (pa.int32(), pa.float32()),
        (pa.int32(), pa.float64()),
        (pa.int64(), pa.float32()),
        (pa.int64(), pa.float64()),
        (pa.float32(), pa.float64()),
        (pa.string(), pa.binary()),
    ],
)
def test_widenings_hudi_allows_widen_the_table(old: pa.DataType, new: pa.DataType) -> None:
    got = _fields(
        evolve_schema(_avro(F("id", pa.int64()), F("x", old)), _avro(F("id", pa.int64()), F("x", new)))
    )
    assert got["x"]["type"] == _fields(_avro(F("x", new)))["x"]["type"]
    # the other way round (a write narrower than the table) keeps the table's type
    table = _avro(F("id", pa.int64()), F("x", new))
    assert evolve_schema(table, _avro(F("id", pa.int64()), F("x", old))) is table


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        (pa.int64(), pa.string(), ("long", "string")),
        (pa.string(), pa.int64(), ("string", "long")),
        (pa.float64(), pa.string(), ("double", "string")),
        (pa.date32(), pa.int64(), ("date", "long")),  # Hudi's Avro check ignores logical types
        (pa.int32(), pa.date32(), ("int", "date")),
        (pa.decimal128(10, 2), pa.decimal128(10, 3), ("decimal(10,2)", "decimal(10,3)")),
        (pa.timestamp("us", tz="UTC"), pa.timestamp("us"), ("timestamp-micros", "local-timestamp-micros")),
        (pa.list_(pa.int64()), pa.int64(), ("array<long>", "long")),
        (pa.bool_(), pa.int32(), ("boolean", "int")),
    ],
)
def test_other_changes_are_refused_in_one_line(
    old: pa.DataType, new: pa.DataType, names: tuple[str, str]
) -> None:
    with pytest.raises(SchemaMismatch) as e:
        evolve_schema(_avro(F("id", pa.int64()), F("x", old)), _avro(F("id", pa.int64()), F("x", new)))
    msg = str(e.value)
    assert "\n" not in msg and e.value.column == "x"
    assert msg.startswith(f"column 'x': the table's type is {names[0]}, the write's is {names[1]};")


def test_new_columns_are_recorded_nullable_and_last() -> None:
    table = _avro(*BASE)
    got = json.loads(evolve_schema(table, _avro(F("w", pa.string(), nullable=False), *BASE)))
    assert [f["name"] for f in got["fields"]] == ["id", "p", "v", "w"]
    assert got["fields"][3] == {"name": "w", "type": ["null", "string"], "default": None}
    assert got["fields"][0] == {"name": "id", "type": "long"}  # untouched
    assert (got["name"], got["namespace"]) == ("t1_record", "hoodie.t1")


def test_nullability_widens_never_narrows() -> None:
    table = _avro(*BASE)
    got = _fields(
        evolve_schema(table, _avro(F("id", pa.int64(), nullable=True), BASE.field("p"), BASE.field("v")))
    )
    assert got["id"] == {"name": "id", "type": ["null", "long"], "default": None}
    nullable = _avro(F("id", pa.int64()), BASE.field("p"), BASE.field("v"))
    assert evolve_schema(nullable, table) is nullable


def test_missing_columns_refused_unless_allowed() -> None:
    table = _avro(*BASE)
    without_v = _avro(BASE.field("id"), BASE.field("p"))
    with pytest.raises(SchemaMismatch) as e:
        evolve_schema(table, without_v)
    msg = str(e.value)
    assert e.value.column == "v" and "\n" not in msg
    assert msg.startswith("column 'v' (string) of the table is missing from the write")
    assert "allowMissingColumns" in msg
    got = _fields(evolve_schema(table, without_v, allow_missing=True))
    assert list(got) == ["id", "p", "v"]
    assert got["v"] == {"name": "v", "type": ["null", "string"], "default": None}
    # a non-nullable column left out becomes nullable (its new rows are null)
    got = _fields(evolve_schema(table, _avro(BASE.field("p"), BASE.field("v")), allow_missing=True))
    assert got["id"] == {"name": "id", "type": ["null", "long"], "default": None}
    # a column written with another case is named as such
    with pytest.raises(SchemaMismatch, match="the write has 'V'"):
        evolve_schema(table, _avro(BASE.field("id"), BASE.field("p"), F("V", pa.string())))


def test_nested_fields_follow_the_same_rules() -> None:
    s1 = F("s", pa.struct([F("a", pa.int32()), F("b", pa.list_(pa.int32()))]))
    table = _avro(F("id", pa.int64()), s1)
    s2 = F(
        "s",
        pa.struct([F("a", pa.int64()), F("b", pa.list_(pa.int32())), F("c", pa.string(), nullable=False)]),
    )
    got = _fields(evolve_schema(table, _avro(F("id", pa.int64()), s2)))
    rec = got["s"]["type"][1]
    assert [(f["name"], f["type"]) for f in rec["fields"]] == [
        ("a", ["null", "long"]),
        ("b", ["null", {"type": "array", "items": ["null", "int"]}]),
        ("c", ["null", "string"]),
    ]
    bad = F("s", pa.struct([F("a", pa.int32()), F("b", pa.list_(pa.string()))]))
    with pytest.raises(
        SchemaMismatch, match=r"^column 's\.b\.element': the table's type is int, the write's is string"
    ):
        evolve_schema(table, _avro(F("id", pa.int64()), bad))
    with pytest.raises(SchemaMismatch, match=r"^column 's\.b' \(array<int>\) of the table is missing"):
        evolve_schema(table, _avro(F("id", pa.int64()), F("s", pa.struct([F("a", pa.int32())]))))


# --- the engine ------------------------------------------------------------------------------


async def _write(
    store: Store,
    dest: str,
    schema: pa.Schema,
    data: list[dict[str, Any]],
    *,
    declare: bool = True,
    allow_missing: bool = False,
    commit: bool = True,
) -> TableWrite:
    """One write of ``data`` (one task, one file in ``p=a``) with Arrow schema ``schema``."""
    w = await begin_write(
        store,
        dest,
        operation=Operation.INSERT,
        spec=SPEC,
        avro_schema=avro_schema(schema, "t1") if declare else None,
        allow_missing_columns=allow_missing,
    )
    ta = f"attempt_{w.instant}_m_000000_0"
    work = await setup_task(store, w.layout, ta)
    name = base_file_name(new_file_id(), write_token(0, 0, 0), w.instant)
    rel = f"p=a/{name}"
    await store.put(join(work, rel), parquet_bytes(data, schema, meta=(w.instant, "p=a", name, 0)))
    extra = {"hudi.rows": json.dumps({rel: len(data)})}
    await commit_task(store, w.layout, f"task_{w.instant}_m_000000", ta, extra_data=extra)
    if commit:
        report = await commit_job(store, dest, w.instant)
        assert report.success
    return w


async def _schema_at(store: Store, dest: str, instant: str) -> dict[str, Any]:
    data = await store.get(join(dest, ".hoodie", f"{instant}.commit"))
    return json.loads(decode_commit_metadata(data).extra_metadata["schema"])  # type: ignore[no-any-return]


def _local_uri(sut: StoreUnderTest, dest: str) -> str:
    assert isinstance(sut.store, LocalStore)
    return os.path.join(sut.store.root, dest)


def _hudi_rs(uri: str, as_of: str | None = None) -> pa.Table:
    from hudi import HudiReadOptions, HudiTableBuilder

    opts = HudiReadOptions()
    if as_of:
        opts = opts.with_as_of_timestamp(as_of)
    t = pa.Table.from_batches(list(HudiTableBuilder.from_base_uri(uri).build().read(opts)))
    t = t.drop_columns([c for c in t.column_names if c.startswith("_hoodie")])
    return t.sort_by("id")


async def test_begin_write_refuses_a_changed_type_before_anything_is_written(
    backend_local: StoreUnderTest,
) -> None:
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    await _write(store, dest, BASE, [{"id": 1, "p": "a", "v": "x"}])
    before = await listing(store, dest)
    as_string = pa.schema([F("id", pa.string()), F("p", pa.string()), F("v", pa.string())])
    with pytest.raises(SchemaMismatch) as e:
        await begin_write(store, dest, operation=Operation.INSERT, avro_schema=avro_schema(as_string, "t1"))
    assert str(e.value).startswith("column 'id': the table's type is long, the write's is string;")
    with pytest.raises(SchemaMismatch, match=r"^column 'v' \(string\) of the table is missing"):
        await begin_write(
            store, dest, operation=Operation.INSERT, avro_schema=avro_schema(pa.schema(list(BASE)[:2]), "t1")
        )
    assert await listing(store, dest) == before  # no instant, no staging, nothing


async def test_commit_refuses_a_schema_committed_meanwhile(engine_sut: StoreUnderTest) -> None:
    """Two writers begin on the same table schema; the first adds ``w`` as long and commits;
    the second's ``w`` string fails its commit under the lock, before anything is published:
    abort_job then leaves exactly the first writer's table."""
    store, dest = engine_sut.store, join(engine_sut.base, "tbl")
    await _write(store, dest, BASE, [{"id": 1, "p": "a", "v": "x"}])
    with_long = pa.schema([*BASE, F("w", pa.int64())])
    first = await _write(store, dest, with_long, [{"id": 3, "p": "a", "v": "z", "w": 7}], commit=False)
    with_string = pa.schema([*BASE, F("w", pa.string())])
    late = await _write(store, dest, with_string, [{"id": 2, "p": "a", "v": "y", "w": "s"}], commit=False)
    assert (await commit_job(store, dest, first.instant)).success
    committed = await listing(store, dest)
    with pytest.raises(SchemaMismatch) as e:
        await commit_job(store, dest, late.instant)
    assert str(e.value).startswith("column 'w': the table's type is long, the write's is string;")
    after = await listing(store, dest)
    assert [n for n in after if late.instant in n and not n.startswith(".hoodie/")] == []  # nothing renamed
    assert f".hoodie/{late.instant}.commit" not in after
    report = await abort_job(store, dest, late.instant)
    assert not report.success
    assert await listing(store, dest) == [n for n in committed if late.instant not in n]
    assert (await _schema_at(store, dest, first.instant))["fields"][3]["type"] == ["null", "long"]


async def test_undeclared_write_schema_is_checked_from_its_files(backend_local: StoreUnderTest) -> None:
    """A write that gave begin_write no schema: the commit reads it from a written file."""
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    await _write(store, dest, BASE, [{"id": 1, "p": "a", "v": "x"}])
    as_string = pa.schema([F("id", pa.string()), F("p", pa.string()), F("v", pa.string())])
    w = await _write(store, dest, as_string, [{"id": "2", "p": "a", "v": "y"}], declare=False, commit=False)
    with pytest.raises(
        SchemaMismatch, match=r"^column 'id': the table's type is long, the write's is string"
    ):
        await commit_job(store, dest, w.instant)
    assert f".hoodie/{w.instant}.commit" not in await listing(store, dest)
    await abort_job(store, dest, w.instant)


async def test_evolved_table_reads_in_hudi_rs(backend_local: StoreUnderTest) -> None:
    """A new column Spark marks non-nullable, a widened column and (opted in) a column left
    out: every file of the table stays readable by hudi-rs, older rows read as null."""
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    uri = _local_uri(backend_local, dest)
    i1 = (await _write(store, dest, BASE, [{"id": 1, "p": "a", "v": "x"}])).instant
    s2 = pa.schema([*BASE, F("w", pa.string(), nullable=False)])
    i2 = (await _write(store, dest, s2, [{"id": 2, "p": "a", "v": "y", "w": "z"}])).instant
    assert (await _schema_at(store, dest, i2))["fields"][3] == {
        "name": "w",
        "type": ["null", "string"],
        "default": None,
    }
    assert _hudi_rs(uri).to_pylist() == [
        {"id": 1, "p": "a", "v": "x", "w": None},
        {"id": 2, "p": "a", "v": "y", "w": "z"},
    ]
    s3 = pa.schema([F("id", pa.float64(), nullable=False), F("p", pa.string()), F("w", pa.string())])
    with pytest.raises(SchemaMismatch, match="'v'"):
        await _write(store, dest, s3, [{"id": 3.5, "p": "a", "w": "q"}])
    i3 = (await _write(store, dest, s3, [{"id": 3.5, "p": "a", "w": "q"}], allow_missing=True)).instant
    got = await _schema_at(store, dest, i3)
    assert [(f["name"], f["type"]) for f in got["fields"]] == [
        ("id", "double"),
        ("p", ["null", "string"]),
        ("v", ["null", "string"]),
        ("w", ["null", "string"]),
    ]
    assert _hudi_rs(uri).to_pylist() == [
        {"id": 1.0, "p": "a", "v": "x", "w": None},
        {"id": 2.0, "p": "a", "v": "y", "w": "z"},
        {"id": 3.5, "p": "a", "v": None, "w": "q"},
    ]
    assert _hudi_rs(uri, as_of=i1).column("id").to_pylist() == [1.0]


async def test_spark_reader_schema_is_the_instants(backend_local: StoreUnderTest) -> None:
    """amcommit's Spark reader (planned on the driver, no Spark session needed): the latest
    snapshot has the evolved schema, a time travel the schema of its instant."""
    from amcommit.spark.reader import build_read_plan, load_plan

    store, dest = backend_local.store, join(backend_local.base, "tbl")
    uri = _local_uri(backend_local, dest)
    i1 = (await _write(store, dest, BASE, [{"id": 1, "p": "a", "v": "x"}])).instant
    s2 = pa.schema([F("id", pa.int64(), nullable=False), F("p", pa.string()), F("w", pa.float32())])
    i2 = (await _write(store, dest, s2, [{"id": 2, "p": "a", "w": 1.5}], allow_missing=True)).instant
    s3 = pa.schema(
        [F("id", pa.int32(), nullable=False), F("p", pa.string()), F("v", pa.string()), F("w", pa.float64())]
    )
    await _write(store, dest, s3, [{"id": 3, "p": "a", "v": "q", "w": 2.5}])

    def columns(options: dict[str, str]) -> list[tuple[str, str, bool]]:
        schema_json, _ = load_plan(build_read_plan({"path": uri, **options}))
        return [
            (f["name"], f["type"], f["nullable"])
            for f in json.loads(schema_json)["fields"]
            if f["name"][0] != "_"
        ]

    assert columns({}) == [
        ("id", "long", False),
        ("p", "string", True),
        ("v", "string", True),
        ("w", "double", True),
    ]
    assert columns({"as.of.instant": i2}) == [
        ("id", "long", False),
        ("p", "string", True),
        ("v", "string", True),
        ("w", "float", True),
    ]
    assert columns({"as.of.instant": i1}) == [
        ("id", "long", False),
        ("p", "string", True),
        ("v", "string", True),
    ]
    assert columns({"since": "000", "until": i2})[-1] == ("w", "float", True)
