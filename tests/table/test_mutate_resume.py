"""An upsert or delete SIGKILLed (a real subprocess, tests.table.mutate_kill_child) after its
instant was allocated and its files written, before its task commit: nothing completes it.

``amcommit commit-job`` of it is refused in one line (nonzero exit, nothing published, its
label not used up; also with ``--allow-partial`` when it has a label); ``abort-job`` then
rolls it back. ``recover()`` of its application rolls it back too; an unlabelled one is
rolled back by the next writer on this host. Either way the replayed batch is then visible
exactly once (hudi-rs, the label on one completed instant). On local files (every case) and
on Azurite and fake-gcs-server (a labelled upsert: commit refused, then ``recover``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pyarrow as pa
import pytest

from amcommit.api import commit_job
from amcommit.errors import IncompleteJob
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.commit.labels import Label, committed_by, label_of, recover
from amcommit.table.mutate import engine as mutate
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants, load_timeline
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake  # noqa: F401 (fixtures)
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


class Table:
    """A table under test: its store and folder, how hudi-rs reads it, where the child
    writes it (``where``: {"root": R} or {"backend": INFO})."""

    def __init__(
        self, store: Store, dest: str, read: Callable[[], list[tuple[Any, ...]]], where: dict[str, Any]
    ) -> None:
        self.store, self.dest, self.read, self.where = store, dest, read, where

    def kill_child(self, op: str, label: Label | None) -> None:
        spec = self.where | {
            "dest": self.dest,
            "op": op,
            "rows": UPSERT if op == "upsert" else DELETE,
            "label": None if label is None else [label.app_id, label.version],
            "kill": TASK_COMMIT,
        }
        argv = [sys.executable, "-m", "tests.table.mutate_kill_child", json.dumps(spec)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ})
        assert r.returncode == -9, (r.returncode, r.stdout, r.stderr[-2000:])

    async def names(self) -> list[str]:
        return await listing(self.store, self.dest)

    async def pending(self) -> list[str]:
        """The times of the table's instants that are not completed."""
        instants = await list_instants(self.store, self.dest)
        done = {i.time for i in instants if i.completed}
        return sorted({i.time for i in instants} - done)

    async def replay(self, op: str, label: Label | None) -> mutate.MutateReport:
        if op == "upsert":
            data = pa.Table.from_pylist(UPSERT, schema=SCHEMA)
            return await mutate.upsert(self.store, self.dest, data, precombine_field="ts", label=label, **KW)
        keys = pa.Table.from_pylist(DELETE, schema=KEYS)
        return await mutate.delete(self.store, self.dest, keys, label=label, **KW)


def _refused(names: list[str], instant: str) -> list[str]:
    """The listing ``names`` after a refused commit of ``instant``: the same but for the dead
    writer's keeper record, which the refusing commit's heartbeat took over and withdrew
    (its heartbeat then says *stopped*: a later writer rolls the write back at once)."""
    return [n for n in names if n != f".hoodie/.aux/amcommit/{instant}/_keeper.json"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "amcommit.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ})


async def _setup(t: Table, op: str, label: bool) -> str:
    """The table (one committed upsert, label app:0 if ``label``), then the killed write of
    batch app:1: its instant."""
    first = Label("app", 0) if label else None
    await mutate.upsert(t.store, t.dest, pa.Table.from_pylist(FIRST, schema=SCHEMA), label=first, **KW)
    t.kill_child(op, Label("app", 1) if label else None)
    instants = await t.pending()
    assert len(instants) == 1, instants
    names = await t.names()
    assert [n for n in names if n.endswith(".parquet") and instants[0] in n], names  # its files
    return instants[0]


async def _nothing_published(t: Table, killed: str, left: list[str], label: bool) -> None:
    """The same files (but the keeper record), the instant pending, the label not used up."""
    assert await t.names() == _refused(left, killed)
    assert await t.pending() == [killed]
    assert t.read() == BEFORE
    if label:
        assert await committed_by(t.store, t.dest, Label("app", 1), config=CFG) is None


async def _check_once(t: Table, op: str, label: bool, killed: str) -> None:
    """The replayed batch is visible exactly once; the killed instant left nothing."""
    rep = await t.replay(op, Label("app", 1) if label else None)
    assert rep.skipped_label is None and rep.instant != killed
    assert t.read() == AFTER[op]
    if label:  # replayed once more: skipped, nothing changes
        again = await t.replay(op, Label("app", 1))
        assert again.skipped_label == rep.instant
        assert t.read() == AFTER[op]
    _, commits = await load_timeline(t.store, t.dest)
    labels = [label_of(c.metadata.extra_metadata) for c in commits]
    assert labels == ([Label("app", 0), Label("app", 1)] if label else [None, None]), labels
    assert commits[1].instant.time == rep.instant
    assert [n for n in await t.names() if killed in n] == []  # none of its files, instants, markers
    assert await t.pending() == []


def _local(tmp_path: Path) -> Table:
    root = tmp_path / "root"
    root.mkdir()
    return Table(
        LocalStore(str(root), fsync=False),
        "tbl",
        lambda: hudi_snapshot(str(root / "tbl")),
        {"root": str(root)},
    )


# (each path with and without a label, both operations across them: each case runs three
# processes, a few seconds each)
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("op", "label"), [("upsert", True), ("delete", False)], ids=["upsert-label", "delete"]
)
async def test_killed_mutation_refused_by_commit_job_then_aborted(
    tmp_path: Path, op: str, label: bool
) -> None:
    t = _local(tmp_path)
    killed = await _setup(t, op, label)
    uri = str(tmp_path / "root" / "tbl")
    left = await t.names()
    r = _cli("commit-job", uri, "--job-id", killed, "-q")
    assert r.returncode != 0, r.stdout
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "incomplete" in err and "0 task manifests found, 1 expected" in err and "abort-job" in err, err
    await _nothing_published(t, killed, left, label)
    r = _cli("abort-job", uri, "--job-id", killed, "-q")
    assert r.returncode == 0, r.stderr[-2000:]
    assert t.read() == BEFORE
    assert [n for n in await t.names() if killed in n] == []
    assert await t.pending() == []
    await _check_once(t, op, label, killed)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("op", "label"), [("upsert", False), ("delete", True)], ids=["upsert", "delete-label"]
)
async def test_killed_mutation_refused_by_commit_job_then_recovered(
    tmp_path: Path, op: str, label: bool
) -> None:
    """A tool that tries ``commit_job`` first (refused: IncompleteJob, nothing published),
    then ``recover("app")``: the labelled write of the app's dead run is rolled back;
    an unlabelled one (not the application's) is left, and the replay's own commit rolls it
    back (its writer is dead and its heartbeat says *stopped*)."""
    t = _local(tmp_path)
    await _refused_then_recovered(t, op, label)


async def _refused_then_recovered(t: Table, op: str, label: bool) -> None:
    killed = await _setup(t, op, label)
    left = await t.names()
    with pytest.raises(IncompleteJob, match="0 task manifests found, 1 expected"):
        await commit_job(t.store, t.dest, killed, config=CFG)
    await _nothing_published(t, killed, left, label)
    assert await recover(t.store, t.dest, "app", config=CFG) == ([killed] if label else [])
    assert t.read() == BEFORE
    if label:
        assert [n for n in await t.names() if killed in n] == []
        assert await t.pending() == []
    else:
        assert await t.pending() == [killed]
    await _check_once(t, op, label, killed)


@pytest.mark.timeout(180)
async def test_killed_labelled_mutation_refused_even_with_allow_partial(tmp_path: Path) -> None:
    """``--allow-partial`` overrides the task count, never a label: publishing it without
    the batch's data would make the replay skip the batch for good."""
    t = _local(tmp_path)
    killed = await _setup(t, "upsert", True)
    uri = str(tmp_path / "root" / "tbl")
    left = await t.names()
    r = _cli("commit-job", uri, "--job-id", killed, "--allow-partial", "-q")
    assert r.returncode != 0, r.stdout
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert f"table write {killed} carries label app:1" in err and "nothing was published" in err, err
    await _nothing_published(t, killed, left, True)
    assert await recover(t.store, t.dest, "app", config=CFG) == [killed]
    await _check_once(t, "upsert", True, killed)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["blob", "gcs-fake"])
def test_killed_labelled_upsert_on_emulators(backend: str, request: pytest.FixtureRequest) -> None:
    """The same on Azurite (Blob API) and fake-gcs-server: the killed child writes the
    emulator; ``commit_job`` refused, nothing published; ``recover``; the replay once."""
    from tests.matrix.stores import open_store
    from tests.matrix.table_runner import hudi_location

    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    dest = f"mut-{uuid.uuid4().hex[:8]}/tbl"
    where = hudi_location(SimpleNamespace(info=info, backend=backend, dest=dest))  # type: ignore[arg-type]
    assert where is not None
    uri, storage = where

    async def go() -> None:
        async with open_store(info) as store:
            t = Table(store, dest, lambda: hudi_snapshot(uri, storage=storage), {"backend": info})
            await _refused_then_recovered(t, "upsert", True)

    anyio.run(go)
