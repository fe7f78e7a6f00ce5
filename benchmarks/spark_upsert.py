"""Spark upserts (``amcommit.spark.upsert``) against a whole Spark overwrite and the engine upsert.

A table of ``--rows`` rows (default 1,000,000) in ``--files`` base files (default 200: 20
partitions x 10 files; the table of :mod:`benchmarks.table_upsert`, built once by the engine),
on local files, a Spark session ``local[--cores]``. Each measured run gets a fresh copy of the
table. Batches (Parquet files Spark reads, as a user's DataFrame would come):

* ``one-partition``: 1% of the keys, all in one partition (updates);
* ``spread``: 1% of the keys drawn at random over every file (updates);
* ``inserts``: ``--inserts`` new keys (default 500) spread over every partition.

Contenders, in the same run, alternating (``--rounds``):

* ``spark upsert``: ``amcommit.spark.upsert(df, table, ...)``;
* ``engine upsert``: :func:`amcommit.table.mutate.engine.upsert_blocking` of the same rows
  (read from the same Parquet file into Arrow first, timed with it);
* ``spark overwrite``: the whole table written again by ``df.write.format("amcommit")``
  (``mode("overwrite")``, the table's ``recordKey``/``partitionBy``), of the table's rows
  read by Spark from one Parquet copy (what a user without upsert runs), once per round.

Reported per run: wall seconds, files written (new base files: new versions and new file
groups), bytes of them, and the ratios spark upsert / spark overwrite and spark upsert /
engine upsert. Every run is checked: the snapshot's row count, and for the updates, that the
upsert updated exactly the batch.

    python -m benchmarks.spark_upsert                       # 1,000,000 rows x 200 files
    python -m benchmarks.spark_upsert --rows 100000 --files 40 --rounds 1   # while iterating
    python -m benchmarks.spark_upsert --stages              # Spark's stage times of each spark upsert

Results: a Markdown table on stdout, JSON in ``benchmarks/results/tmp/spark_upsert.json``
(``--save``: ``benchmarks/results/spark_upsert.json``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import add_save_arg, load_average, table, write_json
from benchmarks.table_upsert import FIRST_ID, KW, build, shape

OPTIONS = {"recordKey": "id", "partitionBy": "p", "precombineField": "ts"}
SCENARIOS = ("one-partition", "spread", "inserts")
CONTENDERS = ("spark upsert", "engine upsert")


def batch_of(base: pa.Table, which: str, rows: int, files: int, inserts: int) -> pa.Table:
    """The rows of scenario ``which`` (module doc): updates carry a greater ``ts``."""
    parts, _ = shape(rows, files)
    n = max(1, rows // 100)
    rng = np.random.default_rng(7)
    if which == "inserts":
        ids = np.arange(FIRST_ID + rows, FIRST_ID + rows + inserts, dtype=np.int64)
        part = [f"2026-10-{1 + i % parts:02d}" for i in range(inserts)]
        return pa.table(
            {
                "id": ids,
                "p": pa.array(part, pa.string()),
                "v": pa.array([f"new-{i}" for i in range(inserts)], pa.string()),
                "x": rng.random(inserts),
                "ts": np.full(inserts, 2, dtype=np.int64),
            },
            schema=base.schema,
        )
    if which == "one-partition":
        per_part = rows // parts
        start = (parts // 2) * per_part
        idx = start + rng.choice(per_part, min(n, per_part), replace=False)
    else:
        idx = rng.choice(rows, n, replace=False)
    idx.sort()
    t = base.take(pa.array(idx))
    k = t.num_rows
    return t.set_column(2, "v", pa.array([f"updated-{i}" for i in range(k)], pa.string())).set_column(
        4, "ts", pa.array(np.full(k, 2, dtype=np.int64))
    )


def new_files(dest: Path, instant: str) -> tuple[int, int]:
    """(count, bytes) of the base files ``instant`` wrote under ``dest``."""
    n = size = 0
    for root, _d, fs in os.walk(dest):
        if ".hoodie" in root:
            continue
        for f in fs:
            if f.endswith(".parquet") and f.rsplit("_", 1)[-1].startswith(instant):
                n += 1
                size += os.path.getsize(os.path.join(root, f))
    return n, size


def table_rows(dest: Path) -> int:
    from amcommit.loop import run_blocking
    from amcommit.store.local import LocalStore
    from amcommit.table.timeline.instants import load_timeline, snapshot

    async def go() -> int:
        store = LocalStore(str(dest.parent), fsync=False)
        async with store:
            _, commits = await load_timeline(store, dest.name)
            return sum(f.rows for f in snapshot(commits))

    return run_blocking(go)


def job_times(spark: Any, since: int) -> list[dict[str, Any]]:
    """Spark's completed jobs after job id ``since``: name, tasks, seconds (from its status
    store): where a Spark upsert's time goes."""
    jobs = spark._jsc.sc().statusStore().jobsList(None)
    out = []
    for i in range(jobs.size()):
        j = jobs.apply(i)
        if j.jobId() <= since or not j.completionTime().isDefined():
            continue
        secs = (j.completionTime().get().getTime() - j.submissionTime().get().getTime()) / 1000.0
        out.append({"job": j.jobId(), "name": str(j.name())[:50], "tasks": j.numTasks(), "s": secs})
    return sorted(out, key=lambda s: s["job"])


def last_job(spark: Any) -> int:
    jobs = spark._jsc.sc().statusStore().jobsList(None)
    return max((jobs.apply(i).jobId() for i in range(jobs.size())), default=-1)


def run_one(
    spark: Any, name: str, built: Path, work: Path, batch_path: Path, expect_rows: int, stages: bool
) -> dict[str, Any]:
    from amcommit.spark import upsert
    from amcommit.table.mutate.engine import upsert_blocking

    dest = work / f"run-{time.monotonic_ns()}"
    shutil.copytree(built, dest)
    load = load_average()
    res: dict[str, Any] = {"contender": name, "load_1m": load[0] if load else None}
    since = last_job(spark)
    t0 = time.perf_counter()
    if name == "spark upsert":
        df = spark.read.parquet(str(batch_path))
        r = upsert(df, str(dest), **OPTIONS)
    elif name == "engine upsert":
        r = upsert_blocking(str(dest), pq.read_table(batch_path), **KW)
    else:  # spark overwrite: every row of the table, written again
        df = spark.read.parquet(str(batch_path))
        df.write.format("amcommit").mode("overwrite").options(
            tableFormat="hudi", recordKey="id", partitionBy="p"
        ).save(str(dest))
        r = None
    res["seconds"] = time.perf_counter() - t0
    if r is not None:
        res.update(
            instant=r.instant,
            inserted=r.inserted,
            updated=r.updated,
            files_rewritten=r.files_rewritten,
            files_created=r.files_created,
        )
        res["files_written"], res["bytes_written"] = new_files(dest, r.instant)
    else:
        old = {p.relative_to(built) for p in built.rglob("*.parquet")}
        mine = [p for p in dest.rglob("*.parquet") if p.relative_to(dest) not in old]
        res["files_written"] = len(mine)
        res["bytes_written"] = sum(p.stat().st_size for p in mine)
    if stages and name == "spark upsert":
        res["stages"] = job_times(spark, since)
    got = table_rows(dest)
    res["verified"] = "exact" if got == expect_rows else f"WRONG: {got} rows"
    shutil.rmtree(dest, ignore_errors=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmarks.spark_upsert", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--inserts", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--stages", action="store_true", help="record Spark's stage times of each spark upsert")
    add_save_arg(ap)
    args = ap.parse_args(argv)

    from benchmarks.spark_write import start

    base_dir = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="amcommit-spark-upsert-", dir=base_dir))
    runs: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        base = build(work / "built", args.rows, args.files)
        built = work / "built" / "t"
        pq.write_table(base, work / "whole.parquet")
        print(f"table of {args.rows:,} rows x {args.files} files built in {time.perf_counter() - t0:.1f} s")
        spark = start(args.cores)
        # warm-up: Python workers started, the JVM's classes loaded
        tiny = work / "tiny.parquet"
        pq.write_table(batch_of(base, "spread", 1000, 10, 0).slice(0, 10), tiny)
        run_one(spark, "spark upsert", built, work, tiny, args.rows, False)
        for rnd in range(args.rounds):
            over = run_one(spark, "spark overwrite", built, work, work / "whole.parquet", args.rows, False)
            over.update(scenario="whole table", round=rnd, keys=args.rows)
            print(f"  round {rnd + 1} spark overwrite: {over['seconds']:.2f} s (load {over['load_1m']})")
            runs.append(over)
            for sc in args.scenarios.split(","):
                batch = batch_of(base, sc, args.rows, args.files, args.inserts)
                path = work / f"{sc}.parquet"
                pq.write_table(batch, path)
                expect = args.rows + (batch.num_rows if sc == "inserts" else 0)
                order = CONTENDERS if rnd % 2 == 0 else tuple(reversed(CONTENDERS))
                for name in order:
                    res = run_one(spark, name, built, work, path, expect, args.stages)
                    res.update(scenario=sc, round=rnd, keys=batch.num_rows)
                    print(
                        f"  round {rnd + 1} {sc} {name}: {res['seconds']:.2f} s, "
                        f"{res['files_written']} files, {res['bytes_written']:,} bytes "
                        f"(load {res['load_1m']}) {res['verified']}",
                        flush=True,
                    )
                    for st in res.get("stages", []):
                        print(f"      job {st}")
                    runs.append(res)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    over_s = statistics.median(r["seconds"] for r in runs if r["contender"] == "spark overwrite")
    rows = []
    for sc in ["whole table", *args.scenarios.split(",")]:
        for name in ("spark overwrite", *CONTENDERS):
            rs = [r for r in runs if r["scenario"] == sc and r["contender"] == name]
            if not rs:
                continue
            secs = [r["seconds"] for r in rs]
            engine = [r["seconds"] for r in runs if r["scenario"] == sc and r["contender"] == "engine upsert"]
            med = statistics.median(secs)
            rows.append(
                {
                    "scenario": sc,
                    "keys": rs[0]["keys"],
                    "contender": name,
                    "seconds": med,
                    "spread_s": max(secs) - min(secs),
                    "over_overwrite": med / over_s,
                    "over_engine": med / statistics.median(engine) if engine else None,
                    "files_written": rs[0]["files_written"],
                    "bytes_written": rs[0]["bytes_written"],
                    "load_1m": statistics.median(r["load_1m"] or 0.0 for r in rs),
                    "verified": "exact" if all(r["verified"] == "exact" for r in rs) else "WRONG",
                }
            )
    cols = list(rows[0])
    print(table(rows, cols, f"Spark upsert, {args.rows:,} rows in {args.files} files (median s)"))
    path = write_json(
        "spark_upsert",
        {"rows_in_table": args.rows, "files": args.files, "summary": rows, "runs": runs},
        save=args.save,
    )
    print(f"results: {path}")
    return 0 if all(r["verified"] == "exact" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
