"""Issue 11.4 under kills: an append commit meets an existing file, and its automatic
rollback (which moves the renamed files back into the task directory and keeps the job)
is killed right after the copy of that move back (copy-based stores: Blob on Azurite, GCS
on fake-gcs-server). Then the job is committed again in another mode, or aborted: exact."""

from __future__ import annotations

from typing import Any

import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.errors import ConflictError
from amcommit.paths import join
from amcommit.store.base import Store
from tests.backends import StoreUnderTest
from tests.crash.runner import kill_child
from tests.engine.helpers import run_task, snapshot, temp_files

JOB = "202611230001_0044"
OLD = {"p=1/same.bin": b"old same"}
# one task: its files are renamed in listing order, new.bin first, then same.bin conflicts
NEW = {"p=1/new.bin": b"new 1", "p=1/same.bin": b"new same!"}
BACK_COPY = {
    "blob": {"method": "PUT", "header": "x-ms-copy-source", "status": 202, "url": r"/tasks/.*/p=1/new\.bin$"},
    "gcs": {"method": "POST", "status": 200, "url": r"/rewriteTo/b/[^/]+/o/[^?]*/tasks/.*/p=1/new\.bin\?"},
}


@pytest.fixture(params=["backend_blob_azurite", "backend_gcs_fake"])
def sut_spec(request: pytest.FixtureRequest) -> tuple[StoreUnderTest, dict[str, Any], str]:
    sut: StoreUnderTest = request.getfixturevalue(request.param)
    if request.param == "backend_blob_azurite":
        az = sut.extras["emulator"]
        spec = {"kind": "blob", "options": {**az.store_options(), "container": sut.extras["container"]}}  # type: ignore[attr-defined]
        kind = "blob"
    else:
        server = sut.extras["server"]
        spec = {
            "kind": "gcs",
            "options": {"bucket": sut.extras["bucket"], "endpoint": server.url, "use_move": False},  # type: ignore[attr-defined]
        }
        kind = "gcs"
    return sut, spec, kind


async def _prepare(
    sut_spec: tuple[StoreUnderTest, dict[str, Any], str],
) -> tuple[Store, str, dict[str, Any], str]:
    sut, spec, kind = sut_spec
    dest = join(sut.base, "table")
    for p, d in OLD.items():
        await sut.store.put(join(dest, p), d)
    layout = await setup_job(sut.store, dest, JOB)
    await run_task(sut.store, layout, 0, NEW)
    return sut.store, dest, spec, kind


def _kill_rollback(store_spec: dict[str, Any], dest: str, kind: str) -> None:
    kill_child(
        {
            "store": store_spec,
            "action": "commit",
            "dest": dest,
            "job_id": JOB,
            "config": {"conflict_mode": "append", "io_threads": 1},
            "kill": {"requests": [BACK_COPY[kind]]},
        }
    )


async def test_killed_moving_back_then_committed_in_another_mode(sut_spec: Any) -> None:
    store, dest, spec, kind = await _prepare(sut_spec)
    _kill_rollback(spec, dest, kind)
    # the journal (append) is still there: this run resumes in append mode, meets the
    # conflict again, and finishes the rollback, keeping the job
    with pytest.raises(ConflictError, match="--mode replace"):
        await commit_job(store, dest, JOB, config=CommitterConfig(conflict_mode="replace"))
    assert await snapshot(store, dest) == OLD
    report = await commit_job(
        store, dest, JOB, config=CommitterConfig(conflict_mode="replace", validate_output=True)
    )
    assert report.success
    assert await snapshot(store, dest) == NEW
    assert await temp_files(store, dest) == []


async def test_killed_moving_back_then_aborted(sut_spec: Any) -> None:
    store, dest, spec, kind = await _prepare(sut_spec)
    _kill_rollback(spec, dest, kind)
    await abort_job(store, dest, JOB)
    assert await snapshot(store, dest) == OLD
    assert await temp_files(store, dest) == []
