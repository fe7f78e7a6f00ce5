"""The fixed requests of a table upsert (issue 35 item 5, issue 34): each needed read made
once, and requests that do not depend on each other made at once.

On an object store every sequential request of an upsert's begin and commit costs a round
trip; a small upsert (late data) is made of little else. Counted and timed through a real
local store that records every request (and, for the concurrency checks, holds each
listing or put for a fixed time, so that requests made one after the other never overlap
and requests made at once always do).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pytest

from amcommit.store.base import ObjectInfo
from amcommit.store.local import LocalStore
from amcommit.table.mutate.engine import upsert
from amcommit.table.settings import TableConfig

pytestmark = pytest.mark.timeout(60)

HOLD = 0.2
"""Seconds each held request takes (far above the time a task switch takes on a busy machine)."""


class Recorder(LocalStore):
    """A local store that records (operation, path, start, end) of every request; requests
    whose path ends with one of ``held`` take ``HOLD`` seconds more."""

    def __init__(self, root: str, held: tuple[str, ...] = ()) -> None:
        super().__init__(root, fsync=False)
        self.log: list[tuple[str, str, float, float]] = []
        self.held = held

    async def _hold(self, path: str) -> None:
        # a held name: the end of the path, or (leading "*") any part of it
        p = path.rstrip("/")
        if any(p.endswith(h) or (h[:1] == "*" and h[1:] in p) for h in self.held):
            await anyio.sleep(HOLD)

    async def get(self, path: str, *a: Any, **kw: Any) -> bytes:
        t0 = time.monotonic()
        await self._hold(path)
        try:
            return await super().get(path, *a, **kw)
        finally:
            self.log.append(("get", path, t0, time.monotonic()))

    async def put(self, path: str, data: bytes, *a: Any, **kw: Any) -> ObjectInfo:
        t0 = time.monotonic()
        await self._hold(path)
        try:
            return await super().put(path, data, *a, **kw)
        finally:
            self.log.append(("put", path, t0, time.monotonic()))

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        t0 = time.monotonic()
        try:
            return await super().delete(path, recursive=recursive)
        finally:
            self.log.append(("delete", path, t0, time.monotonic()))

    async def mkdirs(self, path: str) -> None:
        t0 = time.monotonic()
        await self._hold(path)
        try:
            await super().mkdirs(path)
        finally:
            self.log.append(("mkdirs", path, t0, time.monotonic()))

    async def stat(self, path: str) -> ObjectInfo:
        t0 = time.monotonic()
        await self._hold(path)
        try:
            return await super().stat(path)
        finally:
            self.log.append(("stat", path, t0, time.monotonic()))

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:  # type: ignore[override]
        t0 = time.monotonic()
        await self._hold(prefix)
        async for o in super().list(prefix, recursive=recursive):
            yield o
        self.log.append(("list", prefix, t0, time.monotonic()))

    def calls(self, op: str, suffix: str) -> list[tuple[str, str, float, float]]:
        return [c for c in self.log if c[0] == op and c[1].rstrip("/").endswith(suffix)]


def rows(ids: list[int], v: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "p": pa.array([f"p{i % 2}" for i in ids], pa.string()),
            "v": pa.array([f"{v}{i}" for i in ids], pa.string()),
            "ts": pa.array([1] * len(ids), pa.int64()),
        }
    )


KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "precombine_field": "ts"}
CFG = TableConfig(compact_every=0)


def overlap(a: tuple[str, str, float, float], b: tuple[str, str, float, float]) -> bool:
    return a[2] < b[3] and b[2] < a[3]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
async def test_an_upsert_reads_the_properties_and_the_latest_commit_once_before_its_commit(
    tmp_path: Path, table_type: str
) -> None:
    store = Recorder(str(tmp_path))
    await upsert(store, "t", rows(list(range(10)), "a"), table_type=table_type, config=CFG, **KW)
    first = sorted(
        p for p in store.log if p[0] == "put" and p[1].startswith("t/.hoodie/") and "commit" in p[1]
    )
    assert first, "the first write completed no instant"
    store.log.clear()
    report = await upsert(store, "t", rows([1, 2, 3], "b"), config=CFG, **KW)
    assert report.updated == 3
    # the begin (up to the job commit's lock): the table's properties and the latest
    # completed write's metadata are each read once; the begin, the task and the commit
    # share the latter through the upsert's timeline handle
    lock = store.calls("put", "_commit.lock")
    assert len(lock) == 1
    before = [c for c in store.log if c[2] < lock[0][2]]
    props = [c for c in before if c[0] == "get" and c[1] == "t/.hoodie/hoodie.properties"]
    assert len(props) == 1, props
    latest = [
        c for c in before if c[0] == "get" and c[1].startswith("t/.hoodie/") and c[1].endswith("commit")
    ]
    assert len(latest) == 1, latest
    # the keeper record: claimed once, withdrawn once (the job commit nests in the upsert's
    # heartbeat block, not a new claim after a withdrawal)
    keeper = [c for c in store.log if c[1].endswith("_keeper.json") and c[0] == "put"]
    assert len(keeper) == 1, keeper
    # and the table is exactly as written: 10 records, 3 of them updated
    from amcommit.table.query.read import read_store

    got = (await read_store(store, "t")).select(["id", "v"]).sort_by("id").to_pylist()
    assert got == [{"id": i, "v": f"{'b' if i in (1, 2, 3) else 'a'}{i}"} for i in range(10)]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
async def test_an_upsert_makes_its_independent_begin_requests_at_once(
    tmp_path: Path, table_type: str
) -> None:
    """The claim's listings of the staging and marker folders (and, on Merge-on-Read, the
    look for a compaction's claim of the same time) overlap; so do the write's folders and
    its first beat; and the task's setup overlaps the reading of the timeline."""
    plain = Recorder(str(tmp_path))
    await upsert(plain, "t", rows(list(range(10)), "a"), table_type=table_type, config=CFG, **KW)
    held = (
        "t/.hoodie",
        "t/.hoodie/archived",
        "t/.hoodie/.aux/amcommit",
        "t/.hoodie/.temp",
        ".compaction.requested",
        "/manifests",
        "/tasks",
        "*/.hoodie/.heartbeat/",
        "*/task-attempts/",
    )
    store = Recorder(str(tmp_path), held=held)
    report = await upsert(store, "t", rows([1, 2], "b"), config=CFG, **KW)
    assert report.updated == 2
    aux = store.calls("list", ".hoodie/.aux/amcommit")
    temp = store.calls("list", ".hoodie/.temp")
    # the claim: one look before it (the floor), one after it, each folder
    assert len(aux) >= 2 and len(temp) >= 2
    claim = store.calls("put", "_job.json")[0]
    after = [c for c in aux + temp if c[2] > claim[3]]
    pairs = [(a, b) for a in after for b in after if a[1] != b[1] and overlap(a, b)]
    assert pairs, "the looks after the claim ran one after the other"
    if table_type == "MERGE_ON_READ":
        (look,) = store.calls("stat", ".compaction.requested")
        assert look[2] > claim[3]  # after the claim
        assert any(overlap(look, c) for c in after)
    dirs = store.calls("mkdirs", "/manifests") + store.calls("mkdirs", "/tasks")
    beats = store.calls("put", f".heartbeat/{report.instant}")
    assert len(dirs) >= 2 and beats
    assert overlap(dirs[0], dirs[1]) and overlap(dirs[0], beats[0])
    # the instant files come after the beat, as before
    requested = [
        c for c in store.log if c[0] == "put" and c[1].endswith(".requested") and report.instant in c[1]
    ]
    assert requested and requested[0][2] >= beats[0][3]
    # the task's setup is made while the timeline is read
    setup = store.calls("put", f"attempt_{report.instant}_m_000000_0")
    assert setup
    reads = [
        c for c in store.log if c[0] == "list" and c[1].rstrip("/") in ("t/.hoodie", "t/.hoodie/archived")
    ]
    assert any(overlap(setup[0], r) for r in reads if r[2] > beats[0][3])
    # nothing was written into the table before the task was set up
    data = [c for c in store.log if c[0] == "put" and not c[1].startswith("t/.hoodie/")]
    assert data and min(c[2] for c in data) >= setup[0][3]


async def test_a_merge_on_read_upsert_shares_its_upload_checks(tmp_path: Path) -> None:
    """The check after each log file's upload (the write's job marker still there) is shared
    by the uploads that finished while a check was under way: each upload is followed by a
    check that started after it finished, and there are fewer checks than log files."""
    store = Recorder(str(tmp_path))
    ids = list(range(400))
    await upsert(
        store,
        "t",
        rows(ids, "a"),
        table_type="MERGE_ON_READ",
        config=CFG,
        max_file_rows=20,
        small_file_limit=0,
        **KW,
    )
    store.held = ("_job.json",)  # each check of the job marker takes HOLD seconds
    store.log.clear()
    report = await upsert(store, "t", rows(ids[::5], "b"), config=CFG, **KW)
    assert report.files_logged == 20 and report.updated == 80
    logs = [c for c in store.log if c[0] == "put" and ".log." in c[1]]
    assert len(logs) == 20
    lock = store.calls("put", "_commit.lock")[0]
    checks = [c for c in store.calls("stat", "_job.json") if c[2] < lock[2]]
    # every log file has a check that started after its upload finished
    for up in logs:
        assert any(c[2] >= up[3] for c in checks), up
    assert len(checks) < len(logs) / 2, f"{len(checks)} checks for {len(logs)} log files"
    from amcommit.table.query.read import read_store

    got = (await read_store(store, "t")).select(["id", "v"]).sort_by("id").to_pylist()
    assert got == [{"id": i, "v": f"{'b' if i % 5 == 0 else 'a'}{i}"} for i in ids]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
async def test_the_job_commit_makes_its_first_reads_under_the_lock_at_once(
    tmp_path: Path, table_type: str
) -> None:
    """Under the lock, the completeness check's three reads (the journal's stat, the job
    marker, the manifest listing) overlap, and so do the order check's listings of the
    staging folder and of ``.hoodie/.temp/`` (each made one after the other before)."""
    plain = Recorder(str(tmp_path))
    await upsert(plain, "t", rows(list(range(10)), "a"), table_type=table_type, config=CFG, **KW)
    store = Recorder(
        str(tmp_path),
        held=("journal.json", "_job.json", "/manifests", "t/.hoodie/.aux/amcommit", "t/.hoodie/.temp"),
    )
    report = await upsert(store, "t", rows([1, 2], "b"), config=CFG, **KW)
    assert report.updated == 2
    (lock,) = store.calls("put", "_commit.lock")
    under = [c for c in store.log if c[2] > lock[3]]
    journal = [c for c in under if c[0] == "stat" and c[1].endswith("/journal.json")]
    marker = [c for c in under if c[0] == "get" and c[1].endswith("/_job.json")]
    manifests = [c for c in under if c[0] == "list" and c[1].rstrip("/").endswith("/manifests")]
    assert len(journal) == 1 and marker and manifests
    first_marker, first_listing = marker[0], manifests[0]
    assert overlap(journal[0], first_marker) and overlap(journal[0], first_listing)
    assert overlap(first_marker, first_listing)
    staged = [c for c in under if c[0] == "list" and c[1].rstrip("/") == "t/.hoodie/.aux/amcommit"]
    temp = [c for c in under if c[0] == "list" and c[1].rstrip("/") == "t/.hoodie/.temp"]
    assert staged and temp
    assert overlap(staged[0], temp[0]), "the order check listed its folders one after the other"
    from amcommit.table.query.read import read_store

    got = (await read_store(store, "t")).select(["id", "v"]).sort_by("id").to_pylist()
    assert got == [{"id": i, "v": f"{'b' if i in (1, 2) else 'a'}{i}"} for i in range(10)]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
async def test_after_the_lock_an_upsert_sweeps_its_own_markers_without_looking_its_instant_up(
    tmp_path: Path, table_type: str
) -> None:
    """After the lock is released, the writer's sweep of its own markers knows what it
    published: no lookup of the instant's state, of its commit or of the properties; the
    sweep of its own marker folder runs while ``.hoodie/.temp/`` is listed, and the removal
    of the last beat at the same time. Exact end state: the marker folder and the beat
    are gone, and the table holds every update."""
    plain = Recorder(str(tmp_path))
    await upsert(plain, "t", rows(list(range(10)), "a"), table_type=table_type, config=CFG, **KW)
    store = Recorder(str(tmp_path), held=("t/.hoodie/.temp", "_job.json"))
    report = await upsert(store, "t", rows([1, 2, 3], "b"), config=CFG, **KW)
    assert report.updated == 3
    instant = report.instant
    release = [c for c in store.log if c[0] == "delete" and c[1].endswith("_commit.lock")]
    assert release
    after = [c for c in store.log if c[2] >= release[-1][3]]
    hoodie = "t/.hoodie/"
    looked = [
        c
        for c in after
        if c[0] in ("stat", "get")
        and (c[1] == hoodie + "hoodie.properties" or c[1].startswith(f"{hoodie}{instant}."))
    ]
    assert looked == [], looked
    (temp,) = [c for c in after if c[0] == "list" and c[1].rstrip("/") == "t/.hoodie/.temp"]
    own = [c for c in after if c[0] == "list" and c[1].rstrip("/") == f"t/.hoodie/.temp/{instant}"]
    assert own and overlap(temp, own[0]), "the own sweep waited for the listing of .hoodie/.temp"
    (beat_look,) = [c for c in after if c[0] == "stat" and c[1].endswith(f"/{instant}/_job.json")]
    assert overlap(beat_look, temp), "the beat's removal waited for the sweep"
    assert [c for c in after if c[0] == "delete" and c[1] == f"{hoodie}.heartbeat/{instant}"]
    # exact end state: no marker folder, no heartbeat, the job directory gone
    assert not (tmp_path / "t" / ".hoodie" / ".temp" / instant).exists()
    assert not (tmp_path / "t" / ".hoodie" / ".heartbeat" / instant).exists()
    assert not (tmp_path / "t" / ".hoodie" / ".aux" / "amcommit" / instant).exists()
    from amcommit.table.query.read import read_store

    got = (await read_store(store, "t")).select(["id", "v"]).sort_by("id").to_pylist()
    assert got == [{"id": i, "v": f"{'b' if i in (1, 2, 3) else 'a'}{i}"} for i in range(10)]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
async def test_a_fresh_commit_lists_its_markers_once_under_the_lock(tmp_path: Path, table_type: str) -> None:
    """The marker check and the reconcile of a fresh job commit share one listing (and
    read) of the write's marker folder; a loser's file marked in it is still deleted
    before the publish, and no marker is left after the commit."""
    plain = Recorder(str(tmp_path))
    await upsert(plain, "t", rows(list(range(10)), "a"), table_type=table_type, config=CFG, **KW)
    store = Recorder(str(tmp_path))
    report = await upsert(store, "t", rows([1, 2], "b"), config=CFG, **KW)
    assert report.updated == 2
    instant = report.instant
    (lock,) = store.calls("put", "_commit.lock")
    release = [c for c in store.log if c[0] == "delete" and c[1].endswith("_commit.lock")][-1]
    folder = f"t/.hoodie/.temp/{instant}"
    under = [c for c in store.log if lock[3] <= c[2] and c[3] <= release[2]]
    listed = [c for c in under if c[0] == "list" and c[1].rstrip("/") == folder]
    read = [c for c in under if c[0] == "get" and c[1].startswith(folder + "/MARKERS")]
    assert len(listed) == 1, listed
    assert len(read) == 1, read
    assert not (tmp_path / "t" / ".hoodie" / ".temp" / instant).exists()


async def test_the_task_commit_looks_for_the_completed_instant_and_the_job_marker_at_once(
    tmp_path: Path,
) -> None:
    """The task commit's look at the write's state (:func:`instant_state`): the lookup of
    the completed instant and the stat of the job marker overlap (one after the other
    before)."""
    plain = Recorder(str(tmp_path))
    await upsert(plain, "t", rows(list(range(10)), "a"), config=CFG, **KW)
    store = Recorder(str(tmp_path), held=(".replacecommit", "_job.json"))
    report = await upsert(store, "t", rows([1, 2], "b"), config=CFG, **KW)
    assert report.updated == 2
    (lock,) = store.calls("put", "_commit.lock")
    looks = [c for c in store.calls("stat", f"{report.instant}.replacecommit") if c[3] <= lock[2]]
    markers = [c for c in store.calls("stat", "_job.json") if c[3] <= lock[2]]
    assert looks and markers
    assert all(any(overlap(look, m) for m in markers) for look in looks), (looks, markers)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
async def test_the_task_setup_reads_the_marker_and_types_the_marker_folder_at_once(
    tmp_path: Path, table_type: str
) -> None:
    """The task's setup (its attempt record), the read of the write's job marker for the
    schema, and the marker folder's ``MARKERS.type`` overlap; ``MARKERS.type`` still comes
    after the write's instant files and before the attempt's ``MARKERS<n>`` file, which
    comes before the first data file."""
    plain = Recorder(str(tmp_path))
    await upsert(plain, "t", rows(list(range(10)), "a"), table_type=table_type, config=CFG, **KW)
    store = Recorder(str(tmp_path), held=("MARKERS.type", "*/task-attempts/", "_job.json"))
    report = await upsert(store, "t", rows([1, 2], "b"), config=CFG, **KW)
    assert report.updated == 2
    instant = report.instant
    (typed,) = store.calls("put", f".temp/{instant}/MARKERS.type")
    (record,) = store.calls("put", f"attempt_{instant}_m_000000_0")
    claim = store.calls("put", "_job.json")[0]
    reads = [c for c in store.calls("get", f"{instant}/_job.json") if c[2] > claim[3]]
    assert reads and overlap(reads[0], record), "the job marker was read after the task's setup"
    assert overlap(typed, record), "MARKERS.type was put after the task's setup"
    inflight = [c for c in store.log if c[0] == "put" and c[1].startswith(f"t/.hoodie/{instant}.")]
    assert inflight and typed[2] >= max(c[3] for c in inflight)
    files = [c for c in store.log if c[0] == "put" and "/MARKERS" in c[1] and not c[1].endswith(".type")]
    data = [c for c in store.log if c[0] == "put" and not c[1].startswith("t/.hoodie/")]
    assert files and data
    assert min(c[2] for c in files) >= typed[3] and min(c[2] for c in data) >= files[0][3]


async def test_an_upsert_reads_the_properties_and_lists_the_timeline_at_once(tmp_path: Path) -> None:
    """The upsert's first two reads (the table's properties, the listing of ``.hoodie/``)
    overlap; into a folder with no table the listing's answer is not used (the write
    creates the table, and its records are all inserted)."""
    store = Recorder(str(tmp_path), held=("hoodie.properties", "t/.hoodie"))
    first = await upsert(store, "t", rows(list(range(10)), "a"), config=CFG, **KW)
    assert first.inserted == 10
    store.log.clear()
    report = await upsert(store, "t", rows([1, 2], "b"), config=CFG, **KW)
    assert report.updated == 2
    props = store.calls("get", "t/.hoodie/hoodie.properties")[0]
    listing = next(c for c in store.log if c[0] == "list" and c[1].rstrip("/") == "t/.hoodie")
    assert overlap(props, listing), "the timeline was listed after the properties were read"
    from amcommit.table.query.read import read_store

    got = (await read_store(store, "t")).select(["id", "v"]).sort_by("id").to_pylist()
    assert got == [{"id": i, "v": f"{'b' if i in (1, 2) else 'a'}{i}"} for i in range(10)]
