"""The Spark task writer's table files carry bloom filters sized to their keys (no
SparkSession: the writer alone)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from amcommit.spark.parquet import HudiMeta, PartitionedParquetWriter
from amcommit.table.format.bloom import parse_footer
from amcommit.table.format.naming import base_file_name, new_file_id


def test_spark_writer_files_carry_filters_sized_to_their_keys(tmp_path: Path) -> None:
    instant = "20260101000000000"
    names = iter(base_file_name(new_file_id(), "0-1-0", instant) for _ in range(4))
    w = PartitionedParquetWriter(
        partition_columns=("cat",),
        file_name=lambda n: next(names),
        local_path=lambda rel: str(tmp_path / rel),
        on_closed=lambda rel, local: None,
        keep_partition_columns=True,
        meta=HudiMeta(instant, 0, ("id",)),
    )
    w.write(pa.record_batch({"id": pa.array(range(5001), pa.int64()), "cat": ["a"] + ["b"] * 5000}))
    stats = w.close()
    got = {}
    for rel in stats.paths:
        f = pq.ParquetFile(tmp_path / rel)
        idx = parse_footer(f.metadata.metadata)
        keys = f.read(columns=["_hoodie_record_key"]).column(0).to_pylist()
        assert idx.bloom is not None and idx.may_hold(keys) == [True] * len(keys)
        got[len(keys)] = (idx.bloom.nr, (tmp_path / rel).stat().st_size)
    assert sorted(got) == [1, 5000]
    assert got[1][0] == 1 and got[1][1] < 10_000, got  # was 60,000 entries, ~434 KB
    assert got[5000][0] == 5000 and got[5000][1] < 150_000, got  # was ~502 KB
