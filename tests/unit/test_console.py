"""amcommit.console: tables, reports and progress as a person sees them."""

from __future__ import annotations

import io
import re

from amcommit.committer.jobs import DestinationJobs, JobInfo
from amcommit.committer.report import JobReport, Progress
from amcommit.console import ProgressBar, format_jobs, format_report, pretty_json, report_from_success


def _events(bar: ProgressBar) -> None:
    bar(Progress("load_manifests", 0, 0, "start"))
    for i in range(1, 5):
        bar(Progress("load_manifests", i, 4))
    bar(Progress("load_manifests", 0, 0, "end"))
    bar(Progress("rename_files", 0, 0, "start"))
    bar(Progress("rename_files", 500, 1000))
    bar(Progress("rename_files", 1000, 1000))
    bar(Progress("rename_files", 0, 0, "end"))


def test_progress_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with ProgressBar(stream, tty=False) as bar:
        _events(bar)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "  load_manifests ..." and lines[2] == "  rename_files ..."
    assert re.fullmatch(r"  load_manifests done: 4/4 in \d+\.\d\d s", lines[1]), lines
    assert re.fullmatch(r"  rename_files done: 1,000/1,000 in \d+\.\d\d s", lines[3]), lines
    assert "\x1b" not in stream.getvalue()


def test_progress_bars_per_stage_on_a_terminal() -> None:
    stream = io.StringIO()
    with ProgressBar(stream, tty=True) as bar:
        _events(bar)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert "load_manifests" in text and "rename_files" in text
    assert "4/4" in text and "1,000/1,000" in text and "ETA" in text


def test_report_from_success_matches_the_live_report() -> None:
    live = JobReport(job_id="j1", dest_uri="gs://b/out", success=True, files=12, bytes=3456, manifests=3)
    live.renamed, live.recovered_renames, live.retries = 12, 1, 2
    live.stage_seconds = {"load_manifests": 0.01, "rename_files": 0.5}
    live.started, live.finished = 100.0, 101.25
    again = report_from_success(live.to_success_data())
    assert format_report(again) == format_report(live)
    assert "committed 12 files (3,456 bytes) from 3 task manifests into gs://b/out" in format_report(live)
    assert "rename rate 24 files/s, recovered renames 1, retries 2" in format_report(live)


def test_jobs_table_does_not_wrap_long_ids() -> None:
    long_id = "job_" + "x" * 150
    d = DestinationJobs(dest_uri="file:///d", jobs=[JobInfo(long_id, "amcommit", "set up", 3)])
    lines = format_jobs(d, now=0).splitlines()
    row = next(line for line in lines if line.startswith("job_"))
    assert row.split()[:5] == [long_id, "amcommit", "set", "up", "3"]
    assert all(line == line.rstrip() for line in lines)


def test_pretty_json_keeps_keys_and_numbers_as_written() -> None:
    data = b'{"b":1,"a":[1.50,{"z":null}],"e":[],"s":"caf\xc3\xa9"}'
    assert pretty_json(data) == (
        '{\n  "b": 1,\n  "a": [\n    1.50,\n    {\n      "z": null\n    }\n  ],\n  "e": [],\n  "s": "café"\n}'
    )
