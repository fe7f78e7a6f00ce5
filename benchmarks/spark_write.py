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
one small file per day), local disk, same session. Measured the same way for both: the
wall time from the end of the Spark job (its last task, from Spark's status store) until
``save()`` returns, i.e. the driver-side job commit as a user waits for it (amcommit: a
Python worker started, messages unpickled, ``commit_job`` including cleanup;
native: ``FileOutputCommitter.commitJob`` v1 merging every task directory, ``_SUCCESS``,
cleanup, plus Spark's bookkeeping). Also reported: each committer's own figure, amcommit's
``_SUCCESS`` ``duration_ms`` (up to ``_SUCCESS``, cleanup excluded) and its stage times,
and Spark's ``job commit time`` SQL metric for the native writer.

Every write goes to a fresh directory in mode ``append`` (an ``overwrite`` would add a
listing of the old destination to amcommit's commit and a delete before the job to
Spark's).

Results: a Markdown table on stdout, JSON in ``benchmarks/results/tmp/spark_write.json``
(``--save``: ``benchmarks/results/spark_write.json``, tracked).
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
from benchmarks.common import add_save_arg, table, write_json


def dataset(spark: Any, rows: int, tasks: int, days: int) -> Any:
    from amcommit.demo.spark import dataset as demo_dataset

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


def last_job_end(spark: Any) -> float:
    """Completion time (epoch seconds) of the newest Spark job, from the status store."""
    jobs = spark._jsc.sc().statusStore().jobsList(None)  # a Scala Seq
    newest = max((jobs.apply(i) for i in range(jobs.size())), key=lambda j: j.jobId())
    return float(newest.completionTime().get().getTime()) / 1000.0


def _ms(metric: str) -> float:
    """``"233 ms"`` or ``"1.2 s"`` or ``"2.0 m"`` -> milliseconds."""
    num, unit = metric.split()[0:2]
    value = float(num.replace(",", ""))
    return value * {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}[unit]


def count_files(path: Path) -> int:
    return sum(1 for _r, _d, fs in os.walk(path) for f in fs if f.endswith(".parquet"))


def write_amcommit(spark: Any, df: Any, dest: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    df.write.format("amcommit").mode("append").option("partitionBy", "day").save(str(dest))
    wall = time.perf_counter() - t0
    end = time.time()
    success = json.loads((dest / "_SUCCESS").read_text())
    m = success["metrics"]
    return {
        "wall_s": wall,
        "job_commit_ms": (end - last_job_end(spark)) * 1000,
        "own_metric_ms": float(m["duration_ms"]),
        "stages_ms": {k[6:-3]: v for k, v in m.items() if k.startswith("stage_") and k.endswith("_ms")},
        "files": int(m["files"]),
    }


def write_native(spark: Any, df: Any, dest: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    (
        df.write.mode("append")
        .option("mapreduce.fileoutputcommitter.algorithm.version", "1")
        .option("compression", "snappy")
        .partitionBy("day")
        .parquet(str(dest))
    )
    wall = time.perf_counter() - t0
    end = time.time()
    metrics = last_execution_metrics(spark)
    return {
        "wall_s": wall,
        "job_commit_ms": (end - last_job_end(spark)) * 1000,
        "own_metric_ms": _ms(metrics["job commit time"]),
        "files": count_files(dest),
    }


def start(cores: int) -> Any:
    spark = (
        local_builder(f"local[{cores}]", "amcommit-bench")
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
    add_save_arg(ap)
    args = ap.parse_args(argv)

    spark = start(args.cores)
    work = Path(tempfile.mkdtemp(prefix="amcommit-bench-spark-"))
    load_before = os.getloadavg()
    try:
        big = dataset(spark, args.rows, args.tasks, args.days).cache()
        big.count()  # generated once: both writers read the same cached rows
        warm = dataset(spark, 20_000, args.tasks, args.days)
        write_amcommit(spark, warm, work / "warm-a")
        write_native(spark, warm, work / "warm-n")

        runs: dict[str, list[dict[str, Any]]] = {"amcommit": [], "native": []}
        for r in range(args.rounds):
            for name in ("amcommit", "native") if r % 2 == 0 else ("native", "amcommit"):
                dest = work / f"rows-{name}-{r}"
                res = (
                    write_amcommit(spark, big, dest) if name == "amcommit" else write_native(spark, big, dest)
                )
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
                res = (
                    write_amcommit(spark, small, dest)
                    if name == "amcommit"
                    else write_native(spark, small, dest)
                )
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

    def row(label: str, runs_: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {
            "writer": label,
            "files": runs_[0]["files"],
            "median rows/s": med([x["rows_per_s"] for x in runs_]) if "rows_per_s" in runs_[0] else None,
            "median save wall s": med([x["wall_s"] for x in runs_]),
            "median job commit ms": med([x["job_commit_ms"] for x in runs_]),
            "min ms": min(x["job_commit_ms"] for x in runs_),
            "max ms": max(x["job_commit_ms"] for x in runs_),
            "committer's own figure ms": med([x["own_metric_ms"] for x in runs_]),
            **extra,
        }

    amc = "amcommit: format('amcommit')"
    nat = "Spark parquet + FileOutputCommitter v1"
    rows_table = [row(amc, runs["amcommit"]), row(nat, runs["native"])]
    commit_table = [row(amc, commits["amcommit"]), row(nat, commits["native"])]
    stage_names = list(commits["amcommit"][0]["stages_ms"])
    stages = {k: med([float(x["stages_ms"].get(k, 0)) for x in commits["amcommit"]]) for k in stage_names}
    load_after = os.getloadavg()
    print(
        table(
            rows_table,
            ["writer", "files", "median rows/s", "median save wall s", "median job commit ms"],
            f"{args.rows:,} rows, {args.tasks} tasks, partitioned by day ({args.days}), local[{args.cores}]",
        )
    )
    print()
    print(
        table(
            commit_table,
            [
                "writer",
                "files",
                "median job commit ms",
                "min ms",
                "max ms",
                "committer's own figure ms",
                "median save wall s",
            ],
            f"job commit of {args.commit_files:,} files ({commit_tasks} tasks x {args.days} partitions), "
            "local disk; job commit = end of the Spark job to save() returning",
        )
    )
    print("\namcommit stages (median ms): " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items()))
    print(f"\nload average before {load_before[0]:.1f}, after {load_after[0]:.1f} ({os.cpu_count()} CPUs)")
    path = write_json(
        "spark_write",
        {
            "args": vars(args),
            "load_average": {"before": load_before, "after": load_after},
            "rows": rows_table,
            "commit": commit_table,
            "amcommit_commit_stages_ms": stages,
            "runs": runs,
            "commits": commits,
        },
        save=args.save,
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
