"""A SparkSession per test module (``local[2,3]``: 2 cores, a task may fail 3 times, so
retries happen), helpers to read the destination back.

The Python workers must run this interpreter (pyarrow, amcommit): ``PYSPARK_PYTHON`` is
set before the session starts."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pyspark = pytest.importorskip("pyspark")


def _java_ok() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java"))))


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    if not _java_ok():
        pytest.skip("Java is not available")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("amcommit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def data_files(dest: Path) -> dict[str, int]:
    """Visible files below ``dest`` (relative path -> size), ``_temporary`` included."""
    out = {}
    for root, _dirs, files in os.walk(dest):
        for f in files:
            full = os.path.join(root, f)
            out[os.path.relpath(full, dest)] = os.path.getsize(full)
    return out


def rows(df: Any, *cols: str) -> list[tuple[Any, ...]]:
    """Sorted rows of ``df`` (selected ``cols``) as tuples."""
    sel = df.select(*cols) if cols else df
    return sorted(tuple(r) for r in sel.collect())
