"""Smoke test of benchmarks/table_age.py on a small old table: runs, archives, verifies every
commit and file through amcommit's reader, prints both tables. Not a measurement."""

from __future__ import annotations

import pytest

from benchmarks.smoke import run_benchmark


@pytest.mark.timeout(120)
def test_table_age_small() -> None:
    proc = run_benchmark(
        "benchmarks.table_age", "--backend", "local", "--old", "60", "--writes", "3", timeout=110
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| local 10 | 10 | 3 |" in proc.stdout and "| local 60 | 60 | 3 |" in proc.stdout
    # the old table was archived: 60 commits, 20 active, +3 writes
    assert "'active_writes': 23, 'verified': True" in proc.stderr
    assert "| local | 10 | 60 |" in proc.stdout
