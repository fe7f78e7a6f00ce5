"""The Spark adapter's pure parts, without a SparkSession: option validation, partition
directory names, Parquet row groups and file rolling, the task and driver sides driven
directly (as Spark would, including a denied attempt whose manifest was published last)."""

from __future__ import annotations

import datetime
import decimal
import os
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import (
    ArrayType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from amcommit.committer.layout import JobLayout
from amcommit.errors import ConfigError
from amcommit.spark.driver import abort_write, commit_write
from amcommit.spark.options import build_plan, session_defaults
from amcommit.spark.parquet import HIVE_DEFAULT_PARTITION, PartitionedParquetWriter, partition_dir
from amcommit.spark.source import _setup_job
from amcommit.spark.task import decode_manifest, run_task
from amcommit.store.local import LocalStore
from amcommit.store.schemes import open_location
from amcommit.testing.spark import armed, parse_task_failure

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("day", DateType()),
        StructField("cat", StringType()),
        StructField("tags", ArrayType(StringType())),
    ]
)


def plan(tmp_path: Path, overwrite: bool = False, **options: Any) -> Any:
    opts = {"path": str(tmp_path / "dest"), **{k.lower(): v for k, v in options.items()}}
    return build_plan(opts, SCHEMA, overwrite)


def job(tmp_path: Path, overwrite: bool = False, **options: Any) -> Any:
    """A plan whose job is set up (as the driver's ``writer()`` does)."""
    p = plan(tmp_path, overwrite, **options)
    _setup_job(p)
    return p


@pytest.mark.parametrize(
    ("options", "overwrite", "message"),
    [
        (
            {"partitionBy": "nope"},
            False,
            "'partitionBy' must name columns of the DataFrame (id, day, cat, tags)",
        ),
        ({"partitionBy": "tags"}, False, "cannot be a partition value"),
        ({"partitionBy": "id,id"}, False, "listed twice"),
        ({"partitionBy": "id,day,cat,tags"}, False, "cannot be a partition value"),
        ({"format": "csv"}, False, "option 'format' must be parquet"),
        ({"compression": "lzo"}, False, "option 'compression' must be one of brotli, gzip"),
        ({"partitionby2": "id"}, False, "did you mean 'partitionby'"),
        ({"io_threadz": "3"}, False, "did you mean 'io_threads'"),
        ({"io_threads": "zero"}, False, "must be an integer"),
        ({"partitionOverwriteMode": "sometimes"}, True, "static or dynamic"),
        ({"conflict_mode": "overwrite"}, False, "needs mode('overwrite')"),
        ({"conflict_mode": "append"}, True, "contradicts mode('overwrite')"),
        ({"maxRecordsPerFile": "-1"}, False, "'maxrecordsperfile' must be an integer >= 0"),
        ({"rowGroupRows": "1_000_x"}, False, "'rowgrouprows' must be an integer >= 1"),
        ({"amcommit.testing.fail_task": "{}"}, False, "amcommit.testing.fail_task"),  # no job option
    ],
)
def test_bad_options(tmp_path: Path, options: dict[str, str], overwrite: bool, message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        plan(tmp_path, overwrite, **options)
    assert message in str(ei.value)
    assert "\n" not in str(ei.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [("{", "not valid JSON"), ('{"how": "later"}', "'how' must be"), ("[1]", "must be a JSON object")],
)
def test_bad_fail_task_spec(spec: str, message: str) -> None:
    """The test switch checks its spec (from test code: it is no job option)."""
    with pytest.raises(ConfigError, match=message), armed(fail_task=spec):
        pass
    assert parse_task_failure(None) is None


def test_store_option_values_never_in_messages(tmp_path: Path) -> None:
    wasb = "wasb://c@acct.blob.core.windows.net/t"
    with pytest.raises(ConfigError) as ei:
        build_plan({"path": wasb, "account_key": "s3cr3t-key", "io_threadz": "1"}, SCHEMA, False)
    assert "s3cr3t" not in str(ei.value)
    p = build_plan({"path": wasb, "account_key": "s3cr3t-key"}, SCHEMA, False)
    assert "s3cr3t" not in repr(p) and p.store_options == {"account_key": "s3cr3t-key"}
    with pytest.raises(ConfigError, match="does not apply to file:// destinations"):
        plan(tmp_path, account_key="s3cr3t-key")


def test_modes_and_conf(tmp_path: Path) -> None:
    assert plan(tmp_path).conflict_mode == "append"
    assert plan(tmp_path, conflict_mode="fail").conflict_mode == "fail"
    assert plan(tmp_path, True).conflict_mode == "overwrite"
    assert plan(tmp_path, True, partitionOverwriteMode="dynamic").conflict_mode == "replace"
    conf = {
        "spark.amcommit.io_threads": "7",
        "spark.amcommit.compression": "zstd",
        "spark.hadoop.mapreduce.manifest.committer.validate.output": "true",
        "spark.hadoop.fs.s3a.endpoint": "ignored",
    }
    assert session_defaults(conf) == {
        "io_threads": "7",
        "compression": "zstd",
        "mapreduce.manifest.committer.validate.output": "true",
    }
    p = build_plan({"path": str(tmp_path), "io_threads": "9"}, SCHEMA, False, session_conf=conf)
    cfg = p.config()
    assert (cfg.io_threads, cfg.validate_output, p.compression) == (9, True, "zstd")
    assert plan(tmp_path, partitionBy=" Day , CAT ").partition_columns == ("day", "cat")
    rel = build_plan({"path": "rel/dir"}, SCHEMA, False)
    assert rel.url == os.path.abspath("rel/dir") and not rel.remote  # executors may have another cwd
    assert build_plan({"path": "gs://b/x"}, SCHEMA, False).remote


def test_partition_dir_names() -> None:
    cols = ("a", "b")
    assert partition_dir(cols, (1, "x/y=z")) == "a=1/b=x%2Fy%3Dz"
    assert partition_dir(cols, (None, "")) == f"a={HIVE_DEFAULT_PARTITION}/b={HIVE_DEFAULT_PARTITION}"
    assert partition_dir(("d",), (datetime.date(2026, 11, 22),)) == "d=2026-11-22"
    ts = datetime.datetime(2026, 11, 22, 10, 30, 0, 500000, tzinfo=datetime.UTC)
    assert partition_dir(("t",), (ts,)) == "t=2026-11-22 10%3A30%3A00.5"
    assert partition_dir(("p",), (decimal.Decimal("1.50"),)) == "p=1.50"
    assert partition_dir(("f", "g"), (True, float("nan"))) == "f=true/g=NaN"


def _batches(n: int, size: int, parts: int = 3) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, n, size):
        ids = list(range(start, min(n, start + size)))
        out.append(
            pa.record_batch(
                {"id": pa.array(ids, pa.int64()), "k": pa.array([i % parts for i in ids], pa.int32())}
            )
        )
    return out


def _writer(tmp_path: Path, closed: list[str], **kw: Any) -> PartitionedParquetWriter:
    return PartitionedParquetWriter(
        partition_columns=kw.pop("partition_columns", ("k",)),
        file_name=lambda n: f"part-{n:03d}.parquet",
        local_path=lambda rel: str(tmp_path / rel),
        on_closed=lambda rel, local: closed.append(rel),
        **kw,
    )


def test_row_groups_are_not_arrow_batches(tmp_path: Path) -> None:
    closed: list[str] = []
    w = _writer(tmp_path, closed, row_group_rows=4000)
    for b in _batches(30_000, 1000):
        w.write(b)
    stats = w.close()
    assert stats.rows == 30_000 and stats.files == 3 and sorted(closed) == sorted(stats.paths)
    for rel in closed:
        md = pq.ParquetFile(tmp_path / rel).metadata
        assert md.num_rows == 10_000
        assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [4000, 4000, 2000]
        assert pq.read_schema(tmp_path / rel).names == ["id"]  # partition column not stored


def test_rolling_and_open_file_limit(tmp_path: Path) -> None:
    closed: list[str] = []
    w = _writer(tmp_path, closed, row_group_rows=500, max_records_per_file=1200, max_open_files=2)
    for b in _batches(9_000, 700, parts=3):
        w.write(b)
    stats = w.close()
    assert stats.rows == 9_000
    total = 0
    for rel in closed:
        n = pq.ParquetFile(tmp_path / rel).metadata.num_rows
        assert n <= 1200
        total += n
    assert total == 9_000 and len(set(closed)) == len(closed)
    got = sorted(
        i
        for rel in closed
        for i in pq.read_table(tmp_path / rel).column("id").to_pylist()
        if rel.startswith("k=1/")
    )
    assert got == [i for i in range(9_000) if i % 3 == 1]


def test_bounded_buffers(tmp_path: Path) -> None:
    closed: list[str] = []
    w = _writer(tmp_path, closed, row_group_rows=10**9, buffer_bytes=64 * 1024)
    for b in _batches(50_000, 1000, parts=10):
        w.write(b)
        assert w._buffered <= 64 * 1024 + b.nbytes
    assert w.close().rows == 50_000


def _drive_task(p: Any, partition: int, attempt: int, n: int = 3000) -> Any:
    batches = [
        pa.record_batch(
            {
                "id": pa.array(range(partition * n, (partition + 1) * n), pa.int64()),
                "day": pa.array([datetime.date(2026, 11, 1 + i % 2) for i in range(n)], pa.date32()),
                "cat": pa.array([f"c{attempt}"] * n),
                "tags": pa.array([["t"]] * n, pa.list_(pa.string())),
            }
        )
    ]
    return run_task(p, batches, partition=partition, attempt=attempt)


def _visible(dest: Path) -> dict[str, int]:
    out = {}
    for root, _dirs, files in os.walk(dest):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), dest)
            out[rel] = os.path.getsize(os.path.join(root, f))
    return out


def test_denied_attempt_published_last_never_visible(tmp_path: Path) -> None:
    """Speculation: attempts 0 and 1 of task 0 both commit their task; attempt 1 publishes
    its manifest last but Spark authorised attempt 0. Only attempt 0's rows are visible,
    also after a failed job commit rolled back by abort() (which reads the store's
    manifests: the driver must have replaced attempt 1's)."""
    p = job(tmp_path, partitionBy="day")
    r0 = _drive_task(p, 0, 0)
    r1 = _drive_task(p, 1, 0)
    denied = _drive_task(p, 0, 1)  # published last
    assert decode_manifest(denied.manifest).task_attempt_id.endswith("_1")
    dest = tmp_path / "dest"
    rule = {"phase": "commit", "op": "rename", "path": "*.parquet", "after": 2, "error": "PermissionDenied"}
    with armed(driver_faults=[rule]), pytest.raises(Exception, match="rename"):
        commit_write(p, [r0, r1])
    abort_write(p)
    assert _visible(dest) == {}

    p2 = job(tmp_path, partitionBy="day")
    results = [_drive_task(p2, 0, 0), _drive_task(p2, 1, 0)]
    _drive_task(p2, 0, 1)  # denied, published last
    report = commit_write(p2, results)
    assert report.files == 4 and report.success
    files = _visible(dest)
    assert "_temporary" not in {f.split("/")[0] for f in files}
    cats = set()
    rows = 0
    for rel in files:
        if rel.endswith(".parquet"):
            t = pq.read_table(dest / rel)
            cats |= set(t.column("cat").to_pylist())
            rows += t.num_rows
    assert cats == {"c0"} and rows == 6000


def test_task_error_cleans_its_attempt(tmp_path: Path) -> None:
    p = job(tmp_path)
    with armed(fail_task={"after_rows": 1}), pytest.raises(RuntimeError, match="injected task failure"):
        _drive_task(p, 0, 0)
    layout = JobLayout(str(tmp_path / "dest").lstrip("/"), p.job_id)
    store = LocalStore("/")
    assert os.listdir(store.os_path(layout.tasks_dir)) == []
    assert os.listdir(os.path.dirname(store.os_path(layout.task_attempt_marker("x")))) == []
    anyio.run(store.aclose)
    abort_write(p)
    assert not (tmp_path / "dest" / "_temporary").exists()


def test_zombie_attempts_leave_nothing(tmp_path: Path) -> None:
    """Spark aborts the job while an attempt still runs (or commits it before a speculative
    attempt finishes): the attempt fails and removes what is left of the job directory."""
    p = job(tmp_path)
    batches = iter([pa.record_batch({"id": pa.array([1], pa.int64())})])

    def aborted_midway() -> Any:
        yield next(batches)
        abort_write(p)  # the driver aborts while this task writes
        yield pa.record_batch({"id": pa.array([2], pa.int64())})

    with pytest.raises(Exception, match="still writing: its files were removed"):
        run_task(p, aborted_midway(), partition=3, attempt=0)  # its next file finds the job over
    assert not (tmp_path / "dest").exists() or _visible(tmp_path / "dest") == {}
    assert not (tmp_path / "dest" / "_temporary").exists()
    with pytest.raises(Exception, match="not active"):  # a task starting after the job ended
        _drive_task(p, 0, 0)
    assert not (tmp_path / "dest" / "_temporary").exists()


def test_setup_attempt_ids_are_single_use(tmp_path: Path) -> None:
    """A retried stage starts attempt numbers at 0 again: the id gets a stage bit."""
    p = job(tmp_path)
    a = _drive_task(p, 0, 0)
    b = _drive_task(p, 0, 0)
    assert a.task_attempt_id.endswith("_m_000000_0")
    assert b.task_attempt_id.endswith(f"_m_000000_{1 << 16}")
    assert commit_write(p, [b]).files == 1


def test_remote_task_uploads_rolled_files(fake_gcs: Any, tmp_path: Path) -> None:
    """Cloud destination: files are written locally, uploaded (several in flight, bounded),
    and the job commit renames exactly them."""
    import uuid

    bucket = f"amc-units-{uuid.uuid4().hex[:10]}"
    fake_gcs.create_bucket(bucket)
    url = f"gs://{bucket}/t/events"
    p = build_plan(
        {"path": url, "endpoint": fake_gcs.url, "partitionby": "day", "maxrecordsperfile": "700"},
        SCHEMA,
        False,
    )
    _setup_job(p)
    results = [_drive_task(p, i, 0) for i in range(2)]
    assert all(r.files == 6 for r in results)  # 2 days x 1500 rows / 700 per file
    report = commit_write(p, results)
    assert report.files == 12 and report.success

    async def listing() -> dict[str, int]:
        store, dest = open_location(url, endpoint=fake_gcs.url)
        async with store:
            return {i.path[len(dest) + 1 :]: i.size async for i in store.list(dest, recursive=True)}

    names = anyio.run(listing)
    assert "_SUCCESS" in names and not [n for n in names if n.startswith("_temporary")]
    assert len([n for n in names if n.endswith(".parquet")]) == 12


def test_session_sql_settings_precedence(tmp_path: Path) -> None:
    from amcommit.errors import CommitError
    from amcommit.spark.sqlconf import (
        MAX_RECORDS_PER_FILE,
        PARQUET_CODEC,
        PARTITION_OVERWRITE_MODE,
        TaskSettings,
        job_conflict_mode,
        task_settings,
    )

    session = {PARTITION_OVERWRITE_MODE: "DYNAMIC", PARQUET_CODEC: "zstd", MAX_RECORDS_PER_FILE: "10"}
    assert task_settings(plan(tmp_path, True), session) == TaskSettings("zstd", 10, "dynamic")
    assert task_settings(plan(tmp_path, True), {}) == TaskSettings("snappy", 0, "static")
    assert task_settings(plan(tmp_path), session).overwrite_mode is None  # append: no mode
    given = plan(tmp_path, True, compression="gzip", maxRecordsPerFile="5", partitionOverwriteMode="static")
    assert task_settings(given, session) == TaskSettings("gzip", 5, "static")  # options win
    with pytest.raises(ConfigError, match=r"compression\.codec is not one amcommit supports \(brotli"):
        task_settings(plan(tmp_path), {PARQUET_CODEC: "lzo"})

    p = plan(tmp_path, True)
    assert job_conflict_mode(p, [TaskSettings(None, 0, "dynamic")] * 2) == "replace"
    assert job_conflict_mode(p, [TaskSettings(None, 0, "static")]) == "overwrite"
    with pytest.raises(CommitError, match="no task ran"):
        job_conflict_mode(p, [])
    with pytest.raises(CommitError, match="different partition overwrite modes"):
        job_conflict_mode(p, [TaskSettings(None, 0, "static"), TaskSettings(None, 0, "dynamic")])
    explicit = plan(tmp_path, True, partitionOverwriteMode="dynamic")
    assert job_conflict_mode(explicit, []) == "replace"  # the option decides: no task needed
    assert job_conflict_mode(plan(tmp_path), []) == "append"


def test_overwrite_mode_unknown_is_refused_and_destination_kept(tmp_path: Path) -> None:
    from amcommit.errors import CommitError

    old = job(tmp_path)
    commit_write(old, [_drive_task(old, 0, 0)])
    before = _visible(tmp_path / "dest")
    p = job(tmp_path, overwrite=True)
    with pytest.raises(CommitError, match="no task ran"):
        commit_write(p, [])
    abort_write(p)
    assert _visible(tmp_path / "dest") == before


@pytest.mark.parametrize("kind", ["gcs", "gcs_double", "blob", "dfs"])
def test_missing_bucket_or_container_named_at_once(kind: str, request: pytest.FixtureRequest) -> None:
    """The driver's ``writer()`` names a missing bucket / container / file system in one
    line, at once (no retries), before any task runs."""
    import uuid

    from amcommit.spark.source import AmcommitDataSource

    name = f"nosuch{uuid.uuid4().hex[:10]}"
    if kind.startswith("gcs"):
        srv = request.getfixturevalue("fake_gcs" if kind == "gcs" else "gcs_double")
        options = {"path": f"gs://{name}/w/events", "endpoint": srv.url}
        expected = f"bucket '{name}' does not exist"
    else:
        az = request.getfixturevalue("azurite" if kind == "blob" else "adls_server")
        host = "blob" if kind == "blob" else "dfs"
        scheme = "wasb" if kind == "blob" else "abfs"
        options = {
            "path": f"{scheme}://{name}@{az.account}.{host}.core.windows.net/w/events",
            "endpoint": az.endpoint,
            "account": az.account,
            "account_key": az.account_key if kind == "blob" else next(iter(az.accounts.values())),
        }
        expected = (
            f"container '{name}' does not exist" if kind == "blob" else f"file system '{name}' does not exist"
        )
    options["request_timeout"] = "15"  # a hung request is retried after 15 s, not 60 s
    # "at once": no request was retried (counted where every retry layer schedules its
    # retries), rather than timed: a loaded machine once took 8 s for this without a retry
    from amcommit.store.retry import Backoff

    retries: list[float] = []
    after = Backoff.after

    def counting(self: Backoff, e: Exception, attempt: int) -> float:
        delay = after(self, e, attempt)  # type: ignore[arg-type]
        if "connection failed: TimeoutError" not in str(e):
            # a hung emulator request (Azurite hung for 60 s once) is retried after the
            # request_timeout below: that is the emulator's fault, not a retried answer
            retries.append(delay)
        return delay

    request.getfixturevalue("monkeypatch").setattr(Backoff, "after", counting)
    with pytest.raises(ConfigError) as ei:
        AmcommitDataSource(options).writer(SCHEMA, False)
    assert retries == []
    assert expected in str(ei.value) and "\n" not in str(ei.value), str(ei.value)
    assert ei.value.__cause__ is None and ei.value.__suppress_context__  # no chained traceback


def test_void_types_made_nullable() -> None:
    from amcommit.spark.parquet import nullable_voids, unwritable_column

    t = StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {
                    "name": "e",
                    "type": {"type": "array", "elementType": "void", "containsNull": False},
                    "nullable": False,
                    "metadata": {},
                },
                {"name": "n", "type": "void", "nullable": False, "metadata": {}},
            ],
        }
    )
    fixed = StructType.fromJson(nullable_voids(t.jsonValue()))
    assert fixed.fields[0].dataType.containsNull and fixed.fields[1].nullable
    assert not fixed.fields[0].nullable  # only void parts change
    assert unwritable_column(t.json()) is None
    m = (
        '{"type":"struct","fields":[{"name":"m","type":{"type":"map","keyType":"void","valueType":"void",'
        '"valueContainsNull":false},"nullable":false,"metadata":{}}]}'
    )
    assert unwritable_column(m) == "m"


def test_commit_job_refuses_a_spark_job_its_driver_never_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 11 item 5: the driver died after 3 of 4 tasks committed; ``commit-job`` must not
    publish the 3 as a success. ``--allow-partial`` does, on request."""
    from amcommit.cli import main

    p = job(tmp_path, partitionBy="day")
    for i in range(3):
        _drive_task(p, i, 0, n=1000)
    dest = tmp_path / "dest"
    before = _visible(dest)
    assert main(["commit-job", str(dest), "--job-id", p.job_id, "-q"]) == 1
    err = capsys.readouterr().err
    assert "set up by Spark" in err and "3 task manifests present" in err and "--allow-partial" in err
    assert _visible(dest) == before and not (dest / "_SUCCESS").exists()
    assert main(["commit-job", str(dest), "--job-id", p.job_id, "-q", "--allow-partial"]) == 0
    assert "committed 6 files" in capsys.readouterr().out
    assert pq.read_table(dest).num_rows == 3000


def test_dictionary_where_parquet_mr_keeps_it() -> None:
    """parquet-mr's first-page check: dictionary plus indices must beat plain values."""
    from amcommit.spark.parquet import dictionary_columns, dictionary_pays, writer_options

    n = 30_000
    assert not dictionary_pays(pa.array(range(n), pa.int64()))  # unique: plain
    assert not dictionary_pays(pa.array([f"user-{i}" for i in range(n)]))
    assert not dictionary_pays(pa.array([i * 0.5 for i in range(n)]))
    assert dictionary_pays(pa.array([i % 1000 for i in range(n)], pa.int32()))
    assert dictionary_pays(pa.array(["view", "click", None] * 1000))
    unique_ts = pa.array(range(n), pa.timestamp("us", "UTC"))
    assert not dictionary_pays(unique_ts)  # INT64: plain
    assert dictionary_pays(unique_ts, int96=True)  # INT96: parquet-mr keeps the dictionary
    assert not dictionary_pays(pa.array([decimal.Decimal(i) for i in range(n)], pa.decimal128(12, 2)))
    repeated_big = pa.array([decimal.Decimal(i % 3) for i in range(n)], pa.decimal128(23, 2))
    assert not dictionary_pays(repeated_big)  # FIXED_LEN_BYTE_ARRAY: never, in parquet-mr's v1
    assert dictionary_pays(pa.array([True, False] * 10))  # not modelled: pyarrow decides
    assert dictionary_pays(pa.array([None, None], pa.string()))
    # a dictionary past 1 MiB on the first page is plain even if values repeat
    big = [("x" * 200) + str(i % 10_000) for i in range(n)]
    assert not dictionary_pays(pa.array(big))
    t = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "kind": pa.array(["a", "b"] * (n // 2)),
            "st": pa.array([{"a": i, "b": [str(i)]} for i in range(n)]),
            "m": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
        }
    )
    assert dictionary_columns(t) == [
        "kind",
        "st.a",
        "st.b.list.element",
        "m.key_value.key",
        "m.key_value.value",
    ]
    assert dictionary_columns(t.select(["kind"])) is True
    assert writer_options(None)["use_dictionary"] is True
    assert writer_options(t, int96=True)["use_deprecated_int96_timestamps"] is True


def test_output_timestamp_type_from_session(tmp_path: Path) -> None:
    from amcommit.spark.sqlconf import OUTPUT_TIMESTAMP_TYPE, task_settings

    schema = StructType([StructField("id", LongType())])
    plan = build_plan({"path": str(tmp_path)}, schema, False)
    assert task_settings(plan, {}).int96_timestamps
    assert not task_settings(plan, {OUTPUT_TIMESTAMP_TYPE: "timestamp_micros"}).int96_timestamps
    with pytest.raises(ConfigError, match="outputTimestampType must be INT96"):
        task_settings(plan, {OUTPUT_TIMESTAMP_TYPE: "nanos"})


def test_int96_unless_timestamp_ntz(tmp_path: Path) -> None:
    def physical(schema: pa.Schema) -> str:
        out: list[str] = []
        w = PartitionedParquetWriter(
            partition_columns=(),
            file_name=lambda n: f"f{n}.parquet",
            local_path=lambda rel: str(tmp_path / rel),
            on_closed=lambda rel, local: out.append(local),
            int96_timestamps=True,
        )
        ts = pa.array([0, 1], pa.timestamp("us", "UTC"))
        cols = [ts if f.type.tz else ts.cast(pa.timestamp("us")) for f in schema]
        w.write(pa.RecordBatch.from_arrays(cols, schema=schema))
        w.close()
        return str(pq.ParquetFile(out[0]).metadata.schema.column(0).physical_type)

    aware = pa.field("ts", pa.timestamp("us", "UTC"))
    assert physical(pa.schema([aware])) == "INT96"
    assert physical(pa.schema([aware, pa.field("ntz", pa.timestamp("us"))])) == "INT64"
