"""Smoke test of benchmarks/table_footers.py --quick: both contenders run and are verified,
sizes and index reads reported. Not a measurement: only the facts that do not depend on the
machine are checked (sizes, counts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.smoke import run_benchmark


@pytest.mark.timeout(150)
def test_table_footers_quick(tmp_path: Path) -> None:
    proc = run_benchmark("benchmarks.table_footers", "--quick", "--out", str(tmp_path), timeout=140)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| backend | contender | index_ms |" in proc.stdout
    res = json.loads((tmp_path / "table_footers.json").read_text())
    sizes = {(r["contender"], r["rows"]): r for r in res["sizes"]}
    assert sizes[("fixed", 1)]["filter_bytes"] == sizes[("fixed", 5000)]["filter_bytes"] == 431_380
    assert sizes[("sized", 1)]["filter_bytes"] == 60 and sizes[("sized", 5000)]["filter_bytes"] == 35_996
    assert sizes[("sized", 1)]["file_bytes"] < 10_000 < 430_000 < sizes[("fixed", 1)]["file_bytes"]
    got = {r["contender"]: r for r in res["summary"]}
    assert set(got) == {"fixed", "sized", "fixed, 576 KB tail (before)"}
    assert got["fixed, 576 KB tail (before)"]["index_ms"] > 0
    for r in (got["fixed"], got["sized"]):
        assert r["verified"] == "exact" and r["upsert_s"] > 0 and r["index_ms"] > 0
        assert (r["footers_read"], r["key_columns_read"], r["files_rewritten"]) == (20, 10, 10)
