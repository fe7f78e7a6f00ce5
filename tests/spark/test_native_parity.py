"""Parity with Spark's own Parquet writer (issue 11 items 6 and 13): the session's SQL
settings (dynamic partition overwrite, Parquet codec, records per file) are honoured as
``df.write.partitionBy(...).parquet(...)`` honours them, also after ``register(spark)``; a
write option beats the session setting; columns of Spark's ``void`` type (``array()``,
``null``) are written and read back as native Spark writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.spark.helpers import data_files, make_df, no_temporary, rows, writer

pytestmark = pytest.mark.spark

SESSION = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.files.maxRecordsPerFile": "400",
}


def _parts(dest: Path) -> set[str]:
    return {f.split("/")[0] for f in data_files(dest) if f.endswith(".parquet")}


def test_session_sql_settings_as_native(spark: Any, tmp_path: Path) -> None:
    from amcommit.spark import register

    ours, native = tmp_path / "ours", tmp_path / "native"
    old = make_df(spark, n=3_000, cats="abc").select("id", "cat", "amount")
    new = make_df(spark, n=2_000, start=10_000, cats="bd").select("id", "cat", "amount")
    writer(old, partitionBy="cat").save(str(ours))
    old.write.partitionBy("cat").parquet(str(native))
    for k, v in SESSION.items():
        spark.conf.set(k, v)
    try:
        register(spark)  # the session's SQL settings must count after register too
        writer(new, "overwrite", partitionBy="cat").save(str(ours))
        new.write.mode("overwrite").partitionBy("cat").parquet(str(native))
        assert rows(spark.read.parquet(str(ours))) == rows(spark.read.parquet(str(native)))
        assert _parts(ours) == _parts(native) == {"cat=a", "cat=b", "cat=c", "cat=d"}
        for f in data_files(ours):
            if f.endswith(".parquet") and f.split("/")[0] in ("cat=b", "cat=d"):
                meta = pq.ParquetFile(ours / f).metadata
                assert meta.row_group(0).column(0).compression == "ZSTD"
                assert meta.num_rows <= 400
        assert no_temporary(ours)

        # a write option beats the session setting (static: the whole destination goes)
        newest = make_df(spark, n=500, start=50_000, cats="e").select("id", "cat", "amount")
        writer(newest, "overwrite", partitionBy="cat", partitionOverwriteMode="static").save(str(ours))
        assert _parts(ours) == {"cat=e"}
    finally:
        for k in SESSION:
            spark.conf.unset(k)
        register(spark)


def test_void_columns_as_native(spark: Any, tmp_path: Path) -> None:
    df = spark.sql(
        "select id, array() as e, array(array()) as ee, named_struct('a', array(), 'b', null) as st, "
        "null as n, cast(id % 2 as string) as p from range(0, 100, 1, 2)"
    )
    ours, native = tmp_path / "ours", tmp_path / "native"
    writer(df, partitionBy="p").save(str(ours))
    df.write.partitionBy("p").parquet(str(native))
    back, expected = spark.read.parquet(str(ours)), spark.read.parquet(str(native))
    assert back.schema == expected.schema
    assert rows(back) == rows(expected) and len(rows(back)) == 100

    empty = tmp_path / "empty"  # no rows: partition 0 writes the schema alone
    writer(df.where("id < 0").drop("p"), "overwrite").save(str(empty))
    back = spark.read.parquet(str(empty))
    assert back.count() == 0 and back.schema == expected.drop("p").schema

    with pytest.raises(Exception, match="column 'm' is a map with void keys"):
        writer(spark.sql("select id, map() as m from range(3)")).save(str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()
