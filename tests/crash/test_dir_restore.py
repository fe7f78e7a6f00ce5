"""Issue 11.3: the destination holds a *file* ``p=1`` and the job writes ``p=1/x.bin``
in replace or overwrite mode. The commit moves the file aside and creates the directory
``p=1``; every rollback (an abort after a kill, the automatic one after an unfixable error)
must remove that (now empty) directory before it restores the file. Local files and the
ADLS Gen2 test server (real directories); Blob and GCS (flat: nothing to remove) must not
break either."""

from __future__ import annotations

from typing import Any

import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.errors import CommitError
from amcommit.paths import join
from tests.backends import StoreUnderTest
from tests.crash.runner import kill_child
from tests.engine.helpers import run_task, snapshot, task_ids, temp_files

JOB = "202611230001_0011"
OLD = {"p=1": b"a file named p=1", "keep.bin": b"keep"}
NEW = {"p=1/x.bin": b"x", "p=1/y.bin": b"yy"}


def _store_spec(sut: StoreUnderTest) -> dict[str, Any]:
    if sut.name == "local":
        return {"kind": "local", "options": {"root": sut.store.root, "fsync": False}}  # type: ignore[attr-defined]
    em = sut.extras["emulator"]
    kind = "dfs" if sut.name == "dfs-server" else "blob"
    opts = {**em.store_options(), ("filesystem" if kind == "dfs" else "container"): sut.extras["container"]}  # type: ignore[attr-defined]
    return {"kind": kind, "options": opts}


@pytest.fixture(params=["backend_local", "backend_dfs_server", "backend_blob_azurite"])
def sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def _prepare(sut: StoreUnderTest) -> str:
    s, dest = sut.store, join(sut.base, "table")
    for p, d in OLD.items():
        await s.put(join(dest, p), d)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, NEW)
    return dest


@pytest.mark.parametrize("mode", ["replace", "overwrite"])
async def test_killed_mid_rename_then_aborted(sut: StoreUnderTest, mode: str) -> None:
    dest = await _prepare(sut)
    spec = {
        "store": _store_spec(sut),
        "action": "commit",
        "dest": dest,
        "job_id": JOB,
        # one rename at a time, local files too (a batch would emit its first progress event
        # after its last rename): the kill falls between the two renames
        "config": {"conflict_mode": mode, "io_threads": 1, "rename_batch_size": 1},
        "kill": {"progress": "rename_files:progress:1"},
    }
    kill_child(spec)
    await abort_job(sut.store, dest, JOB)
    assert await snapshot(sut.store, dest) == OLD
    assert await temp_files(sut.store, dest) == []


@pytest.mark.parametrize("mode", ["replace", "overwrite"])
async def test_unfixable_error_rolls_back_then_abort(sut: StoreUnderTest, mode: str) -> None:
    dest = await _prepare(sut)
    # a task file changed after its task committed: the commit cannot publish it
    _, ta = task_ids(JOB, 0)
    layout_tasks = JobLayout(dest, JOB).task_attempt_dir(ta)
    found = [i.path async for i in sut.store.list(layout_tasks, recursive=True)]
    assert found, layout_tasks
    await sut.store.put(sorted(found)[-1], b"rewritten")
    with pytest.raises(CommitError, match="changed after its task committed"):
        await commit_job(sut.store, dest, JOB, config=CommitterConfig(conflict_mode=mode, io_threads=1))
    assert await snapshot(sut.store, dest) == OLD  # the rollback restored the file p=1
    await abort_job(sut.store, dest, JOB)
    assert await snapshot(sut.store, dest) == OLD
    assert await temp_files(sut.store, dest) == []
