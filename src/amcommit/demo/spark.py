"""The Spark part of ``amcommit demo`` (see :mod:`amcommit.demo`): a local SparkSession
writes a partitioned dataset through ``format("amcommit")`` into fake-gcs-server (default),
Azurite or a local directory; the job report is printed and the data read back with Spark
and verified. Everything binds to 127.0.0.1; credentials are never printed."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import anyio

from amcommit import loop as amcommit_loop
from amcommit.committer.layout import SUCCESS_NAME, TEMP_DIR_NAME
from amcommit.console import format_report, report_from_success
from amcommit.demo.targets import DemoTarget, check_at_least_one, demo_target
from amcommit.errors import ConfigError
from amcommit.manifest import SuccessData, decode_success
from amcommit.paths import relative_to
from amcommit.spark.session import local_builder
from amcommit.store.base import Store
from amcommit.store.schemes import open_location


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def start_spark(cores: int | None = None, max_failures: int = 3, faults: bool = False) -> Any:
    """A quiet local SparkSession whose Python workers run this interpreter; ``faults``:
    set up for the simulated task failures of :mod:`amcommit.testing.spark` (its hooks
    installed in the Python workers)."""
    n = cores or os.cpu_count() or 2
    builder = (
        local_builder(f"local[{n},{max_failures}]", "amcommit-demo")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if faults:
        from amcommit.testing.spark import configure

        builder = configure(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("FATAL")  # injected task failures would log stack traces
    return spark


def dataset(spark: Any, rows: int, tasks: int, days: int) -> Any:
    from pyspark.sql import functions as F

    kinds = F.array(F.lit("view"), F.lit("click"), F.lit("buy"))
    return (
        spark.range(rows, numPartitions=tasks)
        .withColumn("day", F.date_add(F.lit("2026-11-01").cast("date"), (F.col("id") % days).cast("int")))
        .withColumn("user", F.concat(F.lit("u"), ((F.col("id") * 7919) % 100_000).cast("string")))
        .withColumn("kind", F.element_at(kinds, (F.col("id") % 3 + 1).cast("int")))
        .withColumn("amount", F.round((F.col("id") % 10_000) * 0.37, 2))
    )


async def _download(url: str, options: dict[str, Any], to: str) -> list[str]:
    """Copy every object below ``url`` into ``to``; return the relative names."""
    store: Store
    store, dest = open_location(url, **options)
    names: list[str] = []
    limit = anyio.CapacityLimiter(16)
    async with store:
        infos = [i async for i in store.list(dest, recursive=True) if not i.is_dir]

        async def one(path: str) -> None:
            async with limit:
                data = await store.get(path)
            rel = relative_to(path, dest)
            names.append(rel)
            target = os.path.join(to, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:  # noqa: ASYNC230 - small files, demo only
                f.write(data)

        async with anyio.create_task_group() as tg:
            for info in infos:
                tg.start_soon(one, info.path)
    return sorted(names)


def _read_success(url: str, options: dict[str, Any]) -> SuccessData:
    async def main() -> SuccessData:
        store, dest = open_location(url, **options)
        async with store:
            return decode_success(await store.get(f"{dest}/{SUCCESS_NAME}" if dest else SUCCESS_NAME))

    return amcommit_loop.run(main)


def run_spark_demo(args: argparse.Namespace) -> int:
    tasks = 12 if args.tasks is None else args.tasks
    failed = 2 if args.failed_attempts is None else args.failed_attempts
    check_at_least_one(rows=args.rows, tasks=tasks, days=args.days, io_threads=args.io_threads)
    if not 0 <= failed <= tasks:
        raise ConfigError("--failed-attempts must be within 0..--tasks")
    with demo_target(args) as target:
        _say(f"amcommit demo: Spark -> {target.where}, destination {target.url}")
        return _run(args, target, tasks, failed)


def _run(args: argparse.Namespace, target: DemoTarget, tasks: int, failed: int) -> int:

    from pyspark.sql import SparkSession

    from amcommit.testing.spark import armed

    t0 = time.perf_counter()
    existing = SparkSession.getActiveSession()  # e.g. the test suite's: used, not stopped
    try:
        spark = existing or start_spark(faults=failed > 0)
    except Exception as e:
        raise ConfigError(f"could not start Spark (Java 17 needed; or use --no-spark): {e}") from None
    _say(
        f"SparkSession {spark.version} ({spark.sparkContext.master}) started in {time.perf_counter() - t0:.1f} s"
    )
    try:
        df = dataset(spark, args.rows, tasks, args.days)
        w = (
            df.write.format("amcommit")
            .mode("overwrite")
            .option("partitionBy", "day")
            .option("io_threads", str(args.io_threads))
        )
        for k, v in target.options.items():
            w = w.option(k, v)
        # simulated failures (from code, amcommit.testing): first attempts die after writing
        # files, Spark retries
        hook = {"partitions": list(range(failed)), "attempts": [0], "after_rows": args.rows // tasks // 2}
        faults = armed(fail_task=hook) if failed else contextlib.nullcontext()
        _say(
            f"writing {args.rows:,} rows in {tasks} tasks, partitioned by day ({args.days} days)"
            + (f"; the first attempt of {failed} task(s) fails after writing files" if failed else "")
            + " ..."
        )
        t1 = time.perf_counter()
        with faults:
            w.save(target.url)
        write_s = time.perf_counter() - t1
        print(
            f"Spark wrote {args.rows:,} rows through amcommit in {write_s:.1f} s "
            f"({args.rows / write_s:,.0f} rows/s, job commit included)"
        )
        success = _read_success(target.url, target.options)
        print(format_report(report_from_success(success)))

        _say("reading the data back with Spark ...")
        copy_dir: str | None = None
        try:
            if target.local_dir is not None:
                read_dir = target.local_dir
                names = sorted(
                    os.path.relpath(os.path.join(r, f), read_dir)
                    for r, _d, fs in os.walk(read_dir)
                    for f in fs
                )
            else:
                copy_dir = tempfile.mkdtemp(prefix="amcommit-demo-copy-")
                names = amcommit_loop.run(_download, target.url, target.options, copy_dir)
                read_dir = copy_dir
            ok = _verify(spark, df, read_dir, names, success, args.rows)
        finally:
            if copy_dir is not None:
                shutil.rmtree(copy_dir, ignore_errors=True)
        return 0 if ok else 1
    finally:
        if existing is None:
            spark.stop()


def _verify(spark: Any, df: Any, read_dir: str, names: list[str], success: SuccessData, rows: int) -> bool:
    from pyspark.sql import functions as F

    data = [n for n in names if n.endswith(".parquet")]
    temporary = [n for n in names if n.startswith(TEMP_DIR_NAME + "/")]
    foreign = [n for n in data if success.job_id not in n]
    back = spark.read.parquet(read_dir)
    got = {r["day"]: r["count"] for r in back.groupBy("day").count().collect()}
    want = {r["day"]: r["count"] for r in df.groupBy("day").count().collect()}
    agg = back.agg(F.count("*").alias("n"), F.sum("id").alias("s"), F.countDistinct("id").alias("d")).first()
    n, total, distinct = (int(agg["n"]), int(agg["s"] or 0), int(agg["d"])) if agg is not None else (0, 0, 0)
    ok = (
        got == want
        and n == rows
        and distinct == rows
        and total == rows * (rows - 1) // 2
        and not temporary
        and not foreign
        and success.success
        and success.metrics.get("files") == len(data)
    )
    print(
        f"verified with Spark: {n:,} rows ({distinct:,} distinct ids) in {len(got)} day partitions, "
        f"{len(data)} files; expected {rows:,} rows in {len(want)} partitions; "
        f"duplicates: {n - distinct}; files of other jobs: {len(foreign)}; "
        f"temporary files left: {len(temporary)} -> " + ("OK" if ok else "MISMATCH")
    )
    return ok


__all__ = ["dataset", "run_spark_demo", "start_spark"]
