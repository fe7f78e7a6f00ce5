"""Per-file schemas (issue 32 item 5): every task writer checks the Parquet footer of what it
uploads against the write's schema, so a base file whose own schema differs is refused in
one line naming the file and the column, before anything of it is written, and the table
(its listing, amcommit's reader and hudi-rs) stays as it was."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.paths import basename, join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.errors import SchemaMismatch
from amcommit.table.format.schema import avro_schema, check_file_schema, check_footer
from amcommit.table.settings import TableConfig
from amcommit.table.write.task import TableTask, setup_table_task
from tests.backends import StoreUnderTest
from tests.table.test_write_engine import _hudi_location
from tests.table.writehelpers import SCHEMA, begin, hudi_rows, listing, parquet_bytes, rows, write

FAST = TableConfig(lock_ttl=5.0, lock_wait=20.0, writer_ttl=30.0)
WRITE = avro_schema(SCHEMA, "t1")  # id long (required), p string, v string


def _schema(*fields: tuple[str, pa.DataType] | pa.Field) -> pa.Schema:
    return pa.schema([f if isinstance(f, pa.Field) else pa.field(*f) for f in fields])


def test_check_file_schema_is_pure_and_names_file_and_column() -> None:
    meta = [(c, pa.string()) for c in ("_hoodie_commit_time", "_hoodie_record_key")]
    ok = [
        _schema(*meta, ("id", pa.int64()), ("p", pa.string()), ("v", pa.string())),
        _schema(("id", pa.int32()), ("p", pa.string()), ("v", pa.string())),  # narrower: cast up
        _schema(("id", pa.int64()), ("p", pa.string())),  # a nullable column left out
        _schema(("id", pa.int64()), ("v", pa.dictionary(pa.int32(), pa.string()))),
    ]
    for s in ok:
        check_file_schema("p=a/f.parquet", s, WRITE)
    bad = [
        (
            _schema(("id", pa.float64()), ("p", pa.string()), ("v", pa.string())),
            "id",
            "is double in the file but long",
        ),
        (
            _schema(("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())),
            "v",
            "is long in the file but string",
        ),
        (
            _schema(("id", pa.int64()), ("p", pa.string()), ("w", pa.string())),
            "w",
            "is not in the write's schema",
        ),
        (
            _schema(("p", pa.string()), ("v", pa.string())),
            "id",
            r"\(long, not nullable\) is missing from the file",
        ),
    ]
    for s, col, why in bad:
        with pytest.raises(SchemaMismatch, match=f"^base file 'p=a/f.parquet': column '{col}' {why}") as e:
            check_file_schema("p=a/f.parquet", s, WRITE)
        assert e.value.column == col and "\n" not in str(e.value)
    nested = avro_schema(_schema(("id", pa.int64()), ("s", pa.struct([("x", pa.int64())]))), "t")
    check_file_schema("f", _schema(("id", pa.int64()), ("s", pa.struct([("x", pa.int32())]))), nested)
    with pytest.raises(
        SchemaMismatch, match=r"column 's\.x' is string in the file but long in the write's schema"
    ) as e:
        check_file_schema("f", _schema(("id", pa.int64()), ("s", pa.struct([("x", pa.string())]))), nested)
    assert e.value.column == "s.x"
    stamps = avro_schema(_schema(("t", pa.timestamp("us", tz="UTC"))), "t")
    check_file_schema("f", _schema(("t", pa.timestamp("ns"))), stamps)  # an INT96 footer
    with pytest.raises(SchemaMismatch, match=r"^base file 'f': not a Parquet file"):
        check_footer("f", b"not parquet", WRITE)
    check_footer("f", b"not parquet", None)  # a write without a declared schema: unchecked


def _bad_files(w: Any, t: TableTask) -> list[tuple[str, bytes, str]]:
    """(path, bytes, column) of files whose own schema differs from the write's."""
    part = "p=a"
    out = []
    for col, schema, row in [
        (
            "v",
            _schema(pa.field("id", pa.int64(), False), ("p", pa.string()), ("v", pa.int64())),
            {"id": 90, "p": "a", "v": 1},
        ),
        (
            "extra",
            SCHEMA.append(pa.field("extra", pa.string())),
            {"id": 91, "p": "a", "v": "x", "extra": "e"},
        ),
        (
            "id",
            _schema(("id", pa.string()), ("p", pa.string()), ("v", pa.string())),
            {"id": "92", "p": "a", "v": "x"},
        ),
    ]:
        rel = t.new_file(part)
        out.append((rel, parquet_bytes([row], schema, meta=(w.instant, part, basename(rel), 0)), col))
    return out


async def _refused(sut: StoreUnderTest, table_commit: str, hudi: tuple[str, dict[str, str] | None]) -> None:
    store: Store = sut.store
    dest = join(sut.base, f"fs-{table_commit}")
    cfg = FAST.with_options(table_commit=table_commit)
    first = rows(0, 6)
    await write(store, dest, first, config=cfg)
    uri = hudi[0] if hudi[0] else dest
    want = hudi_rows(uri, storage=hudi[1])
    assert len(want) == 6
    before = await listing(store, dest)

    w = await begin(store, dest, config=cfg)
    base = f"{w.instant}_m_000000"
    t = await setup_table_task(store, w, f"task_{base}", f"attempt_{base}_0", config=cfg)
    assert t.schema is not None and t.direct == (table_commit == "direct")
    begun = await listing(store, dest)
    for rel, data, col in _bad_files(w, t):
        with pytest.raises(SchemaMismatch, match=f"^base file '{rel}': column '{col}' ") as e:
            await t.put(rel, data, rows=1)
        assert e.value.column == col and "\n" not in str(e.value)
        # nothing of it was written: no file, no marker, nothing staged
        assert await listing(store, dest) == begun
    assert t.files == {}
    await abort_job(store, dest, w.instant, config=cfg)
    after = await listing(store, dest)
    assert [n for n in after if not n.startswith(".hoodie/")] == [
        n for n in before if not n.startswith(".hoodie/")
    ]
    assert hudi_rows(uri, storage=hudi[1]) == want

    # the same task API writes good files (a narrower id is cast up by readers) and commits
    w = await begin(store, dest, config=cfg)
    base = f"{w.instant}_m_000000"
    t = await setup_table_task(store, w, f"task_{base}", f"attempt_{base}_0", config=cfg)
    good = rows(10, 2, parts=("a",))
    rel = t.new_file("p=a")
    await t.put(rel, parquet_bytes(good, meta=(w.instant, "p=a", basename(rel), 0)), rows=2)
    await t.commit()
    await commit_job(store, dest, w.instant, config=cfg)
    assert len(hudi_rows(uri, storage=hudi[1])) == 8


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
async def test_table_task_refuses_a_file_of_another_schema_local(
    backend_local: StoreUnderTest, table_commit: str
) -> None:
    store = backend_local.store
    assert isinstance(store, LocalStore)
    await _refused(
        backend_local,
        table_commit,
        (os.path.join(store.root, backend_local.base, f"fs-{table_commit}"), None),
    )


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
async def test_table_task_refuses_a_file_of_another_schema_fake_gcs(
    backend_gcs_fake: StoreUnderTest, table_commit: str
) -> None:
    dest = join(backend_gcs_fake.base, f"fs-{table_commit}")
    await _refused(backend_gcs_fake, table_commit, _hudi_location(backend_gcs_fake, dest))
