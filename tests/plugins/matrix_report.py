"""Records every fault-matrix cell's result and writes ``tests/matrix/last_run.json`` and
``last_run.md`` (registered in ``tests/conftest.py``: under pytest-xdist the controller
receives every worker's reports and writes the files; workers write nothing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

MATRIX = Path(__file__).resolve().parents[1] / "matrix"
RESULTS = MATRIX / "last_run.json"
TABLE = MATRIX / "last_run.md"

# -- results for the table -------------------------------------------------------------------------
_results: dict[str, dict[str, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/matrix/test_matrix.py::test_matrix[" not in report.nodeid:
        return
    cell = report.nodeid.split("[", 1)[1].rstrip("]")
    scenario, _, backend = cell.rpartition(".")
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfail"  # passed: a non-strict xfail
            reason = str(report.wasxfail)
        elif report.skipped:
            outcome = "skip"
            longrepr: Any = report.longrepr
            reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
            reason = reason.removeprefix("Skipped: ")
        elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
            outcome = "xpass"
            reason = str(report.longrepr).removeprefix("[XPASS(strict)]").strip()
        else:
            outcome = report.outcome
            reason = ""
            if report.failed:
                reason = str(
                    getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                )  # type: ignore[union-attr]
        _results[f"{scenario}|{backend}"] = {
            "scenario": scenario,
            "backend": backend,
            "outcome": outcome,
            "reason": reason.splitlines()[0][:300] if reason else "",
            "seconds": f"{report.duration:.2f}",
        }


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _results or hasattr(session.config, "workerinput"):
        return  # nothing ran, or an xdist worker: the controller gets every report and writes
    from tests.matrix.table import render

    RESULTS.write_text(json.dumps(list(_results.values()), indent=1, ensure_ascii=False))
    TABLE.write_text(render(list(_results.values())))
