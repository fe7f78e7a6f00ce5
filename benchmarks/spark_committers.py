"""Local files through PySpark: Hadoop's committers against amcommit.

    .venv/bin/python -m benchmarks.spark_committers [--tasks 200] [--files-per-task 10]
        [--rounds 2] [--rows 1000000] [--json-only]

Part 1, job commit (what the committer does after the last task): a job of
``tasks x files-per-task`` files (1 KiB, 10 partitions) on local disk, committed by

* Hadoop's ``FileOutputCommitter`` algorithm v1 and v2 and its Java ``ManifestCommitter``
  (Hadoop 3.5, bundled in PySpark 4.3), driven through py4j exactly as Spark drives them
  (setupJob, setupTask, getWorkPath, commitTask per task, then commitJob), warm JVM;
* amcommit's ``commit_job`` (defaults, ``LocalStore``) on the same files in a fresh
  Python process, after amcommit's task commits.

Timed: ``commitJob`` / ``commit_job`` alone (wall), and the sum of the task commits.
Note that v2 already moved every file during task commit (its job commit only cleans up
and writes ``_SUCCESS``), at the price of exposing partial output when a job fails.

Part 2, rows/s of a whole write (``--rows`` rows of 4 columns in 200 partitions, 10
values of ``day``; ``--rows 0`` skips it), same session: ``df.write.format("amcommit")`` vs Spark's native
``df.write.parquet`` (FileOutputCommitter v1 and v2), and the RDD path
``saveAsNewAPIHadoopFile`` (text) with FileOutputCommitter v1 vs the ManifestCommitter
(the only way to reach Hadoop's manifest committer here). Rows/s compare like with like
within the Parquet group and within the RDD group.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from amcommit.spark.session import local_builder
from benchmarks.common import Measure, add_save_arg, run_isolated, table, write_json
from benchmarks.job_commit import own_peak_rss_mb

MANIFEST_FACTORY = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitterFactory"
JT = "202611220300"
AMC_JOB = "202611220300_0001"
PARTS = 10
DATA = b"x" * 1024


def start_spark(java_tmp: str) -> Any:
    spark = (
        local_builder("local[2]", "amcommit-bench")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={java_tmp}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _write_files(work_dir: str, task: int, files: int) -> None:
    for i in range(files):
        d = os.path.join(work_dir, f"day={i % PARTS:02d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"part-{task:05d}-{i:04d}.bin"), "wb") as f:
            f.write(DATA)


def _local(uri: str) -> str:
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(uri).path)


def hadoop_job(spark: Any, committer: str, dest: str, tasks: int, files: int) -> dict[str, Any]:
    """One job through a Hadoop committer (``v1``, ``v2``, ``manifest``) via py4j."""
    j = spark._jvm
    mr = j.org.apache.hadoop.mapreduce
    conf = j.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    dest_path = j.org.apache.hadoop.fs.Path("file://" + dest)
    conf.set("mapreduce.output.fileoutputformat.outputdir", dest_path.toString())
    if committer == "manifest":
        conf.set("mapreduce.outputcommitter.factory.scheme.file", MANIFEST_FACTORY)
    else:
        conf.set("mapreduce.fileoutputcommitter.algorithm.version", "1" if committer == "v1" else "2")

    def make(tac: Any) -> Any:
        if committer == "manifest":
            return mr.lib.output.committer.manifest.ManifestCommitterFactory().createOutputCommitter(
                dest_path, tac
            )
        return mr.lib.output.FileOutputCommitter(dest_path, tac)

    job_id = mr.JobID(JT, 1)
    job_ctx = mr.task.JobContextImpl(conf, job_id)
    job_committer = make(mr.task.TaskAttemptContextImpl(conf, mr.TaskAttemptID(JT, 1, mr.TaskType.MAP, 0, 0)))
    job_committer.setupJob(job_ctx)
    task_s = 0.0
    for t in range(tasks):
        tac = mr.task.TaskAttemptContextImpl(conf, mr.TaskAttemptID(JT, 1, mr.TaskType.MAP, t, 0))
        c = make(tac)
        c.setupTask(tac)
        _write_files(_local(c.getWorkPath().toUri().toString()), t, files)
        t0 = time.perf_counter()
        c.commitTask(tac)
        task_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    job_committer.commitJob(job_ctx)
    job_s = time.perf_counter() - t0
    return {"job_commit_s": job_s, "task_commits_s": task_s}


async def _amcommit_prepare(root: str, tasks: int, files: int) -> float:
    """amcommit's task side for the same job; returns the summed task commit time."""
    from amcommit.api import setup_job
    from amcommit.committer import commit_task, setup_task
    from amcommit.store.local import LocalStore

    store = LocalStore(root)
    layout = await setup_job(store, "dest", AMC_JOB)
    total = 0.0
    for t in range(tasks):
        attempt = f"attempt_{AMC_JOB}_m_{t:06d}_0"
        work = await setup_task(store, layout, attempt)
        _write_files(os.path.join(root, work), t, files)
        t0 = time.perf_counter()
        await commit_task(store, layout, f"task_{AMC_JOB}_m_{t:06d}", attempt)
        total += time.perf_counter() - t0
    return total


def amcommit_worker(root: str) -> dict[str, Any]:
    """The job commit alone, in this (fresh) process."""
    from amcommit import loop as amcommit_loop
    from amcommit.api import commit_job
    from amcommit.store.local import LocalStore

    async def main() -> dict[str, Any]:
        store = LocalStore(root)
        with Measure() as m:
            report = await commit_job(store, "dest", AMC_JOB)
        return {
            "job_commit_s": m.wall,
            "cpu_s": m.cpu,
            "files": report.files,
            "peak_rss_mb": own_peak_rss_mb(),
        }

    return amcommit_loop.run(main)


def _count(dest: str) -> int:
    n = 0
    for d, _dirs, names in os.walk(dest):
        if "_temporary" in d.split(os.sep):
            continue
        n += sum(1 for x in names if x.endswith(".bin"))
    return n


def job_commit_part(spark: Any, tasks: int, files: int, rounds: int, scratch: str) -> list[dict[str, Any]]:
    """Part 1 (see the module docstring); interleaved rounds, medians."""
    import anyio

    plan = ["amcommit", "manifest", "v1", "v2"]
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in plan}
    want = tasks * files
    for rnd in range(rounds):
        for name in plan if rnd % 2 == 0 else list(reversed(plan)):
            root = tempfile.mkdtemp(prefix=f"amc-{name}-", dir=scratch)
            try:
                if name == "amcommit":
                    task_s = anyio.run(_amcommit_prepare, root, tasks, files)
                    r = run_isolated("benchmarks.spark_committers", ["--amcommit-worker", root])
                    r["task_commits_s"] = task_s
                else:
                    r = hadoop_job(spark, name, os.path.join(root, "dest"), tasks, files)
                got = _count(os.path.join(root, "dest"))
                r["verified"] = "exact" if got == want else f"{got} of {want} files"
                samples[name].append(r)
                print(
                    f"  local job commit {name:<9} {want} files: {r['job_commit_s'] * 1000:8.1f} ms "
                    f"(task commits {r['task_commits_s']:.2f} s) {r['verified']}",
                    file=sys.stderr,
                    flush=True,
                )
            finally:
                shutil.rmtree(root, ignore_errors=True)
    labels = {
        "amcommit": "amcommit commit_job",
        "manifest": "Hadoop ManifestCommitter",
        "v1": "Hadoop FileOutputCommitter v1",
        "v2": "Hadoop FileOutputCommitter v2",
    }
    rows = []
    for name in plan:
        rs = samples[name]
        job_ms = statistics.median(r["job_commit_s"] for r in rs) * 1000
        rows.append(
            {
                "committer": labels[name],
                "files": want,
                "job_commit_ms": round(job_ms, 1),
                "files_per_s": round(want / (job_ms / 1000), 0) if job_ms else 0,
                "task_commits_s": round(statistics.median(r["task_commits_s"] for r in rs), 2),
                "verified": "exact" if all(r["verified"] == "exact" for r in rs) else rs[0]["verified"],
                "runs": len(rs),
            }
        )
    by = {r["committer"]: r for r in rows}
    amc, man = by["amcommit commit_job"], by["Hadoop ManifestCommitter"]
    if amc["job_commit_ms"]:
        amc["x_manifest_committer"] = round(man["job_commit_ms"] / amc["job_commit_ms"], 2)
    return rows


def write_part(spark: Any, rows_n: int, scratch: str) -> list[dict[str, Any]]:
    """Part 2: rows/s of whole writes (see the module docstring)."""
    from pyspark.sql import functions as F

    df = (
        spark.range(rows_n, numPartitions=200)
        .select(
            F.col("id"),
            (F.col("id") % 10).alias("day"),
            (F.col("id") * 7 % 1000).cast("double").alias("value"),
            F.concat(F.lit("name-"), F.col("id").cast("string")).alias("name"),
        )
        .cache()
    )
    df.count()
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    out = []

    def timed(label: str, group: str, fn: Any, dest: str) -> None:
        shutil.rmtree(dest, ignore_errors=True)
        t0 = time.perf_counter()
        fn(dest)
        wall = time.perf_counter() - t0
        row = {"writer": label, "group": group, "rows": rows_n, "seconds": round(wall, 2)}
        row["rows_per_s"] = round(rows_n / wall)
        try:
            s = json.loads(Path(dest, "_SUCCESS").read_text() or "{}")
            ms = s.get("metrics", {}).get("duration_ms")
            if ms is not None:
                row["job_commit_ms"] = ms
        except (OSError, ValueError):
            pass
        out.append(row)
        print(f"  spark write {label:<40} {row['rows_per_s']:>10,} rows/s", file=sys.stderr, flush=True)
        shutil.rmtree(dest, ignore_errors=True)

    def parquet(version: str) -> Any:
        def go(dest: str) -> None:
            hconf.set("mapreduce.fileoutputcommitter.algorithm.version", version)
            df.write.mode("overwrite").partitionBy("day").parquet("file://" + dest)
            hconf.set("mapreduce.fileoutputcommitter.algorithm.version", "1")

        return go

    def amcommit(dest: str) -> None:
        df.write.format("amcommit").mode("overwrite").option("partitionBy", "day").save("file://" + dest)

    def rdd(manifest: bool) -> Any:
        def go(dest: str) -> None:
            conf = {"mapreduce.outputcommitter.factory.scheme.file": MANIFEST_FACTORY} if manifest else {}
            df.rdd.map(lambda r: (str(r[0]), f"{r[1]},{r[2]},{r[3]}")).saveAsNewAPIHadoopFile(
                "file://" + dest,
                "org.apache.hadoop.mapreduce.lib.output.TextOutputFormat",
                keyClass="org.apache.hadoop.io.Text",
                valueClass="org.apache.hadoop.io.Text",
                conf=conf,
            )

        return go

    plan = [
        ("amcommit data source (Parquet)", "parquet", amcommit),
        ("Spark parquet, FileOutputCommitter v1", "parquet", parquet("1")),
        ("Spark parquet, FileOutputCommitter v2", "parquet", parquet("2")),
        ("RDD text, FileOutputCommitter v1", "rdd", rdd(False)),
        ("RDD text, Hadoop ManifestCommitter", "rdd", rdd(True)),
    ]
    timed("warm-up (not reported)", "warmup", parquet("1"), os.path.join(scratch, "warmup"))
    out.clear()
    for label, group, fn in plan:
        timed(label, group, fn, os.path.join(scratch, "w-" + group))
    df.unpersist()
    return out


def run(tasks: int, files: int, rounds: int, rows_n: int) -> dict[str, Any]:
    scratch = tempfile.mkdtemp(prefix="amcommit-spark-bench-")
    java_tmp = os.path.join(scratch, "java-tmp")
    os.makedirs(java_tmp)
    try:
        spark = start_spark(java_tmp)
        try:
            commit_rows = job_commit_part(spark, tasks, files, rounds, scratch)
            write_rows = write_part(spark, rows_n, scratch) if rows_n else []
        finally:
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"job_commit": commit_rows, "writes": write_rows}


COMMIT_COLUMNS = [
    "committer",
    "files",
    "job_commit_ms",
    "files_per_s",
    "x_manifest_committer",
    "task_commits_s",
    "verified",
]
WRITE_COLUMNS = ["writer", "rows", "seconds", "rows_per_s", "job_commit_ms"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--amcommit-worker", help=argparse.SUPPRESS)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--files-per-task", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for part 2 (0: skip it)")
    ap.add_argument("--json-only", action="store_true", help="print only the results as JSON")
    add_save_arg(ap)
    a = ap.parse_args(argv)
    if a.amcommit_worker:
        print(json.dumps(amcommit_worker(a.amcommit_worker)))
        return 0
    res = run(a.tasks, a.files_per_task, a.rounds, a.rows)
    if a.json_only:
        print(json.dumps(res))
        return 0
    print(table(res["job_commit"], COMMIT_COLUMNS, "Local job commit (PySpark / Hadoop 3.5 committers)"))
    if res["writes"]:
        print()
        print(table(res["writes"], WRITE_COLUMNS, "Whole writes through Spark, local files"))
    print(f"\nwrote {write_json('spark_committers', {'benchmark': 'spark_committers', **res}, save=a.save)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
