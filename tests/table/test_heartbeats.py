"""Writer liveness of table writes: a long write kept alive is never rolled back by a
concurrent writer, a SIGKILLed one is (at once on its own host, with one line from the
waiting writer), liveness is judged by the store's clock (skewed
clocks), and ``commit_job(operation=...)`` settles the operation before publishing."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import pytest

from amcommit.api import commit_job
from amcommit.errors import CommitError, ConfigError, ConflictError
from amcommit.paths import join
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.local import LocalStore
from amcommit.table.format.model import Operation
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.heartbeat import heartbeat, heartbeat_path
from amcommit.table.timeline.instants import list_instants, load_timeline
from amcommit.testing.faults import FaultyStore
from tests.backends import StoreUnderTest
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake, matrix_local  # noqa: F401 (fixtures)
from tests.table.writehelpers import begin, listing, rows, write, write_tasks

ROOT = str(Path(__file__).resolve().parents[2])
T = TypeVar("T")


async def _completed(store: Store, dest: str) -> list[str]:
    return [i.time for i in await list_instants(store, dest) if i.completed]


async def test_long_write_kept_alive_is_not_rolled_back(backend_local: StoreUnderTest) -> None:
    """Tasks take 3x writer_ttl; a later writer commits meanwhile: it waits for the live
    earlier write instead of rolling it back; no heartbeat outlives its write."""
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    cfg = TableConfig(lock_ttl=5.0, lock_wait=30.0, writer_ttl=1.0)
    await write(store, dest, rows(0, 2), config=cfg)
    early = await begin(store, dest, config=cfg)
    order: list[str] = []

    async def later_writer() -> None:
        late = await begin(store, dest, config=cfg)
        await write_tasks(store, late, rows(20, 2))
        await commit_job(store, dest, late.instant, config=cfg)
        order.append(late.instant)

    async with heartbeat(store, dest, early.instant, ttl=cfg.writer_ttl):
        async with anyio.create_task_group() as tg:
            tg.start_soon(later_writer)
            await anyio.sleep(3.0)  # long tasks, no task setup/commit beating meanwhile
            await write_tasks(store, early, rows(10, 2))
            await commit_job(store, dest, early.instant, config=cfg)
            order.append(early.instant)
        await anyio.sleep(0.6)  # still inside the block: its beats stopped with the write
    assert order[0] == early.instant
    done = await _completed(store, dest)
    assert done[-2:] == order
    assert not [n for n in await listing(store, dest) if ".heartbeat/" in n or ".temp/" in n or ".aux/" in n]


async def move_keeper_to_another_host(store: Store, dest: str, instant: str) -> None:
    """Rewrite a write's keeper record as if its writer ran on another host (its death
    cannot be proven there)."""
    from amcommit.liveness import ProcessId
    from amcommit.table.timeline.heartbeat import claim_keeper, keeper_path

    keeper = msgspec.json.decode(await store.get(keeper_path(dest, instant)), type=ProcessId)
    await claim_keeper(store, dest, instant, msgspec.structs.replace(keeper, host="another-host.example"))


class FirstTouch(FaultyStore):
    """Passes every call through; ``at``: the time (``time.time()``) when the first
    mutating request on a path of ``instant`` was sent (the rollback of a dead write)."""

    def __init__(self, inner: Store, instant: str) -> None:
        super().__init__(inner)
        self.instant = instant
        self.at: float | None = None

    def _selects(self, op: str, paths: tuple[str, ...]) -> bool:
        return op in ("put", "rename", "delete", "mkdirs") or super()._selects(op, paths)

    async def _call(self, op: str, paths: tuple[str, ...], fn: Callable[[], Awaitable[T]]) -> T:
        if self.at is None and op in ("put", "rename", "delete", "mkdirs"):
            if any(self.instant in p for p in paths):
                self.at = time.time()
        return await super()._call(op, paths, fn)


@pytest.mark.parametrize("where", ["this host", "another host"])
async def test_sigkilled_writer_is_rolled_back(tmp_path: Path, where: str) -> None:
    """A writer kept alive by ``heartbeat`` is SIGKILLed. On this host its keeper is provably
    dead: the next commit rolls its instant back at once (writer_ttl 60 s), then commits.
    From another host (its keeper record rewritten so): once its heartbeat is older than
    writer_ttl (1.5 s) by the store's clock: the first request of the rollback is sent no
    earlier than its last beat's modification time plus the ttl."""
    store = LocalStore(str(tmp_path))
    ttl = 1.5 if where == "another host" else 60.0
    cfg = TableConfig(lock_ttl=5.0, lock_wait=30.0, writer_ttl=ttl)
    await write(store, "tbl", rows(0, 2), config=cfg)
    child = await anyio.to_thread.run_sync(
        lambda: subprocess.Popen(
            [sys.executable, "-m", "tests.table.beat_child", str(tmp_path), "tbl", str(ttl)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ},
            cwd=ROOT,
        )
    )
    assert child.stdout is not None
    dead = (await anyio.to_thread.run_sync(child.stdout.readline)).strip()
    await anyio.sleep(1.8)  # it keeps beating: alive past one writer_ttl (1.5 s)
    assert child.poll() is None and dead in [i.time for i in await list_instants(store, "tbl")]
    os.kill(child.pid, signal.SIGKILL)
    await anyio.to_thread.run_sync(child.wait)
    # its last sign of life, by the store's clock (a local file's mtime: this host's clock)
    last_beat = (await store.stat(join("tbl", heartbeat_path(dead)))).mtime
    assert last_beat is not None
    if where == "another host":
        await move_keeper_to_another_host(store, "tbl", dead)
    spy = FirstTouch(store, dead)
    t0 = time.monotonic()
    w, report = await write(spy, "tbl", rows(20, 2), config=cfg)  # type: ignore[arg-type]
    waited = time.monotonic() - t0
    assert spy.at is not None, "the dead write was never touched"
    if where == "another host":
        # not rolled back before its last beat aged past the ttl (a lower bound: a busy
        # machine only makes the rollback later)
        assert spy.at >= last_beat + ttl, (spy.at - last_beat, ttl)
    else:
        assert waited < ttl / 2, waited  # at once, not after writer_ttl
    assert report.success and report.job_stats.counters.get("table_dead_writers_rolled_back") == 1
    assert not [n for n in await listing(store, "tbl") if dead in n]
    assert dead not in [i.time for i in await list_instants(store, "tbl")]
    assert (await _completed(store, "tbl"))[-1] == w.instant


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["local", "blob", "gcs-fake"])
def test_waiting_writer_says_so_then_rolls_back_a_writer_killed_meanwhile(
    backend: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    """A commit finds an earlier write whose writer is alive (a process beating with
    ``heartbeat``, writer_ttl 60 s) and waits, saying so once in one line. The writer is
    SIGKILLed: the waiting commit rolls its instant back at once (its keeper is provably
    dead on this host; not after 60 s) and commits."""
    from tests.matrix.stores import open_store

    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    dest = "tbl"
    cfg = TableConfig(lock_ttl=60.0, lock_wait=40.0, writer_ttl=60.0)
    caplog.set_level(logging.WARNING, logger="amcommit.table.commit.table_commit")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "amcommit.table.commit.table_commit"]

    spec = json.dumps({"backend": info, "dest": dest, "ttl": 60.0})
    argv = [sys.executable, "-m", "tests.table.beat_child", "--spec", spec]
    result: dict[str, Any] = {}

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env={**os.environ}, cwd=ROOT)

    async def go() -> None:
        async with open_store(info) as store:
            await write(store, dest, rows(0, 2), config=cfg)
            child = start()
            try:
                assert child.stdout is not None
                dead = (await anyio.to_thread.run_sync(child.stdout.readline)).strip()
                assert dead, "the writer did not start"

                async def later() -> None:
                    result["write"] = await write(store, dest, rows(20, 2), config=cfg)
                    result["done"] = time.monotonic()

                async with anyio.create_task_group() as tg:
                    tg.start_soon(later)
                    deadline = time.monotonic() + 30
                    while not said():
                        assert time.monotonic() < deadline, "no wait message"
                        await anyio.sleep(0.05)
                    await anyio.sleep(0.5)
                    assert "write" not in result  # the earlier writer is alive: it waits
                    os.kill(child.pid, signal.SIGKILL)
                    await anyio.to_thread.run_sync(child.wait)
                    result["killed"] = time.monotonic()
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()
            w, report = result["write"]
            assert result["done"] - result["killed"] < 10  # not writer_ttl (60 s)
            assert report.success and report.job_stats.counters.get("table_dead_writers_rolled_back") == 1
            assert not [n for n in await listing(store, dest) if dead in n]
            assert (await _completed(store, dest))[-1] == w.instant
            result["dead"] = dead

    anyio.run(go)
    lines = said()
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert f"waits for the earlier instant {result['dead']}, whose writer is alive" in lines[0]
    # what is left of lock_wait (40 s) when it is said: a loaded machine takes a second or two
    assert re.search(r"at most (3[5-9]|40) s \(lock_wait\)", lines[0]) and "60 s old (writer_ttl" in lines[0]


class SkewedStore:
    """A store whose clock runs ``skew`` seconds off: every modification time it reports
    is shifted (what a store with another clock than ours looks like)."""

    def __init__(self, inner: LocalStore, skew: float) -> None:
        self.inner, self.skew = inner, skew
        self.capabilities, self.iostats = inner.capabilities, inner.iostats

    def _fix(self, info: ObjectInfo) -> ObjectInfo:
        return info if info.mtime is None else replace(info, mtime=info.mtime + self.skew)

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    async def stat(self, path: str) -> ObjectInfo:
        return self._fix(await self.inner.stat(path))

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        async for info in self.inner.list(prefix, recursive=recursive):
            yield self._fix(info)

    async def put(self, path: str, data: bytes, **kw: Any) -> ObjectInfo:
        return self._fix(await self.inner.put(path, data, **kw))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
async def test_liveness_judged_by_the_stores_clock(tmp_path: Path, skew: float) -> None:
    """The store's clock is an hour off ours: a live writer is still waited for (not
    rolled back), and a dead one still rolled back."""
    store: Any = SkewedStore(LocalStore(str(tmp_path)), skew)
    cfg = TableConfig(lock_ttl=5.0, lock_wait=0.6, writer_ttl=5.0)
    await write(store, "tbl", rows(0, 2), config=cfg)
    early = await begin(store, "tbl", config=cfg)
    await write_tasks(store, early, rows(10, 2))
    late = await begin(store, "tbl", config=cfg)
    await write_tasks(store, late, rows(20, 2))
    with pytest.raises(ConflictError, match=early.instant):  # alive: waited for, in vain
        await commit_job(store, "tbl", late.instant, config=cfg)
    assert early.instant in [i.time for i in await list_instants(store, "tbl")]
    await anyio.sleep(0.7)
    report = await commit_job(store, "tbl", late.instant, config=cfg.with_options(writer_ttl=0.5))
    assert report.success and report.job_stats.counters.get("table_dead_writers_rolled_back") == 1
    assert early.instant not in [i.time for i in await list_instants(store, "tbl")]


async def test_judge_with_a_skewed_clock_waits_for_a_live_writer(
    backend_local: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our own clock is an hour ahead of the store's: a live writer is not judged dead."""
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    cfg = TableConfig(lock_ttl=5.0, lock_wait=0.6, writer_ttl=5.0)
    await write(store, dest, rows(0, 2), config=cfg)
    early = await begin(store, dest, config=cfg)
    late = await begin(store, dest, config=cfg)
    await write_tasks(store, late, rows(20, 2))
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    with pytest.raises(ConflictError, match=early.instant):
        await commit_job(store, dest, late.instant, config=cfg)
    assert early.instant in [i.time for i in await list_instants(store, dest)]


async def test_commit_job_settles_the_operation(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    await write(store, dest, rows(0, 4))
    w = await begin(store, dest, Operation.INSERT_OVERWRITE_TABLE)
    await write_tasks(store, w, rows(10, 2, parts=("a",)))
    before = await listing(store, dest)
    with pytest.raises(CommitError, match="requested as INSERT_OVERWRITE_TABLE"):
        await commit_job(store, dest, w.instant, operation=Operation.INSERT)
    assert await listing(store, dest) == before
    report = await commit_job(store, dest, w.instant, operation=Operation.INSERT_OVERWRITE)
    assert report.success and report.operation == "INSERT_OVERWRITE"
    _, commits = await load_timeline(store, dest)
    meta = commits[-1].metadata
    assert meta.operation_type == "INSERT_OVERWRITE"
    assert meta.partition_to_replace_file_ids is not None
    assert sorted(meta.partition_to_replace_file_ids) == ["p=a"]  # dynamic: only the partition written
    with pytest.raises(ConfigError, match="table writes only"):
        await commit_job(store, join(backend_local.base, "plain"), "job1", operation="INSERT")


def test_beater_process_beats_until_the_write_or_the_driver_is_gone(tmp_path: Path) -> None:
    """The driver's keep-alive process: beats while the watched driver lives and the write
    is active; stops when the driver is gone (the beat then ages, and the write is judged
    dead at once: the driver is its recorded keeper), and when the write is over (its beat
    removed)."""
    from amcommit.liveness import local_process
    from amcommit.store.schemes import open_location
    from amcommit.table.format.naming import heartbeat_path
    from amcommit.table.timeline.beater import start
    from amcommit.table.write.task import TableSpec, begin_write

    url = str(tmp_path / "t")

    async def begin() -> tuple[str, str]:
        store, dest = open_location(url)
        try:
            w = await begin_write(store, dest, operation=Operation.INSERT, spec=TableSpec("t"))
            return w.instant, w.layout.job_marker
        finally:
            await store.aclose()

    def judged(instant: str) -> float | None:
        async def go() -> float | None:
            from amcommit.table.timeline.heartbeat import judge_writers

            store, dest = open_location(url)
            async with store:
                return (await judge_writers(store, dest, [instant]))[0].get(instant)

        return anyio.run(go)

    def wait_exit(proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 30  # a bound for a busy machine, not a wait
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is not None

    def wait_beat(proc: subprocess.Popen[bytes], beat: Path, first: int) -> None:
        """Until the beat is rewritten (the process beats), bounded for a busy machine: a
        beat every ttl/3 (0.13 s) shows at once when the machine is idle."""
        deadline = time.monotonic() + 30
        while beat.stat().st_mtime_ns == first:
            assert proc.poll() is None, "the beater ended while its driver lives"
            assert time.monotonic() < deadline, "no beat within 30 s"
            time.sleep(0.02)

    # the driver dies: the beats stop, the heartbeat stays (and ages)
    instant, _ = anyio.run(begin)
    beat = tmp_path / "t" / heartbeat_path(instant)
    driver = subprocess.Popen(["sleep", "60"])
    try:
        proc = start(url, {}, instant, 0.4, watch=local_process(driver.pid))
        first = beat.stat().st_mtime_ns
        wait_beat(proc, beat, first)
        assert beat.stat().st_mtime_ns > first and proc.poll() is None
        assert judged(instant) not in (None, float("-inf"))  # alive
    finally:
        driver.kill()
        driver.wait()
    assert judged(instant) == float("-inf")  # its keeper, the driver, is gone: dead at once
    wait_exit(proc)
    last = beat.stat().st_mtime_ns
    time.sleep(0.3)
    assert beat.stat().st_mtime_ns == last
    # the write is committed or aborted (its marker gone): the process ends, no beat left
    instant, marker = anyio.run(begin)
    proc = start(url, {}, instant, 0.4, watch=local_process(os.getpid()))
    os.unlink("/" + marker.lstrip("/"))
    wait_exit(proc)
    assert not (tmp_path / "t" / heartbeat_path(instant)).exists()


async def test_failed_commit_says_its_writer_stopped(backend_local: StoreUnderTest) -> None:
    """While the write is live, ``rollback`` (no --force) is refused; once its commit fails
    for good the heartbeat says ``stopped`` and the rollback goes ahead at once (no wait of
    writer_ttl), leaving the table as before the write."""
    from amcommit.errors import PermissionDenied
    from amcommit.table.commit.rollback import rollback_instant
    from amcommit.table.format.naming import heartbeat_path
    from amcommit.table.timeline.heartbeat import STOPPED
    from amcommit.testing.faults import FaultRule, FaultyStore

    store, dest = backend_local.store, join(backend_local.base, "tbl")
    cfg = TableConfig(writer_ttl=120.0)
    await write(store, dest, rows(0, 2), config=cfg)
    before = await listing(store, dest)
    w = await begin(store, dest, config=cfg)
    await write_tasks(store, w, rows(10, 4))
    with pytest.raises(ConflictError, match="live writer"):
        await rollback_instant(store, dest, w.instant, config=cfg)
    faulty = FaultyStore(store)
    faulty.add(FaultRule("error", frozenset({"rename"}), path=f"{dest}/p=*", after=1, error=PermissionDenied))
    with pytest.raises(PermissionDenied):
        await commit_job(faulty, dest, w.instant, config=cfg)  # type: ignore[arg-type]
    beat_at = join(dest, heartbeat_path(w.instant))
    assert await store.get(beat_at) == STOPPED
    # a commit run again (the fault still there) fails again: stopped again
    with pytest.raises(PermissionDenied):
        await commit_job(faulty, dest, w.instant, config=cfg)  # type: ignore[arg-type]
    assert await store.get(beat_at) == STOPPED
    t0 = time.monotonic()
    report = await rollback_instant(store, dest, w.instant, config=cfg)
    assert report.rolled_back and time.monotonic() - t0 < 30.0
    assert await listing(store, dest) == before


def test_beater_writes_nothing_once_the_write_is_over(tmp_path: Path) -> None:
    """Issue 23 item 15: the write ends and its table folder is deleted before the
    keep-alive process's next beat: the process ends without writing (before, its next beat
    brought ``.hoodie/.heartbeat/`` back into the deleted folder)."""
    import shutil

    from amcommit.liveness import local_process
    from amcommit.store.schemes import open_location
    from amcommit.table.timeline.beater import start
    from amcommit.table.write.task import TableSpec, begin_write

    url = str(tmp_path / "t")

    async def begin() -> str:
        store, dest = open_location(url)
        try:
            return (await begin_write(store, dest, operation=Operation.INSERT, spec=TableSpec("t"))).instant
        finally:
            await store.aclose()

    instant = anyio.run(begin)
    proc = start(url, {}, instant, 0.8, watch=local_process(os.getpid()))  # beats every 0.2 s
    shutil.rmtree(tmp_path / "t")
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is not None
    assert not (tmp_path / "t").exists(), sorted(str(p) for p in (tmp_path / "t").rglob("*"))


class _Writes:
    """Store proxy that records every request that changes the store."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(self, path: str, data: bytes, **kw: Any) -> ObjectInfo:
        self.writes.append(f"put {path}")
        return await self.inner.put(path, data, **kw)

    async def delete(self, path: str, **kw: Any) -> None:
        self.writes.append(f"delete {path}")
        await self.inner.delete(path, **kw)


@pytest.fixture(params=["backend_local", "backend_blob_azurite", "backend_dfs_server", "backend_gcs_double"])
def beat_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    """One store per class of backend: local files, Blob, ADLS Gen2, GCS."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def test_keep_beating_sends_nothing_after_the_write_ended(beat_sut: StoreUnderTest) -> None:
    """Issue 23 item 15, per backend: a write committed before the keep-alive loop's next
    beat gets no more beat from it (before, one more beat, then its removal); the store is
    left as the commit left it."""
    from amcommit.table.timeline.heartbeat import keep_beating

    store, dest = beat_sut.store, join(beat_sut.base, "tbl")
    w = await begin(store, dest)
    await write_tasks(store, w, rows(0, 2))
    await commit_job(store, dest, w.instant)
    before = await listing(store, dest)
    spy = _Writes(store)
    with anyio.fail_after(10):
        await keep_beating(spy, dest, w.instant, ttl=0.2)  # type: ignore[arg-type]
    assert [w for w in spy.writes if not w.startswith("delete ")] == []
    assert await listing(store, dest) == before
