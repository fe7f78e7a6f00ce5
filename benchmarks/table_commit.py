"""Table commit vs plain commit: the cost of the Hudi timeline, same files, same run.

Each round prepares a fresh destination holding one earlier commit, then a new job of
``--tasks`` task attempts x ``--files`` files (task commits done through amcommit; 10
partitions), and commits it in a fresh process (CPU time and peak RSS are its own):

* ``plain``: ``commit_job`` into a plain destination (``_temporary`` staging, ``_SUCCESS``);
* ``table``: ``commit_job`` of a table write (``begin_write`` done while preparing): staging in
  ``.hoodie/.temp/<instant>``, order check against the timeline, commit metadata with write
  stats, ``.hoodie_partition_metadata`` per partition, the completed instant published last.

Rounds alternate between contenders; both destinations are verified after every round.
The files are small stand-ins (the commit never reads them: row counts come from the
task manifests, as the Spark writer provides them).

    python -m benchmarks.table_commit --tasks 20 --files 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import anyio

from amcommit.committer import CommitterConfig, commit_job, commit_task, setup_job, setup_task
from amcommit.store.base import join
from amcommit.store.local import LocalStore
from amcommit.table.model import Operation
from amcommit.table.naming import base_file_name, new_file_id, write_token
from amcommit.table.write import TableSpec, begin_write
from benchmarks.common import (
    Measure,
    alternate,
    best_of,
    peak_rss_mb,
    run_isolated,
    scratch_dir,
    table,
    write_json,
)

JOB = "202611230200_0001"
SPEC = TableSpec(name="bench", partition_fields=("day",))
AVRO = json.dumps(
    {
        "type": "record",
        "name": "bench_record",
        "namespace": "hoodie.bench",
        "fields": [{"name": "day", "type": ["null", "string"], "default": None}],
    }
)


async def _task_files(
    store: LocalStore, work: str, t: int, files: int, instant: str | None, round_: int
) -> dict[str, int]:
    rows: dict[str, int] = {}
    for i in range(files):
        name = (
            base_file_name(new_file_id(), write_token(t, 1, 0), instant)
            if instant
            else f"part-{round_}-{t:05d}-{i:04d}.parquet"
        )
        rel = f"day={i % 10}/{name}"
        await store.put(join(work, rel), b"x" * 1024)
        rows[rel] = 100
    return rows


async def prepare(root: str, kind: str, tasks: int, files: int) -> str:
    """Destination with one earlier commit, and a job ready to commit; returns the job id."""
    store = LocalStore(root, fsync=False)
    config = CommitterConfig()
    for round_ in range(2):
        if kind == "table":
            w = await begin_write(store, "dest", operation=Operation.INSERT, spec=SPEC, avro_schema=AVRO)
            layout, job, instant = w.layout, w.instant, w.instant
        else:
            job = f"{JOB}{round_}"
            layout, instant = await setup_job(store, "dest", job), None
        n = tasks if round_ == 1 else 2
        for t in range(n):
            ta = f"attempt_{job}_m_{t:06d}_0"
            work = await setup_task(store, layout, ta)
            rows = await _task_files(store, work, t, files if round_ == 1 else 5, instant, round_)
            await commit_task(
                store, layout, f"task_{job}_m_{t:06d}", ta, extra_data={"hudi.rows": json.dumps(rows)}
            )
        if round_ == 0:
            await commit_job(store, "dest", job, config=config)
    return job


def contender(kind: str, root: str, job: str) -> dict[str, Any]:
    with Measure() as m:
        report = anyio.run(
            lambda: commit_job(LocalStore(root, fsync=False), "dest", job, config=CommitterConfig())
        )
    return {
        "contender": kind,
        "files": report.files,
        "seconds": m.wall,
        "files_per_s": report.files / m.wall,
        "cpu_ms_per_file": m.cpu * 1000 / report.files,
        "peak_rss_mb": peak_rss_mb(),
    }


def verify(root: str, kind: str, expected: int) -> None:
    dest = os.path.join(root, "dest")
    data = [
        f
        for d, dirs, fs in os.walk(dest)
        if "/." not in d and "_temporary" not in d
        for f in fs
        if f.endswith(".parquet")
    ]
    marker = (
        os.path.exists(os.path.join(dest, "_SUCCESS"))
        if kind == "plain"
        else any(n.endswith(".commit") for n in os.listdir(os.path.join(dest, ".hoodie")))
    )
    if len(data) != expected or not marker or os.path.exists(os.path.join(dest, "_temporary")):
        raise SystemExit(f"verification failed ({kind}): {len(data)} files, expected {expected}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--files", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--quick", action="store_true", help="4 tasks x 25 files, 1 round, no JSON written (smoke test)"
    )
    p.add_argument("--worker", nargs=3, metavar=("KIND", "ROOT", "JOB"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(contender(*a.worker)))
        return
    if a.quick:
        a.tasks, a.files, a.rounds = 4, 25, 1
    rows: list[dict[str, Any]] = []
    expected = 2 * 5 + a.tasks * a.files
    for r, kind in alternate(a.rounds, ("plain", "table")):
        with scratch_dir("amc-table-") as root:
            job = anyio.run(prepare, root, kind, a.tasks, a.files)
            row = run_isolated("benchmarks.table_commit", ["--worker", kind, root, job])
            verify(root, kind, expected)
            rows.append(row | {"round": r})
            print(f"round {r} {kind}: {row['seconds']:.3f} s", file=sys.stderr)
    summary = best_of(rows, ("plain", "table"))
    best = {x["contender"]: x for x in summary}
    ratio = best["table"]["seconds"] / best["plain"]["seconds"]
    cpu_ratio = best["table"]["cpu_ms_per_file"] / best["plain"]["cpu_ms_per_file"]
    print(
        table(
            summary,
            ["contender", "files", "seconds", "files_per_s", "cpu_ms_per_file", "peak_rss_mb"],
            f"Local job commit, {a.tasks * a.files:,} files in {a.tasks} manifests: table vs plain "
            f"(best of {a.rounds})",
        )
    )
    print(f"\ntable commit: {ratio:.3f}x the plain commit's time, {cpu_ratio:.3f}x its CPU (target <= 1.10x)")
    if a.quick:
        return  # a smoke run: not a measurement, results/ keeps the last full run
    write_json(
        "table_commit",
        {
            "rows": rows,
            "best": summary,
            "table_vs_plain_seconds": ratio,
            "table_vs_plain_cpu": cpu_ratio,
            "files": a.tasks * a.files,
            "when": time.time(),
        },
    )


if __name__ == "__main__":
    main()
