"""``amcommit demo`` with Spark (small, local target, in the suite's SparkSession)."""

from __future__ import annotations

from typing import Any

import pytest

from amcommit.cli import main

pytestmark = pytest.mark.spark


def test_spark_demo_local(spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "demo",
        "--target",
        "local",
        "--rows",
        "30000",
        "--tasks",
        "3",
        "--days",
        "4",
        "--failed-attempts",
        "1",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "committed 12 files" in out and "rename rate" in out and "recovered renames 0" in out
    assert "verified with Spark: 30,000 rows" in out and "-> OK" in out
