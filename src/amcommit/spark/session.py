"""A local SparkSession builder that stays on loopback and runs this interpreter."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_builder(master: str, app: str) -> Any:
    """``SparkSession.builder`` for ``master`` (e.g. ``"local[2]"``) named ``app``.

    The Python workers run this interpreter (it has pyarrow and amcommit), the driver binds
    to 127.0.0.1 only (``SPARK_LOCAL_IP``, ``spark.driver.host`` and ``bindAddress``: left
    alone, Spark binds to the machine's first interface) and the web UI is off. Callers add
    their own settings and call ``getOrCreate()``.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .appName(app)
        .config("spark.ui.enabled", "false")
    )


__all__ = ["local_builder"]
