"""The benchmark report (benchmarks/README.md) and its results: every result JSON says when,
on which code and on which machine it was measured; a benchmark run by hand leaves the
tracked results alone; every scenario of the report has its table, plot and command; the
plots are drawn from the recorded results."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks import common
from benchmarks.smoke import run_benchmark

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
REPORT = ROOT / "benchmarks" / "README.md"
DATE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d UTC$")


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def test_write_json_goes_to_tmp_unless_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A benchmark run by hand writes results/tmp/<name>.json; only ``save`` writes the
    tracked results/<name>.json. Both carry the run (date, commit, machine)."""
    tracked, scratch = tmp_path / "results", tmp_path / "results" / "tmp"
    monkeypatch.setattr(common, "RESULTS", tracked)
    monkeypatch.setattr(common, "TMP", scratch)
    by_hand = common.write_json("job_commit", {"rows": [1]})
    assert by_hand == scratch / "job_commit.json"
    assert not (tracked / "job_commit.json").exists()
    saved = common.write_json("job_commit", {"rows": [2]}, save=True)
    assert saved == tracked / "job_commit.json"
    for path, rows in ((by_hand, [1]), (saved, [2])):
        payload = json.loads(path.read_text())
        assert payload["rows"] == rows
        assert DATE.match(payload["run"]["date"])
        assert payload["run"]["machine"]["cpus"] >= 1


def test_run_info_names_the_checkout_commit() -> None:
    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    info = common.run_info()
    assert info["commit"].removesuffix("+dirty") == head
    assert DATE.match(info["date"])
    m = info["machine"]
    assert m["cpus"] >= 1 and m["memory_gib"] >= 0 and m["python"] and m["platform"]
    assert "date" not in m and len(info["load_average"]) in (0, 3)


def _runs(name: str, payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = [(name, payload.get("run"))]
    for scenario, res in payload.get("results", {}).items():  # the suite: each scenario's own
        out.append((f"{name}:{scenario}", res.get("run")))
    return out  # type: ignore[return-value]


def test_every_tracked_result_has_its_run() -> None:
    """Every result JSON in benchmarks/results (and every scenario of the suite's) has the
    date, commit and machine of its run; the commits are real commits of this repository."""
    shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() != "false"
    files = sorted(RESULTS.glob("*.json"))
    assert len(files) >= 20
    for path in files:
        for where, run in _runs(path.name, json.loads(path.read_text())):
            assert run, f"{where}: no run"
            assert DATE.match(run["date"]), (where, run["date"])
            assert run["machine"]["cpus"] and run["machine"]["python"], where
            for key in ("commit", "recorded_in", "before_commit"):
                if key in run and not shallow:
                    commit = run[key].removesuffix("+dirty")
                    assert git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, (where, key, commit)
            assert run["commit"], where


def _sections() -> dict[str, str]:
    text = REPORT.read_text()
    body = text[text.index("\n## The scenarios") : text.index("\n## Targets")]
    parts = re.split(r"\n## ", body)[2:]  # after "The scenarios"
    return {p.split("\n", 1)[0]: p for p in parts}


def test_every_scenario_of_the_report_has_its_run_table_plot_and_command() -> None:
    sections = _sections()
    assert len(sections) >= 12
    index = REPORT.read_text().split("\n## The scenarios", 1)[1].split("\n## ", 1)[0]
    for title, text in sections.items():
        anchor = re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
        assert f"](#{anchor})" in index, f"{title}: not in the scenario index"
        assert "**What it measures.**" in text and "**Why you care.**" in text, title
        run = re.search(r"\*\*Latest runs?:\*\* (.*?)\n\n", text, re.S)
        assert run, f"{title}: no latest run"
        assert re.search(r"20\d\d-\d\d-\d\d\s\d\d:\d\d", run.group(1)), f"{title}: no date"
        assert re.search(r"commits?\s+`[0-9a-f]{7,}`", run.group(1)), f"{title}: no commit"
        assert "VM" in run.group(1), f"{title}: no machine"
        assert re.search(r"\n\|---(\|---)+\|\n", text), f"{title}: no table"
        assert len(re.findall(r"!\[[^]]+\]\(results/[a-z_]+\.png\)", text)) == 1, f"{title}: one plot"
        assert "**Reproduce" in text and "python -m benchmarks" in text, f"{title}: no command"


def test_every_plot_of_the_report_is_drawn_from_the_results(tmp_path: Path) -> None:
    """``python -m benchmarks.plot`` draws, from the recorded results alone, exactly the
    plots the report shows, and each of them is in benchmarks/results."""
    pytest.importorskip("matplotlib")
    from benchmarks import plot

    shown = set(re.findall(r"!\[[^]]+\]\(results/([a-z_]+)\.png\)", REPORT.read_text()))
    drawn = plot.plot_everything(RESULTS, tmp_path)
    assert {p.stem for p in drawn} == shown
    for p in drawn:
        assert p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        assert (RESULTS / p.name).exists(), f"{p.name} is not in benchmarks/results"


@pytest.mark.timeout(120)
def test_merged_suite_results_keep_each_scenario_run(tmp_path: Path) -> None:
    """``python -m benchmarks --merge`` records the run of the scenario it ran and keeps the
    run of every scenario it did not (merged_from: each scenario's own date)."""
    earlier = {"date": "2026-01-02 03:04 UTC", "commit": "abc1234", "machine": {"cpus": 2, "python": "3.11"}}
    previous = {
        "machine": {"date": "2026-02-03 04:05 UTC"},
        "config": {"scale": {"files": 1}},
        "results": {"scale": {"rows": [], "table": "| x |", "run": earlier}},
    }
    (tmp_path / "benchmarks.json").write_text(json.dumps(previous))
    proc = run_benchmark(
        "benchmarks", "--smoke", "--only", "local", "--merge", "--out", str(tmp_path), timeout=110
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads((tmp_path / "benchmarks.json").read_text())
    assert payload["results"]["scale"]["run"] == earlier
    assert payload["merged_from"] == {"scale": earlier["date"]}
    run = payload["results"]["local"]["run"]
    head = git("rev-parse", "--short", "HEAD").stdout.strip()
    assert DATE.match(run["date"]) and run["mode"] == "smoke"
    if head:
        assert run["commit"].removesuffix("+dirty") == head
    assert f"Run {run['date']}, commit {run['commit']}." in (tmp_path / "benchmarks.md").read_text()
