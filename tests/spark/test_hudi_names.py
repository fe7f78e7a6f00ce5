"""Issue 36 items 1 and 2 in Spark: Hudi's write option names in ``format("amcommit")`` and
``amcommit.spark.upsert`` / ``delete``; each mistake's one-line message, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import amcommit.spark as amspark
from amcommit.errors import AmcommitError

pytestmark = pytest.mark.spark


def _props(root: Path) -> dict[str, str]:
    text = (root / ".hoodie" / "hoodie.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def _listing(dest: Path) -> list[str]:
    return sorted(
        str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and ".heartbeat" not in str(p)
    )


def _rows(spark: Any, dest: Path) -> list[tuple[Any, ...]]:
    return sorted((r.id, r.day, r.v, r.ts) for r in spark.read.format("amcommit").load(str(dest)).collect())


@pytest.mark.timeout(600)
def test_hudi_names_write_upsert_delete(spark: Any, tmp_path: Path) -> None:
    """A write, upserts and a delete given Hudi's names only: the table takes the key,
    partition field and name they say; DefaultHoodieRecordPayload with the precombine field
    keeps the greater ts; an int key column upserts into the long-keyed table (promoted);
    the delete finds its row."""
    dest = tmp_path / "t"
    schema = "id long, day string, v string, ts long"
    hudi = {
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "day",
        "hoodie.table.name": "hudi_named",
        "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
        "hoodie.datasource.write.operation": "bulk_insert",
    }
    w = (
        spark.createDataFrame([(1, "a", "x", 5), (2, "b", "y", 5)], schema)
        .write.format("amcommit")
        .mode("append")
    )
    for k, v in hudi.items():
        w = w.option(k, v)
    w.save(str(dest))
    props = _props(dest)
    assert (props["hoodie.table.name"], props["hoodie.table.recordkey.fields"]) == ("hudi_named", "id")
    assert props["hoodie.table.partition.fields"] == "day"
    up = {
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        "hoodie.datasource.write.operation": "upsert",
    }
    older = spark.createDataFrame([(1, "a", "old", 4), (3, "a", "z", 1)], schema)
    amspark.upsert(older, str(dest), **up)
    assert _rows(spark, dest) == [(1, "a", "x", 5), (2, "b", "y", 5), (3, "a", "z", 1)]
    as_int = spark.createDataFrame([(2, "b", "int-key", 9)], "id int, day string, v string, ts long")
    amspark.upsert(as_int, str(dest), **up)
    assert _rows(spark, dest) == [(1, "a", "x", 5), (2, "b", "int-key", 9), (3, "a", "z", 1)]
    amspark.delete(spark.createDataFrame([(3, "a")], "id long, day string"), str(dest))
    assert _rows(spark, dest) == [(1, "a", "x", 5), (2, "b", "int-key", 9)]


@pytest.mark.timeout(600)
def test_mistakes_are_named(spark: Any, tmp_path: Path) -> None:
    dest = tmp_path / "t"
    df = spark.createDataFrame([(1, "a", "x", 5)], "id long, day string, v string, ts long")
    amspark.upsert(df, str(dest), recordKey="id", partitionBy="day")
    before = _listing(dest)
    cases: list[tuple[Any, Any, dict[str, Any], str]] = [
        (
            amspark.upsert,
            df,
            {"precombine_field": "ts"},
            "unknown option 'precombine_field'; did you mean 'precombineField'?",
        ),
        (
            amspark.upsert,
            df,
            {"recordKey": "ID_X"},
            "option 'recordKey' must name columns of the DataFrame (id, day, v, ts): its 1st column 'ID_X' is "
            "none of them",
        ),
        (
            amspark.delete,
            df.select("id"),
            {},
            "the table's partition column 'day' is not in the DataFrame (columns: id)",
        ),
        (
            amspark.upsert,
            df,
            {"precombineField": "ts", "hoodie.datasource.write.precombine.field": "v"},
            "options 'precombineField' and 'hoodie.datasource.write.precombine.field' name one setting with "
            "different values: give one",
        ),
        (
            amspark.upsert,
            df,
            {"hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator"},
            "amcommit does not support Hudi option 'hoodie.datasource.write.keygenerator.class' "
            "(docs/configuration.md: Hudi's option names)",
        ),
    ]
    for fn, frame, opts, msg in cases:
        with pytest.raises(AmcommitError) as ei:
            fn(frame, str(dest), **opts)
        assert msg in str(ei.value) and "\n" not in str(ei.value), str(ei.value)
        assert _listing(dest) == before
