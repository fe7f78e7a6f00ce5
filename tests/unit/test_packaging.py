"""What the package's extras install (pyproject.toml), and that the environment has it."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].strip().lower() for r in requirements}


def test_spark_extra_installs_pandas() -> None:
    """Issue 23 item 14: PySpark warns without pandas and ``toPandas()`` fails."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"pyspark", "pyarrow", "pandas"} <= _names(extras["spark"])
    # the environment the tests run in was installed with the spark extra
    assert metadata.version("pandas")
