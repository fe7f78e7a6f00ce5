"""Issue 36: Hudi's write option names in the engine's upsert/delete, the engine's
``record_key="a,b"`` (two columns), an int key into a long-keyed table, and each refusal's
exact one-line message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from amcommit.errors import ConfigError
from amcommit.store.local import LocalStore
from amcommit.table.format.hudi_names import resolve
from amcommit.table.mutate.engine import delete, upsert


def _rows(ids: list[int], ts: int, key_type: pa.DataType = pa.int64()) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, key_type),
            "k2": pa.array([f"x{i % 2}" for i in ids]),
            "day": pa.array(["2026-11-01" if i % 2 else "2026-11-02" for i in ids]),
            "ts": pa.array([ts] * len(ids), pa.int64()),
        }
    )


def _read(root: Path) -> list[dict[str, Any]]:
    table = hudi.HudiTableBuilder.from_base_uri(str(root.resolve())).build()
    rows = [r for b in table.read(hudi.HudiReadOptions()) for r in b.select(["id", "ts"]).to_pylist()]
    return sorted(rows, key=lambda r: r["id"])


def _props(root: Path) -> dict[str, str]:
    text = (root / ".hoodie" / "hoodie.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


async def test_hudi_names_in_the_engine(tmp_path: Path) -> None:
    """An upsert and a delete given only Hudi's names: the table gets the key, partition
    field and name they say, the precombine field and payload decide duplicates (the lower
    ts loses), the delete finds the
    rows by the key Hudi's name gave."""
    store = LocalStore(str(tmp_path))
    hudi: dict[str, Any] = {
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "day",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        "hoodie.table.name": "hudi_named",
        "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.clean.commits.retained": "1",
        "hoodie.parquet.max.file.size": str(64 * 1024 * 1024),
        "hoodie.index.bloom.num_entries": "1000",
        "hoodie.index.bloom.fpp": "0.001",
        "hoodie.bloom.index.filter.type": "SIMPLE",
    }
    async with store:
        await upsert(store, "t", _rows([1, 2, 3], 5), **hudi)
        await upsert(store, "t", _rows([1, 2], 4), **hudi)  # older ts: DefaultHoodieRecordPayload keeps 5
        await upsert(store, "t", _rows([3], 9), **hudi)
        await upsert(store, "t", _rows([3], 10), **hudi)  # the group of 3 again: its older versions go
        # every file written so far has the SIMPLE filter (no type code) sized for 1000 keys
        for f in (tmp_path / "t").rglob("*.parquet"):
            meta = pq.ParquetFile(f).metadata.metadata
            assert b"hoodie_bloom_filter_type_code" not in meta, f
            assert len(meta[b"org.apache.hudi.bloomfilter"]) < 4000, f  # default: ~431 KB
        await delete(store, "t", _rows([2], 0), **{k: hudi[k] for k in list(hudi)[:2]})
    assert [
        n.name for n in (tmp_path / "t" / ".hoodie").iterdir() if n.name.endswith(".clean")
    ]  # retained: 1
    props = _props(tmp_path / "t")
    assert props["hoodie.table.name"] == "hudi_named"
    assert props["hoodie.table.recordkey.fields"] == "id"
    assert props["hoodie.table.partition.fields"] == "day"
    rows = _read(tmp_path / "t")
    assert rows == [{"id": 1, "ts": 5}, {"id": 3, "ts": 10}]


async def test_record_key_a_comma_b_is_two_columns(tmp_path: Path) -> None:
    """``record_key="id,k2"`` is the columns id and k2 (as Spark and Hudi read it), and an
    int key column upserts into a table whose key column is long (promoted, as Hudi does)."""
    store = LocalStore(str(tmp_path))
    async with store:
        await upsert(store, "t", _rows([1, 2], 1), record_key="id,k2", partition_by="day")
        await upsert(store, "t", _rows([1], 2, pa.int32()), record_key="id,k2", partition_by="day")
    assert _props(tmp_path / "t")["hoodie.table.recordkey.fields"] == "id,k2"
    rows = _read(tmp_path / "t")
    assert rows == [{"id": 1, "ts": 2}, {"id": 2, "ts": 1}]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"hoodie.metadata.enable": "x"},
            "amcommit does not support Hudi option 'hoodie.metadata.enable' (docs/configuration.md: Hudi's option names)",
        ),
        (
            {"hoodie.datasource.write.precombine.fields": "ts"},
            "amcommit does not support Hudi option 'hoodie.datasource.write.precombine.fields'; did you mean "
            "'hoodie.datasource.write.precombine.field'? (docs/configuration.md: Hudi's option names)",
        ),
        (
            {"hoodie.write.set.null.for.missing.columns": "true"},
            "amcommit does not support Hudi option 'hoodie.write.set.null.for.missing.columns' in the "
            "engine's upsert/delete",
        ),
        (
            {"hoodie.datasource.write.table.type": "MERGE_ON_WRITE"},
            "option 'hoodie.datasource.write.table.type': table type 'MERGE_ON_WRITE' is not one of "
            "COPY_ON_WRITE, MERGE_ON_READ",
        ),
        (
            {"hoodie.datasource.write.precombine.field": "v", "precombine_field": "ts"},
            "options 'precombine_field' and 'hoodie.datasource.write.precombine.field' name one setting with "
            "different values: give one",
        ),
        (
            {"hoodie.table.name": "a", "hoodie.datasource.write.table.name": "b"},
            "options 'hoodie.table.name' and 'hoodie.datasource.write.table.name' name one setting with "
            "different values: give one",
        ),
        (
            {"hoodie.datasource.write.operation": "insert"},
            "options 'operation' and 'hoodie.datasource.write.operation' name one setting with different "
            "values: give one",
        ),
        ({"precombineField": "ts"}, "unknown option 'precombineField'; did you mean 'precombine_field'?"),
    ],
)
async def test_engine_refusals_are_one_line(tmp_path: Path, options: dict[str, Any], message: str) -> None:
    store = LocalStore(str(tmp_path))
    async with store:
        with pytest.raises(ConfigError) as e:
            await upsert(store, "t", _rows([1], 1), record_key="id", **options)
    assert str(e.value) == message
    assert not (tmp_path / "t").exists()


def test_resolve_spark_names() -> None:
    """Spark's side: names case-insensitive, values as Hudi spells them."""
    got = resolve(
        {
            "HOODIE.DATASOURCE.WRITE.RECORDKEY.FIELD": "id",
            "recordkey": "ID",
            "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
            "hoodie.parquet.max.file.size": "1000",
        },
        "spark",
    )
    assert got == {"recordkey": "ID", "payload": "DefaultHoodieRecordPayload", "maxFileBytes": "1000"}
    with pytest.raises(
        ConfigError,
        match=r"^amcommit does not support Hudi option 'hoodie\.write\.set\.null\.for\.missing\.columns'",
    ):
        resolve({"hoodie.write.set.null.for.missing.columns": "true"}, "engine")
    assert json.dumps(resolve({"a": 1}, "engine")) == '{"a": 1}'


def test_engine_file_sizes_by_hudi_names() -> None:
    """``hoodie.parquet.small.file.limit`` / ``max.file.size`` set the engine's arguments."""
    from amcommit.committer.config import DEFAULT_CONFIG
    from amcommit.table.format.bloom import DEFAULT_SETTINGS
    from amcommit.table.mutate.engine import MAX_FILE_SIZE, SMALL_FILE_LIMIT, _with_hudi

    kw: dict[str, Any] = {
        "operation": "UPSERT",
        "record_key": "id",
        "small_file_limit": SMALL_FILE_LIMIT,
        "max_file_size": MAX_FILE_SIZE,
        "bloom": DEFAULT_SETTINGS,
        "config": DEFAULT_CONFIG,
    }
    got = _with_hudi({"hoodie.parquet.small.file.limit": "300", "hoodie.parquet.max.file.size": "4000"}, kw)
    assert (got["small_file_limit"], got["max_file_size"]) == (300, 4000)
    with pytest.raises(
        ConfigError, match=r"^options 'small_file_limit' and 'hoodie\.parquet\.small\.file\.limit' "
    ):
        _with_hudi({"hoodie.parquet.small.file.limit": "300"}, {**kw, "small_file_limit": 5})
