"""The README's "other ingestion tools" example (``examples/folder_ingest.py``) as a real
process, SIGKILLed at several points of its loop and restarted (files keep arriving between
runs; no run waits for the lock of a killed one): the table holds every input row exactly once (amcommit's planner + pyarrow, and
hudi-rs), each batch label on exactly one instant, nothing else left in the table."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table.commit.labels import label_of
from amcommit.table.timeline.instants import load_timeline, snapshot
from tests.table.writehelpers import listing

REPO = str(Path(__file__).resolve().parents[2])

# (regex on "<op> <path>", nth match): each run is killed there, then restarted
KILLS = [
    (r"^delete .*/\.hoodie/\.heartbeat/\d{17}$", 1),  # batch 0 published, cleanup not done
    (r"^put .*/\.hoodie/\.aux/amcommit/\d{17}/_job\.json$", 2),  # begin_write of the run's 2nd batch
    (r"^rename .* -> .*/\.hoodie/\d{17}\.commit$", 1),  # every file in place, not published
    (r"^put .*/[^/]*_attempt-[^/]*\.parquet$", 2),  # a task writing the run's 2nd batch (its base file)
    (r"^delete .*/\.hoodie/\.heartbeat/\d{17}$", 1),  # recover's rollback of that batch
    (r"^put .*/commit-plan\.json$", 2),  # label checked, plan not saved
    (r"^delete .*/\.hoodie/\.aux/amcommit/_commit\.lock$", 1),  # committed, lock not released
]
SLOW = 30.0
"""No run takes this long: none waits for a dead run's lock (lock_ttl, 60 s)."""


def _drop(inbox: Path, first: int, count: int) -> list[tuple[int, str]]:
    """``count`` new input files of 3 rows each; the rows written."""
    out = []
    for f in range(first, first + count):
        lines = [{"id": f * 10 + j, "name": f"file{f}"} for j in range(3)]
        (inbox / f"f{f:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        out.extend((r["id"], r["name"]) for r in lines)
    return out


def _run(root: Path, inbox: Path, cp: Path, kill: str, nth: int) -> int:
    argv = [
        sys.executable,
        "-m",
        "tests.table.ingest_child",
        str(root),
        str(inbox),
        str(cp),
        kill,
        str(nth),
        "2",
    ]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ}, cwd=REPO)
    assert r.returncode in (0, -9), r.stderr[-2000:]
    assert time.monotonic() - t0 < SLOW, (kill, nth, r.stderr[-2000:])
    return r.returncode


def _hudi(uri: str) -> list[tuple[Any, ...]]:
    from hudi import HudiReadOptions, HudiTableBuilder

    out: list[tuple[Any, ...]] = []
    for batch in HudiTableBuilder.from_base_uri(uri).build().read(HudiReadOptions()):
        out.extend((r["id"], r["name"]) for r in batch.to_pylist())
    return sorted(out)


async def _commit_refused(root: Path) -> None:
    """``commit_job`` of the batch a run left pending (killed before its task commit) is
    refused (its task count is recorded); nothing is published, the label not used up."""
    from amcommit.api import commit_job
    from amcommit.errors import IncompleteJob
    from amcommit.table.timeline.instants import list_instants

    async with LocalStore(str(root), fsync=False) as store:
        instants = await list_instants(store, "tbl")
        done = {i.time for i in instants if i.completed}
        pending = sorted({i.time for i in instants} - done)
        assert len(pending) == 1, instants
        with pytest.raises(IncompleteJob, match="0 task manifests found, 1 expected"):
            await commit_job(store, "tbl", pending[0])
        assert {i.time for i in await list_instants(store, "tbl") if i.completed} == done


async def test_folder_ingest_survives_kill_9(tmp_path: Path) -> None:
    root, inbox, cp = tmp_path / "root", tmp_path / "inbox", tmp_path / "checkpoint"
    root.mkdir()
    inbox.mkdir()
    expected = _drop(inbox, 0, 5)
    for n, (kill, nth) in enumerate(KILLS):
        assert _run(root, inbox, cp, kill, nth) == -9, (kill, nth)  # each point was reached
        if "_attempt-" in kill:  # killed before its task commit: a commit from the store refuses it
            await _commit_refused(root)
        expected += _drop(inbox, 5 + 2 * n, 2)  # more files arrive meanwhile
    assert _run(root, inbox, cp, "-", 1) == 0
    assert _run(root, inbox, cp, "-", 1) == 0  # nothing new: nothing committed
    expected.sort()
    store = LocalStore(str(root), fsync=False)
    _, commits = await load_timeline(store, "tbl")
    got: list[tuple[Any, ...]] = []
    for f in snapshot(commits):
        t = pq.read_table(io.BytesIO(await store.get(join("tbl", f.path))))
        got.extend((r["id"], r["name"]) for r in t.to_pylist())
    assert sorted(got) == expected
    assert _hudi(str(root / "tbl")) == expected
    labels = [label_of(c.metadata.extra_metadata) for c in commits]
    assert [(lb.app_id, lb.version) for lb in labels if lb] == [("ingest", v) for v in range(len(commits))]
    names = await listing(store, "tbl")
    assert sorted(n for n in names if n.endswith(".parquet")) == sorted(f.path for f in snapshot(commits))
    done = {c.instant.time for c in commits}
    assert [
        n
        for n in names
        if n.startswith((".hoodie/.aux/amcommit/2", ".hoodie/.temp/2", ".hoodie/.heartbeat/"))
    ] == []
    assert [n for n in names if n.startswith(".hoodie/2") and n.split("/")[1][:17] not in done] == []
    await store.aclose()
