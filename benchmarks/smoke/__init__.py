"""Smoke tests of the benchmarks (``./run bench --quick`` runs them, not ``./run test``):
each scenario's smallest case end to end, its verification, tables, JSON and plot. Not a
measurement: no figure is checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (benchmarks run from there)."""


def run_benchmark(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m <argv>`` from the repository root, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
