"""``spark.read.format("amcommit")`` of Merge-on-Read tables, hudi-rs as the oracle.

The Java-written tables of ``tests/data/hudi-java/mor-v6`` (Avro and Parquet data blocks, a
delete block, a rollback command block, a table without meta fields) are unzipped to tmp and
read through Spark: snapshot (base files merged with their log blocks), read-optimized
(``hoodie.datasource.query.type=read_optimized``), time travel and incremental reads, each
equal, row for row and column for column, to what hudi-rs reads.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.table.test_read_oracle import RO, TABLES, _instants, _sorted_rows, unzip

pytestmark = pytest.mark.spark

hudi = pytest.importorskip("hudi")

READ_TABLES = [t for t in TABLES if t != "v6_empty"]
FULL = {"v6_trips_8i1u", "v6_trips_8i3d", "v6_nonpartitioned_rollback"}
"""Tables read in every query type (time travel to each instant, incremental between every
pair); the others in snapshot, read-optimized and a time travel to their first instant."""


def _cases(times: list[str], full: bool) -> list[tuple[str, dict[str, str], Any]]:
    cases: list[tuple[str, dict[str, str], Any]] = [
        ("snapshot", {}, hudi.HudiReadOptions()),
        (
            "read_optimized",
            {"hoodie.datasource.query.type": "read_optimized"},
            hudi.HudiReadOptions(hudi_options=RO),
        ),
    ]
    for t in times if full else times[:1]:
        cases.append((f"as_of {t}", {"as.of.instant": t}, hudi.HudiReadOptions().with_as_of_timestamp(t)))
        cases.append(
            (
                f"read_optimized as_of {t}",
                {"as.of.instant": t, "hoodie.datasource.query.type": "read_optimized"},
                hudi.HudiReadOptions(hudi_options=RO).with_as_of_timestamp(t),
            )
        )
    if not full:
        return cases
    for a, b in itertools.combinations([None, *times], 2):
        assert b is not None
        o = hudi.HudiReadOptions().with_query_type(hudi.HudiQueryType.Incremental).with_end_timestamp(b)
        kw = {"hoodie.datasource.query.type": "incremental", "until": b, "since": a or "000"}
        if a is not None:
            o = o.with_start_timestamp(a)
        cases.append((f"incremental ({a}, {b}]", kw, o))
    return cases


def spark_table(spark: Any, root: Path, opts: dict[str, str]) -> pa.Table:
    r = spark.read.format("amcommit")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load(str(root)).toArrow()


@pytest.mark.parametrize("name", READ_TABLES)
def test_spark_reads_java_mor_tables_as_hudi_rs(spark: Any, tmp_path: Path, name: str) -> None:
    root = unzip(name, tmp_path)
    oracle = hudi.HudiTable(str(root))
    for what, opts, hopts in _cases(_instants(root), name in FULL):
        ours = spark_table(spark, root, opts)
        batches = oracle.read(hopts)
        theirs = pa.Table.from_batches(batches) if batches else None
        assert _sorted_rows(ours) == _sorted_rows(theirs), f"{name}: {what}"
        if theirs is not None:
            assert ours.column_names == theirs.column_names, f"{name}: {what}"


def test_spark_snapshot_sees_log_updates_and_deletes(spark: Any, tmp_path: Path) -> None:
    """The merges spelled out: the update and the deletes that live only in log files."""
    t = spark_table(spark, unzip("v6_trips_8i1u", tmp_path / "u"), {})
    updated = [r for r in t.to_pylist() if r["_hoodie_commit_time"] == "20250331030645735"]
    assert [(r["_hoodie_record_key"], r["_hoodie_file_name"]) for r in updated] == [
        ("9909a8b1-2d15-4d3d-8ec9-efc48c536a00", "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0")
    ]
    root = unzip("v6_trips_8i3d", tmp_path / "d")
    assert spark_table(spark, root, {}).num_rows == 5  # 8 inserts, 3 deleted by a delete block
    assert spark_table(spark, root, {"hoodie.datasource.query.type": "read_optimized"}).num_rows == 8
