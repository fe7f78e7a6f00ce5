"""Smoke test of benchmarks/table_changes.py --quick: runs, verifies against hudi-rs, writes JSON.
Not a measurement: the figures are not checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.smoke import ROOT, run_benchmark


@pytest.mark.timeout(120)
def test_table_changes_quick(tmp_path: Path) -> None:
    proc = run_benchmark("benchmarks.table_changes", "--quick", "--out", str(tmp_path), timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| instants | range |" in proc.stdout
    rows = json.loads((tmp_path / "table_changes.json").read_text())["rows"]
    assert {(r["instants"], r["range"]) for r in rows} == {(100, 1), (100, 10), (10, 1)}
    for r in rows:
        assert r["verified"] == "exact" and r["files"] == 10 * r["range"]
        assert r["amcommit_ms"] > 0 and r["hudi_rs_ms"] > 0 and r["list_table_ms"] > 0


@pytest.mark.timeout(120)
def test_table_commit_quick() -> None:
    """benchmarks/table_commit.py --quick runs both contenders and verifies both outputs,
    and leaves the results of the last full run alone."""
    results = ROOT / "benchmarks" / "results" / "table_commit.json"
    before = results.read_bytes() if results.exists() else None
    proc = run_benchmark("benchmarks.table_commit", "--quick", timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| plain | 100 |" in proc.stdout and "| table | 100 |" in proc.stdout
    assert "local: table commit " in proc.stdout and "table requests:" in proc.stdout
    assert (results.read_bytes() if results.exists() else None) == before


@pytest.mark.timeout(150)
def test_table_upsert_quick(tmp_path: Path) -> None:
    """benchmarks/table_upsert.py --quick: both contenders on both scenarios, every result
    verified; the late-data upsert reads key columns only of the files holding the keys and
    rewrites exactly them."""
    proc = run_benchmark("benchmarks.table_upsert", "--quick", "--out", str(tmp_path), timeout=140)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| backend | scenario | keys | contender |" in proc.stdout
    rows = json.loads((tmp_path / "table_upsert.json").read_text())["summary"]
    got = {(r["scenario"], r["contender"]): r for r in rows}
    assert set(got) == {(s, c) for s in ("late", "spread") for c in ("upsert", "whole rewrite")}
    assert all(r["verified"] == "exact" and r["seconds"] > 0 for r in rows)
    late = got[("late", "upsert")]
    assert (late["footers_read"], late["key_columns_read"], late["files_rewritten"]) == (20, 10, 10)
    assert got[("spread", "upsert")]["files_rewritten"] == 20
    assert got[("late", "whole rewrite")]["files_rewritten"] == 20
