"""Labelled writes and real processes: SIGKILL at points before and after the commit's point
of no return, then the retry of the same label; two processes racing one label.

After every scenario: hudi-rs and amcommit's planner see each batch exactly once, the label
is on exactly one completed instant, and nothing of the loser is left (listing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.commit.labels import Label, label_of, last_committed, recover
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import load_timeline, snapshot
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake, matrix_local  # noqa: F401 (fixtures)
from tests.table.label_child import ingest_once
from tests.table.writehelpers import hudi_rows, keys, listing, rows

REPO = str(Path(__file__).resolve().parents[2])


def _run(root: Path, app: str, version: int, first: int, n: int, kill: str = "-", ttl: float = 2.0) -> Any:
    """Run the child to its end; its JSON answer, or None if it was killed."""
    argv = [sys.executable, "-m", "tests.table.label_child", str(root), "tbl", app, str(version)]
    argv += [str(first), str(n), kill, str(ttl)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ}, cwd=REPO)
    if r.returncode == -9:
        return None
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


async def _check_exactly_once(
    store: Store,
    dest: str,
    hudi_uri: str,
    expected: list[tuple[Any, ...]],
    storage: dict[str, str] | None = None,
) -> dict[str, str]:
    """hudi-rs and our planner read ``expected``; nothing but committed files and completed
    instants remain. Returns instant -> label text of the completed instants."""
    assert hudi_rows(hudi_uri, storage=storage) == expected
    _, commits = await load_timeline(store, dest)
    assert sum(f.rows for f in snapshot(commits)) == len(expected)
    names = await listing(store, dest)
    parquet = sorted(n for n in names if n.endswith(".parquet"))
    assert parquet == sorted(f.path for f in snapshot(commits))  # no file of a rolled-back write
    completed = {c.instant.time for c in commits}
    leftovers = [
        n
        for n in names
        if n.startswith((".hoodie/.aux/amcommit/2", ".hoodie/.temp/2", ".hoodie/.heartbeat/"))
        or (n.startswith(".hoodie/2") and n.split("/")[1][:17] not in completed)
    ]
    assert leftovers == []
    out = {}
    for c in commits:
        label = label_of(c.metadata.extra_metadata)
        out[c.instant.time] = "" if label is None else label.text()
    return out


POINTS = [
    # after the label check, before the plan: nothing decided; the retry commits
    ("before_plan", r"^put .*/commit-plan\.json$", False),
    # every file renamed, journal "renamed", the .commit not yet published (a rename where
    # renames are atomic, else a create-only put)
    ("before_publish", r"^(rename .* -> |put ).*/\.hoodie/\d{17}\.commit$", True),
    # published, cleanup not done
    ("after_publish", r"^delete .*/\.hoodie/\.heartbeat/", True),
]


async def _retry_after_kill(
    store: Store,
    dest: str,
    kill_run: Callable[[], Any],
    read: Callable[[], list[tuple[Any, ...]]],
    point: str,
    passed: bool,
) -> None:
    """Batch 0 committed here; batch 1 killed at ``point`` by ``kill_run()``; then the retry
    of batch 1, once more, and batch 2, as an ingestion tool runs them."""
    # lock_ttl: a killed holder is proven dead at once (same host); the ttl only bounds how
    # late a live holder may renew, which a busy machine stretches past 2 s
    cfg = TableConfig(writer_ttl=2.0, lock_ttl=8.0, lock_wait=60.0)
    first = await ingest_once(store, dest, Label("app", 0), rows(0, 4), cfg)
    assert first["skipped"] is None
    assert kill_run() is None  # killed at `point`
    seen = read()
    assert seen == (keys(rows(0, 4) + rows(10, 6)) if point == "after_publish" else keys(rows(0, 4))), point
    retry = await ingest_once(store, dest, Label("app", 1), rows(10, 6), cfg)
    if passed:  # the killed write is completed (by the retry's commit), the retry skipped
        assert retry["skipped"] is not None and retry["skipped"] != retry["instant"], retry
    else:  # the killed write was rolled back; the retry committed
        assert retry["skipped"] is None and retry["label"] == "app:1", retry
    # once more: nothing new; then the next batch (its commit also removes what a writer
    # killed after publishing left: staging folder, heartbeat)
    again = await ingest_once(store, dest, Label("app", 1), rows(10, 6), cfg)
    assert again["skipped"] is not None and again["instant"] is None
    assert (await ingest_once(store, dest, Label("app", 2), rows(20, 2), cfg))["skipped"] is None


@pytest.mark.parametrize(("point", "kill", "passed"), POINTS)
async def test_killed_labelled_write_then_retry(tmp_path: Path, point: str, kill: str, passed: bool) -> None:
    root = tmp_path / "root"
    root.mkdir()
    uri = str(root / "tbl")
    async with LocalStore(str(root), fsync=False) as store:
        await _retry_after_kill(
            store, "tbl", lambda: _run(root, "app", 1, 10, 6, kill), lambda: hudi_rows(uri), point, passed
        )
        labels = await _check_exactly_once(store, "tbl", uri, keys(rows(0, 4) + rows(10, 6) + rows(20, 2)))
    assert sorted(labels.values()) == ["app:0", "app:1", "app:2"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["blob", "gcs-fake"])
@pytest.mark.parametrize(("point", "kill", "passed"), POINTS)
def test_killed_labelled_write_then_retry_on_emulators(
    backend: str, point: str, kill: str, passed: bool, request: pytest.FixtureRequest
) -> None:
    """The same on Azurite (Blob API) and fake-gcs-server: the killed writer is a real
    process, SIGKILLed before the matching request; hudi-rs reads the emulator."""
    from tests.matrix.stores import open_store
    from tests.matrix.table_runner import hudi_location

    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    dest = f"lbl-{uuid.uuid4().hex[:8]}/tbl"
    where = hudi_location(SimpleNamespace(info=info, backend=backend, dest=dest))  # type: ignore[arg-type]
    assert where is not None
    uri, storage = where

    def kill_run() -> Any:
        spec = {"backend": info, "dest": dest, "app": "app", "version": 1, "first": 10, "n": 6}
        spec |= {"kill": kill, "ttl": 2.0}
        argv = [sys.executable, "-m", "tests.table.label_child", "--spec", json.dumps(spec)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ}, cwd=REPO)
        if r.returncode == -9:
            return None
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    async def go() -> dict[str, str]:
        async with open_store(info) as store:
            await _retry_after_kill(
                store, dest, kill_run, lambda: hudi_rows(uri, storage=storage), point, passed
            )
            expected = keys(rows(0, 4) + rows(10, 6) + rows(20, 2))
            return await _check_exactly_once(store, dest, uri, expected, storage)

    labels = anyio.run(go)
    assert sorted(labels.values()) == ["app:0", "app:1", "app:2"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["local", "blob", "gcs-fake"])
def test_recover_releases_the_lock_of_a_commit_killed_before_releasing_it(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A labelled commit killed (SIGKILL) after it published and cleaned up, right before it
    deleted the table's commit lock: ``recover`` finds nothing pending, and releases the
    lock of the dead holder at once (ttl 60 s); the next batch commits without waiting."""
    from tests.matrix.stores import open_store

    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    dest = f"lbl-{uuid.uuid4().hex[:8]}/tbl"
    lock = f"{dest}/.hoodie/.aux/amcommit/_commit.lock"
    cfg = TableConfig(writer_ttl=60.0, lock_ttl=60.0, lock_wait=60.0)
    spec = {"backend": info, "dest": dest, "app": "app", "version": 1, "first": 10, "n": 6}
    spec |= {"kill": r"^delete .*/\.hoodie/\.aux/amcommit/_commit\.lock$", "ttl": 60.0}
    argv = [sys.executable, "-m", "tests.table.label_child", "--spec", json.dumps(spec)]

    def kill_run() -> None:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ}, cwd=REPO)
        assert r.returncode == -9, r.stderr[-2000:]

    async def go() -> None:
        async with open_store(info) as store:
            assert (await ingest_once(store, dest, Label("app", 0), rows(0, 4), cfg))["skipped"] is None
            kill_run()
            await store.stat(lock)  # the dead commit's lock is left
            t0 = time.monotonic()
            assert await recover(store, dest, "app", config=cfg) == []  # batch 1 is committed
            assert lock not in await listing_paths(store, dest)
            nxt = await ingest_once(store, dest, Label("app", 2), rows(20, 2), cfg)
            assert nxt["skipped"] is None
            assert time.monotonic() - t0 < 20  # no lock_ttl (60 s) wait
            assert (await last_committed(store, dest, "app", config=cfg) or (None,))[0] == 2

    anyio.run(go)


async def listing_paths(store: Store, dest: str) -> list[str]:
    return [i.path async for i in store.list(dest, recursive=True)]


def _race(root: Path) -> list[Any]:
    """Two children commit label race:3 (different rows) at once; their answers."""
    procs = []
    for n in range(2):
        argv = [sys.executable, "-m", "tests.table.label_child", str(root), "tbl", "race", "3"]
        argv += [str(100 * (n + 1)), "3", "-", "30", "nocheck"]  # both reach commit_job
        procs.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        )
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


async def test_two_processes_race_one_label(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    store = LocalStore(str(root), fsync=False)
    assert _run(root, "base", 0, 0, 2)["skipped"] is None
    outs = _race(root)
    winners = [n for n, o in enumerate(outs) if o["skipped"] is None]
    assert len(winners) == 1, outs
    w = winners[0]
    assert outs[1 - w]["skipped"] == outs[w]["instant"]
    assert outs[1 - w]["instant"] is not None  # skipped by the commit's check, under the lock
    labels = await _check_exactly_once(
        store, "tbl", str(root / "tbl"), keys(rows(0, 2) + rows(100 * (w + 1), 3))
    )
    assert sorted(labels.values()) == ["base:0", "race:3"]
    await store.aclose()
