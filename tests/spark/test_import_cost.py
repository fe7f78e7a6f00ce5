"""What Spark's short-lived Python processes import (issue 35 item 6). Spark starts one to
look ``format("amcommit")`` up and one to create the source of each streaming query (before
those that plan its writer, run its tasks and its commits): they load the source's class
only, not the engine, pyarrow or the write and read paths. Each check runs in a fresh
interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

HEAVY = [
    "pyarrow",
    "amcommit.api",
    "amcommit.committer",
    "amcommit.table",
    "amcommit.spark.task",
    "amcommit.spark.driver",
    "amcommit.spark.stream",
    "amcommit.spark.mutate",
    "amcommit.spark.foreach",
    "amcommit.spark.options",
]


def _loaded(code: str) -> list[str]:
    """Which of :data:`HEAVY` a fresh interpreter has loaded after ``code``."""
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(r.stdout.strip().splitlines()[-1]))


def test_looking_the_source_up_loads_its_class_only() -> None:
    code = "import pyspark_amcommit\nassert pyspark_amcommit.DefaultSource.name() == 'amcommit'"
    assert _loaded(code) == []


def test_the_package_loads_its_names_on_first_use() -> None:
    assert _loaded("import amcommit.spark") == []
    code = "import amcommit.spark as s\nassert s.write_batch.__module__ == 'amcommit.spark.foreach'"
    assert "amcommit.spark.foreach" in _loaded(code)
    code = "from amcommit.spark import DefaultSource, AmcommitDataSource\nassert DefaultSource is AmcommitDataSource"
    assert _loaded(code) == []


def test_the_source_name_is_the_options_one() -> None:
    from amcommit.spark import options, source

    assert source.SOURCE_NAME == options.SOURCE_NAME == source.AmcommitDataSource.name()
