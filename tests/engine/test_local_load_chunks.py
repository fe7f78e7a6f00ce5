"""Local files: the job commit reads its manifests a chunk at a time in one worker-thread
hop per chunk (``LocalStore.get_many``), below destination-lock fences only; a wrapper
that may change reads (a fault injector) is read through one manifest at a time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.lock import DestinationLock, FencedStore
from amcommit.committer.stages.load_manifests import _plain_local
from amcommit.errors import ManifestError, NotFound
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import run_task, snapshot, temp_files

JOB = "202611240001_0001"


async def test_get_many_reads_in_order_and_raises_the_first_missing(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    for i in range(5):
        await store.put(f"m/{i}", f"data {i}".encode())
    assert await store.get_many([f"m/{i}" for i in (3, 0, 4)]) == (b"data 3", b"data 0", b"data 4")
    assert await store.get_many([]) == ()
    with pytest.raises(NotFound) as e:
        await store.get_many(["m/1", "m/missing", "m/2"])
    assert e.value.path == "m/missing"
    assert store.iostats.count("get") == 3 and store.iostats.failures("get") == 1


async def test_only_fences_are_looked_through(tmp_path: Path) -> None:
    local = LocalStore(str(tmp_path), fsync=False)
    lock = DestinationLock(local, "d", JOB, ttl=30)
    assert _plain_local(local) is local
    assert _plain_local(FencedStore(FencedStore(local, lock), lock)) is local
    assert _plain_local(FaultyStore(local)) is None


async def prepare(store: LocalStore, tasks: int) -> dict[str, bytes]:
    layout = await setup_job(store, "d", JOB)
    expected: dict[str, bytes] = {}
    for t in range(tasks):
        files = {f"p={t % 3}/t{t:02d}-{i}.bin": f"{t} {i}".encode() for i in range(3)}
        await run_task(store, layout, t, files)
        expected |= files
    return expected


@pytest.mark.parametrize("load_threads", [1, 2, 5, 16])
async def test_commit_reads_every_manifest_once_in_chunks(tmp_path: Path, load_threads: int) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    expected = await prepare(store, 21)
    gets = store.iostats.count("get")
    report = await commit_job(store, "d", JOB, config=CommitterConfig(load_threads=load_threads))
    assert report.success and report.manifests == 21 and report.files == 63
    assert await snapshot(store, "d") == expected
    assert await temp_files(store, "d") == []
    assert store.iostats.count("get") - gets >= 21  # every manifest (and the bookkeeping reads)


async def test_a_bad_manifest_in_a_later_chunk_stops_the_commit_before_any_rename(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    await prepare(store, 12)
    manifests = sorted((tmp_path / f"d/_temporary/manifest_{JOB}/00/manifests").iterdir())
    manifests[-1].write_bytes(b"{not json")
    with pytest.raises(ManifestError):
        await commit_job(store, "d", JOB, config=CommitterConfig(load_threads=4))
    assert not [n for n in os.listdir(tmp_path / "d") if n != "_temporary"]  # nothing renamed
