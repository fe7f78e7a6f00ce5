"""The Spark reader of an archived table (issue 35 item 1): time travel and incremental reads
that start before the active timeline read the archived commits (amcommit reads the archive;
hudi-rs's incremental read there returns only the active commits' rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amcommit.cli.main import main as cli_main
from amcommit.testing.tablegen import Write, generate, write_local
from tests.spark.test_tables import spark_rows

pytestmark = pytest.mark.timeout(300)


def test_spark_reads_before_the_active_timeline(spark: Any, tmp_path: Path) -> None:
    gen = generate([Write(files={"a": 1, "b": 1}) for _ in range(12)])
    root = write_local(gen, tmp_path / "t")
    assert cli_main(["archive", str(root), "--keep-max", "8", "--keep-min", "5"]) == 0
    t = gen.completed
    assert not (root / ".hoodie" / f"{t[2]}.commit").exists()  # archived

    def model(records: dict[str, Any]) -> list[tuple[int, str]]:
        return sorted((r.id, r.commit_time) for r in records.values())

    assert spark_rows(spark, root) == model(gen.snapshot(t[-1]))
    assert spark_rows(spark, root, asOf=t[2]) == model(gen.snapshot(t[2]))
    assert spark_rows(spark, root, since=t[1], until=t[9]) == model(gen.incremental(t[1], t[9]))
    assert spark_rows(spark, root, since="000", until=t[3]) == model(gen.incremental(None, t[3]))
