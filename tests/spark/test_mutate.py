"""Upsert and delete through Spark (``amcommit.spark.upsert`` / ``delete``, ``write_batch``
with ``operation``), checked against a Python model: the snapshot after each step (amcommit's
reader and hudi-rs), the incremental read of each upsert's instant (exactly the records it
changed), the write stats and the index counts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

import amcommit.spark as amspark
from amcommit.errors import AmcommitError
from tests.table.test_mutate import Model, hudi_snapshot, model_delete, model_upsert, rows_of

pytestmark = pytest.mark.spark

SCHEMA = "id long, p string, v string, ts long"


def _steps() -> list[tuple[str, list[dict[str, Any]]]]:
    ins = [{"id": i, "p": "ab"[i % 2], "v": f"a{i}", "ts": 1} for i in range(40)]
    up = [
        {"id": 1, "p": "b", "v": "u1", "ts": 2},  # an update in b
        {"id": 2, "p": "a", "v": "u2-old", "ts": 5},  # duplicates in the batch: ts 7 wins
        {"id": 2, "p": "a", "v": "u2", "ts": 7},
        {"id": 2, "p": "a", "v": "u2-older", "ts": 3},
        {"id": 4, "p": "b", "v": "moved", "ts": 2},  # key 4 lives in a: an insert into b
        {"id": 100, "p": "c", "v": "new-c", "ts": 1},  # a new partition
        {"id": 101, "p": "a", "v": "new-a", "ts": 1},
    ]
    dele = [{"id": 3, "p": "b"}, {"id": 4, "p": "a"}, {"id": 999, "p": "a"}]  # 999: absent
    up2 = [{"id": 5, "p": "b", "v": "u5", "ts": 9}, {"id": 3, "p": "b", "v": "back", "ts": 1}]
    return [("upsert", ins), ("upsert", up), ("delete", dele), ("upsert", up2)]


def _df(spark: Any, rows: list[dict[str, Any]], schema: str = SCHEMA, parts: int = 2) -> Any:
    full = [{k: r.get(k) for k in ("id", "p", "v", "ts")} for r in rows]
    df = spark.createDataFrame(full, schema).repartition(parts)
    return df if "v" in schema else df.select("id", "p")


def _snapshot(spark: Any, dest: str, **opts: str) -> list[tuple[Any, ...]]:
    r = spark.read.format("amcommit")
    for k, v in opts.items():
        r = r.option(k, v)
    return sorted((x.id, x.p, x.v, x.ts) for x in r.load(dest).collect())


def _stats(dest: Path, instant: str) -> list[dict[str, Any]]:
    (name,) = [
        n for n in (dest / ".hoodie").iterdir() if n.name.startswith(instant) and n.suffix == ".commit"
    ]
    meta = json.loads(name.read_text())
    assert meta["operationType"] in ("UPSERT", "DELETE")
    return [s for ss in meta["partitionToWriteStats"].values() for s in ss]


def _changed(before: Model, after: Model) -> list[tuple[Any, ...]]:
    return rows_of({k: v for k, v in after.items() if before.get(k) != v})


def _model_checked(
    spark: Any,
    url: str,
    read_uri: str,
    storage: dict[str, str] | None,
    options: dict[str, Any],
    steps: int = 4,
) -> list[Any]:
    m: Model = {}
    reports = []
    for op, rows in _steps()[:steps]:
        before = m
        if op == "upsert":
            rep = amspark.upsert(
                _df(spark, rows), url, recordKey="id", partitionBy="p", precombineField="ts", **options
            )
            m = model_upsert(m, rows)
        else:
            rep = amspark.delete(_df(spark, rows, "id long, p string"), url, **options)
            m = model_delete(m, rows)
        reports.append(rep)
        assert rep.job is not None and rep.job.success
        assert hudi_snapshot(read_uri, storage=storage) == rows_of(m), op
        if storage is None:
            assert _snapshot(spark, url) == rows_of(m), op
            if op == "upsert" and before:  # incremental read of this instant: what it changed
                prev = reports[-2].instant
                got = _snapshot(spark, url, since=prev, until=rep.instant)
                assert got == _changed(before, m), op
    return reports


_NO_BASE_FILE_RENAME = [
    {"phase": "commit", "op": "rename", "path": "*.parquet", "after": 0, "error": "PermissionDenied"}
]


@pytest.mark.parametrize(
    ("table_commit", "driver_rows"),
    [("staged", None), ("direct", None), ("direct", 0)],
    ids=["staged-driver", "direct-driver", "direct-tasks"],
)
def test_upsert_delete_model_checked_local(
    spark: Any, tmp_path: Path, table_commit: str, driver_rows: int | None
) -> None:
    """(direct: each file group's new version is written in place under a MERGE marker,
    new groups under CREATE markers; the job commits rename no base file (a driver fault on
    the first such rename) and leave no marker. ``driver_rows`` 0: in Spark tasks, the
    rewrite tasks and insert tasks; else on the driver.)"""
    from amcommit.testing.spark import armed

    dest = tmp_path / "mt"
    opts: dict[str, Any] = {"table_commit": table_commit}
    if driver_rows is not None:
        opts["driverBatchRows"] = driver_rows
    with armed(driver_faults=_NO_BASE_FILE_RENAME if table_commit == "direct" else None):
        reps = _model_checked(spark, str(dest), str(dest), None, opts)
    assert not (dest / ".hoodie" / ".temp").exists() or not any((dest / ".hoodie" / ".temp").rglob("*.*"))
    ins, up, dele, up2 = reps
    assert (ins.inserted, ins.files_rewritten, ins.footers_read) == (40, 0, 0)
    # key 2 (a) and key 1 (b) updated: one file group per partition rewritten
    assert (up.updated, up.inserted, up.duplicates_dropped) == (2, 3, 2)
    assert up.files_rewritten == 2 and up.key_columns_read <= up.footers_read
    assert (dele.deleted, dele.absent_deletes) == (2, 1)
    assert up2.updated == 1 and up2.inserted == 1
    stats = _stats(dest, up.instant)
    rewritten = [s for s in stats if s["prevCommit"] not in (None, "", "null")]
    assert sorted(s["numUpdateWrites"] for s in rewritten) == [1, 1]
    assert all(s["prevCommit"] == ins.instant for s in rewritten)
    assert sum(s["numInserts"] for s in stats) == 3
    assert sum(s["numDeletes"] for s in _stats(dest, dele.instant)) == 2


def test_upsert_delete_on_fake_gcs(spark: Any, fake_gcs: Any) -> None:
    bucket = f"amc-mut-{uuid.uuid4().hex[:10]}"
    fake_gcs.create_bucket(bucket)
    url = f"gs://{bucket}/t/mt"
    storage = {"google_base_url": fake_gcs.url, "google_skip_signature": "true", "allow_http": "true"}
    # insert and upsert only: the Spark side is the same on every store (the local test runs
    # the whole sequence); what differs, the store's requests, the engine's tests cover
    reps = _model_checked(spark, url, url, storage, {"endpoint": fake_gcs.url}, steps=2)
    assert reps[1].files_rewritten == 2 and reps[1].updated == 2


def _listing(dest: Path) -> list[str]:
    return sorted(
        str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and ".heartbeat" not in str(p)
    )


def test_bad_input_one_line_each_before_any_task_writes(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    dest = tmp_path / "bad"
    rows = [{"id": 1, "p": "a", "v": "x", "ts": 1}, {"id": 2, "p": "b", "v": "y", "ts": 1}]
    amspark.upsert(_df(spark, rows), str(dest), recordKey="id", partitionBy="p", precombineField="ts")
    before = _listing(dest)
    kw = {"recordKey": "id", "partitionBy": "p"}
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (
            _df(spark, [{"id": None, "p": "a", "v": "n", "ts": 1}]),
            kw,
            "record key column 'id' is null or empty in 1 row",
        ),
        (
            _df(spark, rows).drop("ts"),
            kw | {"precombineField": "ts"},
            "precombine column 'ts' is not in the data",
        ),
        (_df(spark, rows).drop("id"), kw, "option 'recordKey' must name columns of the DataFrame (p, v, ts)"),
        (
            _df(spark, [{"id": 1, "p": "a", "v": "x", "ts": None}]),
            kw | {"precombineField": "ts"},
            "precombine column 'ts' is null in 1 row",
        ),
        (
            _df(spark, rows).withColumn("id", F.col("id").cast("string")),
            kw,
            "record key column 'id' is string in the data but long in the table",
        ),
        (_df(spark, rows), kw | {"payload": "Nope"}, "payload 'Nope'"),
    ]
    for df, opts, msg in cases:
        with pytest.raises(AmcommitError) as ei:
            amspark.upsert(df, str(dest), **opts)
        assert msg in str(ei.value) and "\n" not in str(ei.value), str(ei.value)
        assert ei.value.__traceback__ is not None and ei.value.__cause__ is None
        assert _listing(dest) == before
    with pytest.raises(AmcommitError, match="is not a Hudi table"):
        amspark.delete(_df(spark, rows, "id long, p string"), str(tmp_path / "none"), **kw)


def test_format_and_write_stream_refuse_upsert_naming_the_function(spark: Any, tmp_path: Path) -> None:
    dest = tmp_path / "r"
    df = _df(spark, [{"id": 1, "p": "a", "v": "x", "ts": 1}])
    for op in ("upsert", "delete"):
        with pytest.raises(Exception) as ei:
            df.write.format("amcommit").mode("append").option("operation", op).option("recordKey", "id").save(
                str(dest)
            )
        assert f"use amcommit.spark.{op}(df, dest" in str(ei.value)
    assert not dest.exists()
    stream = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    with pytest.raises(Exception) as ei:
        q = (
            stream.writeStream.format("amcommit")
            .option("operation", "upsert")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start(str(dest))
        )
        q.processAllAvailable()
        q.stop()
    assert "use foreachBatch with amcommit.spark.write_batch(df, batch_id, dest, operation='upsert')" in str(
        ei.value
    )
    assert not dest.exists()


def test_write_batch_upsert_and_delete_replay_skipped(spark: Any, tmp_path: Path) -> None:
    dest, ck = tmp_path / "wb", str(tmp_path / "ck")
    kw: dict[str, Any] = {
        "checkpointLocation": ck,
        "recordKey": "id",
        "partitionBy": "p",
        "precombineField": "ts",
    }
    m: Model = {}
    batches = _steps()
    for n, (op, rows) in enumerate(batches):
        df = _df(spark, rows) if op == "upsert" else _df(spark, rows, "id long, p string")
        opts = kw if op == "upsert" else {"checkpointLocation": ck}
        rep = amspark.write_batch(df, n, str(dest), operation=op, **opts)
        assert rep.success and not getattr(rep, "skipped_label", None)
        m = model_upsert(m, rows) if op == "upsert" else model_delete(m, rows)
        assert hudi_snapshot(str(dest)) == rows_of(m)
    # batch 1 replayed (other data, same label): skipped, its files removed
    replay = _df(spark, [{"id": 1, "p": "b", "v": "replayed", "ts": 99}])
    before = _listing(dest)
    rep = amspark.write_batch(replay, 1, str(dest), operation="upsert", **kw)
    assert getattr(rep, "skipped_label", None)
    assert hudi_snapshot(str(dest)) == rows_of(m)
    assert [f for f in _listing(dest) if f.endswith(".parquet")] == [
        f for f in before if f.endswith(".parquet")
    ]


def test_spark_written_table_upserted_by_spark(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from tests.spark.helpers import make_df, writer

    dest = str(tmp_path / "sw")
    df = make_df(spark, n=3_000, parts=3).select("id", "cat", "day", "amount", "name")
    writer(df, partitionBy="cat,day", recordKey="id", tableFormat="hudi").save(dest)
    upd = df.where("id % 100 = 0").withColumn("amount", F.lit(-1.0))
    new = make_df(spark, n=10, start=5_000, parts=1).select("id", "cat", "day", "amount", "name")
    rep = amspark.upsert(upd.unionByName(new), dest)
    assert (rep.updated, rep.inserted) == (30, 10)
    # rewritten: the groups holding updated keys, and small groups that took inserts
    assert rep.key_columns_read <= rep.footers_read and rep.files_rewritten <= rep.footers_read
    got = spark.read.format("amcommit").load(dest)
    assert got.count() == 3_010
    assert sorted(r.id for r in got.where("amount = -1.0").collect()) == list(range(0, 3_000, 100))
    rep = amspark.delete(upd.select("id", "cat", "day"), dest)
    assert rep.deleted == 30 and spark.read.format("amcommit").load(dest).count() == 2_980


def test_double_and_nan_precombine_as_hudi_orders_them(spark: Any, tmp_path: Path) -> None:
    """Issue 32 items 6 and 7 through Spark (the engine's tests: tests/table/test_precombine.py):
    a ``double`` precombine batch into a ``long`` table widens the column (no pyarrow error);
    NaN wins over every value and ``0.0`` over ``-0.0``, in the batch (whatever the rows'
    order after the shuffle) and against the stored record (ordering-aware payload)."""
    import math

    from tests.table.test_precombine import _norm

    url = str(tmp_path / "t")
    kw: dict[str, Any] = {"recordKey": "id", "partitionBy": "p", "precombineField": "ts"}
    first = [{"id": i, "p": "a", "v": f"v{i}", "ts": 5} for i in (1, 2, 3)]
    amspark.upsert(_df(spark, first), url, **kw)
    nan = float("nan")
    second = [
        {"id": 1, "p": "a", "v": "nan", "ts": nan},
        {"id": 1, "p": "a", "v": "huge", "ts": 1e308},
        {"id": 1, "p": "a", "v": "inf", "ts": math.inf},
        {"id": 2, "p": "a", "v": "plus", "ts": 0.0},
        {"id": 2, "p": "a", "v": "minus", "ts": -0.0},
        {"id": 3, "p": "a", "v": "half", "ts": 6.5},
    ]
    double = "id long, p string, v string, ts double"
    rep = amspark.upsert(_df(spark, second, double, parts=3), url, **kw)
    assert (rep.updated, rep.duplicates_dropped) == (3, 3)
    want = [(1, "a", "nan", "nan"), (2, "a", "plus", (0.0, 1.0)), (3, "a", "half", (6.5, 1.0))]
    assert _norm(_snapshot(spark, url)) == _norm(hudi_snapshot(url)) == want
    # against the stored record: a stored NaN stays against 1e308, a stored 0.0 against
    # -0.0; a stored 6.5 loses to an incoming NaN
    third = [
        {"id": 1, "p": "a", "v": "huge", "ts": 1e308},
        {"id": 2, "p": "a", "v": "minus", "ts": -0.0},
        {"id": 3, "p": "a", "v": "nan3", "ts": nan},
    ]
    rep = amspark.upsert(_df(spark, third, double), url, **kw, payload="DefaultHoodieRecordPayload")
    assert (rep.updated, rep.kept_stored) == (1, 2)
    want[2] = (3, "a", "nan3", "nan")
    assert _norm(_snapshot(spark, url)) == _norm(hudi_snapshot(url)) == want


def _groups(dest: Path) -> dict[str, dict[str, tuple[str, int]]]:
    """The snapshot's file groups: partition -> file id -> (instant, rows)."""
    from amcommit.loop import run_blocking
    from amcommit.store.local import LocalStore
    from amcommit.table.timeline.instants import load_timeline, snapshot

    async def go() -> dict[str, dict[str, tuple[str, int]]]:
        store = LocalStore(str(dest.parent))
        async with store:
            _, commits = await load_timeline(store, dest.name)
            out: dict[str, dict[str, tuple[str, int]]] = {}
            for f in snapshot(commits):
                part = f.partition.rsplit("=", 1)[-1]  # "a" or Hive-style "p=a"
                out.setdefault(part, {})[f.file_id] = (f.instant, f.rows)
            return out

    return run_blocking(go)


@pytest.mark.parametrize("driver", [True, False], ids=["driver", "tasks"])
def test_inserts_fill_the_smallest_file_group_then_one_new_file_per_partition(
    spark: Any, tmp_path: Path, driver: bool
) -> None:
    """Issue 35 item 5: 500 inserted rows from a DataFrame of 8 Spark partitions into a
    partitioned table. On the driver (the default for a batch this size): each partition's
    inserts go into its smallest file group (Hudi's small-file handling: a new version of
    that group), a new partition gets exactly one new file group, the other groups are
    untouched. In Spark tasks (``driverBatchRows=0``): one new file group per partition.
    (Before: one new file per Spark task and partition.)"""
    from tests.spark.helpers import writer

    dest = tmp_path / "ins"
    # partition a: two file groups (30 and 5 rows), b: one
    first = [{"id": i, "p": "a", "v": f"a{i}", "ts": 1} for i in range(30)]
    second = [{"id": 100 + i, "p": "a", "v": f"s{i}", "ts": 1} for i in range(5)]
    second += [{"id": 200 + i, "p": "b", "v": f"b{i}", "ts": 1} for i in range(4)]
    for rows in (first + second[5:], second[:5]):  # two writes: two groups in a
        df = spark.createDataFrame(rows, SCHEMA).coalesce(1)
        writer(df, partitionBy="p", recordKey="id", tableFormat="hudi").save(str(dest))
    before = _groups(dest)
    (small,) = [fid for fid, (_, n) in before["a"].items() if n == 5]
    (big,) = [fid for fid, (_, n) in before["a"].items() if n == 30]
    (b_group,) = before["b"]
    on_disk = sorted(dest.rglob("*.parquet"))
    new = [{"id": 1_000 + i, "p": "abc"[i % 3], "v": f"n{i}", "ts": 2} for i in range(500)]
    opts: dict[str, Any] = {"recordKey": "id", "partitionBy": "p", "precombineField": "ts"}
    if not driver:
        opts["driverBatchRows"] = 0
    rep = amspark.upsert(_df(spark, new, parts=8), str(dest), **opts)
    assert (rep.inserted, rep.updated) == (500, 0)
    after = _groups(dest)
    added = sorted(set(dest.rglob("*.parquet")) - set(on_disk))
    assert set(on_disk) <= set(dest.rglob("*.parquet"))  # no file removed
    a_n, b_n, c_n = (len([r for r in new if r["p"] == p]) for p in "abc")
    (c_group,) = after["c"]
    assert after["c"] == {c_group: (rep.instant, c_n)}
    if driver:
        # a: the smaller group took a's inserts (a new version), the bigger one is untouched
        assert after["a"] == {small: (rep.instant, 5 + a_n), big: before["a"][big]}
        assert after["b"] == {b_group: (rep.instant, 4 + b_n)}
        assert (rep.files_rewritten, rep.files_created) == (2, 1)
    else:
        (a_new,) = set(after["a"]) - set(before["a"])
        (b_new,) = set(after["b"]) - set(before["b"])
        assert after["a"] == {**before["a"], a_new: (rep.instant, a_n)}
        assert after["b"] == {**before["b"], b_new: (rep.instant, b_n)}
        assert (rep.files_rewritten, rep.files_created) == (0, 3)
    assert len(added) == 3 and all(rep.instant in p.name for p in added)
    want = {(r["id"], r["p"], r["v"], r["ts"]) for r in [*first, *second, *new]}
    assert set(hudi_snapshot(str(dest))) == want and len(hudi_snapshot(str(dest))) == len(want)


def _last_job(spark: Any) -> int:
    jobs = spark._jsc.sc().statusStore().jobsList(None)
    return max((jobs.apply(i).jobId() for i in range(jobs.size())), default=-1)


def _jobs_since(spark: Any, since: int) -> list[str]:
    """The names of Spark's jobs submitted after job id ``since`` (its status store)."""
    jobs = spark._jsc.sc().statusStore().jobsList(None)
    return [str(jobs.apply(i).name()) for i in range(jobs.size()) if jobs.apply(i).jobId() > since]


@pytest.mark.parametrize("via", ["upsert", "write_batch"])
def test_driver_batch_is_one_spark_job_and_fills_small_file_groups(
    spark: Any, tmp_path: Path, via: str
) -> None:
    """Issue 35 item 5: a batch of at most ``driverBatchRows`` rows (read from a Parquet
    file, as a user's DataFrame comes) costs one Spark job: its rows collected as Arrow
    (``limit(driverBatchRows + 1)``), the null checks and the count made on them; the engine
    then writes it on the driver, for ``upsert`` and for ``write_batch(operation="upsert")``
    alike: the updates rewrite their file group, the inserts fill the partition's file
    group (Hudi's small-file handling), no new file group. ``write_batch`` keeps its label:
    the batch replayed is skipped, nothing written. (Before: two jobs for ``upsert``;
    ``write_batch`` ran in Spark tasks, its inserts in a new file group.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amcommit.spark.stream import QUERY_ID_KEY

    dest = tmp_path / "one"
    kw: dict[str, Any] = {"recordKey": "id", "partitionBy": "p", "precombineField": "ts"}
    first = [{"id": i, "p": "ab"[i % 2], "v": f"a{i}", "ts": 1} for i in range(20)]
    amspark.upsert(_df(spark, first, parts=1), str(dest), **kw)
    before = _groups(dest)
    assert [len(before[p]) for p in "ab"] == [1, 1]
    batch = [
        {"id": i, "p": "ab"[i % 2], "v": f"u{i}", "ts": 2} for i in (0, 1, 40, 41)
    ]  # 2 updates, 2 inserts
    src = tmp_path / "batch.parquet"
    pq.write_table(pa.Table.from_pylist(batch), src)
    df = spark.read.parquet(str(src))
    sc = spark.sparkContext
    since = _last_job(spark)
    if via == "upsert":
        rep = amspark.upsert(df, str(dest), **kw)
        assert (rep.updated, rep.inserted, rep.files_rewritten, rep.files_created) == (2, 2, 2, 0)
        jobs = _jobs_since(spark, since)
    else:
        sc.setLocalProperty(QUERY_ID_KEY, "q-driver")
        try:
            job = amspark.write_batch(df, 0, str(dest), operation="upsert", **kw)
            assert job.success and not getattr(job, "skipped_label", None)
            jobs = _jobs_since(spark, since)
            on_disk = _listing(dest)
            again = amspark.write_batch(df, 0, str(dest), operation="upsert", **kw)
            assert again.skipped_label
            assert [f for f in _listing(dest) if f.endswith(".parquet")] == [
                f for f in on_disk if f.endswith(".parquet")
            ]
        finally:
            sc.setLocalProperty(QUERY_ID_KEY, None)
    assert len(jobs) == 1 and jobs[0].startswith("toArrow"), jobs
    after = _groups(dest)
    # each partition's one file group took its update and its insert (a new version)
    assert {p: set(g) for p, g in after.items()} == {p: set(g) for p, g in before.items()}
    assert all(n == 11 for g in after.values() for _, n in g.values()), after
    model = model_upsert(model_upsert({}, first), batch)
    assert hudi_snapshot(str(dest)) == rows_of(model)


def test_driver_batch_reads_the_table_while_spark_collects(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 item 5: the driver's reads of the table (properties, timeline, committed
    schema) overlap the Spark job that collects the batch, instead of running before it (on a
    remote store they cost as much as the job). Pinned with the order of events: the read
    of the committed schema is held until the collect has started (at most 20 s); before,
    the collect started only after it, so the read waited out its bound. The upsert's
    result is the model's."""
    import threading

    import anyio.to_thread

    import amcommit.spark.mutate as mutate_mod
    import amcommit.table.write.task as task_mod

    dest = tmp_path / "overlap"
    kw: dict[str, Any] = {"recordKey": "id", "partitionBy": "p", "precombineField": "ts"}
    first = [{"id": i, "p": "ab"[i % 2], "v": f"a{i}", "ts": 1} for i in range(6)]
    amspark.upsert(_df(spark, first, parts=1), str(dest), **kw)
    collecting = threading.Event()
    waited: list[bool] = []
    real_schema, real_collect = task_mod.committed_schema, mutate_mod.collect_arrow

    async def held_schema(*a: Any, **k: Any) -> Any:
        waited.append(await anyio.to_thread.run_sync(collecting.wait, 20))
        return await real_schema(*a, **k)

    def collect(df: Any, schema: Any) -> Any:
        collecting.set()
        return real_collect(df, schema)

    monkeypatch.setattr(task_mod, "committed_schema", held_schema)
    monkeypatch.setattr(mutate_mod, "collect_arrow", collect)
    batch = [{"id": 1, "p": "b", "v": "u1", "ts": 2}, {"id": 40, "p": "a", "v": "n40", "ts": 1}]
    rep = amspark.upsert(_df(spark, batch, parts=1), str(dest), **kw)
    # the first read is the driver's check; later ones (the engine's) follow the collect anyway
    assert waited and all(waited), "the committed schema was read before the Spark job started"
    assert (rep.updated, rep.inserted) == (1, 1)
    assert hudi_snapshot(str(dest)) == rows_of(model_upsert(model_upsert({}, first), batch))


def test_batch_over_driver_batch_rows_runs_in_spark_tasks(spark: Any, tmp_path: Path) -> None:
    """A batch of more rows than ``driverBatchRows`` (its ``limit(n + 1)`` collect finds
    ``n + 1``) runs in Spark tasks, its nulls checked by a Spark job there: refused in one
    line with nothing written, and a clean batch upserted with one new file group per
    partition (the task path's inserts), as the model says."""
    dest = tmp_path / "over"
    kw: dict[str, Any] = {"recordKey": "id", "partitionBy": "p", "precombineField": "ts"}
    first = [{"id": i, "p": "ab"[i % 2], "v": f"a{i}", "ts": 1} for i in range(10)]
    amspark.upsert(_df(spark, first), str(dest), **kw)
    before = _listing(dest)
    bad = [{"id": None if i == 3 else 100 + i, "p": "a", "v": "n", "ts": 1} for i in range(5)]
    with pytest.raises(AmcommitError) as ei:
        amspark.upsert(_df(spark, bad), str(dest), driverBatchRows=4, **kw)
    assert "record key column 'id' is null or empty in 1 row" in str(ei.value)
    assert "\n" not in str(ei.value) and _listing(dest) == before
    groups = _groups(dest)
    new = [{"id": 100 + i, "p": "ab"[i % 2], "v": f"n{i}", "ts": 2} for i in range(5)]
    rep = amspark.upsert(_df(spark, new), str(dest), driverBatchRows=4, **kw)
    assert (rep.inserted, rep.files_created, rep.files_rewritten) == (5, 2, 0)
    after = _groups(dest)
    assert all(len(after[p]) == len(groups[p]) + 1 for p in "ab")
    assert hudi_snapshot(str(dest)) == rows_of(model_upsert(model_upsert({}, first), new))


def test_null_checks_on_the_driver_say_what_the_spark_job_says(spark: Any) -> None:
    """The Arrow null checks of a driver batch refuse exactly what the Spark job's checks
    (a batch over ``driverBatchRows``) refuse, in the same words: a null or empty single
    string key, a composite key with every part null or empty, a null precombine value."""
    import pyarrow as pa

    from amcommit.spark.mutate import _check_nulls, check_nulls_arrow

    cases: list[tuple[dict[str, list[Any]], tuple[str, ...], str | None, str | None]] = [
        (
            {"k": ["x", "", None], "ts": [1, 1, 1]},
            ("k",),
            "ts",
            "record key column 'k' is null or empty in 2 row(s)",
        ),
        (
            {"k": [1, None, 3], "ts": [1, 1, 1]},
            ("k",),
            None,
            "record key column 'k' is null or empty in 1 row(s)",
        ),
        ({"k": [0, 1, 2], "ts": [1, None, None]}, ("k",), "ts", "precombine column 'ts' is null in 2 row(s)"),
        (
            {"a": ["", None, "x", None], "b": [None, "", None, "7"]},
            ("a", "b"),
            None,
            "record key columns a, b are all null or empty in 2 row(s)",
        ),
        ({"a": ["x", None], "b": [None, "y"]}, ("a", "b"), None, None),
        ({"k": ["x", "y"], "ts": [1.5, float("nan")]}, ("k",), "ts", None),
    ]
    for cols, keys, pre, msg in cases:
        data = pa.table(cols)
        df = spark.createDataFrame(data)
        got: list[str | None] = []
        for check, arg in ((check_nulls_arrow, data), (_check_nulls, df)):
            try:
                check(arg, keys, pre)
                got.append(None)
            except AmcommitError as e:
                got.append(str(e))
        if msg is None:
            assert got == [None, None], (cols, got)
        else:
            assert got[0] == got[1] and got[0] is not None and got[0].startswith(msg), (cols, got)
