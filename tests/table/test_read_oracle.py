"""amcommit.table.read against hudi-rs (the oracle), row for row.

Every Merge-on-Read table Hudi's Java writer wrote (tests/data/hudi-java/mor-v6: Avro data
blocks, Parquet data blocks, a delete block, a rollback command block, a table without meta
fields, an empty table) is unzipped to tmp and read in every query type: snapshot,
read-optimized, time travel to each instant, incremental between every pair of instants.
Copy-on-Write tables amcommit's table generator writes read the same way. One Java table is
also read from Azurite and fake-gcs-server.
"""

from __future__ import annotations

import itertools
import json
import zipfile
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

from amcommit.paths import join
from amcommit.table import read, read_async
from amcommit.table.format.model import Operation
from amcommit.table.query.read import read_store
from amcommit.testing.tablegen import Write, generate, write_local
from tests.backends import StoreUnderTest

MOR = Path(__file__).resolve().parent.parent / "data" / "hudi-java" / "mor-v6"
TABLES = sorted(p.stem for p in MOR.glob("*.zip"))
RO = {"hoodie.read.use.read_optimized.mode": "true"}


def unzip(name: str, into: Path) -> Path:
    """The Java-written table ``name`` unzipped under ``into`` (macOS resource forks left out)."""
    with zipfile.ZipFile(MOR / f"{name}.zip") as zf:
        for m in zf.namelist():
            if not m.startswith("__MACOSX/"):
                zf.extract(m, into)
    return into / name


@pytest.fixture(params=TABLES)
def java_table(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return unzip(request.param, tmp_path)


def _instants(root: Path) -> list[str]:
    return sorted(
        f.name.split(".")[0]
        for f in (root / ".hoodie").iterdir()
        if f.name.endswith((".deltacommit", ".commit", ".replacecommit"))
    )


def _hudi_rows(table: hudi.HudiTable, opts: hudi.HudiReadOptions) -> pa.Table | None:
    batches = table.read(opts)
    return pa.Table.from_batches(batches) if batches else None


def _sorted_rows(t: pa.Table | None) -> list[dict[str, Any]]:
    if t is None:
        return []
    key = "_hoodie_record_key" if "_hoodie_record_key" in t.column_names else "id"
    return sorted(t.to_pylist(), key=lambda r: str(r[key]))


def _cases(times: list[str]) -> list[tuple[str, dict[str, Any], hudi.HudiReadOptions]]:
    cases = [
        ("snapshot", {}, hudi.HudiReadOptions()),
        ("read_optimized", {"query_type": "read_optimized"}, hudi.HudiReadOptions(hudi_options=RO)),
    ]
    for t in times:
        cases.append((f"as_of {t}", {"as_of": t}, hudi.HudiReadOptions().with_as_of_timestamp(t)))
        cases.append(
            (
                f"read_optimized as_of {t}",
                {"as_of": t, "query_type": "read_optimized"},
                hudi.HudiReadOptions(hudi_options=RO).with_as_of_timestamp(t),
            )
        )
    for a, b in itertools.combinations([None, *times], 2):
        assert b is not None
        o = hudi.HudiReadOptions().with_query_type(hudi.HudiQueryType.Incremental).with_end_timestamp(b)
        kw: dict[str, Any] = {"until": b}
        if a is not None:
            o = o.with_start_timestamp(a)
            kw["since"] = a
        else:
            kw["query_type"] = "incremental"
        cases.append((f"incremental ({a}, {b}]", kw, o))
    return cases


def compare(url: str, times: list[str], oracle: hudi.HudiTable, reader: Any = read) -> int:
    """Assert amcommit == hudi-rs in every query type; the number of non-empty answers."""
    nonempty = 0
    for what, kw, opts in _cases(times):
        ours = reader(url, **kw)
        theirs = _hudi_rows(oracle, opts)
        assert _sorted_rows(ours) == _sorted_rows(theirs), what
        if theirs is not None:
            assert ours.column_names == theirs.column_names, what
            nonempty += 1
    return nonempty


def test_java_mor_tables_read_as_hudi_rs_reads_them(java_table: Path) -> None:
    times = _instants(java_table)
    n = compare(str(java_table), times, hudi.HudiTable(str(java_table)))
    if java_table.name != "v6_empty":
        assert n >= 2 + 2 * len(times)


def test_java_tables_hold_what_the_sql_scripts_did(tmp_path: Path) -> None:
    """The merges these tables exercise, spelled out (not only equal to hudi-rs)."""
    t = read(str(unzip("v6_trips_8i1u", tmp_path)))
    assert t.num_rows == 8
    updated = [r for r in t.to_pylist() if r["_hoodie_commit_time"] == "20250331030645735"]
    assert [(r["_hoodie_record_key"], r["_hoodie_file_name"]) for r in updated] == [
        ("9909a8b1-2d15-4d3d-8ec9-efc48c536a00", "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0")
    ]
    d = read(str(unzip("v6_trips_8i3d", tmp_path)))
    assert d.num_rows == 5  # 8 inserts, 3 deleted by the delete block
    assert read(str(unzip("v6_trips_8i3d", tmp_path / "2")), query_type="read_optimized").num_rows == 8
    r = read(str(unzip("v6_nonpartitioned_rollback", tmp_path)))
    assert sorted(r.column("id").to_pylist()) == [1, 2, 3]
    e = read(str(unzip("v6_empty", tmp_path)))
    assert e.num_rows == 0
    assert e.column_names == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
        "id",
        "name",
        "isActive",
    ]


COW_WRITES = [
    Write(files={"a": 2, "b": 1}),
    Write(files={"a": 1, "b": 1}),
    Write(Operation.INSERT_OVERWRITE, files={"a": 1}),
    Write(files={"b": 2}, failed=True),
    Write(files={"c": 1}),
    Write(Operation.INSERT_OVERWRITE_TABLE, files={"b": 1, "d": 1}, rows=5),
    Write(files={"a": 1}),
]


def test_cow_tables_read_as_hudi_rs_reads_them(tmp_path: Path) -> None:
    gen = generate(COW_WRITES)
    root = write_local(gen, tmp_path / "t")
    n = compare(str(root), gen.completed, hudi.HudiTable(str(root)))
    assert n > len(gen.completed)


async def test_read_async_is_read(tmp_path: Path) -> None:
    root = unzip("v6_trips_8i1u", tmp_path)
    a = await read_async(str(root), as_of="20250331030642808")
    assert _sorted_rows(a) == _sorted_rows(read(str(root), as_of="20250331030642808"))
    assert a.num_rows == 8


def _files(root: Path) -> list[tuple[str, bytes]]:
    """Relative path and bytes of every file, the timeline last (as a writer publishes it)."""
    files = [p for p in root.rglob("*") if p.is_file()]
    files.sort(key=lambda p: (".hoodie" in p.parts, str(p)))
    return [(p.relative_to(root).as_posix(), p.read_bytes()) for p in files]


async def _upload(sut: StoreUnderTest, root: Path) -> None:
    for rel, data in _files(root):
        await sut.store.put(join(sut.base, rel), data)


async def _check_remote(sut: StoreUnderTest, tmp_path: Path, url: str, options: dict[str, str]) -> None:
    root = unzip("v6_trips_8i3d", tmp_path)
    await _upload(sut, root)
    oracle = hudi.HudiTable(url, options)
    for what, kw, opts in _cases(_instants(root)):
        ours = await read_store(sut.store, sut.base, **kw)
        assert _sorted_rows(ours) == _sorted_rows(_hudi_rows(oracle, opts)), what


async def test_azurite_read_equals_hudi_rs(backend_blob_azurite: StoreUnderTest, tmp_path: Path) -> None:
    sut = backend_blob_azurite
    az: Any = sut.extras["emulator"]
    options = {
        "azure_storage_account_name": az.account,
        "azure_storage_account_key": az.account_key,
        "azure_storage_endpoint": az.endpoint,
        "azure_allow_http": "true",
    }
    await _check_remote(sut, tmp_path, f"az://{sut.extras['container']}/{sut.base}", options)


async def test_fake_gcs_read_equals_hudi_rs(backend_gcs_fake: StoreUnderTest, tmp_path: Path) -> None:
    sut = backend_gcs_fake
    server: Any = sut.extras["server"]
    key = {
        "private_key": "",
        "private_key_id": "",
        "client_email": "amcommit-test@example.invalid",
        "gcs_base_url": server.url.rstrip("/"),
        "disable_oauth": True,
    }
    options = {"google_service_account_key": json.dumps(key), "google_allow_http": "true"}
    await _check_remote(sut, tmp_path, f"gs://{sut.extras['bucket']}/{sut.base}", options)
