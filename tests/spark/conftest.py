"""One SparkSession for all Spark test modules (``local[2,3]``: 2 cores, a task may fail 3
times, so retries happen). Starting a session and warming up its Python workers takes
15-30 s on this machine, so the modules share it (package scope).

The Python workers must run this interpreter (pyarrow, amcommit): ``PYSPARK_PYTHON`` is
set before the session starts. Test faults (:mod:`amcommit.testing.spark`) are set up with
``configure``: its ``sitecustomize`` installs them in Spark's Python processes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from amcommit.spark.session import local_builder
from amcommit.testing.spark import configure

pyspark = pytest.importorskip("pyspark")


def _java_ok() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java"))))


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    if not _java_ok():
        pytest.skip("Java is not available")
    session = (
        configure(local_builder("local[2,3]", "amcommit-tests"))  # test faults reach the workers
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")  # one session serves every Spark test of a worker
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
