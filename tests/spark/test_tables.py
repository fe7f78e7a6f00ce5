"""Hudi tables through ``format("amcommit")`` with a real SparkSession, hudi-rs as the oracle.

One table gets: append (creates it), append (continues its timeline without
``tableFormat``), dynamic partition overwrite, whole-table overwrite, then a write whose
task fails on every attempt (the job aborts). hudi-rs's snapshot, time travel to every
instant and incremental reads between every pair of instants must equal amcommit's own
Spark reader and what was written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from amcommit.table.format.model import parse_instant_file
from amcommit.table.format.naming import META_COLUMNS, parse_base_file_name
from tests.spark.helpers import make_df, writer

pytestmark = pytest.mark.spark

hudi = pytest.importorskip("hudi")


def instants(dest: Path) -> list[str]:
    """Completed instant times, in order."""
    out = []
    for name in os.listdir(dest / ".hoodie"):
        i = parse_instant_file(name)
        if i is not None and i.completed and i.action in ("commit", "replacecommit"):
            out.append(i.time)
    return sorted(out)


def pending(dest: Path) -> list[str]:
    """Times of instants that are requested or inflight and not completed."""
    seen = [i for n in os.listdir(dest / ".hoodie") if (i := parse_instant_file(n)) is not None]
    done = {i.time for i in seen if i.completed}
    return sorted({i.time for i in seen if i.time not in done})


def base_files(dest: Path) -> list[str]:
    out = []
    for root, dirs, files in os.walk(dest):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        out.extend(os.path.relpath(os.path.join(root, f), dest) for f in files if f.endswith(".parquet"))
    return sorted(out)


def hudi_rows(dest: Path, **opts: str) -> list[tuple[int, str]]:
    """(id, _hoodie_commit_time) of what hudi-rs reads (absolute path: pitfall 7)."""
    table = hudi.HudiTableBuilder.from_base_uri(str(dest.resolve())).build()
    o = hudi.HudiReadOptions()
    if "as_of" in opts:
        o = o.with_as_of_timestamp(opts["as_of"])
    if "start" in opts:
        o = o.with_query_type(hudi.HudiQueryType.Incremental).with_start_timestamp(opts["start"])
        if "end" in opts:
            o = o.with_end_timestamp(opts["end"])
    out: list[tuple[int, str]] = []
    for b in table.read(o):
        d = b.to_pydict()
        out.extend(zip(d["id"], d["_hoodie_commit_time"], strict=True))
    return sorted(out)


def spark_rows(spark: Any, dest: Path | str, **opts: str) -> list[tuple[int, str]]:
    r = spark.read.format("amcommit")
    for k, v in opts.items():
        r = r.option(k, v)
    return sorted((row.id, row._hoodie_commit_time) for row in r.load(str(dest)).collect())


def test_table_timeline_read_by_hudi_rs(spark: Any, tmp_path: Path) -> None:
    dest = tmp_path / "events"
    written: dict[str, list[tuple[int, str]]] = {}  # instant -> (id, cat) rows it wrote

    def write(df: Any, mode: str = "append", **opts: str) -> str:
        before = set(instants(dest)) if (dest / ".hoodie").exists() else set()
        writer(df, mode, partitionBy="cat", **opts).save(str(dest))
        (new,) = set(instants(dest)) - before
        written[new] = sorted((r.id, r.cat) for r in df.select("id", "cat").collect())
        return new

    t1 = write(make_df(spark, n=600, parts=3), tableFormat="hudi", recordKey="id")
    t2 = write(make_df(spark, n=300, start=1000, parts=2))  # continues the table, no tableFormat
    t3 = write(
        make_df(spark, n=200, start=2000, cats="a", parts=2), "overwrite", partitionOverwriteMode="dynamic"
    )
    t4 = write(make_df(spark, n=150, start=3000, cats="bc", parts=2), "overwrite")
    assert instants(dest) == [t1, t2, t3, t4] and t1 < t2 < t3 < t4
    assert [
        n.rsplit(".", 1)[-1]
        for n in sorted(os.listdir(dest / ".hoodie"))
        if n[:17] == t3 and n.count(".") == 1
    ] == ["replacecommit"]

    # a write whose partition 1 fails on every attempt: Spark aborts the job
    with pytest.raises(Exception, match="injected task failure"):
        writer(
            make_df(spark, n=100, start=9000, parts=2),
            partitionBy="cat",
            fail_task={"partitions": [1], "attempts": [0, 1, 2, 3]},
        ).save(str(dest))
    assert instants(dest) == [t1, t2, t3, t4] and pending(dest) == []
    stamped = {parse_base_file_name(f.rsplit("/", 1)[-1]).instant for f in base_files(dest)}  # type: ignore[union-attr]
    assert stamped <= {t1, t2, t3, t4}, "a file of the failed write is left"
    assert not (dest / "_temporary").exists()

    # every file: meta columns first, partition column kept, record key = id
    for f in base_files(dest):
        t = pq.read_table(dest / f)
        assert tuple(t.column_names[:5]) == META_COLUMNS and "cat" in t.column_names
        d = t.to_pydict()
        assert d["_hoodie_record_key"] == [str(i) for i in d["id"]]
        assert set(d["_hoodie_partition_path"]) == {f.rsplit("/", 1)[0]}
        assert set(d["_hoodie_file_name"]) == {f.rsplit("/", 1)[-1]}

    # the model: rows visible as of each instant
    order = [t1, t2, t3, t4]

    def visible(upto: str) -> list[tuple[int, str]]:
        rows: dict[str, list[tuple[int, str, str]]] = {}  # cat -> (id, cat, instant)
        for t in order:
            if t > upto:
                break
            new = [(i, c, t) for i, c in written[t]]
            if t == t3:  # dynamic overwrite of the partitions written
                for c in {c for _, c in written[t]}:
                    rows[c] = []
            if t == t4:
                rows = {}
            for r in new:
                rows.setdefault(r[1], []).append(r)
        return sorted((i, t) for rs in rows.values() for i, _, t in rs)

    latest = visible(t4)
    assert hudi_rows(dest) == latest == spark_rows(spark, dest)
    for t in order:
        assert hudi_rows(dest, as_of=t) == visible(t) == spark_rows(spark, dest, asOf=t), t
        assert spark_rows(spark, dest, **{"as.of.instant": t}) == visible(t)
    for i, a in enumerate(["000", *order]):
        for b in order[i:]:
            if a == b:
                continue
            expected = hudi_rows(dest, start=a, end=b)
            assert spark_rows(spark, dest, since=a, until=b) == expected, (a, b)
            hudi_opts = {
                "hoodie.datasource.query.type": "incremental",
                "hoodie.datasource.read.begin.instanttime": a,
                "hoodie.datasource.read.end.instanttime": b,
            }
            assert spark_rows(spark, dest, **hudi_opts) == expected
    # adjacent ranges hold exactly what each write wrote
    for a, b in zip(["000", *order], order, strict=False):
        assert sorted(i for i, _ in hudi_rows(dest, start=a, end=b)) == [i for i, _ in written[b]]

    # plain Parquet reading sees the replaced files too (they stay until cleaned)
    plain = spark.read.parquet(str(dest)).count()
    assert plain == sum(len(v) for v in written.values()) > len(latest)


_NO_BASE_FILE_RENAME = [
    {"phase": "commit", "op": "rename", "path": "*.parquet", "after": 0, "error": "PermissionDenied"}
]


@pytest.mark.parametrize("commit", ["staged", "direct"])
def test_table_task_retry_publishes_one_attempt(spark: Any, tmp_path: Path, commit: str) -> None:
    """Partition 1's first attempt writes files, then fails: only the retry's files are
    published (pitfall 2: two attempts of one file group break every hudi-rs read)."""
    dest = tmp_path / "retry"
    df = make_df(spark, n=4000, parts=3)
    writer(
        df,
        partitionBy="cat",
        tableFormat="hudi",
        rowGroupRows="200",
        maxRecordsPerFile="300",
        fail_task={"partitions": [1], "attempts": [0], "after_rows": 900},
        # direct: the job commit renames no base file (the first rename of one would fail)
        driver_faults=None if commit == "staged" else _NO_BASE_FILE_RENAME,
        table_commit=commit,
    ).save(str(dest))
    files = base_files(dest)
    ids = [parse_base_file_name(f.rsplit("/", 1)[-1]).file_id for f in files]  # type: ignore[union-attr]
    assert len(ids) == len(set(ids))
    tokens = {parse_base_file_name(f.rsplit("/", 1)[-1]).write_token for f in files}  # type: ignore[union-attr]
    assert not any(t.startswith("1-") and t.endswith("-0") for t in tokens), (
        "a failed attempt's file is published"
    )
    assert any(t.startswith("1-") and t.endswith("-1") for t in tokens)
    got = hudi_rows(dest)
    assert sorted(i for i, _ in got) == list(range(4000))
    assert spark_rows(spark, dest) == got
    # generated record keys are unique
    keys = spark.read.format("amcommit").load(str(dest)).select("_hoodie_record_key").distinct().count()
    assert keys == 4000


@pytest.mark.parametrize("commit", ["staged", "direct"])
def test_table_crashed_attempt_never_published(spark: Any, tmp_path: Path, commit: str) -> None:
    """Partition 0's first attempt finishes its files, then its Python worker dies (no
    cleanup): its files stay in the write's staging, never in the table."""
    dest = tmp_path / "crash"
    df = make_df(spark, n=3000, parts=2)
    writer(
        df,
        partitionBy="cat",
        tableFormat="hudi",
        fail_task={
            "partitions": [0],
            "attempts": [0],
            "after_rows": 500,
            "how": "exit",
        },
        table_commit=commit,
    ).save(str(dest))
    files = base_files(dest)
    tokens = {parse_base_file_name(f.rsplit("/", 1)[-1]).write_token for f in files}  # type: ignore[union-attr]
    assert not any(t.startswith("0-") and t.endswith("-0") for t in tokens), tokens
    assert sorted(i for i, _ in hudi_rows(dest)) == list(range(3000))
    assert not (dest / ".hoodie" / ".aux" / "amcommit" / instants(dest)[0]).exists()


def test_table_bad_read_options_one_line(spark: Any, tmp_path: Path) -> None:
    dest = tmp_path / "t"
    writer(make_df(spark, n=10, parts=1), tableFormat="hudi").save(str(dest))  # not partitioned
    assert hudi_rows(dest) == spark_rows(spark, dest) and len(hudi_rows(dest)) == 10
    for opts, match in [
        ({"hoodie.datasource.query.type": "streaming"}, "must be snapshot, read_optimized or incremental"),
        ({"asOf": "yesterday"}, "must be an instant time"),
        ({"hoodie.datasource.query.type": "incremental"}, "needs option"),
        ({"sinse": "000"}, "did you mean 'since'"),
    ]:
        r = spark.read.format("amcommit")
        for k, v in opts.items():
            r = r.option(k, v)
        with pytest.raises(Exception, match=match) as e:
            r.load(str(dest)).collect()
        # as the writer's errors: Spark shows the worker's traceback, here one frame and the line
        assert str(e.value).count('File "') <= 1, str(e.value)
    with pytest.raises(Exception, match="holds no Hudi table"):
        spark.read.format("amcommit").load(str(tmp_path / "nothing")).collect()


@pytest.mark.parametrize("commit", ["staged", "direct"])
def test_table_on_fake_gcs(spark: Any, fake_gcs: Any, tmp_path: Path, commit: str) -> None:
    """A table on fake-gcs-server: amcommit's reader on the bucket, hudi-rs on a downloaded
    copy (hudi-rs's GCS client cannot be pointed at the emulator's plain-HTTP endpoint)."""
    import uuid

    from tests.spark.test_cloud import download

    bucket = f"amc-table-{uuid.uuid4().hex[:10]}"
    fake_gcs.create_bucket(bucket)
    url = f"gs://{bucket}/warehouse/events"
    opts = {"endpoint": fake_gcs.url}
    writer(
        make_df(spark, n=500, parts=2),
        partitionBy="cat",
        tableFormat="hudi",
        recordKey="id",
        table_commit=commit,
        **opts,
    ).save(url)
    writer(
        make_df(spark, n=100, start=1000, cats="a", parts=2),
        "overwrite",
        partitionOverwriteMode="dynamic",
        table_commit=commit,
        **opts,
    ).save(url)
    names = download(url, opts, tmp_path / "copy")
    assert not [n for n in names if "_temporary" in n or n.startswith((".hoodie/.temp/", ".hoodie/.aux/"))], (
        names
    )
    expected = hudi_rows(tmp_path / "copy")
    assert sorted(i for i, _ in expected) == sorted(
        [i for i in range(500) if i % 3 != 0] + list(range(1000, 1100))
    )
    assert spark_rows(spark, url, **opts) == expected


def test_table_dynamic_overwrite_from_session_conf(spark: Any, tmp_path: Path) -> None:
    """``spark.sql.sources.partitionOverwriteMode=dynamic`` reaches only the tasks: the
    commit records INSERT_OVERWRITE (what the tasks saw) and replaces only partition a."""
    import json

    dest = tmp_path / "conf"
    writer(make_df(spark, n=300, parts=2), partitionBy="cat", tableFormat="hudi").save(str(dest))
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        writer(make_df(spark, n=50, start=1000, cats="a", parts=2), "overwrite").save(str(dest))
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    t2 = instants(dest)[-1]
    meta = json.loads((dest / ".hoodie" / f"{t2}.replacecommit").read_text())
    assert meta["operationType"] == "INSERT_OVERWRITE" and list(meta["partitionToReplaceFileIds"]) == [
        "cat=a"
    ]
    expected = sorted([i for i in range(300) if i % 3 != 0] + list(range(1000, 1050)))
    assert sorted(i for i, _ in hudi_rows(dest)) == expected
    assert spark_rows(spark, dest) == hudi_rows(dest)


def test_table_write_refusals(spark: Any, tmp_path: Path) -> None:
    """One line, before any task, nothing changed: a table over a plain destination, a
    partitionBy or recordKey that is not the table's."""
    plain = tmp_path / "plain"
    writer(make_df(spark, n=20, parts=1)).save(str(plain))
    before = sorted(os.listdir(plain))
    with pytest.raises(Exception, match="already holds files but no Hudi table"):
        writer(make_df(spark, n=20, parts=1), tableFormat="hudi").save(str(plain))
    assert sorted(os.listdir(plain)) == before

    dest = tmp_path / "t"
    writer(make_df(spark, n=20, parts=1), partitionBy="cat", tableFormat="hudi", recordKey="id").save(
        str(dest)
    )
    for opts, match in [
        ({"partitionBy": "day"}, "differs from the table's partition fields 'cat'"),
        ({"recordKey": "name"}, "differs from the table's record key fields 'id'"),
    ]:
        with pytest.raises(Exception, match=match):
            writer(make_df(spark, n=20, parts=1), **opts).save(str(dest))
    assert pending(dest) == [] and len(instants(dest)) == 1


def test_table_schema_on_write(spark: Any, tmp_path: Path) -> None:
    """Issue 23 item 9 through Spark: a changed type and a left-out column are refused in
    writer(), before any task, in one line; a new column Spark marks non-nullable
    (``lit``) is recorded nullable, so hudi-rs reads every file; allowMissingColumns keeps
    the column (null for the new rows); time travel reads with the instant's schema."""
    from pyspark.sql import functions as F

    dest = tmp_path / "t"
    base = spark.range(0, 4, numPartitions=1).withColumn("v", F.concat(F.lit("v"), F.col("id")))
    writer(base, tableFormat="hudi").save(str(dest))
    (t1,) = instants(dest)
    listed = sorted(os.listdir(dest / ".hoodie"))
    for df, match in [
        (
            base.withColumn("id", F.col("id").cast("string")),
            "column 'id': the table's type is long, the write's is string;",
        ),
        (base.drop("v"), r"column 'v' \(string\) of the table is missing from the write"),
    ]:
        with pytest.raises(Exception, match=match):
            writer(df).save(str(dest))
    assert sorted(os.listdir(dest / ".hoodie")) == listed  # no instant begun, nothing staged

    with_w = spark.range(4, 6, numPartitions=1).withColumn("v", F.lit("n")).withColumn("w", F.lit("x"))
    assert not with_w.schema["w"].nullable
    writer(with_w).save(str(dest))
    narrower = spark.range(6, 7, numPartitions=1).select(
        F.col("id").cast("int").alias("id"), F.lit("z").alias("w")
    )
    writer(narrower, allowMissingColumns="true").save(str(dest))
    assert len(instants(dest)) == 3
    table = hudi.HudiTableBuilder.from_base_uri(str(dest.resolve())).build()
    got = sorted((r["id"], r["v"], r["w"]) for b in table.read(hudi.HudiReadOptions()) for r in b.to_pylist())
    want = [(0, "v0", None), (1, "v1", None), (2, "v2", None), (3, "v3", None), (4, "n", "x"), (5, "n", "x")]
    assert got == [*want, (6, None, "z")]
    snap = spark.read.format("amcommit").load(str(dest))
    assert [(f.name, f.dataType.simpleString()) for f in snap.schema.fields[5:]] == [
        ("id", "bigint"),
        ("v", "string"),
        ("w", "string"),
    ]
    assert sorted((r.id, r.v, r.w) for r in snap.collect()) == [*want, (6, None, "z")]
    assert sorted(snap.toPandas()["id"]) == list(range(7))  # the spark extra installs pandas (item 14)
    old = spark.read.format("amcommit").option("asOf", t1).load(str(dest))
    assert [f.name for f in old.schema.fields[5:]] == ["id", "v"]
    assert sorted((r.id, r.v) for r in old.collect()) == [(i, f"v{i}") for i in range(4)]


def test_table_read_past_a_clean_is_refused(spark: Any, tmp_path: Path) -> None:
    """After a clean deleted replaced files, a time travel or incremental query reaching
    before what it kept is refused in one line (hudi-rs silently returns fewer rows there).
    Needs the reading/clean API (amcommit.table.commit.clean, branch tableread)."""
    import anyio

    clean_mod = pytest.importorskip("amcommit.table.commit.clean")
    from amcommit.store.local import LocalStore

    dest = tmp_path / "cleaned"
    writer(make_df(spark, n=30, parts=1), partitionBy="cat", tableFormat="hudi").save(str(dest))
    writer(make_df(spark, n=30, start=100, parts=1), "overwrite").save(str(dest))
    writer(make_df(spark, n=30, start=200, parts=1), "overwrite").save(str(dest))
    t1, _t2, t3 = instants(dest)

    async def clean() -> None:
        store = LocalStore("/")
        try:
            await clean_mod.clean(store, str(dest.resolve()).lstrip("/"), retain_commits=1)
        finally:
            await store.aclose()

    anyio.run(clean)
    assert sorted(i for i, _ in spark_rows(spark, dest)) == list(range(200, 230))
    assert sorted(i for i, _ in spark_rows(spark, dest, asOf=t3)) == list(range(200, 230))
    for opts in ({"asOf": t1}, {"since": "000", "until": t1}):
        with pytest.raises(Exception, match="reaches past what clean") as e:
            spark_rows(spark, dest, **opts)
        assert str(e.value).count('File "') <= 1, str(e.value)


@pytest.mark.timeout(300)
def test_table_slow_stage_not_rolled_back_by_concurrent_writer(spark: Any, tmp_path: Path) -> None:
    """A Spark table write whose upstream stage runs for longer than ``writer_ttl`` (no write
    task beats then) stays alive through the driver's keep-alive process: a concurrent engine
    writer that commits meanwhile waits for it instead of rolling it back; afterwards no
    heartbeat is left (the keep-alive process ended with the write).

    No race with the machine's speed (with ``writer_ttl`` 1 s and fixed sleeps it failed at
    load ~10): the upstream stage is held (a Python filter polling a file) until the engine
    writer says it waits for the Spark write (its WARNING); the test's clock stands in for a
    long stage: once the keep-alive process has started (its keeper record), the heartbeat's
    modification time is set back by 2 ``writer_ttl``, so only a beat that comes after that
    can make the Spark write look alive. The engine writer commits only once such a beat
    came (the keep-alive beats every ``writer_ttl / 4`` = 5 s; nothing else of the held write
    beats). ``writer_ttl`` 20 s: only a 20 s stall of the keep-alive process could fail it.
    Without the keep-alive process no beat comes, and the engine writer would roll the
    Spark write back.
    """
    import glob
    import json
    import logging
    import threading
    import time

    import anyio
    import pyarrow as pa
    from pyspark.sql import functions as F

    from amcommit.api import commit_job
    from amcommit.committer.task import commit_task, setup_task
    from amcommit.store.local import LocalStore
    from amcommit.table.format.model import Operation
    from amcommit.table.format.naming import base_file_name, new_file_id, write_token
    from amcommit.table.format.schema import avro_schema
    from amcommit.table.settings import TableConfig
    from tests.table.writehelpers import parquet_bytes

    ttl = 20.0
    dest = tmp_path / "slow"
    release = tmp_path / "release-upstream-stage"
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.string())])
    cfg = TableConfig(lock_ttl=20.0, lock_wait=150.0, writer_ttl=ttl)
    other: dict[str, Any] = {}

    class WaitSeen(logging.Handler):
        """Releases the upstream stage once the engine writer waits for the Spark write."""

        def emit(self, record: logging.LogRecord) -> None:
            if "waits for the earlier instant" in record.getMessage():
                other["waited"] = True
                release.touch()

    async def engine_write() -> None:
        from amcommit.table.write.task import begin_write

        store = LocalStore(str(tmp_path))
        w = await begin_write(
            store, "slow", operation=Operation.INSERT, avro_schema=avro_schema(schema, "slow"), config=cfg
        )
        work = await setup_task(store, w.layout, f"attempt_{w.instant}_m_000000_0")
        name = base_file_name(new_file_id(), write_token(0, 0, 0), w.instant)
        data = parquet_bytes([{"id": 1000, "v": "e"}], schema, meta=(w.instant, "", name, 0))
        await store.put(f"{work}/{name}", data)
        rows = json.dumps({name: 1})
        await commit_task(
            store,
            w.layout,
            f"task_{w.instant}_m_000000",
            f"attempt_{w.instant}_m_000000_0",
            extra_data={"hudi.rows": rows},
        )
        await commit_job(store, "slow", w.instant, config=cfg)
        other["instant"] = w.instant
        await store.aclose()

    def concurrent() -> None:
        try:
            deadline = time.monotonic() + 150  # Spark plans the write: ~90 s at load ~40
            while not (
                found := glob.glob(str(dest / ".hoodie" / ".aux" / "amcommit" / "*" / "_keeper.json"))
            ):
                assert time.monotonic() < deadline, "the Spark write's keep-alive process never started"
                time.sleep(0.05)
            instant = Path(found[0]).parent.name
            beat = dest / ".hoodie" / ".heartbeat" / instant
            old = time.time() - 2 * ttl  # the test's clock: the last beat is long stale
            os.utime(beat, (old, old))
            deadline = time.monotonic() + 3 * ttl  # it beats every ttl / 4
            while beat.stat().st_mtime < old + ttl:  # a beat since: only the keep-alive's
                assert time.monotonic() < deadline, "no beat of the keep-alive process"
                time.sleep(0.05)
            anyio.run(engine_write)
        except BaseException as e:  # reported below
            other["error"] = repr(e)
        finally:
            release.touch()  # never leave the Spark stage held

    def hold(i: int) -> bool:
        """The upstream stage's row 0 waits until released (at most 120 s)."""
        import os
        import time

        end = time.monotonic() + 120
        while i == 0 and not os.path.exists(str(release)) and time.monotonic() < end:
            time.sleep(0.05)
        return True

    df = (
        spark.range(0, 10, numPartitions=1)
        .filter(F.udf(hold, "boolean").asNondeterministic()("id"))
        .selectExpr("id", "cast(id as string) as v")
        .repartition(1)
    )
    watch = WaitSeen(logging.WARNING)
    commit_log = logging.getLogger("amcommit.table.commit.table_commit")
    commit_log.addHandler(watch)
    thread = threading.Thread(target=concurrent)
    thread.start()
    # without adaptive execution Spark begins the write (writer()) before the upstream stage
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        writer(df, tableFormat="hudi", writer_ttl="20").save(str(dest))
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
        thread.join(180)
        commit_log.removeHandler(watch)
    assert "error" not in other, other
    assert other.get("waited"), other  # the engine writer judged the held Spark write alive
    done = instants(dest)
    assert len(done) == 2 and done[1] == other["instant"], done  # the Spark write completed first
    deadline = time.monotonic() + 5
    while os.listdir(dest / ".hoodie" / ".heartbeat") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.listdir(dest / ".hoodie" / ".heartbeat") == []


def test_table_written_by_spark_upserted_by_the_engine(spark: Any, tmp_path: Path) -> None:
    """Spark's table files carry Hudi's footer index: an engine upsert (amcommit.table.mutate.engine)
    finds the keys through it, rewrites only the files holding them, and hudi-rs and the
    Spark reader read the result."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from amcommit.table.mutate import engine as mutate

    dest = tmp_path / "sp"
    df = spark.range(0, 300, numPartitions=3).withColumn(
        "cat", F.expr("substring('abc', cast(id % 3 + 1 as int), 1)")
    )
    df = df.withColumn("v", F.lit("s"))
    writer(df, tableFormat="hudi", recordKey="id", partitionBy="cat").save(str(dest))
    before = base_files(dest)
    up = pa.table({"id": pa.array([1, 2, 1000], pa.int64()), "cat": ["b", "c", "a"], "v": ["u", "u", "new"]})
    rep = mutate.upsert_blocking(str(dest), up, record_key="id", partition_by="cat", small_file_limit=0)
    assert (rep.updated, rep.inserted, rep.files_rewritten, rep.files_created) == (2, 1, 2, 1)
    assert rep.key_columns_read == 2 and rep.footers_read == len(before)
    got = spark.read.format("amcommit").load(str(dest)).select("id", "cat", "v").collect()
    rows = sorted((r.id, r.cat, r.v) for r in got)
    want = sorted(
        [(i, "abc"[i % 3], "s") for i in range(300) if i not in (1, 2)]
        + [(1, "b", "u"), (2, "c", "u"), (1000, "a", "new")]
    )
    assert rows == want
    assert len(hudi_rows(dest)) == 301


@pytest.mark.timeout(300)
@pytest.mark.parametrize("commit", ["direct"])
def test_two_writers_into_one_table(spark: Any, tmp_path: Path, commit: str) -> None:
    """Two processes write into one table at once, both direct: a child (the engine's direct
    writes: ``tests/spark/direct_child.py``) begins its write and puts its files in place,
    then this session's Spark write runs its tasks (both writes' files lie in the same
    partitions, both inflight) and waits at its commit for the child's earlier instant;
    released once this write's tasks have written, the child commits, then this write.
    Neither loses a file: both instants complete, every file their metadata names exists,
    hudi-rs reads both writes' rows exactly, and no data file is left that no completed
    instant names."""
    import glob
    import json
    import subprocess
    import sys
    import threading
    import time

    from tests.spark.helpers import stray_files

    dest = tmp_path / "two"
    opts = {"partitionBy": "cat", "table_commit": commit}
    df = spark.range(0, 30, numPartitions=2).selectExpr("id", "cast(id % 3 as string) as cat")
    df.write.format("amcommit").mode("append").options(tableFormat="hudi", **opts).save(str(dest))
    base = instants(dest)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root), *sys.path]))
    ready, release = tmp_path / "ready", tmp_path / "release"
    argv = [sys.executable, "-m", "tests.spark.direct_child", str(tmp_path), "two", "1000"]
    child = subprocess.Popen(
        [*argv, str(ready), str(release)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    seen: list[str] = []  # what the releasing thread saw; its errors

    def release_when_written() -> None:
        try:
            # this write's tasks wrote their six files (two tasks, three partitions) in place
            deadline = time.monotonic() + 120

            def marked() -> int:  # CREATE lines of the attempts' MARKERS<n> files (and per-file markers)
                n = len(glob.glob(str(dest / ".hoodie" / ".temp" / "2*" / "cat=*" / "*.marker.CREATE")))
                for f in glob.glob(str(dest / ".hoodie" / ".temp" / "2*" / "MARKERS[0-9]*")):
                    try:
                        n += sum(ln.endswith(".marker.CREATE") for ln in Path(f).read_text().splitlines())
                    except FileNotFoundError:  # rewritten (replaced) meanwhile
                        pass
                return n

            while marked() < 3 + 6:
                assert time.monotonic() < deadline, "this write's tasks never wrote"
                time.sleep(0.05)
            seen.extend(pending(dest))
        except BaseException as e:  # reported below
            seen.append(f"error: {e}")
        finally:
            release.touch()

    releaser = threading.Thread(target=release_when_written)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the child never wrote its files"
            time.sleep(0.05)
        theirs = ready.read_text()
        releaser.start()
        # (Spark's write runs here: the data source is found from the session's own thread)
        more = spark.range(2000, 2300, numPartitions=2).selectExpr("id", "cast(id % 3 as string) as cat")
        more.write.format("amcommit").mode("append").options(**opts).save(str(dest))
        out, err = child.communicate(timeout=120)
        releaser.join(60)
    finally:
        release.touch()
        if child.poll() is None:
            child.kill()
    # both writes were inflight at once when the child was released, the child's first
    assert len(seen) == 2 and seen[0] == theirs, seen
    assert child.returncode == 0 and out.strip() == "done", err[-3000:]
    done = instants(dest)
    assert len(done) == 3 and done[:1] == base and done[1] == theirs, done
    for t in done:
        name = next(n for n in os.listdir(dest / ".hoodie") if n.startswith(t) and n.endswith(".commit"))
        meta = json.loads((dest / ".hoodie" / name).read_text())
        for stats in meta["partitionToWriteStats"].values():
            for s in stats:
                assert (dest / s["path"]).exists(), f"{s['path']} of {t} is lost"
    got = hudi_rows(dest)
    assert sorted(i for i, _ in got) == [*range(30), *range(1000, 1300), *range(2000, 2300)]
    assert {t for _, t in got} == set(done)
    assert stray_files(dest) == []
    assert pending(dest) == []
