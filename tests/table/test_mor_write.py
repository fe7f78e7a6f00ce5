"""Merge-on-Read writes through the engine API (issue 34): deltacommits whose updates and
deletes go to one new log version of each touched file slice, checked against a model and
read by hudi-rs (snapshot, read-optimized, time travel) on local files, Azurite and
fake-gcs-server; the table type chosen at creation; conflicting log writers; bad input."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest

from amcommit.errors import ConfigError
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.errors import MutationError
from amcommit.table.format.model import decode_commit_metadata
from amcommit.table.format.naming import HOODIE_DIR, parse_base_file_name, parse_log_file_name
from amcommit.table.format.rollback_meta import decode_rollback_metadata
from amcommit.table.mutate import engine as mutate
from amcommit.table.query.read import read_store
from amcommit.table.timeline.instants import list_instants
from tests.backends import StoreUnderTest
from tests.table.test_mutate import (
    FAST,
    KW,
    Model,
    _steps,
    _t,
    _temp_left,
    hudi_snapshot,
    model_delete,
    model_upsert,
    rows_of,
)
from tests.table.writehelpers import listing

MOR = KW | {"config": FAST.with_options(table_commit="direct"), "table_type": "MERGE_ON_READ"}


def hudi_read_optimized(uri: str, storage: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
    """hudi-rs's read-optimized view (base files only)."""
    from hudi import HudiReadOptions, HudiTableBuilder

    b = HudiTableBuilder.from_base_uri(uri)
    if storage:
        b = b.with_storage_options(storage)
    opts = HudiReadOptions(hudi_options={"hoodie.read.use.read_optimized.mode": "true"})
    out = []
    for batch in b.build().read(opts):
        out += [(r["id"], r["p"], r["v"], r["ts"]) for r in batch.to_pylist()]
    return sorted(out)


async def _files(store: Store, dest: str) -> dict[str, int]:
    """Data files of the table (base and log files) -> size."""
    out = {}
    async for i in store.list(dest, recursive=True):
        rel = i.path[len(dest) + 1 :]
        if i.is_dir or rel.startswith(".hoodie/"):
            continue
        name = rel.rpartition("/")[2]
        if parse_base_file_name(name) or parse_log_file_name(name):
            out[rel] = i.size
    return out


MOR_SEQ = MOR | {"config": MOR["config"].with_options(compact_every=0)}
"""The sequence's writes: no inline compaction (the sequence compacts at its own step)."""


async def _mor_model_checked(sut: StoreUnderTest, hudi_uri: Any) -> None:
    """insert -> upsert (updates across partitions, duplicates in the batch, inserts) ->
    delete -> upsert -> compact -> upsert -> delete -> clean on a Merge-on-Read table: after
    each instant hudi-rs's and amcommit's snapshots equal the model, their read-optimized
    views equal the base files' records (before the compaction: each key as first inserted;
    after it: the compacted state, then the keys inserted since), each write is a
    deltacommit, updates and deletes went to new log files (one per touched file group,
    after the compaction against the new slices), every file present before is still there,
    same size (no base file rewritten by a deltacommit), and no marker is left. Time travel
    to every instant and incremental reads between every pair equal the model (amcommit's
    reader) and hudi-rs's answers. The clean then deletes exactly the slices the compaction
    superseded, each whole (base file and log files)."""
    from amcommit.table.commit.clean import clean
    from amcommit.table.commit.compaction import compact_store

    cfg = MOR_SEQ["config"]
    store, dest = sut.store, join(sut.base, "mor")
    uri, storage = hudi_uri(dest)
    m: Model = {}
    ro: Model = {}  # the records of the base files
    history: list[tuple[str, Model]] = []
    changed: dict[tuple[str, int], str] = {}  # key -> the instant that last wrote it
    changes: list[dict[tuple[str, int], str]] = []
    before: dict[str, int] = {}
    compacted: dict[str, str] = {}  # file id -> the base instant of the slice compaction superseded
    tc = ""
    for op, rows in _mor_steps():
        if op == "compact":
            crep = await compact_store(store, dest, config=cfg)
            assert crep.instant is not None and crep.file_groups > 0
            instant, kind = crep.instant, "commit"
            ro = dict(m)  # every group with logs compacted (small table, one plan)
        elif op == "upsert":
            rep = await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **MOR_SEQ)
            new = {k: r for k, r in model_upsert({}, rows).items() if k not in m and k not in ro}
            m = model_upsert(m, rows)
            ro.update(new)
            changed |= {(r["p"], r["id"]): rep.instant for r in rows}
        else:
            rep = await mutate.delete(store, dest, _t(rows), **MOR_SEQ)
            m = model_delete(m, rows)
        if op != "compact":
            assert rep.job is not None and rep.job.success
            assert rep.files_rewritten == 0
            instant, kind = rep.instant, "deltacommit"
        changed = {k: t for k, t in changed.items() if k in m}
        changes.append(dict(changed))
        history.append((instant, m))
        names = {i.file_name for i in await list_instants(store, dest) if i.time == instant}
        states = (
            (".requested", ".inflight")
            if op != "compact"
            else (".compaction.requested", ".compaction.inflight")
        )
        assert names == {
            f"{instant}.{kind}",
            *(f"{instant}{s}" if op == "compact" else f"{instant}.{kind}{s}" for s in states),
        }
        meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, f"{instant}.{kind}")))
        stats = [s for ss in meta.partition_to_write_stats.values() for s in ss]
        logs = [s for s in stats if parse_log_file_name(s.path.rpartition("/")[2])]
        bases = [s for s in stats if s not in logs]
        if op == "compact":
            assert meta.compacted and not logs
            tc = instant
            compacted = {s.file_id: s.prev_commit for s in bases}
        else:
            assert len(logs) == rep.files_logged and len(bases) == rep.files_created
            assert all(s.prev_commit == "null" for s in bases)  # new file groups only
            for s in logs:  # after the compaction, logs of compacted groups go to the new slices
                name = parse_log_file_name(s.path.rpartition("/")[2])
                assert name is not None and name.base_instant == (
                    tc if s.file_id in compacted else name.base_instant
                )
        after = await _files(store, dest)
        for rel, size in before.items():  # nothing written before was replaced or removed
            assert after.get(rel) == size, rel
        added = set(after) - set(before)
        assert added == {s.path for s in stats}
        assert await _temp_left(store, dest) == []  # no marker left
        if op == "upsert" and rep.updated:
            assert rep.files_logged > 0
        before = after
        assert hudi_snapshot(uri, storage=storage) == rows_of(m), op
        assert hudi_read_optimized(uri, storage) == rows_of(ro), op
        assert _rows(await read_store(store, dest)) == rows_of(m), op
        assert _rows(await read_store(store, dest, query_type="read_optimized")) == rows_of(ro), op
    # the update step: a log file in each partition whose records it updated (p=a and p=b)
    update_instant = history[1][0]
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, f"{update_instant}.deltacommit")))
    logged = {
        p
        for p, ss in meta.partition_to_write_stats.items()
        for s in ss
        if ".log." in s.path and s.num_update_writes
    }
    assert logged == {"p=a", "p=b"}
    for t, snap in history:
        assert hudi_snapshot(uri, as_of=t, storage=storage) == rows_of(snap), t
        assert _rows(await read_store(store, dest, as_of=t)) == rows_of(snap), t
    # incremental (a, b] for every pair: the records of b's snapshot last written in (a, b]
    # (deletes are not emitted, as in hudi-rs 0.5.0; a compaction keeps each record's commit
    # time); hudi-rs answers the same
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    b_ = HudiTableBuilder.from_base_uri(uri)
    oracle = (b_.with_storage_options(storage) if storage else b_).build()
    times = [t for t, _ in history]
    for i, (b, snap) in enumerate(history):
        for a in [None, *times[:i]]:
            want = [r for k, r in snap.items() if a is None or changes[i][k] > a]
            kw: dict[str, Any] = {"until": b} | ({"since": a} if a else {"query_type": "incremental"})
            assert _rows(await read_store(store, dest, **kw)) == rows_of(
                {(r["p"], r["id"]): r for r in want}
            ), (a, b)
            o = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_end_timestamp(b)
            o = o.with_start_timestamp(a) if a else o
            theirs = [(r["id"], r["p"], r["v"], r["ts"]) for x in oracle.read(o) for r in x.to_pylist()]
            assert sorted(theirs) == rows_of({(r["p"], r["id"]): r for r in want}), (a, b)
    # clean (KEEP_LATEST_COMMITS, the latest commit kept): exactly the slices the compaction
    # superseded go, each whole (its base file and its log files); every latest slice stays
    kept = await _files(store, dest)

    def superseded(rel: str) -> bool:
        name = rel.rpartition("/")[2]
        b, lg = parse_base_file_name(name), parse_log_file_name(name)
        fid, base = (b.file_id, b.instant) if b else (lg.file_id, lg.base_instant) if lg else ("", "")
        return compacted.get(fid) == base

    doomed = {rel for rel in kept if superseded(rel)}
    assert [r for r in doomed if ".log." in r] and [r for r in doomed if ".log." not in r]
    crep = await clean(store, dest, retain_commits=1, config=cfg)
    assert set(crep.files) == doomed
    assert set(await _files(store, dest)) == set(kept) - doomed
    assert hudi_snapshot(uri, storage=storage) == rows_of(m)
    assert hudi_read_optimized(uri, storage) == rows_of(ro)
    assert _rows(await read_store(store, dest)) == rows_of(m)
    assert _rows(await read_store(store, dest, query_type="read_optimized")) == rows_of(ro)


def _mor_steps() -> list[tuple[str, list[dict[str, Any]]]]:
    """The issue's sequence: insert, upsert (updates across partitions, duplicates in the
    batch), delete, upsert, compact, upsert, delete."""
    up3 = [
        {"id": 6, "p": "a", "v": "u6", "ts": 4},  # a second log version of p=a's slice
        {"id": 6, "p": "a", "v": "u6-old", "ts": 2},  # a duplicate: ts 4 wins
        {"id": 7, "p": "b", "v": "u7", "ts": 4},
        {"id": 200, "p": "c", "v": "new-c2", "ts": 1},
    ]
    del2 = [{"id": 2, "p": "a", "v": None, "ts": 0}, {"id": 100, "p": "c", "v": None, "ts": 0}]
    return [*_steps(), ("compact", []), ("upsert", up3), ("delete", del2)]


def _rows(t: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(t[c].to_pylist() for c in ("id", "p", "v", "ts")), strict=True))


async def test_mor_model_checked_sequence_local(backend_local: StoreUnderTest) -> None:
    store = backend_local.store
    assert isinstance(store, LocalStore)
    await _mor_model_checked(backend_local, lambda dest: (os.path.join(store.root, dest), None))
    props = (await store.get(join(backend_local.base, "mor", HOODIE_DIR, "hoodie.properties"))).decode()
    assert "hoodie.table.type=MERGE_ON_READ\n" in props
    assert (
        "hoodie.compaction.payload.class=org.apache.hudi.common.model.OverwriteWithLatestAvroPayload\n"
        in props
    )
    assert "hoodie.table.precombine.field=ts\n" in props


async def test_mor_model_checked_sequence_fake_gcs(backend_gcs_fake: StoreUnderTest) -> None:
    srv: Any = backend_gcs_fake.extras["server"]
    opts = {"google_base_url": srv.url, "google_skip_signature": "true", "allow_http": "true"}
    await _mor_model_checked(
        backend_gcs_fake, lambda dest: (f"gs://{backend_gcs_fake.extras['bucket']}/{dest}", opts)
    )


async def test_mor_model_checked_sequence_azurite(backend_blob_azurite: StoreUnderTest) -> None:
    az: Any = backend_blob_azurite.extras["emulator"]
    opts = {
        "azure_storage_account_name": az.account,
        "azure_storage_account_key": az.account_key,
        "azure_storage_endpoint": az.endpoint,
        "azure_allow_http": "true",
    }
    container = backend_blob_azurite.extras["container"]
    await _mor_model_checked(backend_blob_azurite, lambda dest: (f"az://{container}/{dest}", opts))


async def test_table_type_chosen_at_creation_mismatch_refused(backend_local: StoreUnderTest) -> None:
    """A write naming another type than the table's is refused in one line, nothing
    written; a bad type too; not naming one continues the table as it is."""
    store, base = backend_local.store, backend_local.base
    rows = _t([{"id": 1, "p": "a", "v": "x", "ts": 1}])
    cow, mor = join(base, "cow"), join(base, "mor")
    await mutate.upsert(store, cow, rows, precombine_field="ts", **KW)
    await mutate.upsert(store, mor, rows, precombine_field="ts", **MOR)
    for dest, asked, is_ in (
        (cow, "MERGE_ON_READ", "COPY_ON_WRITE"),
        (mor, "COPY_ON_WRITE", "MERGE_ON_READ"),
    ):
        was = await listing(store, dest)
        for call in (mutate.upsert, mutate.delete):
            kw = (MOR if dest == mor else KW) | {"table_type": asked}
            with pytest.raises(ConfigError) as e:
                await call(store, dest, rows, **kw)
            msg = str(e.value)
            assert "\n" not in msg and f"is a {is_} table; a write asked for {asked}" in msg, msg
            with pytest.raises(ConfigError, match="a write asked for"):
                await call(store, dest, rows, **{**kw, "table_type": None, "hoodie.table.type": asked})
        assert await listing(store, dest) == was
    with pytest.raises(ConfigError) as e:
        await mutate.upsert(store, join(base, "new"), rows, **KW | {"table_type": "MOR"})
    assert str(e.value) == "invalid table type 'MOR': COPY_ON_WRITE or MERGE_ON_READ"
    assert await listing(store, join(base, "new")) == []
    # not naming a type: the table's own
    rep = await mutate.upsert(store, mor, _t([{"id": 1, "p": "a", "v": "y", "ts": 2}]), **KW)
    assert rep.files_logged == 1 and rep.files_rewritten == 0


async def test_bad_input_refused_on_mor(backend_local: StoreUnderTest) -> None:
    """Bad input as on Copy-on-Write: one line each, nothing written."""
    store, dest = backend_local.store, join(backend_local.base, "bad")
    await mutate.upsert(
        store, dest, _t([{"id": 1, "p": "a", "v": "x", "ts": 1}]), precombine_field="ts", **MOR
    )
    was = await listing(store, dest)
    nulls = pa.table({"id": pa.array([None], pa.int64()), "p": ["a"], "v": ["x"], "ts": [1]})
    bad_type = pa.table({"id": ["1"], "p": ["a"], "v": ["x"], "ts": [1]})
    no_key = pa.table({"p": ["a"], "v": ["x"], "ts": [1]})
    for data, want in (
        (nulls, "null"),
        (bad_type, "record key column 'id' is string in the data but long in the table"),
        (no_key, "record key column 'id' is not in the data"),
    ):
        with pytest.raises(MutationError) as e:
            await mutate.upsert(store, dest, data, precombine_field="ts", **MOR)
        assert "\n" not in str(e.value) and want in str(e.value), str(e.value)
    assert await listing(store, dest) == was


async def test_concurrent_log_writers_one_fails_cleanly(backend_local: StoreUnderTest) -> None:
    """Two writers add a log file to the same file slice at once: each writes its own log
    file (a token holding its instant: the names differ, nothing is overwritten); the one
    committing second fails with WriteConflict (one line) and is rolled back, its log file
    removed; the first's log file and update stay. A writer of another file group commits."""
    from amcommit.table.errors import WriteConflict

    store, dest = backend_local.store, join(backend_local.base, "cc")
    base = [{"id": i, "p": "ab"[i % 2], "v": "0", "ts": 1} for i in range(10)]
    await mutate.upsert(store, dest, _t(base), precombine_field="ts", **MOR)
    kw = MOR | {"precombine_field": "ts", "operation": "UPSERT"}
    b = await mutate.prepare(store, dest, _t([{"id": 0, "p": "a", "v": "B", "ts": 2}]), **kw)
    a = await mutate.prepare(store, dest, _t([{"id": 2, "p": "a", "v": "A", "ts": 2}]), **kw)
    other = await mutate.prepare(store, dest, _t([{"id": 1, "p": "b", "v": "O", "ts": 2}]), **kw)
    logs = [n for n in await listing(store, dest) if ".log.1_" in n and n.startswith("p=a/")]
    assert len(logs) == 2  # the same log version of one slice, two files
    await b.commit()
    with pytest.raises(WriteConflict) as e:
        await a.commit()
    msg = str(e.value)
    assert "\n" not in msg and f"conflicts with instant {b.report.instant}" in msg
    await other.commit()
    left = await listing(store, dest)
    assert not [n for n in left if a.report.instant in n]  # A's log file and markers gone
    assert [n for n in left if b.report.instant in n and ".log." in n]
    want = {(r["id"], r["p"]): r["v"] for r in base} | {(0, "a"): "B", (1, "b"): "O"}
    got = {(r[0], r[1]): r[2] for r in hudi_snapshot(os.path.join(store.root, dest))}  # type: ignore[attr-defined]
    assert got == want


# -- crash safety: the whole deltacommit (begin, files, task commit, job commit) killed
# before each of its mutating requests in a real subprocess (SIGKILL), then resumed or
# rolled back here

KILL_CFG = FAST.with_options(writer_ttl=600.0, lock_ttl=60.0, table_commit="direct")
FIRST = [{"id": i, "p": "abc"[i % 3], "v": "0", "ts": 1} for i in range(12)]
UPSERT = [
    {"id": 1, "p": "b", "v": "u", "ts": 2},  # updates: log files of two slices
    {"id": 3, "p": "a", "v": "u", "ts": 2},
    {"id": 50, "p": "c", "v": "n", "ts": 1},  # an insert: a new base file
]
LATER = [{"id": 1, "p": "b", "v": "w", "ts": 3}]


def _kill_child(root: str, n: int) -> bool:
    """The upsert in a child forked from the suite's fork server (tests.forkrun), killed
    before its n-th mutating request; True if it completed."""
    import json

    from tests.forkrun import run_module

    r = run_module("tests.table.mor_kill_child", [root, "tbl", str(n), json.dumps(UPSERT)])
    if r.returncode == 0:
        assert "completed" in r.stdout
        return True
    assert r.returncode == -9, r.stderr[-2000:]
    return False


async def _files_only(store: Store, dest: str) -> list[str]:
    return sorted([i.path[len(dest) + 1 :] async for i in store.list(dest, recursive=True) if not i.is_dir])


async def test_mor_upsert_killed_at_every_request_then_resume_or_roll_back(tmp_path: Any) -> None:
    """At every kill point hudi-rs sees the table before the deltacommit or after it, never
    a mix. Then the write is resumed (``commit_job``: it completes once its task committed,
    else it is refused and rolled back) or rolled back (``abort_job``): rolled back, the
    table's files are exactly those before it (its base files, its log files, markers,
    instant files all gone); completed, exactly one deltacommit more and no marker left.
    A later upsert into the same slices is then read right by hudi-rs."""
    from amcommit.api import abort_job, commit_job
    from amcommit.errors import AmcommitError
    from amcommit.table.commit.table_commit import staged_times

    from_model = model_upsert(model_upsert({}, FIRST), UPSERT)
    before_rows, after_rows = rows_of(model_upsert({}, FIRST)), rows_of(from_model)
    n = 1
    outcomes = set()
    rolled: set[int] = set()  # kill points whose rollback was recorded as an instant
    while True:
        root = str(tmp_path / f"k{n}")
        os.makedirs(root)
        store = LocalStore(root, fsync=False)
        async with store:
            await mutate.upsert(store, "tbl", _t(FIRST), precombine_field="ts", **MOR | {"config": KILL_CFG})
            was = await _files_only(store, "tbl")
            done = _kill_child(root, n)
            uri = os.path.join(root, "tbl")
            assert hudi_snapshot(uri) in (before_rows, after_rows), n  # the whole instant or nothing
            pending = {i.time for i in await list_instants(store, "tbl") if not i.completed}
            pending |= await staged_times(store, "tbl")
            for t in sorted(pending):
                if n % 2:
                    try:
                        await commit_job(store, "tbl", t, config=KILL_CFG)
                    except AmcommitError:
                        await abort_job(store, "tbl", t, config=KILL_CFG)
                else:
                    await abort_job(store, "tbl", t, config=KILL_CFG)
            seen = hudi_snapshot(uri)
            now = await _files_only(store, "tbl")
            deltas = [
                i for i in await list_instants(store, "tbl") if i.completed and i.action == "deltacommit"
            ]
            if seen == before_rows:
                outcomes.add("rolled back")
                # exactly the files before, plus the rollback instant (three files) when the
                # deltacommit had reached the timeline
                extra = sorted(set(now) - set(was))
                assert not set(was) - set(now) and len(deltas) == 1, (n, sorted(set(now) ^ set(was)))
                if extra:
                    r = extra[0].split("/")[1].split(".")[0]
                    assert extra == [f".hoodie/{r}.rollback{s}" for s in ("", ".inflight", ".requested")], n
                    meta = decode_rollback_metadata(
                        await store.get(f"tbl/{extra[0]}"), root_uri=join(store.root_uri, "tbl")
                    )
                    assert meta.target in pending and meta.action == "deltacommit", n
                    assert not {d for ds in meta.deleted.values() for d in ds} & set(was), n
                    rolled.add(n)
            else:
                outcomes.add("completed")
                assert seen == after_rows and len(deltas) == 2, n
                assert not [p for p in now if "/.temp/" in p or ".marker." in p], n
            # the table goes on: a later deltacommit into the same slice reads right
            await mutate.upsert(store, "tbl", _t(LATER), precombine_field="ts", **MOR | {"config": KILL_CFG})
            want = model_upsert(from_model if seen == after_rows else model_upsert({}, FIRST), LATER)
            assert hudi_snapshot(uri) == rows_of(want), n
        if done:
            break
        n += 1
    assert n > 10 and outcomes == {"rolled back", "completed"}, (n, outcomes)
    assert rolled, "no kill point left a deltacommit to roll back"


def test_spark_table_type_option() -> None:
    """Spark's ``tableType`` (alias ``hoodie.datasource.write.table.type``): Copy-on-Write
    is taken out of the options; Merge-on-Read is refused in one line (Spark writes of it
    are not built yet); another value too."""
    from amcommit.table.format.hudi_names import resolve, spark_table_type

    opts = resolve({"hoodie.datasource.write.table.type": "copy_on_write", "x": 1}, "spark")
    assert opts == {"x": 1, "tableType": "COPY_ON_WRITE"}
    spark_table_type(opts)
    assert opts == {"x": 1}
    with pytest.raises(ConfigError) as e:
        spark_table_type(resolve({"hoodie.datasource.write.table.type": "MERGE_ON_READ"}, "spark"))
    assert str(e.value) == (
        "option 'tableType': Spark writes MERGE_ON_READ tables not yet; use "
        "amcommit.table.mutate.upsert/delete(table_type='MERGE_ON_READ')"
    )
    with pytest.raises(ConfigError, match="table type 'MOR' is not one of"):
        spark_table_type({"TABLETYPE": "mor"})
