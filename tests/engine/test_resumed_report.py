"""A commit killed (SIGKILL, in a subprocess) past its point of no return and resumed
writes the same ``_SUCCESS`` report as an uninterrupted commit of the same job: the same
files, bytes, file names and counts, the same metric keys. Times, the I/O statistics and
the ``resumed`` diagnostic (which says the truth) are the only differences."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.committer import CommitterConfig
from amcommit.paths import join
from amcommit.store.local import LocalStore
from tests.engine.helpers import snapshot, temp_files
from tests.engine.test_kill_resume import JOB, NEW, kill_at, prepare

CFG = CommitterConfig(conflict_mode="overwrite", io_threads=1)  # as tests.engine.kill_child


def comparable(store: LocalStore, dest: str, raw: bytes) -> dict[str, Any]:
    """The report without times, I/O statistics, the event loop and the store's root (the
    two runs use two directories); metric keys are kept, their time values blanked."""
    d: dict[str, Any] = json.loads(raw.decode().replace(store.root_uri, "ROOT/"))
    for key in ("timestamp", "date", "iostatistics"):
        d.pop(key)
    d["metrics"] = {
        k: ("time" if k == "duration_ms" or k.startswith("stage_") else v) for k, v in d["metrics"].items()
    }
    d["diagnostics"]["rename_rate_per_s"] = "time"
    d["diagnostics"].pop("resumed")
    d["diagnostics"].pop("event_loop")  # the process that wrote it: the killed child or this one
    return d


async def uninterrupted(tmp_path: Path) -> dict[str, Any]:
    store, dest = await prepare(tmp_path / "plain")
    report = await commit_job(store, dest, JOB, config=CFG)
    assert report.success and not report.resumed
    return comparable(store, dest, await store.get(join(dest, "_SUCCESS")))


@pytest.mark.parametrize(
    "point", ["delete_victims:start", "delete_victims:end", "save_success:end", "cleanup:start"]
)
@pytest.mark.parametrize("finisher", ["commit", "abort"])
async def test_resumed_report_equals_uninterrupted(tmp_path: Path, point: str, finisher: str) -> None:
    expected = await uninterrupted(tmp_path)
    assert expected["metrics"]["renamed"] == len(NEW) and len(expected["filenames"]) == len(NEW)
    store, dest = await prepare(tmp_path / "killed")
    kill_at(store, dest, point)
    if finisher == "commit":
        report = await commit_job(store, dest, JOB, config=CFG)
    else:  # past the point of no return, abort completes the commit
        report = await abort_job(store, dest, JOB, config=CFG)
    assert report.success and report.resumed
    assert await snapshot(store, dest) == NEW and await temp_files(store, dest) == []
    got = comparable(store, dest, await store.get(join(dest, "_SUCCESS")))
    assert got == expected
    # the returned report agrees with _SUCCESS
    assert (report.files, report.renamed, report.victims_deleted) == (
        got["metrics"]["files"],
        got["metrics"]["renamed"],
        got["metrics"]["victims_deleted"],
    )
