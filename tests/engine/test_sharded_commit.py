"""A plain job commit sharded over worker processes (``processes``,
:mod:`amcommit.committer.shard`), on local files, Azure Blob (Azurite) and GCS
(fake-gcs-server):

* the sharded commit leaves exactly what the one-process commit leaves (listing and bytes,
  the report's counts), in ``replace`` mode with an old file moved aside by a worker;
* the kill matrix: a worker SIGKILLed mid-shard (the commit fails with
  RenameWorkerFailed, the journal kept) and the coordinator SIGKILLed mid-commit (its
  workers exit at once), each then resumed, and separately aborted: exact listings;
* a worker's error is raised as its own type (a conflict), rolled back as in one process,
  and the job can be committed again;
* the rate budget is one for all processes: two workers under ``io_rate`` rename at that
  rate in total, not twice it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import anyio
import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import TEMP_DIR_NAME, JobLayout
from amcommit.errors import ConflictError
from amcommit.paths import join
from amcommit.store.base import Store, local_os_path
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task, snapshot, temp_files
from tests.forkrun import finish, start_module

JOB = "202611270001_0027"
OLD = {"p=1/same.bin": b"old same", "p=1/old.bin": b"old 1", "p=9/keep.bin": b"keep 9"}
TASKS = 4


def new_files(per_task: int) -> list[dict[str, str]]:
    """The job's files per task: ``per_task`` each in partitions 0..3, and
    ``p=1/same.bin`` (an old file of that name exists: moved aside) in task 1."""
    out = [{f"p={t}/f-{t}-{i:04d}.bin": f"new {t} {i}" for i in range(per_task)} for t in range(TASKS)]
    out[1]["p=1/same.bin"] = "new same"
    return out


def committed(per_task: int) -> dict[str, bytes]:
    """The destination after the commit (``replace``: the written partitions replaced)."""
    files = {k: v.encode() for task in new_files(per_task) for k, v in task.items()}
    return files | {"p=9/keep.bin": OLD["p=9/keep.bin"]}


async def prepare(store: Store, dest: str, per_task: int) -> JobLayout:
    for p, d in OLD.items():
        await store.put(join(dest, p), d)
    layout = await setup_job(store, dest, JOB)
    for t, files in enumerate(new_files(per_task)):
        await run_task(store, layout, t, {k: v.encode() for k, v in files.items()})
    return layout


SHARDED = ["backend_local", "backend_blob_azurite", "backend_gcs_fake"]
"""Local files, a copy-based flat store with batched deletes (Blob), GCS's rewrite."""


@pytest.fixture(params=SHARDED)
def shard_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def config(processes: int, **more: Any) -> CommitterConfig:
    return CommitterConfig(conflict_mode="replace", processes=processes, **more)


async def test_sharded_equals_one_process(shard_sut: StoreUnderTest) -> None:
    store = shard_sut.store
    per_task = 40
    reports = []
    for processes, name in ((1, "one"), (2, "two")):
        dest = join(shard_sut.base, name)
        await prepare(store, dest, per_task)
        report = await commit_job(store, dest, JOB, config=config(processes))
        assert report.success
        assert report.job_stats.counters.get("committer_rename_processes", 1) == processes
        assert await snapshot(store, dest) == committed(per_task)
        assert await temp_files(store, dest) == []
        await store.stat(join(dest, "_SUCCESS"))
        reports.append(report)
    one, two = reports
    assert (
        (two.renamed, two.recovered_renames, two.moved_aside, two.files)
        == (
            one.renamed,
            one.recovered_renames,
            one.moved_aside,
            one.files,
        )
        == (4 * per_task + 1, 0, 1, 4 * per_task + 1)
    )
    # the report's first names: which files come first depends on the order renames
    # finish, in one process too; as many, each a committed file
    assert len(two.filenames) == len(one.filenames) == 100
    assert {f.rsplit("/two/", 1)[1] for f in two.filenames} <= set(committed(per_task))


# -- the kill matrix ------------------------------------------------------------------------


def child_store(sut: StoreUnderTest) -> dict[str, Any]:
    """The crash child's store spec (:mod:`tests.crash.child`) for the fixture's store."""
    store: Any = sut.store
    if sut.name == "local":
        return {"kind": "local", "options": {"root": store.root, "fsync": False}}
    if sut.name == "blob-azurite":
        az: Any = sut.extras["emulator"]
        return {"kind": "blob", "options": {"container": sut.extras["container"], **az.store_options()}}
    assert sut.name == "gcs-fake"
    return {"kind": "gcs", "options": {"bucket": sut.extras["bucket"], "endpoint": store.endpoint}}


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc)."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out.extend(int(c) for c in f.read().split())
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


async def renamed_count(store: Store, dest: str) -> int:
    """The job's files in the destination (one listing; no file is read)."""
    n = 0
    async for info in store.list(dest, recursive=True):
        rel = info.path[len(dest) + 1 :]
        n += not info.is_dir and "/f-" in rel and not rel.startswith(TEMP_DIR_NAME + "/")
    return n


async def start_and_kill(sut: StoreUnderTest, dest: str, victim: str, rate: float) -> dict[str, Any] | None:
    """Commit in a child process with two workers under ``io_rate`` ``rate``; once some
    files are renamed (and before all), SIGKILL ``victim`` ("worker": one of the workers;
    "coordinator": the child itself). Returns the child's JSON result (None if killed).

    The workers are stopped (SIGSTOP) as soon as they are seen and let run in short steps
    (SIGCONT, 0.2 s, SIGSTOP; 0.5 s until the first rename) until the destination, counted
    while they are stopped, has 20 renamed files: the kill lands mid-shard however slowly
    the count is read on a busy machine (before, the workers ran on while it was read, and
    under load finished the shard before the kill: the commit succeeded); a step renames at
    most ``rate`` x 0.5 s plus a burst of ``rate``/10, far fewer than all. A killed worker's
    survivor stays stopped: the coordinator stops it (kills it after its grace period of
    5 s) without it renaming more."""
    spec = {
        "store": child_store(sut),
        "action": "commit",
        "dest": dest,
        "job_id": JOB,
        "config": {"conflict_mode": "replace", "processes": 2, "io_rate": rate},
    }
    # forked from the fork server of tests/forkrun.py (its workers are spawned by it as usual)
    proc, out_file, err_file = start_module("tests.crash.child", [json.dumps(spec)])
    stopped: set[int] = set()

    def pause(pids: list[int]) -> None:
        for w in pids:
            if alive(w):
                os.kill(w, signal.SIGSTOP)
                stopped.add(w)

    def resume(pids: list[int]) -> None:
        for w in pids:
            if alive(w):
                os.kill(w, signal.SIGCONT)

    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while True:
            assert proc.exitcode is None, finish(proc, out_file, err_file)
            workers = children(proc.pid)
            pause([w for w in workers if w not in stopped])  # stopped on sight
            renamed = await renamed_count(sut.store, dest) if len(workers) == 2 else 0
            if renamed >= 20:
                break
            assert time.monotonic() < deadline, f"no renames seen ({renamed}) or not 2 workers"
            resume(workers)
            # (longer while the workers start up: imports, before their first rename)
            await anyio.sleep(0.2 if renamed else 0.5)
            pause(workers)
        assert len(workers) == 2, workers
        if victim == "worker":
            os.kill(workers[0], signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
            resume(workers)  # they find their coordinator gone and stop at once
        await anyio.to_thread.run_sync(proc.join, 60)
        assert proc.exitcode is not None, "the commit child still runs 60 s after the kill"
        # the workers are gone too: a worker of a dead coordinator stops at once
        for w in workers:
            for _ in range(200):
                if not alive(w):
                    break
                await anyio.sleep(0.05)
            assert not alive(w), f"worker {w} still runs"
    finally:
        resume(list(stopped))
        if proc.exitcode is None:
            proc.kill()
            proc.join()
    code, out, err = finish(proc, out_file, err_file)
    if victim == "coordinator":
        assert code == -signal.SIGKILL, (code, err)
        return None
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


KILL_RATE = {"local": 150.0, "blob-azurite": 60.0, "gcs-fake": 80.0}
"""``io_rate`` per backend: slow enough that the kill lands mid-shard (the destination
has some files and not all)."""


@pytest.mark.parametrize("victim", ["worker", "coordinator"])
@pytest.mark.parametrize("then", ["resume", "abort"])
async def test_killed_mid_shard(shard_sut: StoreUnderTest, victim: str, then: str) -> None:
    store = shard_sut.store
    per_task = 100 if shard_sut.name == "local" else 40
    dest = join(shard_sut.base, "killed")
    await prepare(store, dest, per_task)
    result = await start_and_kill(shard_sut, dest, victim, KILL_RATE[shard_sut.name])
    if victim == "worker":
        # the coordinator failed the commit with a typed error and kept the journal
        assert result is not None and result["outcome"] == "error", result
        assert result["type"] == "RenameWorkerFailed", result
        assert "died (killed by signal 9)" in result["message"], result
    partial = await renamed_count(store, dest)
    assert 0 < partial < 4 * per_task, partial  # stopped mid-shard
    if then == "resume":
        report = await commit_job(store, dest, JOB, config=config(2))
        assert report.success and report.resumed
        assert await snapshot(store, dest) == committed(per_task)
    else:
        await abort_job(store, dest, JOB, config=config(2))
        assert await snapshot(store, dest) == OLD
    assert await temp_files(store, dest) == []


# -- a worker's error; the shared rate budget ---------------------------------------------


async def test_worker_conflict_rolls_back_and_job_stays(backend_local: StoreUnderTest) -> None:
    store = backend_local.store
    dest = join(backend_local.base, "conflict")
    per_task = 30
    await prepare(store, dest, per_task)
    # append mode: the new p=1/same.bin meets the old one in a worker: a conflict
    with pytest.raises(ConflictError, match=r"same\.bin"):
        await commit_job(store, dest, JOB, config=CommitterConfig(conflict_mode="append", processes=2))
    assert await snapshot(store, dest) == OLD  # every rename of every worker rolled back
    report = await commit_job(store, dest, JOB, config=config(2))  # the job was kept
    assert report.success and await snapshot(store, dest) == committed(per_task)


async def test_rate_budget_shared_by_processes(backend_local: StoreUnderTest) -> None:
    """Two workers under ``io_rate`` 150 rename at most ~150 files/s together (each with
    a budget of its own: ~300/s). Measured from the files' ctime (set by the rename)."""
    store = backend_local.store
    dest = join(backend_local.base, "rate")
    per_task = 100
    await prepare(store, dest, per_task)
    rate = 150.0
    report = await commit_job(store, dest, JOB, config=config(2, io_rate=rate))
    assert report.success and report.job_stats.counters["committer_rename_processes"] == 2
    times = sorted(
        os.stat(local_os_path(store, join(dest, k)) or "").st_ctime_ns / 1e9
        for k in await snapshot(store, dest)
        if "/f-" in k
    )
    achieved = (len(times) - 1) / (times[-1] - times[0])
    assert achieved <= rate * 1.2, achieved
    assert achieved >= rate * 0.5, achieved  # and not held back far below it


async def test_lock_lost_stops_every_worker(backend_local: StoreUnderTest) -> None:
    """Another writer takes the destination lock over mid-shard: the coordinator's
    heartbeat sees it and the commit stops with LockLost, its workers stopped with it (no
    file is renamed after), the journal kept; run again, it resumes exactly."""
    import msgspec

    from amcommit.committer.lock import LockBody, lock_path
    from amcommit.errors import LockLost

    store = backend_local.store
    dest = join(backend_local.base, "lock")
    per_task = 100
    await prepare(store, dest, per_task)
    cfg = config(2, io_rate=100, lock_ttl=1.5)

    async def intruder() -> None:
        while await renamed_count(store, dest) < 20:  # noqa: ASYNC110 (polls the store)
            await anyio.sleep(0.05)
        foreign = LockBody(owner="job_other", token="e" * 32, ttl=0.3)
        await store.put(lock_path(dest), msgspec.json.encode(foreign))  # a takeover

    async with anyio.create_task_group() as tg:
        tg.start_soon(intruder)
        with pytest.raises(LockLost, match="another writer took it over"):
            await commit_job(store, dest, JOB, config=cfg)
    stopped_at = await renamed_count(store, dest)
    assert 20 <= stopped_at < 4 * per_task
    await anyio.sleep(1.0)
    assert await renamed_count(store, dest) == stopped_at  # no worker renamed anything since
    report = await commit_job(store, dest, JOB, config=cfg)
    assert report.success and report.resumed
    assert await snapshot(store, dest) == committed(per_task)
    assert await temp_files(store, dest) == []
