"""Renames in batches (``Store.rename_batch``, local files): each request is decided as
``rename`` decides it, a failed request does not stop the others, wrappers keep their
per-request faults, and a job commit recovers every failed request of a batch."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.lock import DestinationLock, FencedStore
from amcommit.errors import AlreadyExists, LockLost, NotFound, PreconditionFailed, Transient
from amcommit.paths import join
from amcommit.store.base import RenameRequest, Store, batch_renamer
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import run_task, snapshot, temp_files
from tests.table.killstore import KillStore

JOB = "202611230003_0001"


async def test_each_request_is_decided_as_rename_decides_it(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    for name in ("a", "b", "c", "d", "e", "taken"):
        await store.put(f"src/{name}", name.encode())
    await store.put("dst/taken", b"someone else's")
    os.symlink(tmp_path / "src" / "a", tmp_path / "src" / "link")
    etag_a = (await store.stat("src/a")).etag
    etag_b = (await store.stat("src/b")).etag
    requests = [
        RenameRequest("src/a", "dst/a", etag_a),  # ok
        RenameRequest("src/missing", "dst/missing", "x"),  # source gone
        RenameRequest("src/taken", "dst/taken", None, "id"),  # destination taken
        RenameRequest("src/c", "dst/c", "not-its-etag"),  # changed since its task committed
        RenameRequest("src/link", "dst/link", None, "id"),  # a declared file that is a link
        RenameRequest("src/b", "new/deep/dir/b", etag_b),  # parents created
        RenameRequest("src/d", "dst/d"),  # undeclared: no checks, renamed
    ]
    failed = await store.rename_batch(requests)
    assert sorted(failed) == [1, 2, 3, 4]
    assert isinstance(failed[1], NotFound)
    assert isinstance(failed[2], AlreadyExists) and failed[2].path == "dst/taken"
    assert isinstance(failed[3], PreconditionFailed) and "etag" in str(failed[3])
    assert isinstance(failed[4], PreconditionFailed) and "symbolic link" in str(failed[4])
    assert await store.get("dst/a") == b"a"
    assert await store.get("new/deep/dir/b") == b"b"
    assert await store.get("dst/d") == b"d"
    assert await store.get("dst/taken") == b"someone else's"
    assert await store.get("src/c") == b"c" and await store.get("src/taken") == b"taken"
    assert (tmp_path / "src" / "link").is_symlink()
    assert store.iostats.count("rename") == 3 and store.iostats.failures("rename") == 4


async def test_faulty_store_faults_the_requests_its_rules_select(tmp_path: Path) -> None:
    inner = LocalStore(str(tmp_path), fsync=False)
    for i in range(6):
        await inner.put(f"src/{i}", b"x")
    store = FaultyStore(inner)
    store.fail("rename", path="src/1")
    store.lose_response("rename", path="src/4")
    assert batch_renamer(store) is store
    failed = await store.rename_batch([RenameRequest(f"src/{i}", f"dst/{i}") for i in range(6)])
    assert sorted(failed) == [1, 4]
    assert all(isinstance(e, Transient) for e in failed.values())
    names = sorted([i.path async for i in inner.list("dst")])
    assert names == ["dst/0", "dst/2", "dst/3", "dst/4", "dst/5"]  # 4 happened, its answer lost
    assert store.injected == {"error:rename": 1, "lost_response:rename": 1}


async def test_fenced_store_refuses_a_batch_after_the_lease_is_lost(tmp_path: Path) -> None:
    inner = LocalStore(str(tmp_path), fsync=False)
    await inner.put("src/a", b"a")
    lock = DestinationLock(inner, "d", JOB, ttl=30)
    assert await lock.acquire() is None
    fenced = FencedStore(inner, lock)
    assert batch_renamer(fenced) is fenced
    assert await fenced.rename_batch([RenameRequest("src/a", "d/a")]) == {}
    await inner.put("src/b", b"b")
    lock.lost = "taken over by another job"
    with pytest.raises(LockLost, match="was not started"):
        await fenced.rename_batch([RenameRequest("src/b", "d/b")])
    assert await inner.get("src/b") == b"b"


async def prepare(store: Store, dest: str) -> dict[str, bytes]:
    await store.put(join(dest, "p=1/same.bin"), b"old same")
    layout = await setup_job(store, dest, JOB)
    files = {f"p={i % 3}/f{i:03d}.bin": f"new {i}".encode() for i in range(120)}
    items = list(files.items())
    for t in range(3):
        await run_task(store, layout, t, dict(items[t * 40 : (t + 1) * 40]))
    await run_task(store, layout, 3, {"p=1/same.bin": b"new same"})
    return files | {"p=1/same.bin": b"new same"}


async def test_a_wrapper_without_batches_renames_one_by_one(tmp_path: Path) -> None:
    inner = LocalStore(str(tmp_path), fsync=False)
    expected = await prepare(inner, "d")
    # a wrapper that copies the capabilities but not rename_batch; counts renames, never kills
    store = KillStore(inner, pattern="^rename ", nth=10**9)
    assert store.capabilities.batch_rename and batch_renamer(store) is None  # type: ignore[arg-type]
    before = inner.iostats.count("rename") + inner.iostats.failures("rename")
    await commit_job(store, "d", JOB, config=CommitterConfig(conflict_mode="overwrite"))  # type: ignore[arg-type]
    # every rename went through the wrapper, one by one (none in a batch below it)
    after = inner.iostats.count("rename") + inner.iostats.failures("rename")
    assert store.count == after - before >= 121
    assert await snapshot(inner, "d") == expected


def faulted(partition: int, share: float) -> list[str]:
    """``share`` of the job's new files in ``p=<partition>`` (those ``prepare`` writes),
    chosen by a seeded draw over their names: the same files in every run."""
    names = sorted(f"f{i:03d}.bin" for i in range(120) if i % 3 == partition)
    return sorted(random.Random(f"faults {partition}").sample(names, round(share * len(names))))


@pytest.mark.parametrize("batch", [1, 7, 256])
async def test_commit_recovers_every_failed_request_of_a_batch(tmp_path: Path, batch: int) -> None:
    """Lost answers (the rename happened), transient failures and throttling on a third of
    the renames, a taken destination in overwrite mode: the output is exact, and every
    lost answer is proven and counted as a recovered rename.

    The faulted files are drawn per path, not per call (a draw per call depends on the
    order of the calls, and a file could fail all its attempts): each chosen file's rename
    fails a fixed number of times, fewer than ``rename_attempts``, in any interleaving."""
    inner = LocalStore(str(tmp_path), fsync=False)
    expected = await prepare(inner, "d")
    store = FaultyStore(inner, seed=7)
    lost = [store.lose_response("rename", path=f"*/p=0/{n}", count=1) for n in faulted(0, 0.3)]
    failed = [store.fail("rename", path=f"*/p=2/{n}", count=2) for n in faulted(2, 0.3)]
    throttled = [
        store.throttle("rename", path=f"*/p=1/{n}", count=2, retry_after=0.01) for n in faulted(1, 0.3)
    ]
    cfg = CommitterConfig(conflict_mode="overwrite", rename_batch_size=batch, retry_base_delay=0.001)
    report = await commit_job(store, "d", JOB, config=cfg)
    assert report.success and report.files == 121
    assert await snapshot(inner, "d") == expected
    assert await temp_files(inner, "d") == []
    # every chosen file (12 per partition) met its faults, and each lost answer counts
    assert [r.fired for r in lost] == [1] * 12
    assert [r.fired for r in failed + throttled] == [2] * 24
    lost_files = {paths[1] for kind, _, paths in store.events if kind == "lost_response"}
    assert len(lost_files) == 12 and report.recovered_renames == 12
