"""A table's commit lock released by a conditional rewrite to a *released* state and acquired
by a conditional rewrite of that state (``lock_release="rewrite"``, issue 35 item 6), on GCS:
exact lock states after each step, real processes killed (SIGKILL) before and after each
lock request, two writers never both holding it, and lock objects of older amcommits."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from amcommit.committer.config import CommitterConfig
from amcommit.committer.lock import DestinationLock, LockBody, decode_lock, held_by, lock_path
from amcommit.errors import NotFound
from amcommit.store.base import PutMode, Store
from amcommit.table.commit.jobs import list_table_jobs
from amcommit.table.format.naming import STAGING_DIR
from amcommit.testing.gcs_double import GcsDouble
from tests.gcs.conftest import GcsEnv
from tests.matrix.conftest import matrix_gcs_fake  # noqa: F401 (fixture)
from tests.matrix.stores import open_store
from tests.table.writehelpers import amcommit_rows, keys, rows, write

REPO = str(Path(__file__).resolve().parents[2])
CFG = CommitterConfig(lock_ttl=60.0, lock_wait=60.0, io_threads=2, lock_release="rewrite")
"""Release by rewrite; a lock ttl far longer than any test: a wait for it to expire would show."""


def _rows(*batches: tuple[int, int]) -> list[tuple[Any, ...]]:
    return sorted(t for first, n in batches for t in keys(rows(first, n)))


async def _lock(store: Store, dest: str) -> tuple[str | None, LockBody]:
    """The lock object's etag (the GCS generation) and body."""
    path = lock_path(dest, staging=STAGING_DIR)
    info = await store.stat(path)
    body = decode_lock(await store.get(path))
    assert body is not None
    return info.etag, body


async def test_table_lock_is_released_and_acquired_by_rewrite(gcs_double: GcsDouble) -> None:
    """Three table writes: the first creates the lock, each releases it by rewriting it to
    the released state (its job and token named, ``released``), the next acquires it by
    rewriting that generation. Two changes of the lock per commit; it is never deleted,
    and a released lock names no holder. Before: each commit created and deleted it."""
    bucket = f"lr{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    dest = "tbl"
    lock = f"{bucket}/{lock_path(dest, staging=STAGING_DIR)}"
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:
        etags: list[str | None] = []
        for i in range(3):
            before = gcs_double.changes[lock]
            w, report = await write(store, dest, rows(10 * i, 4), config=CFG)
            assert report.success
            assert gcs_double.changes[lock] == before + 2  # acquired (create / rewrite), released
            etag, body = await _lock(store, dest)
            assert body.released and body.owner == w.instant and body.operation == "commit"
            assert body.host == socket.gethostname() and body.pid == os.getpid()
            assert not await held_by(store, dest, w.instant, staging=STAGING_DIR)
            etags.append(etag)
        assert len(set(etags)) == 3
        jobs = await list_table_jobs(store, dest, CFG, 60.0)
        assert jobs is not None and jobs.lock is None and not jobs.lock_unreadable
        assert await amcommit_rows(store, dest) == _rows((0, 4), (10, 4), (20, 4))
    assert not gcs_double.rate_limited


async def test_two_writers_never_both_hold_a_released_lock(gcs_double: GcsDouble) -> None:
    """Eight lock handles race for a released lock at once, each holding it 50 ms: exactly
    one holds it at any time (intervals disjoint), each got it once, and it ends released
    by the last one."""
    bucket = f"lr{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:
        first = DestinationLock(
            store, "tbl", "j0", staging=STAGING_DIR, ttl=60.0, wait=60.0, release="rewrite"
        )
        assert await first.acquire() is None
        await first.release()
        held: list[tuple[float, float, str]] = []

        async def one(i: int) -> None:
            lk = DestinationLock(
                store, "tbl", f"j{i}", staging=STAGING_DIR, ttl=60.0, wait=60.0, release="rewrite"
            )
            assert await lk.acquire() is None  # a released lock is nobody's: none replaced
            t0 = time.monotonic()
            _, body = await _lock(store, "tbl")
            assert not body.released and body.owner == f"j{i}" and body.token == lk.token
            await anyio.sleep(0.05)
            t1 = time.monotonic()
            held.append((t0, t1, f"j{i}"))
            await lk.release()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for i in range(1, 9):
                    tg.start_soon(one, i)
        held.sort()
        assert sorted(h[2] for h in held) == [f"j{i}" for i in range(1, 9)]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(held)), held
        _, body = await _lock(store, "tbl")
        assert body.released and body.owner == held[-1][2]


@pytest.mark.parametrize("old", ["absent", "held-by-dead"])
async def test_lock_objects_of_older_versions_still_work(gcs_double: GcsDouble, old: str) -> None:
    """What an older amcommit leaves: no lock (it released by delete), or a lock in its
    format (no ``released`` field) held by a process that is gone. The next write creates
    it, or takes it over at once; then releases it by rewrite."""
    bucket = f"lr{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    dest = "tbl"
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:
        await write(store, dest, rows(0, 4), config=CFG)
        path = lock_path(dest, staging=STAGING_DIR)
        await store.delete(path)
        if old == "held-by-dead":
            dead = _exited_pid()
            body = _old_format_body(dead)
            await store.put(path, body, mode=PutMode.CREATE)
        t0 = time.monotonic()
        w, report = await write(store, dest, rows(10, 4), config=CFG)
        assert report.success and time.monotonic() - t0 < 20  # no 60 s ttl wait
        _, now = await _lock(store, dest)
        assert now.released and now.owner == w.instant
        assert await amcommit_rows(store, dest) == _rows((0, 4), (10, 4))


def _exited_pid() -> int:
    """The pid of a process of this host that has exited."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _old_format_body(pid: int) -> bytes:
    """A lock body as amcommit wrote it before release by rewrite (no ``released``), of a
    process of this host that has exited (its pid: proven dead unless reused)."""
    from amcommit.liveness import this_process

    me = this_process()
    assert me is not None
    body = {
        "owner": "20200101000000000",
        "job_attempt": 0,
        "operation": "commit",
        "token": "f" * 32,
        "host": socket.gethostname(),
        "pid": pid,
        "acquired": time.time(),
        "heartbeat": time.time(),
        "ttl": 60.0,
        "beats": 1,
        "boot": me.boot,
        "pidns": me.pidns,
        "start": "1",
        "version": "amcommit-lock/1",
    }
    return msgspec.json.encode(body)


# -- SIGKILL at each lock request ---------------------------------------------------------

KILLS = [
    # (name, nth put of the lock in the child's commit, before/after): the lock was left
    # released by the test's first write, so put 1 acquires it (a rewrite), put 2 releases it
    ("acquire-unsent", 1, "before"),
    ("acquire-landed", 1, "after"),
    ("release-unsent", 2, "before"),
    ("release-landed", 2, "after"),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("cell", "nth", "when"), KILLS, ids=[k[0] for k in KILLS])
def test_kill_at_each_lock_request(
    cell: str,
    nth: int,
    when: str,
    matrix_gcs_fake: dict[str, Any],  # noqa: F811
) -> None:
    """fake-gcs-server; write 0 commits (the lock is left released); a child's write 1 is
    SIGKILLed before or after its acquiring or releasing rewrite of the lock. The lock is
    then exactly: unchanged (acquire unsent), held by the dead child's job (acquire landed,
    release unsent), or released by it (release landed); write 1 is visible iff it got
    past its acquire. The next write commits at once (the dead holder is proven gone on
    this host; ttl 60 s) and leaves the lock released; readers see exactly what was
    committed."""
    info = matrix_gcs_fake
    dest = f"kl-{uuid.uuid4().hex[:8]}/tbl"
    spec = {"backend": info, "dest": dest, "first": 10, "n": 4, "nth": nth, "when": when}
    argv = [sys.executable, "-m", "tests.gcs.lock_release_child", json.dumps(spec)]

    def kill_run() -> None:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ}, cwd=REPO)
        assert r.returncode == -9, (r.returncode, r.stdout, r.stderr[-2000:])

    async def go() -> None:
        async with open_store(info) as store:
            w0, _ = await write(store, dest, rows(0, 4), config=CFG)
            etag0, body0 = await _lock(store, dest)
            assert body0.released and body0.owner == w0.instant
            kill_run()
            etag1, body1 = await _lock(store, dest)
            if cell == "acquire-unsent":
                assert (etag1, body1) == (etag0, body0)  # not a byte changed
            else:
                assert etag1 != etag0 and body1.owner != w0.instant and body1.pid != os.getpid()
                assert body1.token != body0.token and body1.host == socket.gethostname()
                assert body1.released == (cell == "release-landed")
                assert await held_by(store, dest, body1.owner, staging=STAGING_DIR) == (
                    cell != "release-landed"
                )
            committed = cell.startswith("release")
            expect = _rows((0, 4), (10, 4)) if committed else _rows((0, 4))
            assert await amcommit_rows(store, dest) == expect
            t0 = time.monotonic()
            w2, report = await write(store, dest, rows(20, 4), config=CFG)
            assert report.success and time.monotonic() - t0 < 20  # never the 60 s ttl
            _, body2 = await _lock(store, dest)
            assert body2.released and body2.owner == w2.instant
            assert await amcommit_rows(store, dest) == sorted(expect + _rows((20, 4)))

    anyio.run(go)


async def test_plain_destination_lock_is_still_deleted(double_env: GcsEnv) -> None:
    """A plain destination's lock (``_temporary/_commit.lock``) is still deleted, also with
    ``rewrite``: a committed output holds no ``_temporary`` folder; and a table's lock is
    deleted by default."""
    store = double_env.store()
    lk = DestinationLock(store, "out", "j1", ttl=60.0, wait=60.0, release="rewrite")
    assert await lk.acquire() is None
    await lk.release()
    with pytest.raises(NotFound):
        await store.stat(lock_path("out"))
    await write(store, "tbl", rows(0, 4), config=CommitterConfig(lock_ttl=60.0))
    with pytest.raises(NotFound):
        await store.stat(lock_path("tbl", staging=STAGING_DIR))
