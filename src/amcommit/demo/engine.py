"""``amcommit demo --no-spark``: the engine alone (see :mod:`amcommit.demo`)."""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
import uuid

import anyio

from amcommit import loop as amcommit_loop
from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import TEMP_DIR_NAME
from amcommit.committer.task import abort_task, commit_task, setup_task
from amcommit.console import ProgressBar, format_report
from amcommit.demo.targets import check_at_least_one, demo_target
from amcommit.paths import join, relative_to
from amcommit.store.base import Store
from amcommit.store.schemes import open_location


def _payload(task: int, i: int, size: int) -> bytes:
    seed = hashlib.blake2b(f"{task}/{i}".encode(), digest_size=32).digest()
    return (seed * (size // 32 + 1))[:size]


async def _demo(args: argparse.Namespace, store: Store, dest: str) -> int:
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
    with ProgressBar() as bar:
        report = await commit_job(store, dest, job_id, config=cfg, progress=bar)
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


def run_engine_demo(args: argparse.Namespace) -> int:
    """Simulated tasks commit through the engine; 0 when the destination is exactly right."""
    if args.tasks is None:
        args.tasks = 100
    if args.failed_attempts is None:
        args.failed_attempts = 5
    check_at_least_one(tasks=args.tasks, files=args.files, io_threads=args.io_threads)
    with demo_target(args, "events table") as target:
        print(f"amcommit demo: {target.where}, destination {target.url!r}", file=sys.stderr)

        async def main() -> int:
            store, dest = open_location(target.url, **target.options)
            async with store:
                return await _demo(args, store, dest)

        return amcommit_loop.run(main)
