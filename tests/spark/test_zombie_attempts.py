"""Zombie task attempts (issue 37): an attempt still writing when Spark aborted its job
finds out the job is over and removes what it wrote, before it writes more. Driven
directly (no SparkSession, as in ``test_units.py``); the interleaving is the test's: the
job is aborted between two batches the attempt reads, and the attempt is killed (SIGKILL,
as Spark kills a task of a failed stage) at a point the test chooses."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from amcommit.spark.driver import abort_write, commit_write
from amcommit.spark.options import build_plan
from amcommit.spark.source import _setup_job
from amcommit.spark.task import run_task
from amcommit.store.schemes import open_location

SCHEMA = StructType([StructField("id", LongType()), StructField("cat", StringType())])
ROOT = Path(__file__).resolve().parents[2]


def batch(start: int, n: int, cat: str) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(start, start + n), pa.int64()), "cat": pa.array([cat] * n)})


def new_job(options: dict[str, str]) -> Any:
    plan = build_plan({"partitionby": "cat", **options}, SCHEMA, False)
    _setup_job(plan)
    return plan


def listing(url: str, **store_options: Any) -> dict[str, bytes]:
    """Every object under ``url`` with its bytes."""

    async def main() -> dict[str, bytes]:
        store, dest = open_location(url, **store_options)
        async with store:
            return {
                i.path[len(dest) + 1 :]: await store.get(i.path)
                async for i in store.list(dest, recursive=True)
                if not i.is_dir
            }

    return anyio.run(main)


def committed_before(options: dict[str, str]) -> None:
    """An earlier write's files in the destination (they must stay as they are)."""
    plan = new_job(options)
    result = run_task(plan, [batch(0, 30, "b"), batch(30, 30, "c")], partition=0, attempt=0)
    assert commit_write(plan, [result]).success


def test_zombie_killed_after_abort_leaves_nothing_on_local_files(tmp_path: Path) -> None:
    """A local attempt reads rows after its job was aborted and would start a new file: it
    checks the job marker before it creates a file, finds the job over and removes its
    attempt (and what is left of the job directory) before the test kills it. Without the
    check, it recreates ``_temporary/manifest_<job>/00/tasks/<attempt>/cat=d/part-...`` and
    SIGKILL leaves that behind."""
    options = {"path": str(tmp_path / "dest"), "rowgrouprows": "10"}
    committed_before(options)
    before = listing(options["path"])
    plan = new_job(options)
    plan_file = tmp_path / "plan.pkl"
    plan_file.write_bytes(pickle.dumps(plan))
    wrote, aborted, reached = tmp_path / "wrote", tmp_path / "aborted", tmp_path / "reached"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), *sys.path]))
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.spark.zombie_child",
            str(plan_file),
            str(wrote),
            str(aborted),
            str(reached),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not wrote.exists():
            assert child.poll() is None, child.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the attempt never wrote its first file"
            time.sleep(0.02)
        attempt_files = [
            n for n in listing(options["path"]) if n.startswith("_temporary/") and "/tasks/attempt_" in n
        ]
        assert [n.split("/")[-2] for n in attempt_files] == ["cat=b"]  # the attempt's first file
        assert not abort_write(plan).success  # Spark aborts the job while the attempt runs
        assert not (tmp_path / "dest" / "_temporary").exists()
        aborted.touch()
        deadline = time.monotonic() + 60
        while child.poll() is None and not reached.exists():
            assert time.monotonic() < deadline, "the attempt neither failed nor went on"
            time.sleep(0.02)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)  # Spark kills the zombie task
        _out, err = child.communicate(timeout=60)
    assert not reached.exists(), "the attempt wrote on after its job was aborted"
    assert child.returncode == 1 and "still writing: its files were removed" in err, err[-3000:]
    assert listing(options["path"]) == before  # exactly the earlier write's files, no _temporary


def test_zombie_uploads_after_abort_stop_on_fake_gcs(tmp_path: Path, fake_gcs: Any) -> None:
    """A cloud attempt (files written locally, uploaded when rolled) reads rows after its job
    was aborted: its first upload after the abort finds the job marker gone, deletes itself,
    and the attempt fails there (with at most the uploads then in flight, each removing
    itself), removing its attempt. Without the check, it uploads every file of the task into
    the recreated job directory before its task commit finds the job over: the rows read
    last are read with those files on the store (what a kill there leaves)."""
    bucket = f"amc-zombie-{uuid.uuid4().hex[:10]}"
    fake_gcs.create_bucket(bucket)
    url = f"gs://{bucket}/t/events"
    store_options = {"endpoint": fake_gcs.url}
    options = {"path": url, **store_options, "maxrecordsperfile": "20", "rowgrouprows": "20"}
    committed_before(options)
    before = listing(url, **store_options)
    plan = new_job(options)
    seen_at_end: list[dict[str, bytes]] = []

    def batches() -> Iterator[pa.RecordBatch]:
        yield batch(100, 40, "b")  # two files rolled and uploaded while the job is active
        assert not abort_write(plan).success  # Spark aborts the job while the attempt runs
        for k in range(10):  # ten more files: at most four uploads are in flight at once,
            yield batch(200 + 20 * k, 20, "d")  # so the first ones after the abort are done
        seen_at_end.append(listing(url, **store_options))  # not reached with the check

    with pytest.raises(Exception) as ei:
        run_task(plan, batches(), partition=0, attempt=0)
    assert seen_at_end == [], "the attempt uploaded on after its job was aborted"
    assert "still writing: its files were removed" in str(ei.value)
    assert listing(url, **store_options) == before  # exactly the earlier write's files
