"""An upsert or delete SIGKILLed (a real subprocess, tests.table.mutate_kill_child) after its
instant was allocated and its files written, before its task commit: nothing completes it.

``amcommit commit-job`` of it is refused in one line (nonzero exit, nothing published, its
label not used up); ``abort-job`` then rolls it back. ``recover()`` of its application rolls
it back too; an unlabelled one is rolled back by the next writer on this host. Either way the
replayed batch is then visible exactly once (hudi-rs, the label on one completed instant)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from amcommit.committer.job import commit_job
from amcommit.errors import IncompleteJob
from amcommit.store.local import LocalStore
from amcommit.table import mutate
from amcommit.table.labels import Label, committed_by, label_of, recover
from amcommit.table.settings import TableConfig
from amcommit.table.timeline import list_instants, load_timeline
from tests.table.test_mutate import SCHEMA, hudi_snapshot
from tests.table.writehelpers import listing

REPO = str(Path(__file__).resolve().parents[2])
CFG = TableConfig(writer_ttl=600.0, lock_ttl=60.0, lock_wait=60.0)
KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "config": CFG}
FIRST = [{"id": i, "p": "abc"[i % 3], "v": "0", "ts": 1} for i in range(12)]
UPSERT = [
    {"id": 1, "p": "b", "v": "u", "ts": 2},
    {"id": 3, "p": "a", "v": "u", "ts": 2},
    {"id": 50, "p": "c", "v": "n", "ts": 1},
]
DELETE = [{"id": 1, "p": "b"}, {"id": 3, "p": "a"}]
KEYS = pa.schema([("id", pa.int64()), ("p", pa.string())])
TASK_COMMIT = r"^put .*-manifest\.json$"
"""The killed write's task commit (the put of its task manifest)."""


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["p"], r["v"], r["ts"]) for r in rows)


BEFORE = _rows(FIRST)
AFTER = {
    "upsert": _rows([r for r in FIRST if (r["id"], r["p"]) not in {(1, "b"), (3, "a")}] + UPSERT),
    "delete": _rows([r for r in FIRST if (r["id"], r["p"]) not in {(1, "b"), (3, "a")}]),
}


def _kill_child(root: Path, op: str, label: Label | None) -> None:
    spec = {
        "root": str(root),
        "dest": "tbl",
        "op": op,
        "rows": UPSERT if op == "upsert" else DELETE,
        "label": None if label is None else [label.app_id, label.version],
        "kill": TASK_COMMIT,
    }
    argv = [sys.executable, "-m", "tests.table.mutate_kill_child", json.dumps(spec)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ})
    assert r.returncode == -9, (r.returncode, r.stdout, r.stderr[-2000:])


def _refused(names: list[str], instant: str) -> list[str]:
    """The listing ``names`` after a refused commit of ``instant``: the same but for the dead
    writer's keeper record, which the refusing commit's heartbeat took over and withdrew
    (its heartbeat then says *stopped*: a later writer rolls the write back at once)."""
    return [n for n in names if n != f".hoodie/.aux/amcommit/{instant}/_keeper.json"]


async def _pending(store: LocalStore) -> list[str]:
    """The times of the table's instants that are not completed."""
    instants = await list_instants(store, "tbl")
    done = {i.time for i in instants if i.completed}
    return sorted({i.time for i in instants} - done)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "amcommit.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ})


async def _replay(store: LocalStore, op: str, label: Label | None) -> mutate.MutateReport:
    if op == "upsert":
        data = pa.Table.from_pylist(UPSERT, schema=SCHEMA)
        return await mutate.upsert(store, "tbl", data, precombine_field="ts", label=label, **KW)
    return await mutate.delete(store, "tbl", pa.Table.from_pylist(DELETE, schema=KEYS), label=label, **KW)


async def _setup(tmp_path: Path, op: str, label: bool) -> tuple[LocalStore, Path, str, list[str]]:
    """The table (one committed upsert, label app:0 if ``label``), then the killed write of
    batch app:1: (store, root, its instant, the listing before it began)."""
    root = tmp_path / "root"
    root.mkdir()
    store = LocalStore(str(root), fsync=False)
    first = Label("app", 0) if label else None
    await mutate.upsert(store, "tbl", pa.Table.from_pylist(FIRST, schema=SCHEMA), label=first, **KW)
    before = await listing(store, "tbl")
    _kill_child(root, op, Label("app", 1) if label else None)
    instants = await _pending(store)
    assert len(instants) == 1, instants
    names = await listing(store, "tbl")
    written = [n for n in names if n.endswith(".parquet") and instants[0] in n]
    assert written, names  # its files are written (in place under markers, or staged)
    return store, root, instants[0], before


async def _check_once(store: LocalStore, root: Path, op: str, label: bool, killed: str) -> None:
    """The replayed batch is visible exactly once; the killed instant left nothing."""
    rep = await _replay(store, op, Label("app", 1) if label else None)
    assert rep.skipped_label is None and rep.instant != killed
    assert hudi_snapshot(str(root / "tbl")) == AFTER[op]
    if label:  # replayed once more: skipped, nothing changes
        again = await _replay(store, op, Label("app", 1))
        assert again.skipped_label == rep.instant
        assert hudi_snapshot(str(root / "tbl")) == AFTER[op]
    _, commits = await load_timeline(store, "tbl")
    labels = [label_of(c.metadata.extra_metadata) for c in commits]
    expected = [Label("app", 0), Label("app", 1)] if label else [None, None]
    assert labels == expected, labels
    assert [c.instant.time for c in commits][1] == rep.instant
    names = await listing(store, "tbl")
    assert [n for n in names if killed in n and not n.startswith(".hoodie/")] == []  # none of its files
    assert await _pending(store) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("op", ["upsert", "delete"])
@pytest.mark.parametrize("label", [True, False], ids=["label", "nolabel"])
async def test_killed_mutation_refused_by_commit_job_then_aborted(
    tmp_path: Path, op: str, label: bool
) -> None:
    store, root, killed, before = await _setup(tmp_path, op, label)
    uri = str(root / "tbl")
    left = await listing(store, "tbl")
    r = _cli("commit-job", uri, "--job-id", killed, "-q")
    assert r.returncode != 0, r.stdout
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "incomplete" in err and "0 task manifests found, 1 expected" in err and "abort-job" in err, err
    # nothing published: the same files, the instant pending, the label not used up
    assert await listing(store, "tbl") == _refused(left, killed)
    assert await _pending(store) == [killed]
    assert killed not in {i.time for i in await list_instants(store, "tbl") if i.completed}
    assert hudi_snapshot(uri) == BEFORE
    if label:
        assert await committed_by(store, "tbl", Label("app", 1), config=CFG) is None
    r = _cli("abort-job", uri, "--job-id", killed, "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    assert hudi_snapshot(uri) == BEFORE
    assert [n for n in await listing(store, "tbl") if killed in n] == []
    assert [n for n in await listing(store, "tbl") if not n.startswith(".hoodie/")] == [
        n for n in before if not n.startswith(".hoodie/")
    ]
    await _check_once(store, root, op, label, killed)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("op", ["upsert", "delete"])
@pytest.mark.parametrize("label", [True, False], ids=["label", "nolabel"])
async def test_killed_mutation_refused_by_commit_job_then_recovered(
    tmp_path: Path, op: str, label: bool
) -> None:
    """A tool that tries ``commit_job`` first (refused: IncompleteJob, nothing published),
    then ``recover("app")``: the labelled write of the app's dead run is rolled back;
    an unlabelled one (not the application's) is left, and the replay's own commit rolls it
    back (its writer's keeper process is dead on this host)."""
    store, root, killed, _ = await _setup(tmp_path, op, label)
    uri = str(root / "tbl")
    left = await listing(store, "tbl")
    with pytest.raises(IncompleteJob, match="0 task manifests found, 1 expected"):
        await commit_job(store, "tbl", killed, config=CFG)
    assert await listing(store, "tbl") == _refused(left, killed)
    assert await _pending(store) == [killed]
    assert await recover(store, "tbl", "app", config=CFG) == ([killed] if label else [])
    assert hudi_snapshot(uri) == BEFORE
    if label:
        assert [n for n in await listing(store, "tbl") if killed in n] == []
        assert await _pending(store) == []
    else:
        assert await _pending(store) == [killed]
    await _check_once(store, root, op, label, killed)


@pytest.mark.timeout(120)
async def test_killed_labelled_mutation_refused_even_with_allow_partial(tmp_path: Path) -> None:
    """``--allow-partial`` overrides the task count, never a label: publishing it without
    the batch's data would make the replay skip the batch for good."""
    store, root, killed, _ = await _setup(tmp_path, "upsert", True)
    uri = str(root / "tbl")
    left = await listing(store, "tbl")
    r = _cli("commit-job", uri, "--job-id", killed, "--allow-partial", "-q")
    assert r.returncode != 0, r.stdout
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert f"table write {killed} carries label app:1" in err and "nothing was published" in err, err
    assert await listing(store, "tbl") == _refused(left, killed)
    assert await _pending(store) == [killed]
    assert await committed_by(store, "tbl", Label("app", 1), config=CFG) is None
    assert hudi_snapshot(uri) == BEFORE
    assert await recover(store, "tbl", "app", config=CFG) == [killed]
    await _check_once(store, root, "upsert", True, killed)
