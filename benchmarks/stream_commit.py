"""Streaming micro-batches: amcommit's exactly-once sink vs Spark's file sink, same run.

    python -m benchmarks.stream_commit [--quick] [--out DIR]

For micro-batches of 10 and 100 JSON files (``maxFilesPerTrigger``), one Spark session
streams the same input through ``writeStream.format("amcommit")`` (a Hudi table, one
labelled instant per batch) and through ``writeStream.format("parquet")`` (Spark's file
sink and its ``_spark_metadata`` log) on local files, alternating the two. Per batch, from
``query.recentProgress``: ``addBatch`` (the batch's tasks plus the sink's commit: Spark
does not time the commit alone) and ``triggerExecution`` (end to end). Medians over the
batches after the first (warm-up) of each run. Writes ``stream_commit.json`` to ``--out``
(default ``benchmarks/results``; ``--quick`` refuses that default and needs ``--out``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = "id LONG, day STRING, v STRING"


def make_input(folder: Path, files: int, rows_per_file: int) -> None:
    folder.mkdir(parents=True)
    for f in range(files):
        lines = [
            json.dumps({"id": f * rows_per_file + j, "day": f"2026-11-0{j % 2 + 1}", "v": "x" * 20})
            for j in range(rows_per_file)
        ]
        (folder / f"f{f:06d}.json").write_text("\n".join(lines) + "\n")


def run_query(spark: Any, sink: str, src: Path, out: Path, per_batch: int) -> list[dict[str, float]]:
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", str(per_batch)).json(str(src))
    w = (
        stream.writeStream.format(sink)
        .option("checkpointLocation", str(out / "cp"))
        .trigger(availableNow=True)
    )
    if sink == "amcommit":
        q = w.option("partitionBy", "day").start(str(out / "table"))
    else:
        q = w.partitionBy("day").option("path", str(out / "table")).start()
    q.awaitTermination()
    rows = []
    for p in q.recentProgress:
        d = p.get("durationMs", {}) if isinstance(p, dict) else p.durationMs
        if d.get("addBatch") is not None:
            rows.append({"add_batch_ms": float(d["addBatch"]), "trigger_ms": float(d["triggerExecution"])})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10-file batches only, 3 batches")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out_dir = args.out or RESULTS
    if args.quick and args.out is None:
        print("--quick needs --out (it never overwrites benchmarks/results)", file=sys.stderr)
        return 2
    from amcommit.spark.session import local_builder

    spark = (
        local_builder("local[2]", "amcommit-stream-bench")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sizes = [10] if args.quick else [10, 100]
    batches = 3 if args.quick else 6
    results: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="amcommit-stream-bench-"))
    try:
        for n in sizes:
            src = scratch / f"in{n}"
            make_input(src, n * batches, 200)
            per_sink: dict[str, list[dict[str, float]]] = {"amcommit": [], "parquet": []}
            for sink in ("parquet", "amcommit"):
                t0 = time.perf_counter()
                rows = run_query(spark, sink, src, scratch / f"{sink}{n}", n)
                per_sink[sink] = rows[1:] or rows  # first batch: warm-up
                print(f"{sink} {n} files/batch: {len(rows)} batches in {time.perf_counter() - t0:.1f}s")
            row: dict[str, Any] = {"files_per_batch": n, "batches": batches}
            for sink, rows in per_sink.items():
                row[f"{sink}_add_batch_ms"] = statistics.median(r["add_batch_ms"] for r in rows)
                row[f"{sink}_trigger_ms"] = statistics.median(r["trigger_ms"] for r in rows)
            row["add_batch_ratio"] = row["amcommit_add_batch_ms"] / max(row["parquet_add_batch_ms"], 1.0)
            row["trigger_ratio"] = row["amcommit_trigger_ms"] / max(row["parquet_trigger_ms"], 1.0)
            results.append(row)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        "| files/batch | amcommit addBatch ms | parquet addBatch ms | ratio | amcommit batch ms | parquet batch ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['files_per_batch']} | {r['amcommit_add_batch_ms']:.0f} | {r['parquet_add_batch_ms']:.0f} | "
            f"{r['add_batch_ratio']:.2f}x | {r['amcommit_trigger_ms']:.0f} | {r['parquet_trigger_ms']:.0f} | "
            f"{r['trigger_ratio']:.2f}x |"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "stream_commit.json").write_text(
        json.dumps({"benchmark": "stream_commit", "quick": args.quick, "rows": results}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
