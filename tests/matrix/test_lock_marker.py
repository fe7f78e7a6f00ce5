"""A table's commit lock released by a create-only marker named by the holder's token
(``lock_release="marker"``, issue 35 item 6): the lock object changes once per commit, the
next holder takes a marked version over and deletes the marker. Exact lock objects after
each step on the GCS double (with its change counts), on local files, Azurite and
fake-gcs-server; real processes SIGKILLed before and after each lock request; racing
holders never overlap; a late marker releases nothing."""

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
import pytest

from amcommit.committer.config import CommitterConfig
from amcommit.committer.lock import LOCK_NAME, DestinationLock, LockBody, held_by, lock_path, read_lock
from amcommit.coord import lease as coord_lease
from amcommit.coord.lease import marker_path
from amcommit.errors import ConflictError
from amcommit.store.base import Store
from amcommit.table.commit.jobs import list_table_jobs
from amcommit.table.format.naming import STAGING_DIR
from amcommit.testing.gcs_double import GcsDouble
from tests.matrix.stores import BackendInfo, open_store
from tests.table.writehelpers import amcommit_rows, keys, rows, write

REPO = str(Path(__file__).resolve().parents[2])
CFG = CommitterConfig(lock_ttl=60.0, lock_wait=60.0, io_threads=2, lock_release="marker")
"""Release by marker; a lock ttl far longer than any test: a wait for it to expire would show."""
BACKENDS = ["matrix_local", "matrix_blob", "matrix_gcs_fake"]


def _rows(*batches: tuple[int, int]) -> list[tuple[Any, ...]]:
    return sorted(t for first, n in batches for t in keys(rows(first, n)))


async def _lock_names(store: Store, dest: str) -> list[str]:
    """Names in the table's staging folder that are the lock or a release marker, sorted;
    a marker as ``released.<token>``."""
    folder = lock_path(dest, staging=STAGING_DIR).rpartition("/")[0]
    out = []
    async for e in store.list(folder, recursive=False):
        name = e.path.rpartition("/")[2]
        if name == LOCK_NAME:
            out.append(name)
        elif name.startswith(LOCK_NAME + "."):
            out.append(name[len(LOCK_NAME) + 1 :])
    return sorted(out)


async def _lock(store: Store, dest: str) -> LockBody:
    body = await read_lock(store, lock_path(dest, staging=STAGING_DIR))
    assert body is not None
    return body


async def test_lock_changes_once_per_commit_and_markers_are_replaced(gcs_double: GcsDouble) -> None:
    """Three table writes on the GCS double: the first creates the lock, each releases it
    by creating its token's marker, the next takes the lock over (one change of the lock
    object per commit, none for the first write's release) and deletes the previous
    marker: after each write exactly the lock and the writer's marker. A marked lock
    names no holder (``held_by``, ``amcommit jobs``). Before: two changes per commit."""
    bucket = f"lm{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    dest = "tbl"
    lock = f"{bucket}/{lock_path(dest, staging=STAGING_DIR)}"
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:
        for i in range(3):
            before = gcs_double.changes[lock]
            w, report = await write(store, dest, rows(10 * i, 4), config=CFG)
            assert report.success
            assert gcs_double.changes[lock] == before + 1  # created (i = 0) or taken over, not released
            body = await _lock(store, dest)
            assert body.released and body.owner == w.instant and body.operation == "commit"
            assert body.host == socket.gethostname() and body.pid == os.getpid()
            assert await _lock_names(store, dest) == sorted([LOCK_NAME, f"released.{body.token}"])
            marker = f"{bucket}/{marker_path(lock_path(dest, staging=STAGING_DIR), body.token)}"
            assert gcs_double.changes[marker] == 1
            assert not await held_by(store, dest, w.instant, staging=STAGING_DIR)
        jobs = await list_table_jobs(store, dest, CFG, 60.0)
        assert jobs is not None and jobs.lock is None and not jobs.lock_unreadable
        assert await amcommit_rows(store, dest) == _rows((0, 4), (10, 4), (20, 4))
    assert not gcs_double.rate_limited


async def test_racing_holders_of_a_marked_lock_never_overlap(gcs_double: GcsDouble) -> None:
    """Eight handles race for a lock released by marker, each holding it 50 ms: exactly
    one holds it at any time (intervals disjoint), each got it once, none replaced a live
    holder, and it ends released by the last one with only its marker left."""
    bucket = f"lm{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:
        first = DestinationLock(
            store, "tbl", "j0", staging=STAGING_DIR, ttl=60.0, wait=60.0, release="marker"
        )
        assert await first.acquire() is None
        await first.release()
        held: list[tuple[float, float, str]] = []

        async def one(i: int) -> None:
            lk = DestinationLock(
                store, "tbl", f"j{i}", staging=STAGING_DIR, ttl=60.0, wait=60.0, release="marker"
            )
            assert await lk.acquire() is None  # a released lock is nobody's: none replaced
            t0 = time.monotonic()
            body = await _lock(store, "tbl")
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
        body = await _lock(store, "tbl")
        assert body.released and body.owner == held[-1][2]
        assert await _lock_names(store, "tbl") == sorted([LOCK_NAME, f"released.{body.token}"])


async def test_a_late_marker_releases_nothing(gcs_double: GcsDouble) -> None:
    """A's lock is taken over by B (as after A's lease ran out); A's release marker then
    lands (a request on the wire). It names A's token, which the lock no longer carries:
    B still holds the lock, a third writer waits for it (ConflictError after its wait),
    and B's release makes it free again, deleting nothing but markers."""
    bucket = f"lm{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:

        def handle(job: str, wait: float = 60.0) -> DestinationLock:
            return DestinationLock(
                store, "tbl", job, staging=STAGING_DIR, ttl=60.0, wait=wait, release="marker"
            )

        a, b = handle("ja"), handle("jb")
        assert await a.acquire() is None
        seen = await b.lease.observe()
        assert await b.lease.take_over(seen)  # B replaced A's version (A's lease ran out)
        await store.put(marker_path(a.path, a.token), b"")  # A's release lands late
        assert await held_by(store, "tbl", "jb", staging=STAGING_DIR)
        c = handle("jc", wait=1.0)
        with pytest.raises(ConflictError, match="locked by job 'jb'"):
            await c.acquire()
        await b.release()
        assert not await held_by(store, "tbl", "jb", staging=STAGING_DIR)
        d = handle("jd")
        with anyio.fail_after(10):
            assert await d.acquire() is None
        await d.release()
        body = await _lock(store, "tbl")
        assert body.released and body.owner == "jd"
        # d acquired by B's marker: it deleted B's; A's (never a released version) stays
        assert await _lock_names(store, "tbl") == sorted(
            [LOCK_NAME, f"released.{a.token}", f"released.{d.token}"]
        )


class _Recording:
    """The store, recording each request on the lock or a marker as ``(op, name)``."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.iostats = inner.iostats
        self.seen: list[tuple[str, str]] = []

    def _note(self, op: str, path: str) -> None:
        name = path.rpartition("/")[2]
        if name.startswith(LOCK_NAME):
            self.seen.append((op, name if name == LOCK_NAME else "marker"))

    def __getattr__(self, attr: str) -> Any:
        fn = getattr(self.inner, attr)
        if attr not in ("stat", "get", "put", "delete"):
            return fn

        async def call(path: str, *a: Any, **kw: Any) -> Any:
            self._note(attr, path)
            return await fn(path, *a, **kw)

        return call


async def test_a_process_takes_its_own_released_lock_without_reads(gcs_double: GcsDouble) -> None:
    """Back-to-back commits of one process: the second takes over the version the first
    released with one conditional put and no read of the lock or a marker, then deletes
    the first's marker and creates its own. Before: three reads of the lock and a stat of
    the marker first."""
    bucket = f"lm{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as inner:
        store = _Recording(inner)
        await write(store, "tbl", rows(0, 4), config=CFG)  # type: ignore[arg-type]
        store.seen.clear()
        await write(store, "tbl", rows(10, 4), config=CFG)  # type: ignore[arg-type]
        assert store.seen == [("put", LOCK_NAME), ("delete", "marker"), ("put", "marker")]
        body = await _lock(inner, "tbl")
        assert await _lock_names(inner, "tbl") == sorted([LOCK_NAME, f"released.{body.token}"])


async def test_a_changed_lock_is_looked_at_after_the_remembered_version_fails(gcs_double: GcsDouble) -> None:
    """The lock this process released was taken over and released by marker by another
    process since: the remembered version's takeover fails its precondition, the writer
    reads the lock, finds the other's marker and takes the lock at once (ttl 60 s), and
    its release leaves only the lock and its own marker."""
    bucket = f"lm{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:
        await write(store, "tbl", rows(0, 4), config=CFG)
        other = DestinationLock(
            store, "tbl", "other", staging=STAGING_DIR, ttl=60.0, wait=60.0, release="marker"
        )
        seen = await other.lease.observe()
        assert seen.body is not None and await other.lease.take_over(seen)  # as another process would
        await store.put(marker_path(other.path, other.token), b"")  # and its release
        t0 = time.monotonic()
        w, report = await write(store, "tbl", rows(10, 4), config=CFG)
        assert report.success and time.monotonic() - t0 < 20
        body = await _lock(store, "tbl")
        assert body.released and body.owner == w.instant
        assert await _lock_names(store, "tbl") == sorted([LOCK_NAME, f"released.{body.token}"])
        assert await amcommit_rows(store, "tbl") == _rows((0, 4), (10, 4))


@pytest.mark.parametrize("then", ["delete", "rewrite"])
async def test_writers_with_other_settings_take_a_marked_lock_at_once(
    gcs_double: GcsDouble, then: str
) -> None:
    """A write with ``lock_release=marker``, then one with ``delete`` / ``rewrite`` (the
    writers of one table may differ; ttl 60 s): the second takes the marked lock at once,
    deletes the marker, and releases its own way (no lock left / the lock released in its
    body, no marker). Then a marker write again: the lock and its marker only."""
    bucket = f"lm{uuid.uuid4().hex[:12]}"
    gcs_double.create_bucket(bucket)
    async with open_store({"kind": "gcs", "endpoint": gcs_double.url, "bucket": bucket}) as store:
        await write(store, "tbl", rows(0, 4), config=CFG)
        coord_lease._RELEASED_HERE.clear()  # as another process
        other = CommitterConfig(lock_ttl=60.0, lock_wait=60.0, io_threads=2, lock_release=then)  # type: ignore[arg-type]
        t0 = time.monotonic()
        w, report = await write(store, "tbl", rows(10, 4), config=other)
        assert report.success and time.monotonic() - t0 < 20
        if then == "delete":
            assert await _lock_names(store, "tbl") == []
        else:
            body = await _lock(store, "tbl")
            assert body.released and body.owner == w.instant
            assert await _lock_names(store, "tbl") == [LOCK_NAME]
        w, report = await write(store, "tbl", rows(20, 4), config=CFG)
        body = await _lock(store, "tbl")
        assert body.released and body.owner == w.instant
        assert await _lock_names(store, "tbl") == sorted([LOCK_NAME, f"released.{body.token}"])
        assert await amcommit_rows(store, "tbl") == _rows((0, 4), (10, 4), (20, 4))


# -- SIGKILL at each lock request ---------------------------------------------------------

KILLS = [
    # (name, nth put/delete of the lock or a marker in the child's commit, before/after):
    # write 0 left the lock released by its marker M0, so request 1 acquires the lock (a
    # rewrite), request 2 deletes M0, request 3 creates the child's own marker
    ("acquire-unsent", 1, "before"),
    ("acquire-landed", 1, "after"),
    ("tidy-unsent", 2, "before"),
    ("tidy-landed", 2, "after"),
    ("release-unsent", 3, "before"),
    ("release-landed", 3, "after"),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("remember", [False, True], ids=["looks", "remembers"])
@pytest.mark.parametrize("backend", BACKENDS, ids=["local", "azurite", "gcs"])
@pytest.mark.parametrize(("cell", "nth", "when"), KILLS, ids=[k[0] for k in KILLS])
def test_kill_at_each_marker_lock_request(
    cell: str, nth: int, when: str, backend: str, remember: bool, request: pytest.FixtureRequest
) -> None:
    """Write 0 commits (the lock left released by its marker); a child's write 1 is
    SIGKILLed before or after its lock takeover, its delete of write 0's marker, or the
    create of its own marker. Then exactly: the lock and write 0's marker (takeover
    unsent: not a byte changed; takeover landed, delete unsent), the lock alone (delete
    landed, or the release unsent), or the lock and the child's marker (release landed);
    the lock is held by the dead child unless released; write 1 is visible iff its
    commit got to its release. The next write commits at once (the dead holder is proven
    gone on this host; ttl 60 s), sweeps every other marker and leaves exactly the lock
    and its own marker; readers see exactly what was committed. ``remembers``: the child
    acts as the process that released write 0's lock (its takeover is the remembered
    version's, without reads); ``looks``: it reads the lock and the marker first."""
    info: BackendInfo = request.getfixturevalue(backend)
    dest = f"km-{uuid.uuid4().hex[:8]}/tbl"
    spec: dict[str, Any] = {
        "backend": info,
        "dest": dest,
        "first": 10,
        "n": 4,
        "nth": nth,
        "when": when,
        "release": "marker",
    }

    def kill_run() -> None:
        argv = [sys.executable, "-m", "tests.gcs.lock_release_child", json.dumps(spec)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ}, cwd=REPO)
        assert r.returncode == -9, (r.returncode, r.stdout, r.stderr[-2000:])

    async def go() -> None:
        async with open_store(info) as store:
            path = lock_path(dest, staging=STAGING_DIR)
            w0, _ = await write(store, dest, rows(0, 4), config=CFG)
            body0 = await _lock(store, dest)
            etag0 = (await store.stat(path)).etag
            assert body0.released and body0.owner == w0.instant
            m0 = f"released.{body0.token}"
            assert await _lock_names(store, dest) == sorted([LOCK_NAME, m0])
            if remember:
                spec["remember"] = [etag0, body0.token]
            coord_lease._RELEASED_HERE.clear()  # this process's write 2 reads the lock
            kill_run()
            body1 = await _lock(store, dest)
            names = await _lock_names(store, dest)
            if cell == "acquire-unsent":
                assert (await store.stat(path)).etag == etag0 and body1 == body0  # not a byte changed
                assert names == sorted([LOCK_NAME, m0])
            else:
                assert body1.owner != w0.instant and body1.pid != os.getpid()
                assert body1.token != body0.token and body1.host == socket.gethostname()
                assert body1.released == (cell == "release-landed")
                assert await held_by(store, dest, body1.owner, staging=STAGING_DIR) == (
                    cell != "release-landed"
                )
                expect_names = {
                    "acquire-landed": [LOCK_NAME, m0],
                    "tidy-unsent": [LOCK_NAME, m0],
                    "tidy-landed": [LOCK_NAME],
                    "release-unsent": [LOCK_NAME],
                    "release-landed": [LOCK_NAME, f"released.{body1.token}"],
                }[cell]
                assert names == sorted(expect_names)
            committed = cell.startswith("release")
            expect = _rows((0, 4), (10, 4)) if committed else _rows((0, 4))
            assert await amcommit_rows(store, dest) == expect
            t0 = time.monotonic()
            w2, report = await write(store, dest, rows(20, 4), config=CFG)
            assert report.success and time.monotonic() - t0 < 20  # never the 60 s ttl
            body2 = await _lock(store, dest)
            assert body2.released and body2.owner == w2.instant
            assert await _lock_names(store, dest) == sorted([LOCK_NAME, f"released.{body2.token}"])
            assert await amcommit_rows(store, dest) == sorted(expect + _rows((20, 4)))

    anyio.run(go)
