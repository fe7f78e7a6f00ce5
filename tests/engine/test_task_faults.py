"""Task-side requests (setup, scan, abort) go through the single retry layer: a store that
does not retry itself (local, FaultyStore) still sets up, commits and aborts task attempts
through throttling, transient errors and lost answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.task import abort_task, commit_task, setup_task
from amcommit.errors import CommitError
from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import snapshot, task_ids

JOB = "202611230001_0001"
CFG = CommitterConfig(retry_base_delay=0.001, retry_max_delay=0.01)


def _stores(tmp_path: Path) -> tuple[LocalStore, FaultyStore]:
    inner = LocalStore(str(tmp_path / "root"), fsync=False)
    return inner, FaultyStore(inner, seed=7)


async def test_setup_task_recognises_its_own_lost_create(tmp_path: Path) -> None:
    _, store = _stores(tmp_path)
    layout = await setup_job(store, "dest", JOB)
    store.lose_response("put", path="*/task-attempts/*", count=1)
    _, ta = task_ids(JOB, 0)
    work = await setup_task(store, layout, ta, config=CFG)
    assert work == layout.task_attempt_dir(ta)
    with pytest.raises(CommitError, match="already set up"):  # a second setup is still refused
        await setup_task(store, layout, ta, config=CFG)


async def test_task_scan_and_abort_survive_throttling(tmp_path: Path) -> None:
    inner, store = _stores(tmp_path)
    layout = await setup_job(store, "dest", JOB)
    task, ta = task_ids(JOB, 0)
    work = await setup_task(store, layout, ta, config=CFG)
    await inner.put(join(work, "p=1/a.bin"), b"a")
    await inner.put(join(work, "p=2/b.bin"), b"bb")
    store.throttle("list", retry_after=0.001, count=3)
    manifest = await commit_task(store, layout, task, ta, config=CFG)
    assert sorted(f.size for f in manifest.files) == [1, 2]

    _, ta2 = task_ids(JOB, 1)
    work2 = await setup_task(store, layout, ta2, config=CFG)
    await inner.put(join(work2, "p=1/c.bin"), b"c")
    store.throttle("delete", retry_after=0.001, count=2)
    await abort_task(store, layout, ta2, config=CFG)
    assert [i async for i in inner.list(work2)] == []

    report = await commit_job(store, "dest", JOB, config=CFG)
    assert report.success
    assert await snapshot(inner, "dest") == {"p=1/a.bin": b"a", "p=2/b.bin": b"bb"}
