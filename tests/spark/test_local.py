"""``df.write.format("amcommit")`` on local files with a real SparkSession (local[2,3]).

Covers the round trip, task retries after writing (the failed attempt's files never become
visible), jobs whose tasks all fail, a job commit failing midway followed by Spark's
abort(), overwrite and dynamic partition overwrite (also failing), bad options, Spark conf
through ``register``, and empty DataFrames.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from amcommit.committer.sync import BlockingCommitter
from amcommit.loop import uvloop_available
from tests.spark.helpers import data_files, make_df, no_temporary, read, rows, success, writer

pytestmark = pytest.mark.spark

N = 20_000


def test_round_trip_and_append(spark: Any, tmp_path: Path) -> None:
    """Auto-registered source (module pyspark_amcommit): every row comes back, typed."""
    dest = tmp_path / "events"
    df = make_df(spark)
    writer(df, partitionBy="cat,day").save(str(dest))
    back = read(spark, dest, df.schema)
    assert rows(back) == rows(df)
    s = success(dest)
    assert s["success"] and s["committer"] == "amcommit" and s["metrics"]["manifests"] == 4
    files = [f for f in data_files(dest) if f.endswith(".parquet")]
    assert len(files) == s["metrics"]["files"] == 4 * 3 * 2
    assert all(f.split("/")[0].startswith("cat=") and f.split("/")[1].startswith("day=") for f in files)
    assert all(s["jobId"] in f for f in files) and no_temporary(dest)
    # the tasks and the job commit ran on uvloop where it is installed (the test extra has it)
    on = "uvloop " if uvloop_available() else "asyncio"
    assert s["diagnostics"]["event_loop"].startswith(on)
    assert (
        s["diagnostics"]["task_event_loops"].startswith(on)
        and "," not in s["diagnostics"]["task_event_loops"]
    )
    md = pq.ParquetFile(dest / files[0]).metadata
    assert md.row_group(0).column(0).compression == "SNAPPY"
    assert b"org.apache.spark.sql.parquet.row.metadata" in md.metadata

    more = make_df(spark, n=5_000, start=N)
    writer(more, partitionBy="cat,day").save(str(dest))
    assert rows(read(spark, dest, df.schema)) == rows(df.unionByName(more))


def test_task_retried_after_writing_files(spark: Any, tmp_path: Path) -> None:
    """Partition 1's first attempt writes files (small row groups), then raises: it cleans up
    its own attempt, Spark retries it, every row is there exactly once."""
    dest = tmp_path / "retry"
    df = make_df(spark)
    writer(
        df,
        partitionBy="cat",
        rowGroupRows="500",
        maxRecordsPerFile="1000",
        fail_task={"partitions": [1], "attempts": [0], "after_rows": 4000},
    ).save(str(dest))
    assert rows(read(spark, dest, df.schema)) == rows(df)
    assert no_temporary(dest) and success(dest)["metrics"]["manifests"] == 4


def test_crashed_attempt_files_never_visible(spark: Any, tmp_path: Path) -> None:
    """Partition 0's first attempt finishes its files and then its Python worker dies (no
    cleanup at all). Its files stay in its attempt directory and are never renamed; the
    committed job's cleanup (run here by resuming the commit, since cleanup was skipped to
    look at them) deletes them."""
    dest = tmp_path / "crash"
    df = make_df(spark)
    writer(
        df,
        partitionBy="cat",
        cleanup_skipped="true",
        fail_task={
            "partitions": [0],
            "attempts": [0],
            "after_rows": 3000,
            "how": "exit",
        },
    ).save(str(dest))
    job_id = success(dest)["jobId"]
    files = data_files(dest)
    leftovers = [f for f in files if f.startswith("_temporary/") and f.endswith(".parquet")]
    crashed = [f for f in leftovers if f"attempt_{job_id}_m_000000_0/" in f]
    assert crashed, f"the crashed attempt's files should be in its attempt dir: {sorted(files)}"
    assert rows(read(spark, dest, df.schema)) == rows(df)  # no duplicates, nothing missing

    BlockingCommitter(str(dest), job_id).commit_job()  # already committed: cleanup only
    assert no_temporary(dest)
    assert rows(read(spark, dest, df.schema)) == rows(df)


@pytest.mark.parametrize(
    ("mode", "options"),
    [("append", {}), ("overwrite", {}), ("overwrite", {"partitionOverwriteMode": "dynamic"})],
    ids=["append", "overwrite", "dynamic"],
)
def test_all_tasks_fail_destination_as_before(
    spark: Any, tmp_path: Path, mode: str, options: dict[str, str]
) -> None:
    """Every attempt of the write's task fails: the job is aborted and the destination holds
    exactly what it held. One task (``parts=1``): its attempts run one after the other, each
    removes what it wrote before Spark learns that it failed, and the abort comes after the
    last one, so nothing runs when ``save()`` raises. (With two tasks, an attempt of the
    other task may still run after the abort, for as long as Spark takes to kill it: such
    zombies are tested where the test drives them, ``test_zombie_attempts.py`` and
    ``tests/engine/test_leftovers.py``.)"""
    dest = tmp_path / "allfail"
    old = make_df(spark, n=3_000)
    writer(old, partitionBy="cat").save(str(dest))
    before = data_files(dest)
    fail = {"partitions": None, "attempts": [0, 1, 2, 3], "after_rows": 100}
    with pytest.raises(Exception, match="injected task failure"):
        writer(
            make_df(spark, n=6_000, start=10_000, cats="bd", parts=1),
            mode,
            partitionBy="cat",
            rowGroupRows="100",
            **options,
            fail_task=fail,
        ).save(str(dest))
    assert data_files(dest) == before
    assert rows(read(spark, dest, old.schema)) == rows(old)


def _fault(path: str, op: str, after: int) -> str:
    return json.dumps(
        [{"phase": "commit", "op": op, "path": path, "after": after, "error": "PermissionDenied"}]
    )


def test_commit_fails_midway_then_abort_rolls_back(spark: Any, tmp_path: Path) -> None:
    """An overwrite whose job commit fails after a few renames: abort() rolls back, the old
    data is all there and only there."""
    dest = tmp_path / "midway"
    old = make_df(spark, n=3_000)
    writer(old, partitionBy="cat").save(str(dest))
    before = data_files(dest)
    new = make_df(spark, n=4_000, start=50_000)
    with pytest.raises(Exception, match=r"PermissionDenied|rename"):
        writer(
            new,
            "overwrite",
            partitionBy="cat",
            driver_faults=_fault("*.parquet", "rename", 3),
        ).save(str(dest))
    assert data_files(dest) == before
    assert rows(read(spark, dest, old.schema)) == rows(old)


def test_commit_fails_past_point_of_no_return_then_abort_completes(spark: Any, tmp_path: Path) -> None:
    """The overwrite's renames are done, deleting the old files fails: abort() completes the
    commit (the destination holds exactly the new data) although Spark reports a failure."""
    dest = tmp_path / "pnr"
    old = make_df(spark, n=3_000)
    writer(old, partitionBy="cat").save(str(dest))
    old_job = success(dest)["jobId"]
    new = make_df(spark, n=4_000, start=50_000)
    with pytest.raises(Exception, match=r"PermissionDenied|delete"):
        writer(
            new,
            "overwrite",
            partitionBy="cat",
            driver_faults=_fault(f"*{old_job}*.parquet", "delete", 1),
        ).save(str(dest))
    assert rows(read(spark, dest, new.schema)) == rows(new)
    assert no_temporary(dest) and success(dest)["jobId"] != old_job


def test_overwrite_static_and_dynamic(spark: Any, tmp_path: Path) -> None:
    dest = tmp_path / "ow"
    old = make_df(spark, n=3_000, cats="abc")
    writer(old, partitionBy="cat").save(str(dest))
    new = make_df(spark, n=2_000, start=10_000, cats="bd")
    writer(new, "overwrite", partitionBy="cat", partitionOverwriteMode="dynamic").save(str(dest))
    expected = old.where("cat in ('a', 'c')").unionByName(new)
    back = read(spark, dest, old.schema)
    assert rows(back) == rows(expected)
    assert sorted(p for p in data_files(dest) if "=" in p.split("/")[0]) and no_temporary(dest)
    assert {f.split("/")[0] for f in data_files(dest) if f.endswith(".parquet")} == {
        "cat=a",
        "cat=b",
        "cat=c",
        "cat=d",
    }

    newest = make_df(spark, n=1_000, start=90_000, cats="e")
    writer(newest, "overwrite", partitionBy="cat").save(str(dest))
    assert rows(read(spark, dest, old.schema)) == rows(newest)
    assert {f.split("/")[0] for f in data_files(dest) if f.endswith(".parquet")} == {"cat=e"}


@pytest.mark.parametrize(
    ("mode", "options", "message"),
    [
        ("append", {"format": "orc"}, "option 'format' must be parquet"),
        (
            "append",
            {"partitionBy": "category"},
            "option 'partitionBy' must name columns of the DataFrame",
        ),
        ("append", {"partitionBy": "tags"}, "cannot be a partition value"),
        ("append", {"compresion": "zstd"}, "did you mean 'compression'"),
        ("ignore", {}, "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
        ("errorifexists", {}, "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"),
    ],
)
def test_bad_options_fail_before_any_task(
    spark: Any, tmp_path: Path, mode: str, options: dict[str, str], message: str
) -> None:
    dest = tmp_path / "bad"
    with pytest.raises(Exception, match=message):
        writer(make_df(spark, n=100), mode, **options).save(str(dest))
    assert not dest.exists()


def test_partition_by_is_rejected_by_spark(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="partitioning"):
        make_df(spark, n=10).write.format("amcommit").mode("append").partitionBy("cat").save(str(tmp_path))


def test_spark_conf_through_register_and_empty_dataframe(spark: Any, tmp_path: Path) -> None:
    from amcommit.spark import register

    spark.conf.set("spark.amcommit.compression", "gzip")
    spark.conf.set("spark.hadoop.mapreduce.manifest.committer.io.threads", "4")
    try:
        register(spark)
        dest = tmp_path / "conf"
        df = make_df(spark, n=1_000)
        writer(df).save(str(dest))
        f = next(p for p in data_files(dest) if p.endswith(".parquet"))
        assert pq.ParquetFile(dest / f).metadata.row_group(0).column(0).compression == "GZIP"
        assert rows(read(spark, dest, df.schema)) == rows(df)

        empty = tmp_path / "empty"
        writer(df.where("id < 0"), "overwrite").save(str(empty))
        back = spark.read.parquet(str(empty))  # schema readable from the one empty file
        assert back.count() == 0 and back.columns == df.columns
    finally:
        spark.conf.unset("spark.amcommit.compression")
        spark.conf.unset("spark.hadoop.mapreduce.manifest.committer.io.threads")
        register(spark)


def test_errors_reach_the_user_short_with_paths_as_given(spark: Any, tmp_path: Path) -> None:
    """A commit error (conflict mode fail) and a task error reach the Spark user as the
    amcommit message with paths as given (leading ``/`` kept), without engine frames."""
    dest = tmp_path / "err"
    df = make_df(spark, n=200, parts=1)
    writer(df).save(str(dest))
    with pytest.raises(Exception) as ei:
        writer(df, conflict_mode="fail").save(str(dest))
    text = str(ei.value)
    assert f"already holds '{dest}/part-" in text, text
    assert "anyio" not in text and "committer/job.py" not in text and len(text) < 900, text

    with pytest.raises(Exception) as ei:  # a task refuses the session's unsupported codec
        spark.conf.set("spark.sql.parquet.compression.codec", "lzo")
        try:
            writer(df).save(str(tmp_path / "lzo"))
        finally:
            spark.conf.unset("spark.sql.parquet.compression.codec")
    text = str(ei.value)
    assert "spark.sql.parquet.compression.codec is not one amcommit supports" in text
    assert "task.py" not in text and "sqlconf.py" not in text, text


HOLDER = (
    "import sys, time, anyio\n"
    "from amcommit.committer.lock import DestinationLock\n"
    "from amcommit.store.schemes import open_location\n"
    "async def hold():\n"
    "    store, dest = open_location(sys.argv[1])\n"
    "    await DestinationLock(store, dest, 'job_holder', ttl=60).acquire()\n"
    "    print('held', flush=True)\n"
    "    time.sleep(3600)\n"
    "anyio.run(hold)\n"
)


@pytest.mark.timeout(600)
def test_a_write_waiting_for_the_lock_says_so_in_the_driver_log(spark: Any, tmp_path: Path) -> None:
    """A Spark write (its own driver process) finds the destination locked by a live
    process (lock ttl 60 s): its driver log says so once, in one line; the holder is killed
    with SIGKILL and the write takes the lock over at once and commits."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root), *sys.path]))
    dest = tmp_path / "events"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(dest)], stdout=subprocess.PIPE, text=True, env=env, cwd=root
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.write_child", str(dest), "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=root,
    )
    log: list[str] = []
    assert driver.stderr is not None
    reader = threading.Thread(target=lambda: log.extend(driver.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + 180
        while not any("waits for the lock of" in line for line in log):
            assert driver.poll() is None, "".join(log)[-3000:]
            assert time.monotonic() < deadline, "no wait message in the driver's log"
            time.sleep(0.2)
        time.sleep(1.0)
        assert driver.poll() is None  # the holder is alive: the write waits
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    killed = time.monotonic()
    driver.wait(timeout=120)
    took = time.monotonic() - killed
    assert driver.stdout is not None
    out = driver.stdout.read()
    reader.join(timeout=10)
    assert driver.returncode == 0 and out.strip() == "done", "".join(log)[-3000:]
    assert took < 30, took  # not the holder's lock ttl (60 s)
    said = [line for line in log if "waits for the lock of" in line]
    assert len(said) == 1, said
    assert (
        "held by job 'job_holder' (commit, host " in said[0]
        and "waiting at most 600 s (lock_wait)" in said[0]
    )
    assert success(dest)["success"] and no_temporary(dest)
    assert sorted(r.id for r in spark.read.parquet(str(dest)).collect()) == list(range(100))


def test_commit_sharded_over_processes_inside_spark(spark: Any, tmp_path: Path) -> None:
    """``processes=2``: Spark's ``commit()`` worker (a Python process of its own on the driver
    host, no SparkSession) starts two rename workers; the output is every row, and
    ``_SUCCESS`` records that two processes renamed."""
    dest = tmp_path / "sharded"
    df = make_df(spark, n=5_000)
    writer(df, partitionBy="cat,day", processes="2").save(str(dest))
    s = success(dest)
    assert s["success"] and s["iostatistics"]["counters"]["committer_rename_processes"] == 2
    assert rows(read(spark, dest, df.schema)) == rows(df) and no_temporary(dest)
    assert len([f for f in data_files(dest) if f.endswith(".parquet")]) == s["metrics"]["files"] == 4 * 3 * 2
