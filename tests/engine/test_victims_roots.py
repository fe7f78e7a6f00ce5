"""A replace commit begun through a local store rooted in one place and resumed through a
store rooted elsewhere (the same destination by another path: the Python API with
``LocalStore(root)``, then ``amcommit commit-job /absolute/path``) still removes the old files
it recorded: victim lists hold paths relative to the destination, not to the store's root."""

from __future__ import annotations

import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.errors import PermissionDenied
from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import run_task, snapshot, temp_files

JOB = "job_victims_roots"
OLD = {"p=1/old-a": b"a", "p=1/old-b": b"b", "p=2/old-c": b"c"}
NEW = {"p=1/new-0": b"n0", "p=1/new-1": b"n1"}


async def _failed_after_renames(tmp_path: object, mode: str) -> tuple[LocalStore, str]:
    """The commit, through a store rooted at ``tmp_path``, fails at its first victim delete
    (after every new file is in: past the point of no return, the journal kept)."""
    first = LocalStore(str(tmp_path))
    for rel, data in OLD.items():
        await first.put(join("dest", rel), data)
    layout = await setup_job(first, "dest", JOB)
    await run_task(first, layout, 0, NEW)
    faulty = FaultyStore(first, seed=1)
    faulty.fail("delete", error=PermissionDenied, path="dest/p=*/old-*")
    with pytest.raises(PermissionDenied):
        await commit_job(faulty, "dest", JOB, config=CommitterConfig(conflict_mode=mode, io_threads=2))
    await first.aclose()
    return LocalStore("/"), str(tmp_path).strip("/") + "/dest"


@pytest.mark.parametrize("mode", ["overwrite", "replace"])
async def test_resumed_through_another_root_removes_the_recorded_old_files(
    tmp_path: object, mode: str
) -> None:
    other, dest = await _failed_after_renames(tmp_path, mode)
    try:
        report = await commit_job(other, dest, JOB, config=CommitterConfig(conflict_mode=mode))
        assert report.success and report.resumed
        want = dict(NEW) if mode == "overwrite" else dict(NEW) | {"p=2/old-c": b"c"}
        assert await snapshot(other, dest) == want
        assert report.victims_deleted == (3 if mode == "overwrite" else 2)
        assert await temp_files(other, dest) == []
    finally:
        await other.aclose()


async def test_aborted_through_another_root_keeps_the_new_files(tmp_path: object) -> None:
    """Past the point of no return an abort finishes the commit's cleanup the same way."""
    other, dest = await _failed_after_renames(tmp_path, "overwrite")
    try:
        await abort_job(other, dest, JOB)
        got = await snapshot(other, dest)
        assert got == dict(NEW), got
        assert await temp_files(other, dest) == []
    finally:
        await other.aclose()
