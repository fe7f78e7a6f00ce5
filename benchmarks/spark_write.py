"""PySpark writes through amcommit vs Spark's native Parquet writer, in one SparkSession.

    .venv/bin/python -m benchmarks.spark_write [--rows 2000000] [--tasks 8] [--days 10]
        [--commit-files 2000] [--rounds 3]

Part 1, rows/s: ``--rows`` rows (id, day, user, kind, amount), ``--tasks`` partitions,
written partitioned by ``day`` (``--days`` values) with snappy Parquet by
``df.write.format("amcommit")`` and by ``df.write.partitionBy("day").parquet`` (Hadoop
``FileOutputCommitter`` algorithm v1), alternating, ``--rounds`` times each after a
warm-up of both (Python workers started, JIT warm). Wall time of the whole ``save`` (tasks
and job commit); median reported.

Part 2, job commit of ``--commit-files`` files (``commit-files / days`` tasks, each writing
one small file per day): amcommit's job commit time is its ``_SUCCESS`` ``duration_ms``
(the engine's ``commit_job``: manifests, renames, ``_SUCCESS``, cleanup); the native
writer's is Spark's own ``job commit time`` SQL metric (``FileOutputCommitter.commitJob``
v1: merge of every task directory, ``_SUCCESS``, cleanup). Local disk, same session.

Results: a Markdown table on stdout, JSON in ``benchmarks/results/spark_write.json``.
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

from benchmarks.common import table, write_json


def dataset(spark: Any, rows: int, tasks: int, days: int) -> Any:
    from amcommit.spark.demo import dataset as demo_dataset

    return demo_dataset(spark, rows, tasks, days)


def last_execution_metrics(spark: Any) -> dict[str, str]:
    """SQL metrics of the last query execution (name -> value string), through py4j."""
    js = spark._jsparkSession
    store = js.sharedState().statusStore()
    execs = store.executionsList()
    last = execs.apply(execs.size() - 1)
    values = store.executionMetrics(last.executionId())
    out: dict[str, str] = {}
    it = last.metrics().iterator()
    while it.hasNext():
        m = it.next()
        v = values.get(m.accumulatorId())
        if v.isDefined():
            out[str(m.name())] = str(v.get())
    return out


def _ms(metric: str) -> float:
    """``"233 ms"`` or ``"1.2 s"`` or ``"2.0 m"`` -> milliseconds."""
    num, unit = metric.split()[0:2]
    value = float(num.replace(",", ""))
    return value * {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}[unit]


def count_files(path: Path) -> int:
    return sum(1 for _r, _d, fs in os.walk(path) for f in fs if f.endswith(".parquet"))


def write_amcommit(df: Any, dest: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    df.write.format("amcommit").mode("overwrite").option("partitionBy", "day").save(str(dest))
    wall = time.perf_counter() - t0
    success = json.loads((dest / "_SUCCESS").read_text())
    m = success["metrics"]
    return {
        "wall_s": wall,
        "job_commit_ms": float(m["duration_ms"]),
        "rename_ms": float(m.get("stage_rename_files_ms", 0)),
        "files": int(m["files"]),
    }


def write_native(spark: Any, df: Any, dest: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    (
        df.write.mode("overwrite")
        .option("mapreduce.fileoutputcommitter.algorithm.version", "1")
        .option("compression", "snappy")
        .partitionBy("day")
        .parquet(str(dest))
    )
    wall = time.perf_counter() - t0
    metrics = last_execution_metrics(spark)
    return {
        "wall_s": wall,
        "job_commit_ms": _ms(metrics["job commit time"]),
        "files": count_files(dest),
    }


def start(cores: int) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("amcommit-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.spark_write", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--commit-files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)

    spark = start(args.cores)
    work = Path(tempfile.mkdtemp(prefix="amcommit-bench-spark-"))
    load_before = os.getloadavg()
    try:
        big = dataset(spark, args.rows, args.tasks, args.days).cache()
        big.count()  # generated once: both writers read the same cached rows
        warm = dataset(spark, 20_000, args.tasks, args.days)
        write_amcommit(warm, work / "warm-a")
        write_native(spark, warm, work / "warm-n")

        runs: dict[str, list[dict[str, Any]]] = {"amcommit": [], "native": []}
        for r in range(args.rounds):
            for name in ("amcommit", "native") if r % 2 == 0 else ("native", "amcommit"):
                dest = work / f"rows-{name}-{r}"
                res = write_amcommit(big, dest) if name == "amcommit" else write_native(spark, big, dest)
                res["rows_per_s"] = args.rows / res["wall_s"]
                runs[name].append(res)
                print(
                    f"  rows/s round {r} {name}: {res['rows_per_s']:,.0f} ({res['files']} files)",
                    file=sys.stderr,
                )
                shutil.rmtree(dest, ignore_errors=True)
        big.unpersist()

        commit_tasks = max(1, args.commit_files // args.days)
        small = dataset(spark, commit_tasks * args.days * 10, commit_tasks, args.days).cache()
        small.count()
        commits: dict[str, list[dict[str, Any]]] = {"amcommit": [], "native": []}
        for r in range(args.rounds):
            for name in ("amcommit", "native") if r % 2 == 0 else ("native", "amcommit"):
                dest = work / f"commit-{name}-{r}"
                res = write_amcommit(small, dest) if name == "amcommit" else write_native(spark, small, dest)
                commits[name].append(res)
                print(
                    f"  job commit round {r} {name}: {res['job_commit_ms']:.0f} ms ({res['files']} files)",
                    file=sys.stderr,
                )
                shutil.rmtree(dest, ignore_errors=True)
        small.unpersist()
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    rows_table = [
        {
            "writer": "amcommit (format('amcommit'), pyarrow)",
            "rows": args.rows,
            "files": runs["amcommit"][0]["files"],
            "median rows/s": med([x["rows_per_s"] for x in runs["amcommit"]]),
            "median wall s": med([x["wall_s"] for x in runs["amcommit"]]),
            "job commit ms": med([x["job_commit_ms"] for x in runs["amcommit"]]),
        },
        {
            "writer": "Spark native parquet, FileOutputCommitter v1",
            "rows": args.rows,
            "files": runs["native"][0]["files"],
            "median rows/s": med([x["rows_per_s"] for x in runs["native"]]),
            "median wall s": med([x["wall_s"] for x in runs["native"]]),
            "job commit ms": med([x["job_commit_ms"] for x in runs["native"]]),
        },
    ]
    commit_table = [
        {
            "committer": "amcommit commit_job",
            "files": commits["amcommit"][0]["files"],
            "median job commit ms": med([x["job_commit_ms"] for x in commits["amcommit"]]),
            "min ms": min(x["job_commit_ms"] for x in commits["amcommit"]),
            "max ms": max(x["job_commit_ms"] for x in commits["amcommit"]),
            "median save wall s": med([x["wall_s"] for x in commits["amcommit"]]),
        },
        {
            "committer": "FileOutputCommitter v1 commitJob",
            "files": commits["native"][0]["files"],
            "median job commit ms": med([x["job_commit_ms"] for x in commits["native"]]),
            "min ms": min(x["job_commit_ms"] for x in commits["native"]),
            "max ms": max(x["job_commit_ms"] for x in commits["native"]),
            "median save wall s": med([x["wall_s"] for x in commits["native"]]),
        },
    ]
    load_after = os.getloadavg()
    print(
        table(
            rows_table,
            ["writer", "rows", "files", "median rows/s", "median wall s", "job commit ms"],
            f"{args.rows:,} rows, {args.tasks} tasks, partitioned by day ({args.days}), local[{args.cores}]",
        )
    )
    print()
    print(
        table(
            commit_table,
            ["committer", "files", "median job commit ms", "min ms", "max ms", "median save wall s"],
            f"job commit of {args.commit_files:,} files ({commit_tasks} tasks x {args.days} partitions), local disk",
        )
    )
    print(f"\nload average before {load_before[0]:.1f}, after {load_after[0]:.1f} ({os.cpu_count()} CPUs)")
    path = write_json(
        "spark_write",
        {
            "args": vars(args),
            "load_average": {"before": load_before, "after": load_after},
            "rows": rows_table,
            "commit": commit_table,
            "runs": runs,
            "commits": commits,
        },
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
