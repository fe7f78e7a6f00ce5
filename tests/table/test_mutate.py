"""Upsert and delete through the engine API (amcommit.table.mutate.engine), checked against a model."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from amcommit.errors import NotFound
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.file_group import merge
from amcommit.table.format.bloom import BloomSettings
from amcommit.table.format.model import decode_commit_metadata
from amcommit.table.format.naming import HOODIE_DIR
from amcommit.table.mutate import engine as mutate
from amcommit.table.report import table_report
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import load_timeline, snapshot
from amcommit.table.timeline.reader import Timeline
from amcommit.testing.faults import FaultyStore
from tests.backends import StoreUnderTest

FAST = TableConfig(lock_ttl=5.0, lock_wait=20.0, writer_ttl=3.0)
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string()), ("ts", pa.int64())])
KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "config": FAST}
NEW = KW | {"small_file_limit": 0}
"""Inserts into new file groups only (Hudi's small-file handling off)."""

Model = dict[tuple[str, int], dict[str, Any]]


def _t(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def model_upsert(m: Model, rows: list[dict[str, Any]]) -> Model:
    out = dict(m)
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:  # greatest ts wins, the later row on a tie
        k = (r["p"], r["id"])
        if k not in best or not best[k]["ts"] > r["ts"]:
            best[k] = r
    out.update(best)
    return out


def model_delete(m: Model, rows: list[dict[str, Any]]) -> Model:
    return {k: v for k, v in m.items() if k not in {(r["p"], r["id"]) for r in rows}}


def rows_of(m: Model) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["p"], r["v"], r["ts"]) for r in m.values())


async def amcommit_snapshot(store: Store, dest: str, as_of: str | None = None) -> list[tuple[Any, ...]]:
    _, commits = await load_timeline(store, dest)
    out = []
    for f in snapshot(commits, as_of):
        t = pq.read_table(pa.BufferReader(await store.get(join(dest, f.path))))
        out += [(r["id"], r["p"], r["v"], r["ts"]) for r in t.to_pylist()]
    return sorted(out)


async def amcommit_changes(store: Store, dest: str, since: str | None, until: str) -> list[tuple[Any, ...]]:
    """An incremental read of ``(since, until]`` as amcommit's readers plan it: the newest
    version in the range of each file group, its rows stamped in the range."""
    tl = await Timeline.open(store, dest)
    out = []
    for f in (await tl.changes(since, until)).visible():
        t = pq.read_table(pa.BufferReader(await store.get(join(dest, f.path))))
        out += [
            (r["id"], r["p"], r["v"], r["ts"])
            for r in t.to_pylist()
            if (since is None or r["_hoodie_commit_time"] > since) and r["_hoodie_commit_time"] <= until
        ]
    return sorted(out)


def hudi_changes(
    uri: str, since: str | None, until: str, storage: dict[str, str] | None
) -> list[tuple[Any, ...]]:
    """hudi-rs's incremental read of ``(since, until]``."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    b = HudiTableBuilder.from_base_uri(uri)
    if storage:
        b = b.with_storage_options(storage)
    opts = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_end_timestamp(until)
    if since:
        opts = opts.with_start_timestamp(since)
    out = []
    for batch in b.build().read(opts):
        out += [(r["id"], r["p"], r["v"], r["ts"]) for r in batch.to_pylist()]
    return sorted(out)


def hudi_snapshot(
    uri: str, as_of: str | None = None, storage: dict[str, str] | None = None
) -> list[tuple[Any, ...]]:
    from hudi import HudiReadOptions, HudiTableBuilder

    b = HudiTableBuilder.from_base_uri(uri)
    if storage:
        b = b.with_storage_options(storage)
    opts = HudiReadOptions()
    if as_of:
        opts = opts.with_as_of_timestamp(as_of)
    out = []
    for batch in b.build().read(opts):
        out += [(r["id"], r["p"], r["v"], r["ts"]) for r in batch.to_pylist()]
    return sorted(out)


def _steps() -> list[tuple[str, list[dict[str, Any]]]]:
    ins = [{"id": i, "p": "ab"[i % 2], "v": f"a{i}", "ts": 1} for i in range(40)]
    up = [
        {"id": 1, "p": "b", "v": "u1", "ts": 2},  # update in b
        {"id": 2, "p": "a", "v": "u2-old", "ts": 5},  # duplicates in the batch: ts 7 wins
        {"id": 2, "p": "a", "v": "u2", "ts": 7},
        {"id": 2, "p": "a", "v": "u2-older", "ts": 3},
        {"id": 4, "p": "b", "v": "moved", "ts": 2},  # key 4 lives in a: an insert into b
        {"id": 100, "p": "c", "v": "new-c", "ts": 1},  # a new partition
        {"id": 101, "p": "a", "v": "new-a", "ts": 1},
    ]
    dele = [
        {"id": 3, "p": "b", "v": None, "ts": 0},
        {"id": 4, "p": "a", "v": None, "ts": 0},
        {"id": 999, "p": "a", "v": None, "ts": 0},
    ]  # 999: absent, a no-op
    up2 = [{"id": 5, "p": "b", "v": "u5", "ts": 9}, {"id": 3, "p": "b", "v": "back", "ts": 1}]
    return [("upsert", ins), ("upsert", up), ("delete", dele), ("upsert", up2)]


async def _temp_left(store: Store, dest: str) -> list[str]:
    """What is left under ``.hoodie/.temp/`` (markers, staging)."""
    try:
        return [i.path async for i in store.list(join(dest, ".hoodie/.temp")) if not i.is_dir]
    except NotFound:
        return []


async def _model_checked(sut: StoreUnderTest, hudi_uri: Any, table_commit: str = "staged") -> None:
    """The sequence of _steps, checked after each step against the model (amcommit's reader
    and hudi-rs: snapshot, time travel, incremental), then cleaned. ``table_commit``: how the
    writes' files are written (staged and renamed, or direct: in place under markers, and
    then no rename at all and no marker left)."""
    store, dest = sut.store, join(sut.base, "mt")
    kw = KW | {"config": FAST.with_options(table_commit=table_commit)}
    faulty = FaultyStore(store)
    no_rename = faulty.fail("rename", path="*.parquet")  # a direct write renames no base file
    # counts the attempt's marker file puts (Hudi's timeline-server format: MARKERS<n>,
    # rewritten before each upload; their lines are checked in tests/table/test_direct.py)
    marked = faulty.latency(0.0, "put", path="*/.hoodie/.temp/*/MARKERS[0-9]*")
    if table_commit == "direct":
        store = faulty  # type: ignore[assignment]
    m: Model = {}
    history: list[tuple[str, Model]] = []
    changed: dict[tuple[str, int], str] = {}  # each record's latest change: its commit time
    changed_at: list[dict[tuple[str, int], str]] = []
    for op, rows in _steps():
        if op == "upsert":
            rep = await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **kw)
            m = model_upsert(m, rows)
            changed = {**changed, **{(r["p"], r["id"]): rep.instant for r in rows}}
        else:
            rep = await mutate.delete(store, dest, _t(rows), **kw)
            m = model_delete(m, rows)
        assert rep.job is not None and rep.job.success
        assert await _temp_left(store, dest) == []  # no marker, no staging
        history.append((rep.instant, m))
        changed_at.append(changed)
        assert await amcommit_snapshot(store, dest) == rows_of(m), op
        uri, storage = hudi_uri(dest)
        assert hudi_snapshot(uri, storage=storage) == rows_of(m), op
    uri, storage = hudi_uri(dest)
    for t, snap in history:
        assert await amcommit_snapshot(store, dest, t) == rows_of(snap)
        assert hudi_snapshot(uri, as_of=t, storage=storage) == rows_of(snap)
    # incremental reads between every pair of instants: exactly the records whose latest
    # change (as of the range's end) lies in the range (Hudi's definition, _hoodie_commit_time)
    instants = [t for t, _ in history]
    for j, (b, snap_b) in enumerate(history):
        for a in [None, *instants[:j]]:
            want = rows_of({k: r for k, r in snap_b.items() if a is None or changed_at[j][k] > a})
            assert await amcommit_changes(store, dest, a, b) == want, (a, b)
            assert hudi_changes(uri, a, b, storage) == want, (a, b)
    # clean: the versions superseded at or before the 2nd latest instant go; the latest two
    # instants stay readable (snapshot and time travel)
    from amcommit.table.commit.clean import clean

    _, commits = await load_timeline(store, dest)
    live = {f.path for f in snapshot(commits)} | {f.path for f in snapshot(commits, history[-2][0])}
    done = await clean(store, dest, retain_commits=2, config=FAST)
    assert done.files and not set(done.files) & live
    assert await amcommit_snapshot(store, dest) == rows_of(m)
    assert hudi_snapshot(uri, storage=storage) == rows_of(m)
    if table_commit == "direct":
        # every upload under its attempt's marker file, no base file renamed
        assert (no_rename.matched, marked.matched > 0) == (0, True)
    for t, snap in history[-2:]:
        assert await amcommit_snapshot(store, dest, t) == rows_of(snap)
        assert hudi_snapshot(uri, as_of=t, storage=storage) == rows_of(snap)


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
async def test_model_checked_sequence_local(backend_local: StoreUnderTest, table_commit: str) -> None:
    store = backend_local.store
    assert isinstance(store, LocalStore)
    await _model_checked(backend_local, lambda dest: (os.path.join(store.root, dest), None), table_commit)


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
async def test_model_checked_sequence_fake_gcs(backend_gcs_fake: StoreUnderTest, table_commit: str) -> None:
    srv: Any = backend_gcs_fake.extras["server"]
    opts = {"google_base_url": srv.url, "google_skip_signature": "true", "allow_http": "true"}
    await _model_checked(
        backend_gcs_fake,
        lambda dest: (f"gs://{backend_gcs_fake.extras['bucket']}/{dest}", opts),
        table_commit,
    )


async def test_model_checked_sequence_azurite(backend_blob_azurite: StoreUnderTest) -> None:
    az: Any = backend_blob_azurite.extras["emulator"]
    opts = {
        "azure_storage_account_name": az.account,
        "azure_storage_account_key": az.account_key,
        "azure_storage_endpoint": az.endpoint,
        "azure_allow_http": "true",
    }
    container = backend_blob_azurite.extras["container"]
    await _model_checked(backend_blob_azurite, lambda dest: (f"az://{container}/{dest}", opts))


async def test_upsert_stats_and_meta_columns(backend_local: StoreUnderTest) -> None:
    """Only the file groups holding changed keys get a new version (prevCommit = their
    instant); unchanged rows keep commit time and seqno; the report counts everything."""
    store, dest = backend_local.store, join(backend_local.base, "st")
    first = await mutate.upsert(store, dest, _t(_steps()[0][1]), precombine_field="ts", **NEW)
    assert (first.inserted, first.files_created, first.footers_read) == (40, 2, 0)
    before = {r["id"]: r for r in await _meta_rows(store, dest)}
    rep = await mutate.upsert(store, dest, _t(_steps()[1][1]), precombine_field="ts", **NEW)
    assert (rep.updated, rep.inserted, rep.duplicates_dropped) == (2, 3, 2)
    assert (rep.files_rewritten, rep.files_created, rep.footers_read, rep.key_columns_read) == (2, 3, 2, 2)
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, f"{rep.instant}.commit")))
    assert meta.operation_type == "UPSERT"
    stats = {
        (s.partition_path, s.num_update_writes, s.num_inserts, s.prev_commit) for s in meta.write_stats()
    }
    assert ("p=a", 1, 0, first.instant) in stats and ("p=b", 1, 0, first.instant) in stats
    assert {
        (s.partition_path, s.num_inserts, s.prev_commit) for s in meta.write_stats() if s.num_inserts
    } == {("p=a", 1, "null"), ("p=b", 1, "null"), ("p=c", 1, "null")}
    after = await _meta_rows(store, dest)
    for r in after:
        if r["id"] in (1, 2) or r["id"] >= 100 or (r["id"] == 4 and r["p"] == "b"):
            assert r["_hoodie_commit_time"] == rep.instant
        else:
            old = before[r["id"]]
            assert (r["_hoodie_commit_time"], r["_hoodie_commit_seqno"]) == (
                old["_hoodie_commit_time"],
                old["_hoodie_commit_seqno"],
            )
    d = await mutate.delete(store, dest, _t(_steps()[2][1]), **KW)
    assert (d.deleted, d.absent_deletes, d.files_rewritten) == (2, 1, 2)


async def _meta_rows(store: Store, dest: str) -> list[dict[str, Any]]:
    _, commits = await load_timeline(store, dest)
    out = []
    for f in snapshot(commits):
        out += pq.read_table(pa.BufferReader(await store.get(join(dest, f.path)))).to_pylist()
    return out


async def test_index_reads_key_columns_only_of_files_it_cannot_rule_out(
    backend_local: StoreUnderTest,
) -> None:
    """10 files in one partition, keys in disjoint ranges: an upsert of keys of 2 files reads
    10 footers and the key columns of just those 2 (and of a file whose range holds many of
    the keys: not probed), and rewrites just those 2."""
    store, dest = backend_local.store, join(backend_local.base, "ix")
    for g in range(10):
        rows = [{"id": g * 1000 + i, "p": "a", "v": "x", "ts": 1} for i in range(50)]
        await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **NEW)
    keys = [{"id": 3000 + i, "p": "a", "v": "y", "ts": 2} for i in range(5)]
    keys += [{"id": 7000 + i, "p": "a", "v": "y", "ts": 2} for i in range(5)]
    rep = await mutate.upsert(store, dest, _t(keys), precombine_field="ts", **KW)
    # 3 key columns: file 0's range ("0".."9") holds all 10 keys, 1/5 of its rows: at least
    # 1/PROBE_DENSITY, so it is read instead of probed (holding none, it is not rewritten)
    assert (rep.footers_read, rep.key_columns_read, rep.files_rewritten, rep.updated) == (10, 3, 2, 10)
    # keys in range of files that do not hold them: the bloom filter rules them out
    # ("3000".."3049" sorts between "3000" and "3049"; "30000" is in range, not in the file)
    odd = [{"id": 30000 + i, "p": "a", "v": "z", "ts": 1} for i in range(3)]
    rep = await mutate.upsert(store, dest, _t(odd), precombine_field="ts", **NEW)
    assert (rep.footers_read, rep.key_columns_read, rep.inserted, rep.files_rewritten) == (10, 0, 3, 0)
    # as many such keys as 1/PROBE_DENSITY of the file's rows: no probe, the key column is
    # read and holds none of them (file 0 too, as above; inserted all the same, nothing rewritten)
    dense = [{"id": 30100 + i, "p": "a", "v": "z", "ts": 1} for i in range(20)]
    rep = await mutate.upsert(store, dest, _t(dense), precombine_field="ts", **NEW)
    assert (rep.footers_read, rep.key_columns_read, rep.inserted, rep.files_rewritten) == (11, 2, 20, 0)


async def test_ordering_aware_payload_keeps_newer_stored_record(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "pl")
    await mutate.upsert(
        store, dest, _t([{"id": 1, "p": "a", "v": "new", "ts": 5}]), precombine_field="ts", **KW
    )
    stale = _t([{"id": 1, "p": "a", "v": "stale", "ts": 3}])
    rep = await mutate.upsert(store, dest, stale, precombine_field="ts", payload=mutate.Payload.DEFAULT, **KW)
    assert (rep.kept_stored, rep.updated, rep.files_rewritten) == (1, 0, 0)
    assert await amcommit_snapshot(store, dest) == [(1, "a", "new", 5)]
    await mutate.upsert(store, dest, stale, precombine_field="ts", **KW)  # Hudi 0.x default: incoming wins
    assert await amcommit_snapshot(store, dest) == [(1, "a", "stale", 3)]


async def test_bad_input_one_line_each_nothing_written(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "bad")
    await mutate.upsert(
        store, dest, _t([{"id": 1, "p": "a", "v": "x", "ts": 1}]), precombine_field="ts", **KW
    )
    before = sorted([i.path async for i in store.list(dest)])
    cases: list[tuple[pa.Table, dict[str, Any], str]] = [
        (
            _t([{"id": None, "p": "a", "v": "x", "ts": 1}]),
            {"precombine_field": "ts"},
            "record key column 'id' is null or empty in a row",
        ),
        (
            _t([{"id": 1, "p": "a", "v": "x", "ts": 1}]).drop_columns(["id"]),
            {"precombine_field": "ts"},
            "record key column 'id' is not in the data",
        ),
        (
            _t([{"id": 1, "p": "a", "v": "x", "ts": 1}]).drop_columns(["ts"]),
            {"precombine_field": "ts"},
            "precombine column 'ts' is not in the data",
        ),
        (
            _t([{"id": 1, "p": "a", "v": "x", "ts": None}]),
            {"precombine_field": "ts"},
            "precombine column 'ts' is null in a row",
        ),
        (
            pa.table({"id": ["1"], "p": ["a"], "v": ["x"], "ts": [1]}),
            {"precombine_field": "ts"},
            "record key column 'id' is string in the data but long in the table",
        ),
        (
            _t([{"id": 1, "p": "a", "v": "x", "ts": 1}]).drop_columns(["p"]),
            {"precombine_field": "ts"},
            "partition column 'p' is not in the data",
        ),
    ]
    for data, extra, msg in cases:
        with pytest.raises(mutate.MutationError) as e:
            await mutate.upsert(store, dest, data, **extra, **KW)
        assert str(e.value).startswith(msg) and "\n" not in str(e.value), str(e.value)
    assert sorted([i.path async for i in store.list(dest)]) == before


def test_reduce_batch_and_plan_are_pure() -> None:
    b = mutate.reduce_batch(["k", "k", "j", "k"], ["a", "a", "a", "b"], [2, 1, 0, 0])
    assert (b.keys, b.partitions, b.rows, b.dropped) == (["k", "j", "k"], ["a", "a", "b"], [0, 2, 3], 1)
    tie = mutate.reduce_batch(["k", "k"], ["a", "a"], [1, 1])
    assert tie.rows == [1]


def test_small_bloom_settings_are_used(tmp_path: Any) -> None:
    t = merge.with_meta(
        _t([{"id": 1, "p": "a", "v": "x", "ts": 1}]), ["1"], "20260101000000000", 0, 0, "p=a", "f"
    )
    body = merge.parquet_with_index(t, BloomSettings(num_entries=100, fpp=0.01))
    md = pq.read_metadata(pa.BufferReader(body)).metadata
    assert md[b"hoodie_min_record_key"] == b"1" and len(md[b"org.apache.hudi.bloomfilter"]) < 400


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
async def test_conflicting_writers_one_fails_cleanly(
    backend_local: StoreUnderTest, table_commit: str
) -> None:
    await _conflicting_writers(backend_local, table_commit)


async def test_conflicting_writers_one_fails_cleanly_fake_gcs(backend_gcs_fake: StoreUnderTest) -> None:
    await _conflicting_writers(backend_gcs_fake)


async def _conflicting_writers(sut: StoreUnderTest, table_commit: str = "staged") -> None:
    """B begins, A begins and reads the table, B commits a rewrite of file group F, A's
    commit (rewriting F too) fails with WriteConflict: one line, A rolled back, B's update
    kept. A writer rewriting another file group meanwhile commits. ``direct``: A's new
    version of F is in the table (under its MERGE marker) until the rollback removes it
    from its markers; the listing is then exactly B's, without anything of A."""
    from amcommit.table.errors import WriteConflict
    from tests.table.writehelpers import listing

    store, dest = sut.store, join(sut.base, "cc")
    kw = KW | {"config": FAST.with_options(table_commit=table_commit)}
    base = [{"id": i, "p": "ab"[i % 2], "v": "0", "ts": 1} for i in range(10)]
    await mutate.upsert(store, dest, _t(base), precombine_field="ts", **kw)
    b = await mutate.prepare(
        store,
        dest,
        _t([{"id": 0, "p": "a", "v": "B", "ts": 2}]),
        operation="UPSERT",
        precombine_field="ts",
        **kw,
    )
    a = await mutate.prepare(
        store,
        dest,
        _t([{"id": 2, "p": "a", "v": "A", "ts": 2}]),
        operation="UPSERT",
        precombine_field="ts",
        **kw,
    )
    other = await mutate.prepare(
        store,
        dest,
        _t([{"id": 1, "p": "b", "v": "O", "ts": 2}]),
        operation="UPSERT",
        precombine_field="ts",
        **kw,
    )
    assert b.report.instant < a.report.instant < other.report.instant
    mine = [n for n in await listing(store, dest) if a.report.instant in n]
    in_place = [n for n in mine if n.startswith("p=a/") and n.endswith(f"_{a.report.instant}.parquet")]
    folder = f".hoodie/.temp/{a.report.instant}/"
    marker_files = [n for n in mine if n.startswith(folder + "MARKERS") and n != folder + "MARKERS.type"]
    lines = [ln for n in marker_files for ln in (await store.get(f"{dest}/{n}")).decode().splitlines()]
    if table_commit == "direct":  # written in place: A's new version of F, its marker line
        assert len(in_place) == 1 and lines == [f"{in_place[0]}.marker.MERGE"]
    else:
        assert in_place == [] and marker_files == []
    await b.commit()
    before = await listing(store, dest)
    with pytest.raises(WriteConflict) as e:
        await a.commit()
    assert await listing(store, dest) == [n for n in before if a.report.instant not in n]
    msg = str(e.value)
    assert "\n" not in msg and f"conflicts with instant {b.report.instant}" in msg and "rolled back" in msg
    await other.commit()  # file group in p=b: no conflict
    want = {(r["id"], r["p"]): r["v"] for r in base} | {(0, "a"): "B", (1, "b"): "O"}
    assert await amcommit_snapshot(store, dest) == sorted(
        (k[0], k[1], v, 2 if v != "0" else 1) for k, v in want.items()
    )
    names = [i.path async for i in store.list(dest)]
    assert not [n for n in names if a.report.instant in n]  # nothing of A left: files, instant files
    again = await mutate.upsert(
        store, dest, _t([{"id": 2, "p": "a", "v": "A", "ts": 2}]), precombine_field="ts", **kw
    )
    assert again.updated == 1  # run again: it applies


def test_rewrite_conflict_is_pure_and_sees_replacements() -> None:
    from amcommit.table.commit.table_commit import rewrite_conflict
    from amcommit.table.format.model import CommitMetadata, Instant, State, WriteStat
    from amcommit.table.timeline.instants import LoadedCommit

    def commit(t: str, fid: str, replaced: dict[str, list[str]] | None = None) -> LoadedCommit:
        stat = WriteStat(file_id=fid, path=f"p=a/{fid}_0-0-0_{t}.parquet", partition_path="p=a")
        action = "replacecommit" if replaced else "commit"
        meta = CommitMetadata(
            partition_to_write_stats={"p=a": [stat]}, partition_to_replace_file_ids=replaced
        )
        return LoadedCommit(Instant(t, action, State.COMPLETED), meta)

    mine = "20260101000000900"
    rewrites = [("p=a", "f1", "20260101000000100")]
    assert (
        rewrite_conflict(
            rewrites, [commit("20260101000000100", "f1"), commit("20260101000000200", "f2")], mine
        )
        is None
    )
    assert rewrite_conflict(rewrites, [commit("20260101000000300", "f1")], mine) == (
        "20260101000000300",
        "p=a",
        "f1",
    )
    over = commit("20260101000000400", "f9", {"p=a": ["f1"]})
    assert rewrite_conflict(rewrites, [over], mine) == ("20260101000000400", "p=a", "f1")
    assert rewrite_conflict(rewrites, [commit(mine, "f1")], mine) is None


async def test_labels_as_for_inserts(backend_local: StoreUnderTest) -> None:
    """A label commits once: the same upsert again (a replay) is skipped, rolled back, and
    the table is unchanged; delete takes labels too."""
    from amcommit.table.commit.labels import Label, last_committed

    store, dest = backend_local.store, join(backend_local.base, "lb")
    rows = [{"id": i, "p": "a", "v": "x", "ts": 1} for i in range(3)]
    first = await mutate.upsert(store, dest, _t(rows), precombine_field="ts", label=Label("app", 0), **KW)
    assert first.job is not None and table_report(first.job).label == "app:0" and first.skipped_label is None
    again = await mutate.upsert(store, dest, _t(rows), precombine_field="ts", label=Label("app", 0), **KW)
    assert again.skipped_label == first.instant
    d = await mutate.delete(store, dest, _t(rows[:1]), label=Label("app", 1), **KW)
    assert d.deleted == 1 and await last_committed(store, dest, "app") == (1, d.instant)
    replay = await mutate.delete(store, dest, _t(rows[1:2]), label=Label("app", 1), **KW)
    assert replay.skipped_label == d.instant
    assert await amcommit_snapshot(store, dest) == [(1, "a", "x", 1), (2, "a", "x", 1)]
    names = [i.path async for i in store.list(dest)]
    assert not [n for n in names if again.instant in n or replay.instant in n]


class _Counting:
    """The store, counting the bytes that its reads of base files return (the wire's)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.received: dict[str, int] = {}

    def _count(self, path: str, n: int) -> None:
        kind = "data" if path.endswith(".parquet") else "other"
        self.received[kind] = self.received.get(kind, 0) + n

    async def get(self, path: str) -> bytes:
        data = await self.inner.get(path)
        self._count(path, len(data))
        return data

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != "get_range":
            return attr

        async def get_range(path: str, start: int, length: int) -> bytes:
            data: bytes = await attr(path, start, length)
            self._count(path, len(data))
            return data

        return get_range


async def test_index_on_fake_gcs_reads_footers_and_key_chunks_only(backend_gcs_fake: StoreUnderTest) -> None:
    await _ranged_index(backend_gcs_fake)


async def test_index_on_azurite_reads_footers_and_key_chunks_only(
    backend_blob_azurite: StoreUnderTest,
) -> None:
    await _ranged_index(backend_blob_azurite)


async def test_index_on_adls_reads_footers_and_key_chunks_only(backend_dfs_server: StoreUnderTest) -> None:
    await _ranged_index(backend_dfs_server)


async def _ranged_index(sut: StoreUnderTest) -> None:
    """On an object store: the index reads each file's footer by a ranged read of its end and
    the key column of a candidate by ranged reads of its chunks, not whole objects."""
    import random

    store, dest = sut.store, join(sut.base, "rg")
    rnd = random.Random(3)
    for g in range(3):
        rows = [{"id": g * 10_000 + i, "p": "a", "v": rnd.randbytes(150).hex(), "ts": 1} for i in range(2000)]
        await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **NEW)
    _, commits = await load_timeline(store, dest)
    files = snapshot(commits)
    total = sum(f.size for f in files)
    counted = _Counting(store)
    rep = await mutate.upsert(
        counted,  # type: ignore[arg-type]
        dest,
        _t([{"id": 10_005, "p": "a", "v": "new", "ts": 2}]),
        precombine_field="ts",
        **KW,
    )
    assert (rep.footers_read, rep.key_columns_read, rep.files_rewritten, rep.updated) == (3, 1, 1, 1)
    _, commits = await load_timeline(store, dest)
    new = {f.file_id for f in snapshot(commits) if f.instant == rep.instant}
    rewritten = sum(f.size for f in files if f.file_id in new)
    index_bytes = counted.received.get("data", 0) - rewritten  # the rewrite reads its file whole
    assert 0 < index_bytes < 0.75 * total, (index_bytes, total)
    assert (10_005, "a", "new", 2) in await amcommit_snapshot(store, dest)


async def test_unpartitioned_composite_keys_and_files_without_footer_index(
    backend_local: StoreUnderTest,
) -> None:
    """A table without partitions and with a two-column key; a base file without Hudi's
    footer index (an older writer's) cannot be ruled out: its key column is read."""
    store, dest = backend_local.store, join(backend_local.base, "np")
    assert isinstance(store, LocalStore)
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("v", pa.string())])
    kw: dict[str, Any] = {"record_key": ("a", "b"), "config": FAST}
    rows = [{"a": i, "b": "xy"[i % 2], "v": "0"} for i in range(6)]
    await mutate.upsert(store, dest, pa.Table.from_pylist(rows, schema=schema), **kw)
    other = [{"a": 100 + i, "b": "x", "v": "0"} for i in range(3)]
    await mutate.upsert(store, dest, pa.Table.from_pylist(other, schema=schema), small_file_limit=0, **kw)
    _, commits = await load_timeline(store, dest)
    files = snapshot(commits)
    assert len(files) == 2 and all("/" not in f.path for f in files)
    # strip the index from the first file, as a writer without it would have written it
    first = next(f for f in files if f.instant == commits[0].instant.time)
    path = os.path.join(store.root, dest, first.path)
    t = pq.read_table(path)
    assert t.column("_hoodie_record_key").to_pylist()[0] == "a:0,b:x"
    pq.write_table(t.replace_schema_metadata(None), path)
    assert b"hoodie_min_record_key" not in (pq.read_metadata(path).metadata or {})
    up = [{"a": 1, "b": "y", "v": "u"}, {"a": 101, "b": "x", "v": "u"}, {"a": 7, "b": "x", "v": "new"}]
    rep = await mutate.upsert(store, dest, pa.Table.from_pylist(up, schema=schema), small_file_limit=0, **kw)
    assert (rep.footers_read, rep.key_columns_read, rep.updated, rep.inserted) == (2, 2, 2, 1)
    d = await mutate.delete(
        store, dest, pa.Table.from_pylist([{"a": 2, "b": "x", "v": None}], schema=schema), **kw
    )
    assert d.deleted == 1
    got = []
    _, commits = await load_timeline(store, dest)
    for f in snapshot(commits):
        got += [
            (r["a"], r["b"], r["v"])
            for r in pq.read_table(os.path.join(store.root, dest, f.path)).to_pylist()
        ]
    want = {(r["a"], r["b"]): r["v"] for r in rows + other} | {(r["a"], r["b"]): r["v"] for r in up}
    del want[(2, "x")]
    assert sorted(got) == sorted((a, b, v) for (a, b), v in want.items())
    assert sorted(hudi_rows_np(os.path.join(store.root, dest))) == sorted(got)


def hudi_rows_np(uri: str) -> list[tuple[Any, ...]]:
    from hudi import HudiReadOptions, HudiTableBuilder

    out = []
    for batch in HudiTableBuilder.from_base_uri(uri).build().read(HudiReadOptions()):
        out += [(r["a"], r["b"], r["v"]) for r in batch.to_pylist()]
    return out


def test_blocking_wrappers_on_a_url(tmp_path: Any) -> None:
    url = str(tmp_path / "blk")
    rows = [{"id": i, "p": "a", "v": "0", "ts": 1} for i in range(4)]
    kw: dict[str, Any] = {"record_key": "id", "partition_by": "p"}
    first = mutate.upsert_blocking(url, _t(rows), precombine_field="ts", **kw)
    up = mutate.upsert_blocking(
        url, _t([{"id": 1, "p": "a", "v": "u", "ts": 2}]), precombine_field="ts", **kw
    )
    gone = mutate.delete_blocking(url, _t([{"id": 2, "p": "a", "v": None, "ts": 0}]), **kw)
    assert (first.inserted, up.updated, gone.deleted) == (4, 1, 1)
    assert hudi_snapshot(url) == [(0, "a", "0", 1), (1, "a", "u", 2), (3, "a", "0", 1)]


async def test_key_inserted_by_two_writers_at_once_then_deleted_everywhere(
    backend_local: StoreUnderTest,
) -> None:
    """Two writers inserting the same new key at once both insert it (as in Hudi: no file
    group overlaps); a later upsert updates, and a delete removes, every copy."""
    store, dest = backend_local.store, join(backend_local.base, "dup")
    await mutate.upsert(
        store, dest, _t([{"id": 0, "p": "a", "v": "0", "ts": 1}]), precombine_field="ts", **NEW
    )
    one = await mutate.prepare(
        store,
        dest,
        _t([{"id": 7, "p": "a", "v": "one", "ts": 1}]),
        operation="UPSERT",
        precombine_field="ts",
        **NEW,
    )
    two = await mutate.prepare(
        store,
        dest,
        _t([{"id": 7, "p": "a", "v": "two", "ts": 1}]),
        operation="UPSERT",
        precombine_field="ts",
        **NEW,
    )
    await one.commit()
    await two.commit()
    assert await amcommit_snapshot(store, dest) == [(0, "a", "0", 1), (7, "a", "one", 1), (7, "a", "two", 1)]
    up = await mutate.upsert(
        store, dest, _t([{"id": 7, "p": "a", "v": "u", "ts": 2}]), precombine_field="ts", **KW
    )
    assert (up.updated, up.files_rewritten) == (2, 2)
    assert await amcommit_snapshot(store, dest) == [(0, "a", "0", 1), (7, "a", "u", 2), (7, "a", "u", 2)]
    d = await mutate.delete(store, dest, _t([{"id": 7, "p": "a", "v": None, "ts": 0}]), **KW)
    assert (d.deleted, d.absent_deletes) == (2, 0)
    assert await amcommit_snapshot(store, dest) == [(0, "a", "0", 1)]


async def test_inserts_fill_small_file_groups_first(backend_local: StoreUnderTest) -> None:
    """Hudi's small-file handling: inserts go into the partition's smallest file groups
    (rewritten: prevCommit, numInserts) up to max_file_size, the rest into a new group."""
    store, dest = backend_local.store, join(backend_local.base, "sf")
    for g, n in enumerate((30, 10)):
        rows = [{"id": g * 1000 + i, "p": "a", "v": "x", "ts": 1} for i in range(n)]
        await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **NEW)
    _, commits = await load_timeline(store, dest)
    files = sorted(snapshot(commits), key=lambda f: f.size)
    small = files[0]
    assert small.rows == 10
    avg = sum(f.size for f in files) // sum(f.rows for f in files)
    new = [{"id": 5000 + i, "p": "a", "v": "n", "ts": 1} for i in range(8)]
    limits = {
        "small_file_limit": files[1].size,
        "max_file_size": small.size + 5 * avg,
    }  # only `small` is small
    rep = await mutate.upsert(store, dest, _t(new), precombine_field="ts", **limits, **KW)
    assert (rep.inserted, rep.files_rewritten, rep.files_created) == (8, 1, 1)
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, f"{rep.instant}.commit")))
    got = sorted((s.file_id, s.prev_commit, s.num_inserts, s.num_writes) for s in meta.write_stats())
    assert (small.file_id, small.instant, 5, 15) in got and any(s[1] == "null" and s[2] == 3 for s in got)
    assert len(await amcommit_snapshot(store, dest)) == 48
    everything = await mutate.upsert(
        store, dest, _t([{"id": 9999, "p": "a", "v": "n", "ts": 1}]), precombine_field="ts", **KW
    )
    assert (everything.files_rewritten, everything.files_created) == (1, 0)  # default limits: room enough


def test_assign_inserts_is_pure() -> None:
    def fv(path: str, size: int, rows: int) -> Any:
        from amcommit.table.file_group.model import FileVersion

        return FileVersion("p=a", path, path, "20260101000000000", size, rows)

    plan = mutate.MutationPlan(inserts={"p=a": list(range(10)), "p=b": [10, 11]})
    files = [fv("big", 900, 9), fv("small", 300, 3), fv("huge", 5000, 50)]
    mutate.assign_inserts(plan, files, small_file_limit=1000, max_file_size=1000)
    # avg 100 bytes: "small" takes 7, "big" takes 1, "huge" is not small; p=b has no files
    assert plan.rewrites["small"].inserts == list(range(7)) and plan.rewrites["big"].inserts == [7]
    assert plan.inserts == {"p=a": [8, 9], "p=b": [10, 11]}
    off = mutate.MutationPlan(inserts={"p=a": [1]})
    mutate.assign_inserts(off, files, small_file_limit=0)
    assert off.inserts == {"p=a": [1]} and not off.rewrites
