"""The upsert's planning pipeline (issue 35 item 5): each partition planned by vectorised
joins (``plan_partition``), in worker threads, and its file groups written while the next
partitions are still looked up."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from amcommit.paths import join
from amcommit.store.base import ObjectInfo, PutMode, WriteMode
from amcommit.table.file_group.model import FileVersion
from amcommit.table.mutate import engine as mutate
from amcommit.table.mutate import plan as planning
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import load_timeline, snapshot
from amcommit.testing.faults import FaultyStore
from tests.backends import StoreUnderTest

FAST = TableConfig(lock_ttl=5.0, lock_wait=20.0, writer_ttl=30.0)
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string()), ("ts", pa.int64())])
KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "precombine_field": "ts", "config": FAST}


def _t(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _plans_equal(a: planning.MutationPlan, b: planning.MutationPlan) -> None:
    assert sorted(a.rewrites) == sorted(b.rewrites)
    for path, rw in a.rewrites.items():
        other = b.rewrites[path]
        assert rw.version == other.version
        # the order of the updates is the order of the records in the new file
        assert list(rw.updates.items()) == list(other.updates.items()), path
        assert rw.deletes == other.deletes and rw.inserts == other.inserts, path
    assert a.inserts == b.inserts and a.absent_deletes == b.absent_deletes


@pytest.mark.parametrize("seed", range(40))
def test_partition_plan_is_the_reference_plan(seed: int) -> None:
    """``plan_partition`` (vectorised, one partition) gives, partition by partition, exactly
    the plan of the per-key reference (``plan_mutation`` then ``assign_inserts``): random
    batches with duplicates, keys held by two files, inserts filling small files, deletes of
    absent keys."""
    rng = random.Random(seed)
    parts = ["a", "b", "c"][: rng.randint(1, 3)]
    files: list[FileVersion] = []
    holds: dict[str, set[str]] = {}
    for p in parts:
        for i in range(rng.randint(0, 4)):
            f = FileVersion(p, f"f{i}", f"{p}/f{i}.parquet", "001", rng.choice([50, 5000, 10**9]), 10)
            files.append(f)
            holds[f.path] = {str(rng.randrange(40)) for _ in range(rng.randint(0, 15))}
    n = rng.randint(0, 60)
    keys = [str(rng.randrange(50)) for _ in range(n)]
    partitions = [rng.choice(parts) for _ in range(n)]
    batch = planning.reduce_batch(keys, partitions, [rng.randrange(3) for _ in range(n)])
    for delete in (False, True):
        located: dict[tuple[str, str], list[FileVersion]] = {}
        for f in files:
            for k in sorted(holds[f.path]):
                located.setdefault((f.partition, k), []).append(f)
        ref = planning.plan_mutation(batch, located, delete=delete)
        planning.assign_inserts(ref, files, small_file_limit=1000, max_file_size=3000)
        got = planning.MutationPlan()
        for p, pb in planning.partition_batches(batch).items():
            mine = [f for f in files if f.partition == p]
            found = [
                (f, planning.confirm_keys(pb.sorted_keys, pa.array(sorted(holds[f.path]), pa.string())))
                for f in mine
            ]
            rng.shuffle(found)  # confirmations finish in any order
            one = planning.plan_partition(
                pb, found, mine, delete=delete, small_file_limit=1000, max_file_size=3000
            )
            got.rewrites.update(one.rewrites)
            got.inserts.update(one.inserts)
            got.absent_deletes += one.absent_deletes
        _plans_equal(got, ref)


def test_seq_bases_leave_room_for_every_record() -> None:
    """Each partition's seqno range holds the most records it can write (every key updated
    in each of its files and inserted), and the ranges do not overlap."""
    batch = planning.reduce_batch(["1", "2", "3", "1"], ["b", "b", "a", "c"], None)
    parts = planning.partition_batches(batch)
    files = {"b": [FileVersion("b", "x", "b/x", "1", 1, 1), FileVersion("b", "y", "b/y", "1", 1, 1)]}
    assert planning.seq_bases(parts, files) == {"a": 0, "b": 1, "c": 7}


class _Gated(FaultyStore):
    """Holds every read of partition ``p=b``'s base files after their footer (their key
    column: by ranged reads or whole) until a new base file of partition ``p=a`` was put: the
    upsert can only finish if it writes partition ``p=a`` before it has confirmed the keys
    of ``p=b`` (bounded: 20 s)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.a_written = anyio.Event()
        self.reads: Counter[str] = Counter()

    async def _gate(self, path: str) -> None:
        self.reads[path] += 1
        if "/p=b/" in path and self.reads[path] > 1 and not self.a_written.is_set():
            with anyio.fail_after(20):  # the old order: every key column before any write
                await self.a_written.wait()

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        await self._gate(path)
        return await super().get_range(path, start, length)

    async def get(self, path: str) -> bytes:
        if path.endswith(".parquet"):
            await self._gate(path)
        return await super().get(path)

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        info = await super().put(path, data, mode=mode)
        if "/p=a/" in path and path.endswith(".parquet"):
            self.a_written.set()
        return info


async def test_a_partition_is_written_while_the_next_is_looked_up(backend_local: StoreUnderTest) -> None:
    """Partition ``a``'s file groups are rewritten before the key columns of partition ``b``
    are read (the store holds ``b``'s reads until then); the result is the model's, and
    every record the upsert wrote has its own seqno (partitions' seqno ranges apart)."""
    dest = join(backend_local.base, "pipe")
    first = [{"id": i, "p": p, "v": "old", "ts": 1} for p in "ab" for i in range(40)]
    await mutate.upsert(backend_local.store, dest, _t(first), small_file_limit=0, max_file_rows=20, **KW)
    store = _Gated(backend_local.store)
    batch = [{"id": i, "p": p, "v": "new", "ts": 2} for p in "ab" for i in (1, 25, 39, 40, 41)]
    batch += [{"id": 1, "p": "a", "v": "older", "ts": 0}]  # reduced away by the precombine field
    rep = await mutate.upsert(store, dest, _t(batch), **KW)
    assert store.a_written.is_set() and set(store.reads.values()) == {2}  # footer, whole file
    assert (rep.updated, rep.inserted, rep.files_rewritten, rep.duplicates_dropped) == (6, 4, 4, 1)
    _, commits = await load_timeline(backend_local.store, dest)
    rows = []
    for f in snapshot(commits):
        rows += pq.read_table(pa.BufferReader(await backend_local.store.get(join(dest, f.path)))).to_pylist()
    got = sorted((r["p"], r["id"], r["v"]) for r in rows)
    want = {(p, i): "old" for p in "ab" for i in range(40)}
    want.update({(p, i): "new" for p in "ab" for i in (1, 25, 39, 40, 41)})
    assert got == sorted((p, i, v) for (p, i), v in want.items())
    written = [r["_hoodie_commit_seqno"] for r in rows if r["_hoodie_commit_time"] == rep.instant]
    assert len(written) == 10 and len(set(written)) == 10


async def test_planning_runs_in_worker_threads(
    backend_local: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU work of planning (the batch split, bloom candidates, key confirmation, the
    partition plan) runs in worker threads, never on the event loop's thread."""
    dest = join(backend_local.base, "threads")
    first = [{"id": i, "p": p, "v": "old", "ts": 1} for p in "ab" for i in range(30)]
    await mutate.upsert(backend_local.store, dest, _t(first), max_file_rows=10, small_file_limit=0, **KW)
    loop_thread = threading.get_ident()
    seen: Counter[tuple[str, bool]] = Counter()
    for name in ("partition_batches", "file_candidates", "confirm_keys", "plan_partition"):
        real = getattr(mutate, name)

        def spy(*a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            seen[(_name, threading.get_ident() == loop_thread)] += 1
            return _real(*a, **kw)

        monkeypatch.setattr(mutate, name, spy)
    batch = [{"id": i, "p": p, "v": "new", "ts": 2} for p in "ab" for i in (3, 15, 29, 77)]
    rep = await mutate.upsert(backend_local.store, dest, _t(batch), **KW)
    assert (rep.updated, rep.inserted) == (6, 2)
    assert seen == {
        ("partition_batches", False): 1,
        ("file_candidates", False): 6,
        ("confirm_keys", False): 6,
        ("plan_partition", False): 2,
    }


@pytest.mark.parametrize("kind", ["none", "float", "string", "int", "timestamp"])
def test_vectorised_reduction_is_the_reference(kind: str) -> None:
    """``reduce_batch_columns`` (one Arrow sort and group-by) keeps the rows the per-row
    reference ``reduce_batch`` keeps: greatest precombine value, later row on a tie, floats
    as Java orders them (NaN greatest, ``-0.0 < 0.0``), strings by code point."""
    import datetime

    values: dict[str, list[Any]] = {
        "float": [0.0, -0.0, 1.0, float("nan"), float("inf"), -1.5],
        "string": ["x", "y", "é", "\U0001f600", ""],
        "int": [0, 1, 2, -(2**62)],
        "timestamp": [datetime.datetime(2026, 1, d, tzinfo=datetime.UTC) for d in (1, 2, 3)],
    }
    for seed in range(150):
        rng = random.Random(seed)
        n = rng.randint(0, 40)
        keys = [str(rng.randrange(6)) for _ in range(n)]
        parts = [rng.choice(["a", "b", "\U0001f600"]) for _ in range(n)]
        order = None if kind == "none" else [rng.choice(values[kind]) for _ in range(n)]
        col = None if order is None else pa.chunked_array([pa.array(order, pa.array(values[kind]).type)])
        assert planning.reduce_batch_columns(keys, parts, col) == planning.reduce_batch(keys, parts, order)


class _Counting(FaultyStore):
    """Counts the reads of each base file: ranged (footer, key column) and whole."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.ranged: Counter[str] = Counter()
        self.whole: Counter[str] = Counter()

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        self.ranged[path] += 1
        return await super().get_range(path, start, length)

    async def get(self, path: str) -> bytes:
        if path.endswith(".parquet"):
            self.whole[path] += 1
        return await super().get(path)


async def test_a_file_to_rewrite_is_read_in_two_requests(backend_local: StoreUnderTest) -> None:
    """On an object store (local files behind a wrapper without ``local_root``), a file whose
    bloom filter holds a key of the batch is read in two requests: its footer (ranged) and
    then the whole file, once, which its rewrite uses (it was three: footer, key column,
    whole file again). A file ruled out costs its footer only. Delete too."""
    dest = join(backend_local.base, "two")
    first = [{"id": i, "p": "a", "v": "old", "ts": 1} for i in range(60)]
    await mutate.upsert(backend_local.store, dest, _t(first), max_file_rows=20, small_file_limit=0, **KW)
    _, commits = await load_timeline(backend_local.store, dest)
    files = {join(dest, f.path) for f in snapshot(commits)}
    for op, rows in (
        ("upsert", [{"id": 5, "p": "a", "v": "new", "ts": 2}]),
        ("delete", [{"id": 45, "p": "a"}]),
    ):
        store = _Counting(backend_local.store)
        batch = _t([{**{"v": None, "ts": 2}, **r} for r in rows])
        rep = await getattr(mutate, op)(
            store, dest, batch, **{k: v for k, v in KW.items() if op == "upsert" or k != "precombine_field"}
        )
        assert (rep.footers_read, rep.key_columns_read, rep.files_rewritten) == (3, 1, 1), op
        read = {p for p in store.ranged if p.endswith(".parquet")}
        assert read == files and sorted(store.ranged[p] for p in read) == [1, 1, 1], op
        assert len(store.whole) == 1 and set(store.whole.values()) == {1}, op
        _, commits = await load_timeline(backend_local.store, dest)
        files = {join(dest, f.path) for f in snapshot(commits)}
    _, commits = await load_timeline(backend_local.store, dest)
    got = []
    for f in snapshot(commits):
        got += pq.read_table(pa.BufferReader(await backend_local.store.get(join(dest, f.path)))).to_pylist()
    assert sorted((r["id"], r["v"]) for r in got) == sorted(
        [(i, "old") for i in range(60) if i not in (5, 45)] + [(5, "new")]
    )


class _Overlapping(FaultyStore):
    """Holds each upload of a base file until more than ``want`` are in flight at once, or
    for ``bound`` seconds; records the most in flight."""

    def __init__(self, inner: Any, want: int, bound: float) -> None:
        super().__init__(inner)
        self.want, self.bound = want, bound
        self.now = self.most = 0
        self.enough = anyio.Event()

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        if not path.endswith(".parquet") or "/.hoodie/" in path:
            return await super().put(path, data, mode=mode)
        self.now += 1
        self.most = max(self.most, self.now)
        if self.now > self.want:
            self.enough.set()
        try:
            with anyio.move_on_after(self.bound):
                await self.enough.wait()
            return await super().put(path, data, mode=mode)
        finally:
            self.now -= 1


async def test_uploads_do_not_hold_a_rewrite_slot(backend_local: StoreUnderTest) -> None:
    """At most 8 file groups are rewritten at once (their rows in memory), but a rewritten
    file's upload no longer holds one of those 8 slots: with slow uploads, more than 8 are
    in flight at once (within the byte budget); the table is the model's."""
    dest = join(backend_local.base, "slots")
    first = [{"id": i, "p": "a", "v": "old", "ts": 1} for i in range(200)]
    await mutate.upsert(backend_local.store, dest, _t(first), max_file_rows=10, small_file_limit=0, **KW)
    store = _Overlapping(backend_local.store, want=8, bound=5.0)
    batch = [{"id": i, "p": "a", "v": "new", "ts": 2} for i in range(0, 200, 10)]
    rep = await mutate.upsert(store, dest, _t(batch), **KW)
    assert (rep.updated, rep.files_rewritten) == (20, 20)
    assert store.most > 8
    _, commits = await load_timeline(backend_local.store, dest)
    rows = []
    for f in snapshot(commits):
        rows += pq.read_table(pa.BufferReader(await backend_local.store.get(join(dest, f.path)))).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [
        (i, "new" if i % 10 == 0 else "old") for i in range(200)
    ]


async def test_byte_budget_bounds_the_bytes_in_flight() -> None:
    """Holders of the upload budget wait while the bytes held would pass its limit; one
    holder larger than the limit goes alone."""
    budget = mutate.ByteBudget(100)
    log: list[tuple[str, int]] = []

    async def hold(name: str, n: int, release: anyio.Event) -> None:
        async with budget.hold(n):
            log.append((name, budget.held))
            await release.wait()

    ev = [anyio.Event() for _ in range(3)]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(hold, "a", 60, ev[0])
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(hold, "b", 60, ev[1])
            tg.start_soon(hold, "big", 500, ev[2])
            await anyio.wait_all_tasks_blocked()
            assert log == [("a", 60)]  # b and big wait
            ev[0].set()
            await anyio.wait_all_tasks_blocked()
            assert log[1] in (("b", 60), ("big", 500)) and len(log) == 2
            ev[1].set()
            ev[2].set()
    assert sorted(n for n, _ in log) == ["a", "b", "big"] and budget.held == 0


async def test_a_dense_file_is_not_probed(
    backend_local: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On local files a base file whose key range holds at least 1/PROBE_DENSITY of its rows
    in keys of the batch is not probed by its bloom filter (its key column is read anyway);
    a file with fewer keys in range is (both files, one key each). Same result: a key in range that no file holds
    (``1005``, between ``100`` and ``139``) is inserted, not updated."""
    from amcommit.table.format.bloom import BloomFilter

    dest = join(backend_local.base, "dense")
    first = [{"id": i, "p": "a", "v": "old", "ts": 1} for i in range(100, 180)]  # files 100-139, 140-179
    await mutate.upsert(backend_local.store, dest, _t(first), max_file_rows=40, small_file_limit=0, **KW)
    probed: list[int] = []
    real = BloomFilter.might_contain

    def spy(self: BloomFilter, keys: Any) -> Any:
        probed.append(len(keys))
        return real(self, keys)

    monkeypatch.setattr(BloomFilter, "might_contain", spy)
    assert 40 // planning.PROBE_DENSITY < 3
    dense = [{"id": i, "p": "a", "v": "new", "ts": 2} for i in (100, 101, 102, 1005)]
    rep = await mutate.upsert(backend_local.store, dest, _t(dense), **KW)
    assert probed == [] and (rep.updated, rep.inserted, rep.candidates) == (3, 1, 1)
    sparse = [{"id": i, "p": "a", "v": "newer", "ts": 3} for i in (110, 150)]
    rep = await mutate.upsert(backend_local.store, dest, _t(sparse), **KW)
    assert len(probed) == 2 and (rep.updated, rep.inserted, rep.candidates) == (2, 0, 2)
    _, commits = await load_timeline(backend_local.store, dest)
    rows = []
    for f in snapshot(commits):
        rows += pq.read_table(pa.BufferReader(await backend_local.store.get(join(dest, f.path)))).to_pylist()
    want = {i: "old" for i in range(100, 180)} | {100: "new", 101: "new", 102: "new", 1005: "new"}
    want |= {110: "newer", 150: "newer"}
    assert sorted((r["id"], r["v"]) for r in rows) == sorted(want.items())


def test_file_candidates_skips_the_filter_only_when_dense() -> None:
    """``file_candidates`` with a file's ``rows``: every key in range when they are at least
    ``rows / PROBE_DENSITY`` (a key the filter rules out included: the key column decides),
    the filter's maybes below that; without ``rows`` always the filter's."""
    from amcommit.table.format.bloom import build_footer, parse_footer

    held = [f"k{i:03d}" for i in range(0, 64, 2)]  # 32 keys: k000, k002, ..., k062
    idx = parse_footer(build_footer(held))
    asked = ["k001", "k002", "k999"]  # k999 beyond the range
    part = planning.partition_batches(planning.Batch(asked, ["p"] * 3, [0, 1, 2], 0))["p"]
    assert planning.file_candidates(part, idx) == ["k002"]
    assert planning.file_candidates(part, idx, rows=2 * planning.PROBE_DENSITY + 1) == ["k002"]
    assert planning.file_candidates(part, idx, rows=2 * planning.PROBE_DENSITY) == ["k001", "k002"]
