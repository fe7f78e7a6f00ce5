"""Azure Blob (Azurite): a job commit killed (SIGKILL, real child process) right after the
copy request of each rename kind — forward rename, move-aside, restore — then resumed,
and separately aborted: the destination is exact every time."""

from __future__ import annotations

from typing import Any

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.committer import CommitterConfig
from amcommit.errors import CommitError
from tests.backends import StoreUnderTest
from tests.crash import scenario as sc
from tests.crash.runner import kill_child

COPY = "x-ms-copy-source"
# the copy request (Copy Blob: PUT with x-ms-copy-source) of each rename kind; the
# destination's URL names the kind
FORWARD = {"method": "PUT", "header": COPY, "status": 202, "url": r"/table/p=1/new\.bin$"}
FORWARD_SAME = {"method": "PUT", "header": COPY, "status": 202, "url": r"/table/p=1/same\.bin$"}
ASIDE = {"method": "PUT", "header": COPY, "status": 202, "url": r"/trash/p=1/same\.bin$"}
RESTORE = FORWARD_SAME  # during abort, the only copy onto p=1/same.bin is the restore


def _store_spec(sut: StoreUnderTest) -> dict[str, Any]:
    az = sut.extras["emulator"]
    return {"kind": "blob", "options": {**az.store_options(), "container": sut.extras["container"]}}  # type: ignore[attr-defined]


@pytest.fixture
async def blob(backend_blob_azurite: StoreUnderTest) -> tuple[StoreUnderTest, str, dict[str, Any]]:
    sut = backend_blob_azurite
    dest = f"{sut.base}/table"
    await sc.prepare(sut.store, dest)
    return sut, dest, _store_spec(sut)


CFG = CommitterConfig.from_mapping(sc.CONFIG)


# the delete request that completes each rename (its source). The forward renames of a
# manifest are renamed in a batch: the copies, then one Blob Batch of the sources' deletes
# (the first POST ?comp=batch of the commit: task 0's only file is taken, so its batch
# copies nothing and sends no deletes); one by one (rename_batch_size=1) a DELETE each.
FORWARD_DEL = {"method": "POST", "status": 202, "url": r"comp=batch"}
FORWARD_DEL_ALONE = {"method": "DELETE", "status": 202, "url": r"/tasks/.*/p=1/new\.bin$"}
ASIDE_DEL = {
    "method": "DELETE",
    "status": 202,
    "url": r"/table/p=1/same\.bin$",
}  # only the move-aside deletes it in a commit
RULES = [FORWARD, ASIDE, FORWARD_SAME, FORWARD_DEL, ASIDE_DEL]
IDS = ["forward_copy", "move_aside_copy", "forward_same_copy", "forward_delete", "move_aside_delete"]


@pytest.mark.parametrize("rule", RULES, ids=IDS)
async def test_commit_killed_after_copy_then_resumed(blob: Any, rule: dict[str, Any]) -> None:
    sut, dest, st = blob
    kill_child(sc.spec(st, dest, "commit", [rule]))
    report = await commit_job(sut.store, dest, sc.JOB, config=CFG)
    assert report.success
    assert await sc.final_state(sut.store, dest) == (sc.COMMITTED, [])


ONE_BY_ONE = {**sc.CONFIG, "rename_batch_size": 1}


@pytest.mark.parametrize("then", ["resume", "abort"])
async def test_commit_renaming_one_by_one_killed_after_a_source_delete(blob: Any, then: str) -> None:
    """Without batches (``rename_batch_size=1``) each forward rename deletes its source
    alone: killed right after the last one's delete, then resumed or aborted (completes)."""
    sut, dest, st = blob
    kill_child({**sc.spec(st, dest, "commit", [FORWARD_DEL_ALONE]), "config": ONE_BY_ONE})
    if then == "resume":
        assert (await commit_job(sut.store, dest, sc.JOB, config=CFG)).success
    else:
        await abort_job(sut.store, dest, sc.JOB, config=CFG)
    assert await sc.final_state(sut.store, dest) == (sc.COMMITTED, [])


@pytest.mark.parametrize(("rule", "name"), list(zip(RULES, IDS, strict=True)), ids=IDS)
async def test_commit_killed_after_copy_then_aborted(blob: Any, rule: dict[str, Any], name: str) -> None:
    sut, dest, st = blob
    kill_child(sc.spec(st, dest, "commit", [rule]))
    await abort_job(sut.store, dest, sc.JOB, config=CFG)
    expected = sc.COMMITTED if name in sc.COMPLETES_ON_ABORT else sc.OLD
    assert await sc.final_state(sut.store, dest) == (expected, [])


RESTORE_DEL = {"method": "DELETE", "status": 202, "url": r"/trash/p=1/same\.bin$"}


@pytest.mark.parametrize("at", ["copy", "delete"])
@pytest.mark.parametrize("second", ["abort", "commit"])
async def test_abort_killed_after_restore_copy(blob: Any, second: str, at: str) -> None:
    """Killed during abort right after the restore's copy (trash -> destination), then
    aborted again: the old file is back, exactly once, and the trash is gone."""
    sut, dest, st = blob
    # the commit dies after the forward copy of same.bin: the old same.bin is in the trash
    kill_child(sc.spec(st, dest, "commit", [FORWARD_SAME]))
    kill_child(sc.spec(st, dest, "abort", [RESTORE if at == "copy" else RESTORE_DEL]))
    if second == "abort":
        await abort_job(sut.store, dest, sc.JOB, config=CFG)
    else:
        # a commit after a half-done abort: it completes when every task file is still
        # there (the abort had only undone copies), else it fails cleanly; either way exact
        try:
            report = await commit_job(sut.store, dest, sc.JOB, config=CFG)
        except CommitError:
            pass
        else:
            assert report.success
            assert await sc.final_state(sut.store, dest) == (sc.COMMITTED, [])
            return
        await abort_job(sut.store, dest, sc.JOB, config=CFG)
    assert await sc.final_state(sut.store, dest) == (sc.OLD, [])
