"""Two jobs committing into one destination at once: the result is that of one serial
order or the other, never a mix, and no committed file is lost (the destination lock,
amcommit.committer.lock). Also: a holder killed with SIGKILL mid-commit is taken over at
once on its own host (after its ttl when its death cannot be proven: another host) and its
half-done commit completed first; a waiter says once, in one line, whom it waits for; a
holder that cannot renew its lock stops; a waiter gives up after lock_wait naming the
holder."""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec
import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig, Progress
from amcommit.committer.layout import JobLayout
from amcommit.committer.lock import DestinationLock, LockBody, lock_path
from amcommit.committer.report import JobReport
from amcommit.committer.stages.scope import minimal_roots
from amcommit.errors import ConflictError, LockLost, NotFound, PermissionDenied, PreconditionFailed
from amcommit.paths import is_within, join, parent
from amcommit.store.base import Store, UpdateIf
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task, snapshot, temp_files
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake, matrix_local  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store

MODES = ("append", "fail", "replace", "overwrite")
OLD = {"p=1/old.bin": b"old 1", "p=2/old.bin": b"old 2", "top.bin": b"old top"}
State = dict[str, bytes]


def job_files(job: str, part: str, n: int = 6) -> State:
    return {f"{part}/{job}-{i}.bin": f"{job} {i}".encode() for i in range(n)}


def apply(state: State, mode: str, files: State) -> State | None:
    """The destination after committing ``files`` in ``mode`` (None: the commit fails and
    leaves ``state`` as it was). A model of the conflict modes (see config.ConflictMode)."""
    parts = {parent(k) for k in files}
    if mode == "fail" and any(parent(k) in parts for k in state):
        return None
    if mode == "append":
        if set(files) & set(state):
            return None
        return state | files
    if mode == "replace":
        roots = minimal_roots(parts)
        return {k: v for k, v in state.items() if not any(is_within(k, r) for r in roots)} | files
    if mode == "overwrite":
        return dict(files)
    return state | files


def serial(
    first: tuple[str, str, State], second: tuple[str, str, State]
) -> tuple[State, dict[str, bool], str | None]:
    """When ``first`` commits before ``second``: the final state, which job succeeded, and
    the job whose ``_SUCCESS`` is left (the last that succeeded)."""
    state, ok, last = dict(OLD), {}, None
    for job, mode, files in (first, second):
        after = apply(state, mode, files)
        ok[job] = after is not None
        if after is not None:
            state, last = after, job
    return state, ok, last


async def prepare(store: Store, dest: str, jobs: list[tuple[str, str, State]]) -> None:
    for p, d in OLD.items():
        await store.put(join(dest, p), d)
    for job, _, files in jobs:
        layout = await setup_job(store, dest, job)
        items = list(files.items())
        await run_task(store, layout, 0, dict(items[: len(items) // 2]))
        await run_task(store, layout, 1, dict(items[len(items) // 2 :]))


async def commit_both(store: Store, dest: str, jobs: list[tuple[str, str, State]]) -> dict[str, bool]:
    ok: dict[str, bool] = {}

    async def one(job: str, mode: str) -> None:
        cfg = CommitterConfig(conflict_mode=mode, io_threads=2)  # type: ignore[arg-type]
        try:
            ok[job] = (await commit_job(store, dest, job, config=cfg)).success
        except ConflictError:
            ok[job] = False

    async with anyio.create_task_group() as tg:
        for job, mode, _ in jobs:
            tg.start_soon(one, job, mode)
    return ok


async def exists(store: Store, path: str) -> bool:
    try:
        await store.stat(path)
    except NotFound:
        return False
    return True


async def check_pair(store: Store, dest: str, mode_a: str, mode_b: str, overlap: bool) -> None:
    a = ("job_a", mode_a, job_files("a", "p=1"))
    b = ("job_b", mode_b, job_files("b", "p=1" if overlap else "p=3"))
    await prepare(store, dest, [a, b])
    ok = await commit_both(store, dest, [a, b])
    final = await snapshot(store, dest)
    success = None
    if await exists(store, join(dest, "_SUCCESS")):
        success = json.loads(await store.get(join(dest, "_SUCCESS")))["jobId"]
    assert (final, ok, success) in [serial(a, b), serial(b, a)], (final, ok, success)
    assert not any(p.endswith("_commit.lock") for p in await temp_files(store, dest))


PAIRS = [(x, y) for x in MODES for y in MODES]


@pytest.mark.parametrize("overlap", [True, False], ids=["same-partition", "disjoint"])
@pytest.mark.parametrize(("mode_a", "mode_b"), PAIRS)
async def test_pair_local(tmp_path: Path, mode_a: str, mode_b: str, overlap: bool) -> None:
    inner = LocalStore(str(tmp_path / "root"), fsync=False)
    store = FaultyStore(inner)
    store.latency(0.01, "rename")  # both commits are mid-rename at the same time
    await check_pair(store, "warehouse/t", mode_a, mode_b, overlap)


@pytest.mark.parametrize(("mode_a", "mode_b"), PAIRS)
async def test_pair_blob(backend_blob_azurite: StoreUnderTest, mode_a: str, mode_b: str) -> None:
    store = FaultyStore(backend_blob_azurite.store)
    store.latency(0.005, "rename")
    await check_pair(store, join(backend_blob_azurite.base, "t"), mode_a, mode_b, overlap=True)


@pytest.mark.parametrize(("mode_a", "mode_b"), [("overwrite", "append"), ("append", "append")])
async def test_pair_blob_disjoint(backend_blob_azurite: StoreUnderTest, mode_a: str, mode_b: str) -> None:
    store = FaultyStore(backend_blob_azurite.store)
    store.latency(0.005, "rename")
    await check_pair(store, join(backend_blob_azurite.base, "t"), mode_a, mode_b, overlap=False)


@pytest.mark.parametrize(("mode_a", "mode_b"), [("overwrite", "append"), ("replace", "replace")])
async def test_pair_gcs(backend_gcs_fake: StoreUnderTest, mode_a: str, mode_b: str) -> None:
    store = FaultyStore(backend_gcs_fake.store)
    store.latency(0.005, "rename")
    await check_pair(store, join(backend_gcs_fake.base, "t"), mode_a, mode_b, overlap=True)


@pytest.mark.parametrize(("mode_a", "mode_b"), [("overwrite", "append"), ("replace", "replace")])
async def test_pair_dfs(backend_dfs_server: StoreUnderTest, mode_a: str, mode_b: str) -> None:
    store = FaultyStore(backend_dfs_server.store)
    store.latency(0.005, "rename")
    await check_pair(store, join(backend_dfs_server.base, "t"), mode_a, mode_b, overlap=True)


# -- a holder killed with SIGKILL ------------------------------------------------------


def kill_holder(root: str, dest: str, job: str, mode: str, point: str, ttl: float) -> None:
    repo = str(Path(__file__).parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, *sys.path]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.engine.lock_child", root, dest, job, mode, point, str(ttl)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=repo,
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


TTL = 1.0
LONG_TTL = 60.0
"""A ttl no test waits for: a takeover before it is one that did not wait for the ttl."""


async def move_to_another_host(store: Store, dest: str) -> None:
    """Rewrite the lock as if its holder ran on another host (its death cannot be proven)."""
    body = LockBody(**json.loads(await store.get(lock_path(dest))))
    other = msgspec.structs.replace(body, host="another-host.example")
    etag = (await store.stat(lock_path(dest))).etag
    await store.put(lock_path(dest), msgspec.json.encode(other), mode=UpdateIf(etag or ""))


@pytest.mark.parametrize("where", ["this host", "another host"])
@pytest.mark.parametrize(
    ("point", "dead_commit_completed"),
    [
        ("check_conflicts:end", False),  # no journal yet: nothing in the destination changed
        ("rename_files:progress:3", True),  # half renamed: completed by the taker first
        ("delete_victims:start", True),  # past the point of no return
    ],
)
async def test_killed_holder_is_taken_over(
    tmp_path: Path, point: str, dead_commit_completed: bool, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On this host the killed holder is provably dead: taken over at once (its ttl is 60 s),
    without a wait message. A holder on another host (same dead lock, its host renamed) is
    taken over once unrenewed for its ttl, after one line saying so."""
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1"))
    b = ("job_b", "append", job_files("b", "p=3"))
    await prepare(store, dest, [a, b])
    kill_holder(store.root, dest, "job_a", "overwrite", point, TTL if where == "another host" else LONG_TTL)
    assert json.loads(await store.get(lock_path(dest)))["owner"] == "job_a"  # the dead holder's lock
    if where == "another host":
        await move_to_another_host(store, dest)

    caplog.set_level(logging.WARNING, logger="amcommit.lock")
    t0 = time.monotonic()
    cfg = CommitterConfig(conflict_mode="append", lock_ttl=TTL, lock_wait=30)
    report = await commit_job(store, dest, "job_b", config=cfg)
    waited = time.monotonic() - t0
    assert report.success
    said = [r.getMessage() for r in caplog.records if r.name == "amcommit.lock"]
    if where == "another host":
        assert waited >= TTL  # the expiry was observed, not assumed from wall clocks
        assert len(said) == 1 and "\n" not in said[0], said
        assert "job 'job_a' (commit, host another-host.example" in said[0]
        assert "waiting at most 30 s (lock_wait)" in said[0] and "for 1 s" in said[0]
    else:
        assert waited < 10, waited  # not the holder's ttl (60 s)
        assert said == []  # no wait: nothing to say
    if dead_commit_completed:
        # job_a's overwrite was completed first, then job_b appended: one serial order
        assert await snapshot(store, dest) == serial(a, b)[0]
        assert await temp_files(store, dest) == []
        assert report.completed_previous == "job_a"
        # job_a's driver, run again, learns its job is committed (job_b's _SUCCESS names it)
        again = await commit_job(store, dest, "job_a", config=CommitterConfig(conflict_mode="overwrite"))
        assert again.success and again.already_committed and again.committed_by == "job_b"
        assert await snapshot(store, dest) == serial(a, b)[0]
    else:
        # job_a never touched the destination; it stays committable after job_b
        assert await snapshot(store, dest) == OLD | b[2]
        await commit_job(store, dest, "job_a", config=CommitterConfig(conflict_mode="overwrite"))
        assert await snapshot(store, dest) == serial(b, a)[0]
        assert await temp_files(store, dest) == []


def hold_lock(
    info: dict[str, object], dest: str, job: str, mode: str, point: str, hold: Path
) -> subprocess.Popen[str]:
    """A child commits ``job`` and stops at ``point`` alive, holding the lock (ttl 60 s),
    once ``hold`` exists (see tests/engine/lock_child.py)."""
    repo = str(Path(__file__).parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, *sys.path]))
    spec = {"backend": info, "dest": dest, "job": job, "mode": mode, "point": point, "ttl": LONG_TTL}
    spec["hold"] = str(hold)
    argv = [sys.executable, "-m", "tests.engine.lock_child", "--spec", json.dumps(spec)]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=repo
    )


async def until(done: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.05)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["local", "blob", "gcs-fake"])
def test_waiter_says_so_then_takes_over_a_holder_killed_meanwhile(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit finds the lock held by a live process (another job's commit, half renamed,
    ttl 60 s) and waits, saying so once in one line (who holds it, how long at most). The
    holder is killed with SIGKILL: the waiter takes the lock over at once (within its poll
    interval, not after 60 s), completes the dead commit first, then commits."""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1"))
    b = ("job_b", "append", job_files("b", "p=3"))
    caplog.set_level(logging.WARNING, logger="amcommit.lock")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "amcommit.lock"]

    async def go() -> None:
        async with open_store(info) as store:
            await prepare(store, dest, [a, b])
            flag = tmp_path / "holding"
            child = hold_lock(info, dest, "job_a", "overwrite", "rename_files:progress:3", flag)
            result: dict[str, object] = {}
            try:
                await until(flag.exists, 60, "the holder to stop mid-commit")

                async def waiter() -> None:
                    cfg = CommitterConfig(conflict_mode="append", lock_ttl=LONG_TTL, lock_wait=40)
                    result["report"] = await commit_job(store, dest, "job_b", config=cfg)
                    result["done"] = time.monotonic()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(waiter)
                    await until(lambda: bool(said()), 20, "the wait message")
                    await anyio.sleep(1.0)
                    assert "report" not in result  # the holder is alive: the waiter waits
                    os.kill(child.pid, signal.SIGKILL)
                    child.wait()
                    result["killed"] = time.monotonic()
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()
            report = result["report"]
            assert isinstance(report, JobReport) and report.success
            assert report.completed_previous == "job_a"
            took = float(result["done"]) - float(result["killed"])  # type: ignore[arg-type]
            assert took < 10, took  # not the holder's ttl (60 s)
            assert await snapshot(store, dest) == serial(a, b)[0]
            assert await temp_files(store, dest) == []

    anyio.run(go)
    lines = said()
    assert len(lines) == 1 and "\n" not in lines[0], lines  # said once, in one line
    assert "commit of job 'job_b' waits for the lock of " in lines[0]
    assert "held by job 'job_a' (commit, host " in lines[0] and ", pid " in lines[0]
    assert "waiting at most 40 s (lock_wait)" in lines[0]


@pytest.mark.timeout(180)
def test_cli_says_once_that_it_waits_then_takes_over(tmp_path: Path) -> None:
    """``amcommit commit-job`` finds the lock held by a live process: one line on stderr
    (``amcommit: commit of job ... waits for the lock of ...``); the holder is SIGKILLed,
    the command takes the lock over at once and succeeds."""
    import threading

    # the store as the command opens it (rooted at /): a resumed commit's journal holds
    # store paths, so the holder and the command must agree on the store's root
    store = LocalStore("/", fsync=False)
    dest = str(tmp_path / "warehouse" / "t").lstrip("/")
    a = ("job_a", "overwrite", job_files("a", "p=1"))
    b = ("job_b", "append", job_files("b", "p=3"))
    anyio.run(prepare, store, dest, [a, b])
    flag = tmp_path / "holding"
    holder = hold_lock(
        {"kind": "local", "root": "/"}, dest, "job_a", "overwrite", "rename_files:progress:3", flag
    )
    repo = str(Path(__file__).parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, *sys.path]))
    argv = [sys.executable, "-m", "amcommit.cli", "commit-job", "/" + dest, "--job-id", "job_b", "-q"]
    err: list[str] = []
    cli: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert time.monotonic() < deadline and holder.poll() is None, (
                "the holder never stopped mid-commit"
            )
            time.sleep(0.05)
        cli = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=repo
        )
        assert cli.stderr is not None
        reader = threading.Thread(target=lambda: err.extend(cli.stderr), daemon=True)  # type: ignore[union-attr,arg-type]
        reader.start()
        while not err:
            assert time.monotonic() < deadline + 60 and cli.poll() is None, "no wait message"
            time.sleep(0.05)
        time.sleep(0.5)
        assert cli.poll() is None  # the holder is alive: the command waits
    finally:
        holder.kill()
        holder.wait()
        killed = time.monotonic()
    assert cli is not None
    assert cli.wait(timeout=60) == 0, err
    assert time.monotonic() - killed < 10  # not the holder's ttl (60 s)
    reader.join(timeout=10)
    assert len(err) == 1, err
    assert err[0].startswith("amcommit: commit of job 'job_b' waits for the lock of file://")
    assert "held by job 'job_a' (commit, host " in err[0] and "waiting at most 600 s (lock_wait)" in err[0]
    assert anyio.run(snapshot, store, dest) == serial(a, b)[0]


async def test_killed_holder_whose_commit_cannot_be_finished(tmp_path: Path) -> None:
    """The dead holder's half-done commit fails when the taker resumes it (its remaining
    task output vanished): it is rolled back, and the taker's commit goes on alone."""
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1"))
    b = ("job_b", "append", job_files("b", "p=3"))
    await prepare(store, dest, [a, b])
    kill_holder(store.root, dest, "job_a", "overwrite", "rename_files:progress:2", TTL)
    tasks = JobLayout(dest, "job_a").tasks_dir
    left = [i.path async for i in store.list(tasks, recursive=True)]
    assert left
    for path in left:
        await store.delete(path)
    report = await commit_job(store, dest, "job_b", config=CommitterConfig(lock_ttl=TTL, lock_wait=30))
    assert report.success
    assert await snapshot(store, dest) == OLD | b[2]
    assert not await exists(store, lock_path(dest))


async def test_killed_holder_resumes_its_own_commit_at_once(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1"))
    await prepare(store, dest, [a])
    kill_holder(store.root, dest, "job_a", "overwrite", "rename_files:progress:2", 30.0)
    t0 = time.monotonic()
    report = await commit_job(store, dest, "job_a", config=CommitterConfig(conflict_mode="overwrite"))
    assert report.success and report.resumed
    assert time.monotonic() - t0 < 10  # no waiting for its own ttl (30 s)
    assert await snapshot(store, dest) == a[2]
    assert await temp_files(store, dest) == []


async def test_killed_holder_aborted_by_its_owner(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1"))
    await prepare(store, dest, [a])
    kill_holder(store.root, dest, "job_a", "overwrite", "rename_files:progress:2", 30.0)
    await abort_job(store, dest, "job_a")
    assert await snapshot(store, dest) == OLD
    assert await temp_files(store, dest) == []


@pytest.mark.parametrize("owner_aborts", [False, True])
async def test_failed_commit_keeps_the_lock_until_finished(tmp_path: Path, owner_aborts: bool) -> None:
    """A commit that fails half renamed (store outage: resumable) keeps the destination
    locked: its owner aborts at once, or the next job takes over after the ttl and
    completes it first. Either way one serial order."""
    store = FaultyStore(LocalStore(str(tmp_path / "root"), fsync=False))
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1"))
    b = ("job_b", "append", job_files("b", "p=3"))
    await prepare(store, dest, [a, b])
    store.fail("rename", error=PermissionDenied, after=3)
    cfg_a = CommitterConfig(conflict_mode="overwrite", io_threads=1, lock_ttl=2.0)
    with pytest.raises(PermissionDenied):
        await commit_job(store, dest, "job_a", config=cfg_a)
    store.clear()
    assert json.loads(await store.get(lock_path(dest)))["owner"] == "job_a"
    if owner_aborts:
        await abort_job(store, dest, "job_a", config=cfg_a)
        assert not await exists(store, lock_path(dest))
    await commit_job(store, dest, "job_b", config=CommitterConfig(lock_ttl=2.0))
    assert await snapshot(store, dest) == (OLD | b[2] if owner_aborts else serial(a, b)[0])
    assert await temp_files(store, dest) == []


# -- a holder that cannot renew, a waiter that gives up, racing takers ----------------


async def test_holder_that_cannot_renew_stops_and_resumes(tmp_path: Path) -> None:
    inner = LocalStore(str(tmp_path / "root"), fsync=False)
    store = FaultyStore(inner)
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1", 8))
    await prepare(store, dest, [a])
    store.fail("put", path="*/_commit.lock", error=PreconditionFailed, after=1)  # heartbeats fail
    store.latency(0.2, "rename")
    cfg = CommitterConfig(conflict_mode="overwrite", io_threads=1, lock_ttl=0.6)
    # injected precondition failures while the stored lock still carries our token (and the
    # etag we hold) are not a takeover: the holder cannot renew and stops at its deadline
    with pytest.raises(LockLost, match="not renewed within"):
        await commit_job(store, dest, "job_a", config=cfg)
    store.clear()
    report = await commit_job(store, dest, "job_a", config=cfg)
    assert report.success and report.resumed
    assert await snapshot(store, dest) == a[2]
    assert await temp_files(store, dest) == []


@pytest.mark.parametrize("batch", [1, 2])
async def test_no_write_starts_after_the_lease_ran_out(tmp_path: Path, batch: int) -> None:
    """The event loop is blocked past the lease (the heartbeat cannot run): the commit's
    next write is refused by the fence itself, not later by the heartbeat. With batches
    of 2 renames, the fence refuses the next batch."""
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "warehouse/t"
    a = ("job_a", "overwrite", job_files("a", "p=1", 8))
    await prepare(store, dest, [a])

    def progress(p: Progress) -> None:
        if p.stage == "rename_files" and p.phase == "progress" and p.done == 2:
            time.sleep(0.8)  # blocks the loop: longer than the lease (0.75 * 0.6 s)

    cfg = CommitterConfig(conflict_mode="overwrite", io_threads=1, lock_ttl=0.6, rename_batch_size=batch)
    with pytest.raises(LockLost, match="was not started"):
        await commit_job(store, dest, "job_a", config=cfg, progress=progress)
    renamed = [k for k in await snapshot(store, dest) if k.startswith("p=1/a-")]
    assert len(renamed) == 2
    report = await commit_job(store, dest, "job_a", config=cfg)
    assert report.success and report.resumed
    assert await snapshot(store, dest) == a[2]


async def test_waiter_gives_up_naming_the_holder(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    holder = DestinationLock(store, "d", "job_holder", ttl=30)
    assert await holder.acquire() is None
    a = ("job_a", "append", job_files("a", "p=1"))
    await prepare(store, "d", [a])
    cfg = CommitterConfig(lock_wait=0.3)
    with pytest.raises(
        ConflictError, match=r"locked by job 'job_holder' \(commit, host .*gave up after waiting 0.3 s"
    ):
        await commit_job(store, "d", "job_a", config=cfg)
    await holder.release()
    await commit_job(store, "d", "job_a", config=cfg)
    assert await snapshot(store, "d") == OLD | a[2]


async def test_one_taker_wins_a_stale_lock(tmp_path: Path) -> None:
    """Several waiters on an expired lock: they hold it one after the other."""
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    stale = LockBody(owner="dead_job", token="x", ttl=0.2)
    await store.put(lock_path("d"), msgspec.json.encode(stale))
    held: list[tuple[float, float]] = []
    previous: list[str] = []

    async def taker(n: int) -> None:
        lock = DestinationLock(store, "d", f"job_{n}", ttl=5, wait=20)
        prev = await lock.acquire()
        if prev is not None:
            previous.append(prev.owner)
        t = time.monotonic()
        await anyio.sleep(0.05)
        held.append((t, time.monotonic()))
        await lock.release()

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(taker, n)
    assert previous == ["dead_job"]
    held.sort()
    assert all(x[1] <= y[0] for x, y in itertools.pairwise(held))


def test_local_update_if_is_atomic_across_processes(tmp_path: Path) -> None:
    """LocalStore's UpdateIf is fenced with flock: processes incrementing one counter
    with read + UpdateIf(etag) lose no increment (two updates of one version cannot both
    win; the takeover of a stale lock relies on it). The size is the counter, so every
    version has its own etag."""
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    anyio.run(lambda: store.put("d/counter", b""))
    procs, rounds = 4, 150
    code = (
        "import sys, anyio\n"
        "from amcommit.store.local import LocalStore\n"
        "from amcommit.store.base import UpdateIf\n"
        "from amcommit.errors import PreconditionFailed\n"
        "s = LocalStore(sys.argv[1], fsync=False)\n"
        "async def go():\n"
        "    for _ in range(int(sys.argv[2])):\n"
        "        while True:\n"
        "            st = await s.stat('d/counter')\n"
        "            try:\n"
        "                await s.put('d/counter', b'x' * (st.size + 1), mode=UpdateIf(st.etag))\n"
        "                break\n"
        "            except PreconditionFailed:\n"
        "                pass\n"
        "anyio.run(go)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    children = [
        subprocess.Popen([sys.executable, "-c", code, store.root, str(rounds)], env=env) for _ in range(procs)
    ]
    assert [c.wait(timeout=120) for c in children] == [0] * procs
    assert anyio.run(lambda: store.stat("d/counter")).size == procs * rounds
