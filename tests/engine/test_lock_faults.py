"""The destination lock survives faults through the engine's retry layer: throttling,
transient errors and lost answers on its acquisition, heartbeats and release; a lost answer
on a conditional write (CREATE, UpdateIf) is recognised by the lock's token, not misread as
someone else holding or taking the lock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import msgspec
import pytest

from amcommit.api import commit_job
from amcommit.committer.lock import DestinationLock, LockBody, decode_lock, lock_path
from amcommit.errors import LockLost, Transient
from amcommit.store.base import ObjectInfo, PutMode, UpdateIf, WriteMode
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultRule, FaultyStore
from tests.engine.helpers import snapshot, temp_files
from tests.engine.test_faults_bookkeeping import FAST, JOB, NEW, check_exact, prepare

T = TypeVar("T")
LOCK = "*/_temporary/_commit.lock"
# heartbeat every 0.5 s; the renames are slowed down so the commit lasts several beats
TTL = 1.5
CONFIG = FAST.with_options(lock_ttl=TTL, io_threads=2)


def slow_renames(faulty: FaultyStore) -> None:
    faulty.latency(0.25, "rename", path="*/_temporary/*/tasks/*")


def count_lock_puts(faulty: FaultyStore) -> FaultRule:
    """A rule that only counts the lock's puts (a create, then one per heartbeat attempt)."""
    return faulty.latency(0.0, "put", path=LOCK)


@pytest.mark.parametrize("kind", ["throttle", "transient", "lost_response"])
async def test_lock_survives_a_storm(tmp_path: Path, kind: str) -> None:
    """Every lock request (create, reads, heartbeats, release) meets faults 50 % of the
    time: the commit succeeds, the lock is released, the destination is exact."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=11)
    slow_renames(faulty)
    puts = count_lock_puts(faulty)
    ops = ["stat", "get", "put", "delete"]
    if kind == "throttle":
        rule = faulty.throttle(ops, path=LOCK, retry_after=0.001, probability=0.5)
    elif kind == "transient":
        rule = faulty.fail(ops, error=Transient, path=LOCK, probability=0.5)
    else:
        rule = faulty.lose_response(ops, path=LOCK, probability=0.5)
    report = await commit_job(faulty, dest, JOB, config=CONFIG)
    assert report.success
    assert puts.matched >= 4, puts.matched  # a create and heartbeats really happened
    hit = {op for k, op, paths in faulty.events if paths[0].endswith("_commit.lock")}
    assert rule.fired >= 3 and "put" in hit, faulty.events
    await check_exact(store, dest)  # includes: nothing left under _temporary (no lock)


async def test_lost_answer_of_the_create(tmp_path: Path) -> None:
    """The create lands but its answer is lost; the retry meets AlreadyExists: the lock
    carries our token, so we hold it (no wait, no takeover write)."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=1)
    puts = count_lock_puts(faulty)
    rule = faulty.lose_response("put", path=LOCK, count=1)
    report = await commit_job(faulty, dest, JOB, config=FAST)
    assert report.success and rule.fired == 1
    assert puts.matched == 2  # the lost create and its retry (AlreadyExists); no UpdateIf
    await check_exact(store, dest)


async def test_lost_answer_of_a_heartbeat(tmp_path: Path) -> None:
    """The first heartbeat's UpdateIf lands but its answer is lost; the retry fails its
    precondition (the etag changed: by us). The lock carries our token and latest beat:
    renewed, the new etag adopted, the next heartbeats succeed."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=1)
    slow_renames(faulty)
    puts = count_lock_puts(faulty)
    rule = faulty.lose_response("put", path=LOCK, after=1, count=1)  # the create passes
    # a 3 s lease (beats every 1 s): the lost answer's retry and the re-read that follows
    # fit in its safe window even on a loaded machine (1.5 s lost it there once)
    report = await commit_job(faulty, dest, JOB, config=CONFIG.with_options(lock_ttl=3.0))
    assert report.success and rule.fired == 1
    assert puts.matched >= 4  # create, lost beat, its retry, and at least one more beat
    await check_exact(store, dest)


class LoseFirstUpdateIf(FaultyStore):
    """Loses the answer of the first conditional update (``UpdateIf``) of the lock: it
    lands, then Transient is raised (FaultyStore rules cannot select by write mode)."""

    lost = 0

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        if isinstance(mode, UpdateIf) and path.endswith("_commit.lock") and not self.lost:
            self.lost += 1
            await self.inner.put(path, data, mode=mode)
            raise Transient("injected lost response (the operation did happen)", op="put", path=path)
        return await super().put(path, data, mode=mode)


@pytest.mark.parametrize("owner", ["job_dead", JOB])
async def test_lost_answer_of_a_takeover(tmp_path: Path, owner: str) -> None:
    """A stale lock (of a dead job, or of this job's own crashed run: taken back at once)
    is taken over with UpdateIf(stale etag); that answer is lost and the retry fails its
    precondition (the etag changed: by us). Recognised by our token: we hold the lock,
    the commit succeeds and releases it."""
    store, dest = await prepare(tmp_path)
    dead = LockBody(owner=owner, token="f" * 32, ttl=0.2, beats=7)
    await store.put(lock_path(dest), msgspec.json.encode(dead), mode=PutMode.CREATE)
    faulty = LoseFirstUpdateIf(store, seed=1)
    report = await commit_job(faulty, dest, JOB, config=FAST)
    assert report.success and faulty.lost == 1
    await check_exact(store, dest)


async def test_lost_answer_of_the_release(tmp_path: Path) -> None:
    """The release's delete lands but its answer is lost; the retry finds nothing: fine,
    and the empty _temporary directory is removed as usual."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=1)
    rule = faulty.lose_response("delete", path=LOCK, count=1)
    report = await commit_job(faulty, dest, JOB, config=FAST)
    assert report.success and rule.fired == 1
    await check_exact(store, dest)
    assert not (tmp_path / "root" / dest / "_temporary").exists()


async def test_lost_create_answer_is_recognised_not_taken_over(tmp_path: Path) -> None:
    """The acquisition alone: after the lost create answer the lock is recognised as ours
    by its token, not rewritten by a same-job takeover (its first body stays, beats 1), and
    the etag held is the stored one (so the first heartbeat succeeds)."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=1)
    rule = faulty.lose_response("put", path=LOCK, count=1)
    lock = DestinationLock(faulty, dest, JOB, ttl=30)
    assert await lock.acquire() is None and rule.fired == 1
    body = decode_lock(await store.get(lock.path))
    assert body is not None and body.token == lock.token and body.beats == 1
    assert lock.etag == (await store.stat(lock.path)).etag
    await lock.release()
    assert lock.path not in await temp_files(store, dest)


class StallAfterTakeover(FaultyStore):
    """Explicit synchronisation for the takeover test: ``renamed`` is set once a forward
    rename of a task file has returned (the commit holds the lock and is mid-rename); every
    later rename waits for ``taken`` (the intruder's takeover written), then until it is
    cancelled (by the heartbeat that finds the foreign token). So the takeover lands
    mid-commit and the commit can neither finish before the heartbeat looks nor race the
    takeover, however slow the machine. ``stall`` False: renames pass through."""

    def __init__(self, inner: LocalStore) -> None:
        super().__init__(inner, seed=1)
        self.renamed, self.taken = anyio.Event(), anyio.Event()
        self.stall = True

    def _selects(self, op: str, paths: tuple[str, ...]) -> bool:
        return op == "rename" or super()._selects(op, paths)

    async def _call(self, op: str, paths: tuple[str, ...], fn: Callable[[], Awaitable[T]]) -> T:
        if op == "rename" and self.stall and self.renamed.is_set():
            await self.taken.wait()
            await anyio.sleep_forever()
        result = await super()._call(op, paths, fn)
        if op == "rename" and "/tasks/" in paths[0]:
            self.renamed.set()
        return result


async def test_a_real_takeover_is_still_lost(tmp_path: Path) -> None:
    """Only a foreign token means the lock is lost: another writer replaces the lock body
    mid-commit (after the first rename: explicit synchronisation, see StallAfterTakeover);
    the next heartbeat (at most ttl/3 later) fails its precondition, reads the foreign token
    and stops the commit (LockLost); run again, it waits for that lock to expire and
    resumes. The ttl is generous (a busy machine cannot make the lease run out on its own)."""
    store, dest = await prepare(tmp_path)
    faulty = StallAfterTakeover(store)
    cfg = CONFIG.with_options(lock_ttl=6.0, io_threads=1)

    async def intruder() -> None:
        await faulty.renamed.wait()
        foreign = LockBody(owner="job_other", token="e" * 32, ttl=0.3)
        await store.put(lock_path(dest), msgspec.json.encode(foreign))  # a takeover
        faulty.taken.set()

    with anyio.fail_after(30):  # the heartbeat comes within ttl/3 = 2 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(intruder)
            with pytest.raises(LockLost, match="another writer took it over"):
                await commit_job(faulty, dest, JOB, config=cfg)
    assert faulty.taken.is_set()
    got = await snapshot(store, dest)
    renamed = [k for k, v in got.items() if NEW.get(k) == v]
    assert 0 < len(renamed) < len(NEW), renamed  # stopped mid-commit
    faulty.stall = False
    report = await commit_job(faulty, dest, JOB, config=cfg)
    assert report.success and report.resumed
    assert await snapshot(store, dest) == NEW
    assert await temp_files(store, dest) == []
