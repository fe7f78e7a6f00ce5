"""``spark.read.format("amcommit")`` on a table whose file groups were rewritten (upserts and
deletes built by hand to Hudi's rules, amcommit.testing.tablegen): snapshot and time travel at
every instant, incremental reads between every pair of instants, against the generator's
model (hudi-rs agrees with it: tests/table/test_file_versions.py).

Before the readers took the newest version of each file group in a range, ``(000, I2]``
returned every version of a rewritten group: keys came back two and three times."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from amcommit.testing.tablegen import write_local
from tests.table.test_file_versions import model_rows, pairs, versioned

pytestmark = pytest.mark.spark


def spark_rows(spark: Any, dest: Path, **opts: str) -> list[tuple[str, str, str]]:
    r = spark.read.format("amcommit")
    for k, v in opts.items():
        r = r.option(k, v)
    df = r.load(str(dest)).select("_hoodie_record_key", "value", "_hoodie_commit_time")
    return sorted((row[0], row[1], row[2]) for row in df.collect())


def test_table_with_file_group_versions_read_by_spark(spark: Any, tmp_path: Path) -> None:
    gen = versioned()
    dest = write_local(gen, tmp_path / "t")
    assert spark_rows(spark, dest) == model_rows(gen.snapshot(gen.completed[-1]))
    for t in gen.completed:
        assert spark_rows(spark, dest, asOf=t) == model_rows(gen.snapshot(t)), t
    done = gen.completed
    # every pair runs through the same planning and row filter without Spark
    # (test_file_versions.py::test_spark_reader_plans_and_filters_the_newest_versions); here,
    # lean: from the start to every instant, every adjacent pair, and ranges spanning several
    spans = [(None, b) for b in done] + list(itertools.pairwise(done))
    spans += [(done[0], done[3]), (done[1], done[5]), (done[2], done[7]), (done[3], done[6])]
    assert set(spans) <= set(pairs(gen))
    for a, b in spans:
        got = spark_rows(spark, dest, since=a or "000", until=b)
        assert len({k for k, _, _ in got}) == len(got), (a, b)  # each key once
        assert got == model_rows(gen.incremental(a, b)), (a, b)
