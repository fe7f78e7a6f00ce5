"""Compaction of Merge-on-Read tables (issue 34): the plan (Hudi's LogFileSizeBased strategy
under the IO cap), compaction of Java-written tables and of tables amcommit's writer made
(local files, Azurite, fake-gcs-server) read by amcommit and hudi-rs, inline compaction
(``compact_every``), a writer blocked on the lock while a compaction runs, writers and
compactions at once, and a compaction SIGKILLed before each of its requests, then completed
by the next compaction or the next write."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pyarrow.parquet as pq
import pytest

from amcommit.errors import CommitError
from amcommit.paths import join
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.local import LocalStore
from amcommit.table import compact, read
from amcommit.table.commit.compaction import compact_store, pending_compactions
from amcommit.table.commit.compaction_plan import deltacommits_since_compaction, plan_compaction
from amcommit.table.errors import WriteConflict
from amcommit.table.file_group.model import FileVersion, LogFile, group_files
from amcommit.table.format.compaction import decode_compaction_plan
from amcommit.table.format.model import Action, Instant, State, decode_commit_metadata
from amcommit.table.format.naming import HOODIE_DIR, parse_base_file_name, parse_log_file_name
from amcommit.table.mutate import engine as mutate
from amcommit.table.query.read import read_store
from amcommit.table.timeline.instants import list_instants
from tests.backends import StoreUnderTest
from tests.table.killstore import KillStore
from tests.table.test_mor_write import MOR, _files, hudi_read_optimized
from tests.table.test_mutate import FAST, _steps, _t, hudi_snapshot, model_delete, model_upsert, rows_of
from tests.table.test_read_oracle import RO, _hudi_rows, _instants, _sorted_rows, unzip

CFG = FAST.with_options(table_commit="direct", compact_every=0)
NOCOMPACT = MOR | {"config": CFG}
MB = 1024 * 1024


# --- the plan (pure) -------------------------------------------------------------------------


def _groups(spec: list[tuple[str, int | None, list[int]]]) -> list[Any]:
    """File groups of partition ``p``: (file id, base file size or None, log sizes)."""
    bases, logs = [], []
    for fid, base, sizes in spec:
        if base is not None:
            bases.append(FileVersion("p", fid, f"p/{fid}_0-0-0_001.parquet", "001", base, 1))
        for v, size in enumerate(sizes, 1):
            logs.append(LogFile("p", fid, f"p/.{fid}_001.log.{v}_0-00{v}-0", "001", v, f"00{v + 1}", size))
    return group_files(bases, logs)


def test_plan_takes_largest_logs_first_until_the_io_budget_is_used_up() -> None:
    groups = _groups(
        [
            ("small", 10 * MB, [1 * MB]),
            ("big", 10 * MB, [4 * MB, 4 * MB]),
            ("mid", 10 * MB, [3 * MB]),
            ("none", 10 * MB, []),  # no logs: never planned
            ("logonly", None, [2 * MB]),
        ]
    )
    plan = plan_compaction(groups)
    assert plan is not None
    assert [o.file_id for o in plan.operations] == ["big", "mid", "logonly", "small"]
    big = plan.operations[0]
    assert big.delta_files == (".big_001.log.1_0-001-0", ".big_001.log.2_0-002-0")
    assert big.data_file == "big_0-0-0_001.parquet" and big.base_instant == "001"
    assert big.metrics["TOTAL_LOG_FILE_SIZE"] == 8 * MB and big.metrics["TOTAL_LOG_FILES"] == 2
    assert big.metrics["TOTAL_IO_MB"] == 18 + 10  # read base + logs, write the base's size
    assert plan.operations[2].data_file is None and plan.operations[2].metrics["TOTAL_IO_MB"] == 4
    # the budget: "big" spends 28 MB; the operation that uses the budget up is the last one
    assert [o.file_id for o in plan_compaction(groups, target_io_mb=28).operations] == ["big"]  # type: ignore[union-attr]
    assert [o.file_id for o in plan_compaction(groups, target_io_mb=29).operations] == ["big", "mid"]  # type: ignore[union-attr]
    assert [o.file_id for o in plan_compaction(groups, target_io_mb=1).operations] == ["big"]  # type: ignore[union-attr]
    # groups of a pending compaction are left out; nothing with logs: no plan
    rest = plan_compaction(groups, pending=[("p", "big")])
    assert rest is not None and rest.operations[0].file_id == "mid"
    assert plan_compaction(_groups([("none", 5, [])])) is None
    with pytest.raises(ValueError, match="target_io_mb"):
        plan_compaction(groups, target_io_mb=0)


def test_deltacommits_counted_since_the_latest_compaction() -> None:
    def i(t: str, a: str, s: State = State.COMPLETED) -> Instant:
        return Instant(t, a, s)

    timeline = [
        i("001", "deltacommit"),
        i("002", "deltacommit"),
        i("003", "commit"),
        i("003", "compaction", State.INFLIGHT),
        i("004", "deltacommit"),
        i("005", "deltacommit", State.INFLIGHT),
    ]
    assert deltacommits_since_compaction(timeline, ["003"]) == 1
    assert deltacommits_since_compaction(timeline, []) == 3
    assert pending_compactions(timeline) == []
    assert pending_compactions([*timeline, i("006", "compaction", State.REQUESTED)]) == ["006"]


# --- Java-written tables -----------------------------------------------------------------------

JAVA_WITH_LOGS = [
    "v6_nonpartitioned",
    "v6_nonpartitioned_rollback",
    "v6_simplekeygen_nonhivestyle",
    "v6_trips_8i1u",
    "v6_trips_8i3d",
]


def _strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without ``_hoodie_file_name`` (a compacted record names its new base file)."""
    return [{k: v for k, v in r.items() if k != "_hoodie_file_name"} for r in rows]


def _data_files(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and ".hoodie" not in p.relative_to(root).parts[:1] and not p.name.startswith(".hoodie")
    }


def _hudi(root: Path, opts: Any) -> list[dict[str, Any]]:
    import hudi

    return _sorted_rows(_hudi_rows(hudi.HudiTableBuilder.from_base_uri(str(root)).build(), opts))


@pytest.mark.parametrize("name", JAVA_WITH_LOGS)
def test_compact_java_written_table(name: str, tmp_path: Path) -> None:
    """After a compaction, amcommit's read and hudi-rs return the same rows as before in
    snapshot (records keep their commit time and seqno), read-optimized equals snapshot,
    time travel to every earlier instant is unchanged; the instant is recorded as Hudi
    records it; exactly the new base files were added (bloom footers, named after Tc);
    a second compaction finds nothing to do."""
    import hudi

    root = unzip(name, tmp_path)
    times = _instants(root)
    snap = _strip(_sorted_rows(read(str(root))))
    hsnap = _strip(_hudi(root, hudi.HudiReadOptions()))
    travel = {t: _strip(_sorted_rows(read(str(root), as_of=t))) for t in times}
    htravel = {t: _strip(_hudi(root, hudi.HudiReadOptions().with_as_of_timestamp(t))) for t in times}
    files = _data_files(root)

    rep = compact(str(root))
    tc = rep.instant
    assert tc is not None and tc > times[-1] and rep.file_groups >= 1
    hoodie = root / ".hoodie"
    assert {p.name for p in hoodie.iterdir() if p.name.startswith(tc)} == {
        f"{tc}.compaction.requested",
        f"{tc}.compaction.inflight",
        f"{tc}.commit",
    }
    plan = decode_compaction_plan((hoodie / f"{tc}.compaction.requested").read_bytes())
    assert plan.operations and all(op.delta_files for op in plan.operations)
    meta = decode_commit_metadata((hoodie / f"{tc}.commit").read_bytes())
    assert meta.compacted and meta.operation_type == "COMPACT" and meta.extra_metadata["schema"]
    stats = meta.write_stats()
    assert sorted(s.path for s in stats) == sorted(rep.files)
    assert {(s.file_id, s.prev_commit) for s in stats} == {
        (o.file_id, o.base_instant) for o in plan.operations
    }
    after = _data_files(root)
    assert {k: v for k, v in after.items() if k in files} == files  # nothing removed or changed
    assert set(after) - set(files) == set(rep.files)
    for rel in rep.files:
        parsed = parse_base_file_name(rel.rpartition("/")[2])
        assert parsed is not None and parsed.instant == tc
        pf = pq.ParquetFile(root / rel)
        kv = pf.metadata.metadata or {}
        assert b"org.apache.hudi.bloomfilter" in kv and b"hoodie_min_record_key" in kv
        names = set(pf.read(columns=["_hoodie_file_name"]).column(0).to_pylist())
        assert names == {rel.rpartition("/")[2]}

    assert _strip(_sorted_rows(read(str(root)))) == snap
    assert _strip(_hudi(root, hudi.HudiReadOptions())) == hsnap
    assert _sorted_rows(read(str(root), query_type="read_optimized")) == _sorted_rows(read(str(root)))
    assert _hudi(root, hudi.HudiReadOptions(hudi_options=RO)) == _hudi(root, hudi.HudiReadOptions())
    for t in times:
        assert _strip(_sorted_rows(read(str(root), as_of=t))) == travel[t], t
        assert _strip(_hudi(root, hudi.HudiReadOptions().with_as_of_timestamp(t))) == htravel[t], t

    again = compact(str(root))
    assert again.instant is None and again.files == [] and _data_files(root) == after


# --- tables amcommit's writer made, on every backend ---------------------------------------------


async def _compact_on(sut: StoreUnderTest, hudi_uri: Any) -> None:
    """insert -> upsert -> delete -> upsert (deltacommits), then a compaction: exactly its
    base files added; hudi-rs and amcommit read the model in snapshot and read-optimized;
    time travel unchanged; a later upsert writes a log file named after the compaction's
    instant, which hudi-rs reads."""
    store, dest = sut.store, join(sut.base, "mor")
    uri, storage = hudi_uri(dest)
    m: dict[Any, Any] = {}
    history = []
    for op, rows in _steps():
        if op == "upsert":
            rep = await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **NOCOMPACT)
            m = model_upsert(m, rows)
        else:
            rep = await mutate.delete(store, dest, _t(rows), **NOCOMPACT)
            m = model_delete(m, rows)
        assert rep.compaction is None
        history.append((rep.instant, rows_of(m)))
    before = await _files(store, dest)
    assert any(parse_log_file_name(p.rpartition("/")[2]) for p in before)
    assert hudi_read_optimized(uri, storage) != rows_of(m)  # the logs hold updates

    crep = await compact_store(store, dest, config=CFG)
    tc = crep.instant
    assert tc is not None and crep.file_groups >= 2
    after = await _files(store, dest)
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == set(crep.files)
    names = {i.file_name for i in await list_instants(store, dest) if i.time == tc}
    assert names == {f"{tc}.compaction.requested", f"{tc}.compaction.inflight", f"{tc}.commit"}
    assert hudi_snapshot(uri, storage=storage) == rows_of(m)
    assert hudi_read_optimized(uri, storage) == rows_of(m)
    ours = await read_store(store, dest)
    assert sorted((r["id"], r["p"], r["v"], r["ts"]) for r in ours.to_pylist()) == rows_of(m)
    ro = await read_store(store, dest, query_type="read_optimized")
    assert sorted((r["id"], r["p"], r["v"], r["ts"]) for r in ro.to_pylist()) == rows_of(m)
    for t, rows in history:
        assert hudi_snapshot(uri, as_of=t, storage=storage) == rows, t

    later = [{"id": 5, "p": "b", "v": "after", "ts": 20}]
    rep = await mutate.upsert(store, dest, _t(later), precombine_field="ts", **NOCOMPACT)
    m = model_upsert(m, later)
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, f"{rep.instant}.deltacommit")))
    logs = [s for s in meta.write_stats() if ".log." in s.path]
    assert len(logs) == 1 and logs[0].prev_commit == tc
    assert parse_log_file_name(logs[0].path.rpartition("/")[2]).base_instant == tc  # type: ignore[union-attr]
    assert hudi_snapshot(uri, storage=storage) == rows_of(m)


async def test_compaction_local(backend_local: StoreUnderTest) -> None:
    store = backend_local.store
    assert isinstance(store, LocalStore)
    await _compact_on(backend_local, lambda dest: (os.path.join(store.root, dest), None))


async def test_compaction_fake_gcs(backend_gcs_fake: StoreUnderTest) -> None:
    srv: Any = backend_gcs_fake.extras["server"]
    opts = {"google_base_url": srv.url, "google_skip_signature": "true", "allow_http": "true"}
    await _compact_on(
        backend_gcs_fake, lambda dest: (f"gs://{backend_gcs_fake.extras['bucket']}/{dest}", opts)
    )


async def test_compaction_azurite(backend_blob_azurite: StoreUnderTest) -> None:
    az: Any = backend_blob_azurite.extras["emulator"]
    opts = {
        "azure_storage_account_name": az.account,
        "azure_storage_account_key": az.account_key,
        "azure_storage_endpoint": az.endpoint,
        "azure_allow_http": "true",
    }
    container = backend_blob_azurite.extras["container"]
    await _compact_on(backend_blob_azurite, lambda dest: (f"az://{container}/{dest}", opts))


# --- inline compaction -----------------------------------------------------------------------------


async def test_inline_compaction_after_every_n_deltacommits(backend_local: StoreUnderTest) -> None:
    """compact_every=2: the second deltacommit since the latest compaction compacts; the
    first does not; compact_every=0 never compacts (also given as Hudi's option name)."""
    store, dest = backend_local.store, join(backend_local.base, "inline")
    root = os.path.join(store.root, dest)  # type: ignore[attr-defined]
    every2 = MOR | {"config": FAST.with_options(table_commit="direct", compact_every=2)}
    rows = [{"id": i, "p": "ab"[i % 2], "v": "0", "ts": 1} for i in range(10)]
    r1 = await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **every2)
    assert r1.compaction is None
    up = [{"id": 1, "p": "b", "v": "x", "ts": 2}, {"id": 2, "p": "a", "v": "y", "ts": 2}]
    r2 = await mutate.upsert(store, dest, _t(up), precombine_field="ts", **every2)
    assert r2.compaction is not None and r2.compaction.instant is not None
    assert r2.compaction.instant > r2.instant and r2.compaction.file_groups == 2
    want = rows_of(model_upsert(model_upsert({}, rows), up))
    assert hudi_read_optimized(root) == want == hudi_snapshot(root)
    r3 = await mutate.upsert(
        store, dest, _t([{"id": 1, "p": "b", "v": "z", "ts": 3}]), precombine_field="ts", **every2
    )
    assert r3.compaction is None  # one deltacommit since the compaction
    never = MOR | {"config": FAST.with_options(table_commit="direct")}
    for k in range(3):
        r = await mutate.upsert(
            store,
            dest,
            _t([{"id": 2, "p": "a", "v": f"n{k}", "ts": 4 + k}]),
            precombine_field="ts",
            **never | {"hoodie.compact.inline.max.delta.commits": 0},
        )
        assert r.compaction is None
    compactions = [i for i in await list_instants(store, dest) if i.action == Action.COMPACTION.value]
    assert len({i.time for i in compactions}) == 1


# --- concurrency ---------------------------------------------------------------------------------


class _Overlap(KillStore):
    """A store whose GETs of a slice's files (base and log files, not ``.hoodie/``) wait,
    at most ``hold`` seconds, until ``want`` of them are in flight at once; ``most``: the
    most that were."""

    def __init__(self, inner: Store, want: int, hold: float) -> None:
        super().__init__(inner, "^$", 1 << 30)
        self.want, self.hold = want, hold
        self.inflight = self.most = 0
        self.all_in = anyio.Event()

    async def get(self, path: str, *a: Any, **kw: Any) -> Any:
        if HOODIE_DIR in path or not (path.endswith(".parquet") or ".log." in path):
            return await self.inner.get(path, *a, **kw)
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        if self.inflight >= self.want:
            self.all_in.set()
        try:
            with anyio.move_on_after(self.hold):
                await self.all_in.wait()
            return await self.inner.get(path, *a, **kw)
        finally:
            self.inflight -= 1


async def test_compaction_fetches_a_slices_files_at_once(backend_local: StoreUnderTest) -> None:
    """A file slice's base file and its log files are fetched concurrently, not one after
    another (one file group, 3 log files: 4 GETs in flight together); the compacted table
    holds every update."""
    store, dest = backend_local.store, join(backend_local.base, "overlap")
    rows = [{"id": i, "p": "a", "v": "0", "ts": 1} for i in range(6)]
    m = model_upsert({}, rows)
    await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **NOCOMPACT)
    for k in range(3):
        up = [{"id": k, "p": "a", "v": f"u{k}", "ts": 2 + k}, {"id": 5, "p": "a", "v": f"w{k}", "ts": 2 + k}]
        r = await mutate.upsert(store, dest, _t(up), precombine_field="ts", **NOCOMPACT)
        assert r.files_logged == 1
        m = model_upsert(m, up)
    overlap = _Overlap(store, want=4, hold=5.0)  # ends as soon as all 4 are in flight
    rep = await compact_store(overlap, dest, config=CFG)  # type: ignore[arg-type]
    assert rep.instant is not None and rep.file_groups == 1 and rep.log_files == 3
    assert overlap.most == 4
    ours = await read_store(store, dest, query_type="read_optimized")
    assert sorted((r["id"], r["p"], r["v"], r["ts"]) for r in ours.to_pylist()) == rows_of(m)


class _Gate(KillStore):
    """A store that holds the put of a ``.compaction.inflight`` file until ``go`` is set."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner, "^$", 1 << 30)
        self.held = anyio.Event()
        self.go = anyio.Event()

    async def put(self, path: str, data: bytes, **kw: Any) -> ObjectInfo:
        if path.endswith(".compaction.inflight"):
            self.held.set()
            await self.go.wait()
        return await self.inner.put(path, data, **kw)


async def _mor_table(store: Store, dest: str) -> dict[Any, Any]:
    first = [{"id": i, "p": "abc"[i % 3], "v": "0", "ts": 1} for i in range(30)]
    await mutate.upsert(store, dest, _t(first), precombine_field="ts", **NOCOMPACT)
    up = [{"id": i, "p": "abc"[i % 3], "v": "1", "ts": 2} for i in range(0, 30, 4)]
    await mutate.upsert(store, dest, _t(up), precombine_field="ts", **NOCOMPACT)
    return model_upsert(model_upsert({}, first), up)


async def test_writer_blocked_on_the_lock_while_a_compaction_runs(backend_local: StoreUnderTest) -> None:
    """A write that begins while a compaction holds the table's lock (its plan written, its
    files not yet) waits for it, then writes its log files against the new slices: after
    both, nothing is lost and hudi-rs sees every update."""
    store, dest = backend_local.store, join(backend_local.base, "conc")
    root = os.path.join(store.root, dest)  # type: ignore[attr-defined]
    m = await _mor_table(store, dest)
    gate = _Gate(store)
    up = [{"id": i, "p": "abc"[i % 3], "v": "w", "ts": 3} for i in range(1, 30, 5)]
    out: dict[str, Any] = {}

    async def compactor() -> None:
        out["c"] = await compact_store(gate, dest, config=CFG)  # type: ignore[arg-type]

    async def writer() -> None:
        out["w"] = await mutate.upsert(store, dest, _t(up), precombine_field="ts", **NOCOMPACT)

    async with anyio.create_task_group() as tg:
        tg.start_soon(compactor)
        with anyio.fail_after(30):
            await gate.held.wait()
        tg.start_soon(writer)
        await anyio.sleep(1.0)
        assert "w" not in out  # blocked: on the lock, behind the compaction
        gate.go.set()
    tc = out["c"].instant
    assert tc is not None and out["w"].instant > tc
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, f"{out['w'].instant}.deltacommit")))
    logs = [s for s in meta.write_stats() if ".log." in s.path]
    assert logs and all(s.prev_commit == tc for s in logs)  # against the compacted slices
    m = model_upsert(m, up)
    assert hudi_snapshot(root) == rows_of(m)
    ours = await read_store(store, dest)
    assert sorted((r["id"], r["p"], r["v"], r["ts"]) for r in ours.to_pylist()) == rows_of(m)


async def test_writers_and_compactions_at_once(backend_local: StoreUnderTest) -> None:
    """Rounds of two writers (one partition each) and a compaction started together: every
    write that committed is read by hudi-rs and amcommit, a write refused with
    WriteConflict changed nothing; the compaction waits for pending writes."""
    store, dest = backend_local.store, join(backend_local.base, "rounds")
    root = os.path.join(store.root, dest)  # type: ignore[attr-defined]
    m = await _mor_table(store, dest)
    compactions = 0
    for rnd in range(4):
        batches = {
            p: [{"id": i, "p": p, "v": f"r{rnd}", "ts": 10 + rnd} for i in range(30) if "abc"[i % 3] == p]
            for p in "ab"
        }
        done: dict[str, bool] = {}

        async def write(p: str, rows: list[dict[str, Any]], done: dict[str, bool] = done) -> None:
            try:
                await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **NOCOMPACT)
                done[p] = True
            except WriteConflict:
                done[p] = False
            except CommitError as e:
                # a write whose instant is earlier than a compaction that completed while
                # it was pending is refused by its order check (Hudi's rule: no write
                # earlier than a completed instant); it was rolled back, nothing changed
                assert "cannot complete: the later instant" in str(e), e
                done[p] = False

        async def comp() -> None:
            nonlocal compactions
            if (await compact_store(store, dest, config=CFG)).instant is not None:
                compactions += 1

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for p, rows in batches.items():
                    tg.start_soon(write, p, rows)
                tg.start_soon(comp)
        for p, ok in done.items():
            if ok:
                m = model_upsert(m, batches[p])
        assert hudi_snapshot(root) == rows_of(m), rnd
        ours = await read_store(store, dest)
        assert sorted((r["id"], r["p"], r["v"], r["ts"]) for r in ours.to_pylist()) == rows_of(m), rnd
    assert compactions >= 1
    assert pending_compactions(await list_instants(store, dest)) == []


# --- kills ---------------------------------------------------------------------------------------

KILL_CFG = CFG.with_options(writer_ttl=600.0, lock_ttl=60.0)
LATER = [{"id": 4, "p": "b", "v": "later", "ts": 30}]


def _kill_child(root: str, n: int) -> bool:
    from tests.forkrun import run_module

    r = run_module("tests.table.compact_kill_child", [root, "tbl", str(n)])
    if r.returncode == 0:
        assert "completed" in r.stdout
        return True
    assert r.returncode == -9, r.stderr[-2000:]
    return False


async def _data(store: Store, dest: str) -> set[str]:
    return {
        i.path[len(dest) + 1 :]
        async for i in store.list(dest, recursive=True)
        if not i.is_dir and not i.path[len(dest) + 1 :].startswith(".hoodie/")
    }


async def _all(store: Store, dest: str) -> list[str]:
    return [i.path async for i in store.list(dest, recursive=True) if not i.is_dir]


async def test_compaction_killed_before_each_request_then_completed(tmp_path: Path) -> None:
    """A compaction SIGKILLed before each of its mutating requests: hudi-rs and amcommit
    read the same records throughout, and the read-optimized view is the whole compaction
    or none of it. Then the next compaction (odd n) or the next write (even n) completes it
    with its stored plan: exactly the plan's base files are added (or none, when it was
    killed before its plan existed), the instant is requested/inflight/commit, no lock is
    left, and nothing a reader saw before is lost."""
    n = 1
    outcomes: set[str] = set()
    while True:
        root = str(tmp_path / f"k{n}")
        os.makedirs(root)
        store = LocalStore(root, fsync=False)
        uri = os.path.join(root, "tbl")
        async with store:
            m: dict[Any, Any] = {}
            for op, rows in _steps():
                if op == "upsert":
                    await mutate.upsert(
                        store, "tbl", _t(rows), precombine_field="ts", **MOR | {"config": KILL_CFG}
                    )
                    m = model_upsert(m, rows)
                else:
                    await mutate.delete(store, "tbl", _t(rows), **MOR | {"config": KILL_CFG})
                    m = model_delete(m, rows)
            was = await _data(store, "tbl")
            ro_before = hudi_read_optimized(uri)
            done = _kill_child(root, n)
            assert hudi_snapshot(uri) == rows_of(m), n
            assert hudi_read_optimized(uri) in (ro_before, rows_of(m)), n
            ours = await read_store(store, "tbl")
            assert sorted((r["id"], r["p"], r["v"], r["ts"]) for r in ours.to_pylist()) == rows_of(m), n
            instants = await list_instants(store, "tbl")
            planned = {i.time for i in instants if i.action == Action.COMPACTION.value}
            added: set[str] = set()
            if n % 2:
                rep = await compact_store(store, "tbl", config=KILL_CFG)
                assert rep.resumed == sorted(pending_compactions(instants)), n
            else:
                r = await mutate.upsert(
                    store, "tbl", _t(LATER), precombine_field="ts", **MOR | {"config": KILL_CFG}
                )
                m = model_upsert(m, LATER)
                meta = decode_commit_metadata(
                    await store.get(join("tbl", HOODIE_DIR, f"{r.instant}.deltacommit"))
                )
                added = {s.path for s in meta.write_stats()}
            instants = await list_instants(store, "tbl")
            assert pending_compactions(instants) == [], n
            tcs = sorted({i.time for i in instants if i.action == Action.COMPACTION.value})
            for tc in tcs:
                plan = decode_compaction_plan(
                    await store.get(
                        join("tbl", HOODIE_DIR, Instant(tc, "compaction", State.REQUESTED).file_name)
                    )
                )
                added |= {
                    (f"{op.partition}/" if op.partition else "") + f"{op.file_id}_{k}-0-0_{tc}.parquet"
                    for k, op in enumerate(plan.operations)
                }
                names = {i.file_name for i in instants if i.time == tc}
                assert names == {f"{tc}.compaction.requested", f"{tc}.compaction.inflight", f"{tc}.commit"}, n
            assert await _data(store, "tbl") == was | added, (
                n,
                sorted((await _data(store, "tbl")) ^ (was | added)),
            )
            outcomes.add("resumed" if planned else ("fresh" if tcs else "none"))
            assert not [p for p in await _all(store, "tbl") if p.endswith("_commit.lock")], n
            assert hudi_snapshot(uri) == rows_of(m), n
            if tcs and n % 2:
                assert hudi_read_optimized(uri) == rows_of(m), n
        if done:
            break
        n += 1
    assert n >= 5 and "resumed" in outcomes, (n, outcomes)


# --- one time, one instant: a write and a compaction claiming the same time -----------------------


def _times(monkeypatch: pytest.MonkeyPatch, module: Any, first: str) -> None:
    """``next_instant`` in ``module`` answers ``first`` once, then its real answer (after it)."""
    real = module.next_instant
    calls = {"n": 0}

    def fake(now: Any, after: str | None = None) -> str:
        calls["n"] += 1
        return first if calls["n"] == 1 else real(now, max(after or first, first))

    monkeypatch.setattr(module, "next_instant", fake)


async def test_a_compaction_gives_up_a_time_a_write_claimed(
    backend_local: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's staging claim of time T exists: the compaction's claim of T is withdrawn and
    it takes a later time; no two instants ever share a time (T held a deltacommit and a
    compaction before, and a commit of either found the other's)."""
    from amcommit.table.commit import compaction as comp
    from amcommit.table.write.staging import table_layout

    store, dest = backend_local.store, join(backend_local.base, "claim-c")
    await _mor_table(store, dest)
    t = "20991231235959000"
    await store.put(table_layout(dest, t).job_marker, b"{}")  # a writer's claim of t
    _times(monkeypatch, comp, t)
    rep = await compact_store(store, dest, config=CFG)
    assert rep.instant is not None and rep.instant > t
    names = [i.file_name for i in await list_instants(store, dest)]
    assert not [n for n in names if n.startswith(t)], names


async def test_a_merge_on_read_write_gives_up_a_time_a_compaction_claimed(
    backend_local: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction's claim of time T exists (``T.compaction.requested``): a Merge-on-Read
    write that picks T gives it up and writes at a later time."""
    from amcommit.table.write import task

    store, dest = backend_local.store, join(backend_local.base, "claim-w")
    await _mor_table(store, dest)
    t = "20991231235959000"
    requested = join(dest, HOODIE_DIR, Instant(t, Action.COMPACTION.value, State.REQUESTED).file_name)
    await store.put(requested, b"")
    _times(monkeypatch, task, t)
    assert await task.compaction_claimed(store, dest, t)
    w = await task.begin_write(
        store,
        dest,
        operation="UPSERT",
        merge_on_read=True,
        config=CFG,
    )
    assert w.instant > t
    assert not await task.write_claimed(store, dest, t)
