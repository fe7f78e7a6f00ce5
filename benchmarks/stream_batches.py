"""A stream's batches as users wait for them: ``readStream.json`` -> sink, local[2], 20-row
JSON files, one per trigger, into amcommit's sink, ``foreachBatch`` + ``write_batch`` and
Spark's own parquet file sink, in one Spark session, the same run (issue 35 item 6).

Per query: ``--files`` input files of 20 rows (``maxFilesPerTrigger=1``,
``trigger(availableNow=True)``: the batches back to back), a fresh output and checkpoint.
Per batch, from ``query.recentProgress``: ``durationMs.triggerExecution`` (the whole batch)
and ``addBatch`` (its tasks and the sink's commit). Reported: the first batch (a query's
start-up: what a restart pays again) and the median of the later ones (steady), for each
sink and as ratios to the file sink's of the same round. Rounds alternate the order of the
sinks (the first query of the session also warms the JVM: ``--warmup`` runs a throwaway
file-sink query first). With ``AMCOMMIT_STREAM_TIMINGS`` the sink's ``commit()`` timings
go to ``stream_batches_timings.jsonl`` beside the results.

    python -m benchmarks.stream_batches [--files 6] [--rounds 2] [--warmup] [--save]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import TMP, add_save_arg, alternate, load_average, table, write_json

SCHEMA = "id LONG, day STRING, v STRING"
SINKS = ("parquet", "amcommit", "foreach")


def _input(folder: Path, files: int) -> None:
    folder.mkdir(parents=True)
    for f in range(files):
        rows = [{"id": f * 20 + i, "day": f"d{i % 2}", "v": f"v{f}-{i}"} for i in range(20)]
        tmp = folder / f".f{f:03d}.json.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(tmp, (1_700_000_000 + f, 1_700_000_000 + f))  # file order = batch order
        tmp.rename(folder / f"f{f:03d}.json")


def run_query(spark: Any, sink: str, src: Path, out: Path) -> dict[str, Any]:
    """One query to the end of its input; its batches' durations (ms)."""
    dest, ck = out / "dest", out / "ck"
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", "1").json(str(src))
    options = {"partitionBy": "day"}
    t0 = time.monotonic()
    if sink == "foreach":
        from amcommit.spark import write_batch

        def each(df: Any, batch_id: int) -> None:
            write_batch(df, batch_id, dest.as_uri(), **options)

        w = stream.writeStream.foreachBatch(each)
    elif sink == "parquet":
        w = stream.writeStream.format("parquet").partitionBy("day").option("path", str(dest))
    else:
        w = stream.writeStream.format("amcommit")
        for k, v in options.items():
            w = w.option(k, v)
    w = w.option("checkpointLocation", str(ck)).trigger(availableNow=True)
    query = w.start() if sink != "amcommit" else w.start(dest.as_uri())
    query.awaitTermination()
    wall = time.monotonic() - t0
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    trig = [int(p.durationMs.get("triggerExecution", 0)) for p in batches]
    add = [int(p.durationMs.get("addBatch", 0)) for p in batches]
    return {
        "sink": sink,
        "batches": len(batches),
        "trigger_ms": trig,
        "add_ms": add,
        "wall_s": round(wall, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sinks", default=",".join(SINKS))
    ap.add_argument("--warmup", action="store_true")
    add_save_arg(ap)
    a = ap.parse_args()
    from amcommit.spark.session import local_builder

    TMP.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AMCOMMIT_STREAM_TIMINGS", str(TMP / "stream_batches_timings.jsonl"))
    spark = (
        local_builder("local[2]", "amcommit-stream-batches")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sinks = tuple(a.sinks.split(","))
    rows: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="amc-stream-batches-"))
    try:
        if a.warmup:
            _input(scratch / "warm-in", 2)
            run_query(spark, "parquet", scratch / "warm-in", scratch / "warm-out")
        for round_, sink in alternate(a.rounds, sinks):
            base = scratch / f"r{round_}-{sink}"
            _input(base / "in", a.files)
            load = load_average()
            r = run_query(spark, sink, base / "in", base / "out")
            r |= {"round": round_, "first_ms": r["trigger_ms"][0], "load": load}
            r["steady_ms"] = statistics.median(r["trigger_ms"][1:]) if len(r["trigger_ms"]) > 1 else None
            rows.append(r)
            print(json.dumps(r), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    for r in rows:
        ref = (
            next(x for x in rows if x["round"] == r["round"] and x["sink"] == "parquet")
            if "parquet" in sinks
            else None
        )
        if ref is not None:
            r["first_x"] = round(r["first_ms"] / ref["first_ms"], 2)
            r["steady_x"] = (
                round(r["steady_ms"] / ref["steady_ms"], 2) if r["steady_ms"] and ref["steady_ms"] else None
            )
    cols = ["sink", "round", "first_ms", "steady_ms", "first_x", "steady_x", "add_ms", "wall_s", "load"]
    print(table(rows, cols, f"stream batches: {a.files} files of 20 rows, one per trigger, local[2]"))
    path = write_json("stream_batches", {"rows": rows}, save=a.save)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
