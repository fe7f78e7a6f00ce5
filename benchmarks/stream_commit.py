"""Streaming micro-batches: amcommit's exactly-once sink vs Spark's file sink, same run.

    python -m benchmarks.stream_commit [--quick] [--rounds N] [--sizes 10,100] [--direct] [--out DIR | --save]

For micro-batches of 10 and 100 files (``maxFilesPerTrigger`` JSON input files per batch,
repartitioned so that each batch also *writes* that many Parquet files), one Spark session
streams the same input through ``writeStream.format("amcommit")`` (a Hudi table, one
labelled instant per batch) and through ``writeStream.format("parquet")`` (Spark's file
sink and its ``_spark_metadata`` log) on local files. Rounds alternate the order of the two
sinks (fresh output and checkpoint each run). Per batch:

* ``commit latency``: from the last data file of the batch written (its modification time)
  to the batch made visible: amcommit's completed instant ``.hoodie/<instant>.commit``, the
  file sink's ``_spark_metadata/<batch>`` log entry (their modification times). This covers
  the task results reaching the driver, the sink's ``commit()`` and, for amcommit, the job
  commit's renames and the timeline: what a reader waits for after the data exists;
* ``after tasks``: from the batch's last task *finished* as Spark's scheduler records it
  (the latest ``Finish Time`` of the batch's tasks in Spark's event log, millisecond clock
  of the driver JVM) to the same visible file. The tasks' own commit work (amcommit: the
  task manifest; the file sink: nothing, its files are written in place) is excluded: this
  is the sink's driver-side commit, including, for amcommit, the hand-off to the Python
  worker process that runs ``commit()`` (the Python data source API) and the job commit
  up to the completed instant. The same interval for both sinks;
* ``addBatch`` (the batch's tasks plus the sink's commit, from ``query.recentProgress``) and
  ``triggerExecution`` (the whole batch, end to end).

With ``--direct`` (issue 26) a third sink runs in the same rounds: the amcommit sink with
``table_commit=direct`` (base files written in place by the tasks under Hudi's markers; the
commit reconciles against the markers and publishes, no renames), reported as
``amcommit_direct_*``; the results then go to ``stream_direct.json``.

Medians over the batches after the first (warm-up) of every run, pooled over the rounds.
Writes ``stream_commit.json`` to ``--out`` (default ``benchmarks/results/tmp``; ``--save``:
``benchmarks/results``, tracked; ``--quick`` needs ``--out``).
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
import urllib.parse
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, TMP, add_save_arg, run_info

SCHEMA = "id LONG, day STRING, v STRING"


def make_input(folder: Path, files: int, rows_per_file: int) -> None:
    folder.mkdir(parents=True)
    for f in range(files):
        lines = [
            json.dumps({"id": f * rows_per_file + j, "day": "2026-11-01", "v": "x" * 20})
            for j in range(rows_per_file)
        ]
        (folder / f"f{f:06d}.json").write_text("\n".join(lines) + "\n")


def run_query(
    spark: Any, sink: str, src: Path, out: Path, per_batch: int
) -> tuple[str, list[dict[str, float]]]:
    """Stream ``src`` through ``sink`` into ``out/table``; the query's id and per batch (in
    order) its ``addBatch`` and ``triggerExecution`` milliseconds."""
    stream = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", str(per_batch))
        .json(str(src))
        .repartition(per_batch)  # one task, hence one Parquet file, per input file
    )
    w = (
        stream.writeStream.format("amcommit" if sink.startswith("amcommit") else sink)
        .option("checkpointLocation", str(out / "cp"))
        .trigger(availableNow=True)
    )
    if sink.startswith("amcommit"):  # the staged sink says so: direct is the default since issue 26
        w = w.option("table_commit", "direct" if sink == "amcommit_direct" else "staged")
    if sink.startswith("amcommit"):
        q = w.option("partitionBy", "day").start(str(out / "table"))
    else:
        q = w.partitionBy("day").option("path", str(out / "table")).start()
    q.awaitTermination()
    rows = []
    for p in q.recentProgress:
        d = p.get("durationMs", {}) if isinstance(p, dict) else p.durationMs
        if d.get("addBatch") is not None:
            rows.append(
                {
                    "batch": float(p["batchId"] if isinstance(p, dict) else p.batchId),
                    "add_batch_ms": float(d["addBatch"]),
                    "trigger_ms": float(d["triggerExecution"]),
                }
            )
    return str(q.id), rows


def task_ends(event_dir: Path) -> dict[tuple[str, int], list[float]]:
    """(query id, batch id) -> the ``Finish Time`` (epoch seconds) of every task of the
    batch's jobs, from Spark's event log (jobs carry ``sql.streaming.queryId`` and
    ``streaming.sql.batchId`` in their properties). A job may carry the id of the batch
    before it (the file source lists the next batch's input, in parallel from 32 files
    on, with the last batch's properties): callers keep the tasks finished before the
    batch became visible."""
    stage_of: dict[int, tuple[str, int]] = {}
    out: dict[tuple[str, int], list[float]] = {}
    for f in sorted(p for p in event_dir.rglob("events_*") if p.is_file()):
        for line in f.read_text().splitlines():
            ev = json.loads(line)
            kind = ev.get("Event")
            if kind == "SparkListenerJobStart":
                props = ev.get("Properties") or {}
                qid, bid = props.get("sql.streaming.queryId"), props.get("streaming.sql.batchId")
                if qid is not None and bid is not None:
                    for sid in ev.get("Stage IDs", []):
                        stage_of[int(sid)] = (qid, int(bid))
            elif kind == "SparkListenerTaskEnd":
                key = stage_of.get(int(ev["Stage ID"]))
                if key is not None:
                    out.setdefault(key, []).append(ev["Task Info"]["Finish Time"] / 1000.0)
    return out


def _data_files(table: Path) -> list[Path]:
    return [
        p for p in table.rglob("*.parquet") if ".hoodie" not in p.parts and "_spark_metadata" not in p.parts
    ]


def commit_latencies(sink: str, table: Path) -> list[tuple[float, float, str]]:
    """Per batch, in order: (ms from its last data file's modification to the file that
    makes the batch visible (see the module doc), that file's modification time, the
    batch's instant (amcommit) or log entry name)."""
    out: list[tuple[float, float, str]] = []
    if sink.startswith("amcommit"):
        by_instant: dict[str, float] = {}
        for f in _data_files(table):
            instant = f.stem.rsplit("_", 1)[-1]  # <fileId>_<writeToken>_<instant>.parquet
            by_instant[instant] = max(by_instant.get(instant, 0.0), f.stat().st_mtime)
        for done in sorted((table / ".hoodie").glob("*.commit")):
            instant = done.name.split(".", 1)[0]
            if instant in by_instant:
                seen = done.stat().st_mtime
                out.append(((seen - by_instant[instant]) * 1000.0, seen, instant))
        return out
    log = table / "_spark_metadata"
    for entry in sorted((p for p in log.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        paths = [json.loads(line)["path"] for line in entry.read_text().splitlines()[1:] if line.strip()]
        mtimes = [Path(urllib.parse.unquote(urllib.parse.urlparse(u).path)).stat().st_mtime for u in paths]
        if mtimes:
            seen = entry.stat().st_mtime
            out.append(((seen - max(mtimes)) * 1000.0, seen, entry.name))
    return out


def changed_after_commit(table: Path, timings: dict[str, tuple[float, float]]) -> tuple[int, int]:
    """(data files whose inode changed after their batch's ``commit()`` was entered, data
    files of batches with timings): a staged commit renames every file then (a rename sets
    its ctime), a direct one none (the tasks wrote them in place before)."""
    changed = total = 0
    for f in _data_files(table):
        instant = f.stem.rsplit("_", 1)[-1]
        if instant in timings:
            total += 1
            changed += f.stat().st_ctime > timings[instant][0]
    return changed, total


def read_timings(path: Path) -> dict[str, tuple[float, float]]:
    """instant -> (when ``commit()`` was entered, when it returned), from the sink's timings
    file (``AMCOMMIT_STREAM_TIMINGS``)."""
    out: dict[str, tuple[float, float]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            t = json.loads(line)
            if t.get("instant"):
                out[t["instant"]] = (float(t["entered"]), float(t["returned"]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10-file batches only, 3 batches, 1 round")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each sink per size, orders alternating")
    ap.add_argument("--sizes", default=None, help="files per batch, comma-separated (default 10,100)")
    ap.add_argument("--direct", action="store_true", help="also the amcommit sink with table_commit=direct")
    ap.add_argument("--out", type=Path, default=None)
    add_save_arg(ap)
    args = ap.parse_args(argv)
    out_dir = args.out or (RESULTS if args.save else TMP)
    if args.quick and args.out is None:
        print("--quick needs --out (it never overwrites benchmarks/results)", file=sys.stderr)
        return 2
    from amcommit.spark.session import local_builder

    scratch = Path(tempfile.mkdtemp(prefix="amcommit-stream-bench-"))
    events = scratch / "events"
    events.mkdir()
    # amcommit's commit() records when Spark handed it each batch (inherited by the Python
    # workers, which Spark starts after this): the commit latency splits into Spark's
    # hand-off and amcommit's commit
    from amcommit.spark.stream import TIMINGS_ENV

    timings_file = scratch / "timings.jsonl"
    os.environ[TIMINGS_ENV] = str(timings_file)
    spark = (
        local_builder("local[2]", "amcommit-stream-bench")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", events.as_uri())
        .config("spark.eventLog.compress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else [10] if args.quick else [10, 100]
    sinks = ("parquet", "amcommit", "amcommit_direct") if args.direct else ("parquet", "amcommit")
    batches = 3 if args.quick else 6
    rounds = 1 if args.quick else max(1, args.rounds)
    results: list[dict[str, Any]] = []
    runs: list[tuple[int, str, str, list[dict[str, float]]]] = []  # (size, sink, query id, rows)
    renamed: dict[str, int] = {}  # sink -> data files moved after commit() was entered
    try:
        for n in sizes:
            src = scratch / f"in{n}"
            make_input(src, n * batches, 200)
            pooled: dict[str, list[dict[str, float]]] = {sink: [] for sink in sinks}
            for r in range(rounds):
                order = sinks if r % 2 == 0 else tuple(reversed(sinks))
                for sink in order:
                    out = scratch / f"{sink}{n}-{r}"
                    t0 = time.perf_counter()
                    qid, rows = run_query(spark, sink, src, out, n)
                    lat = commit_latencies(sink, out / "table")
                    timings = read_timings(timings_file)
                    if len(lat) != len(rows):
                        raise RuntimeError(f"{sink}: {len(rows)} batches but {len(lat)} commits found")
                    for row, (ms, seen, key) in zip(rows, lat, strict=True):
                        row["commit_ms"], row["visible_at"] = ms, seen
                        if sink.startswith("amcommit") and key in timings:
                            entered, returned = timings[key]
                            row["entered_at"] = entered
                            row["enter_to_visible_ms"] = (seen - entered) * 1000.0
                            row["visible_to_return_ms"] = (returned - seen) * 1000.0
                    if sink.startswith("amcommit"):
                        changed, total = changed_after_commit(out / "table", timings)
                        renamed[sink] = renamed.get(sink, 0) + changed
                        if sink == "amcommit_direct" and changed:
                            raise RuntimeError(f"{sink}: {changed} of {total} files were moved by the commit")
                    kept = rows[1:] or rows  # first batch of a run: warm-up
                    pooled[sink].extend(kept)
                    runs.append((n, sink, qid, kept))
                    print(
                        f"{sink} {n} files/batch, round {r + 1}: {len(rows)} batches in {time.perf_counter() - t0:.1f}s"
                    )
            results.append({"files_per_batch": n, "batches": batches, "rounds": rounds, "pooled": pooled})
    finally:
        spark.stop()
    try:
        # Spark writes its event log as it goes and closes it at stop()
        ends = task_ends(events)
        for _n, _sink, qid, kept in runs:
            for row in kept:
                before = [t for t in ends.get((qid, int(row["batch"])), []) if t <= row["visible_at"]]
                if before:
                    row["after_tasks_ms"] = (row["visible_at"] - max(before)) * 1000.0
                    if "entered_at" in row:
                        row["handoff_ms"] = (row["entered_at"] - max(before)) * 1000.0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    keys = ("commit_ms", "after_tasks_ms", "add_batch_ms", "trigger_ms")
    split = ("handoff_ms", "enter_to_visible_ms", "visible_to_return_ms")
    for row in results:
        pooled = row.pop("pooled")
        for sink, rows in pooled.items():
            for key in keys + (split if sink.startswith("amcommit") else ()):
                vals = [x[key] for x in rows if key in x]
                row[f"{sink}_{key}"] = statistics.median(vals) if vals else float("nan")
                if key in ("commit_ms", "after_tasks_ms", *split):
                    row[f"{sink}_{key}_all"] = [round(v, 1) for v in vals]
        for key in keys:
            row[f"{key.removesuffix('_ms')}_ratio"] = row[f"amcommit_{key}"] / max(row[f"parquet_{key}"], 1.0)
        row["enter_to_visible_vs_parquet_after_tasks"] = row["amcommit_enter_to_visible_ms"] / max(
            row["parquet_after_tasks_ms"], 1.0
        )
        if args.direct:
            for key in keys:
                row[f"direct_{key.removesuffix('_ms')}_ratio"] = row[f"amcommit_direct_{key}"] / max(
                    row[f"parquet_{key}"], 1.0
                )
            row["direct_enter_to_visible_vs_parquet_after_tasks"] = row[
                "amcommit_direct_enter_to_visible_ms"
            ] / max(row["parquet_after_tasks_ms"], 1.0)
            row["direct_vs_staged_enter_to_visible"] = row["amcommit_direct_enter_to_visible_ms"] / max(
                row["amcommit_enter_to_visible_ms"], 1.0
            )
    print()
    print(
        "| files/batch | commit latency ms amcommit / parquet | ratio | after tasks ms amcommit / parquet | ratio "
        "| addBatch ms amcommit / parquet | ratio | batch ms amcommit / parquet | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['files_per_batch']} | {r['amcommit_commit_ms']:.0f} / {r['parquet_commit_ms']:.0f} | "
            f"{r['commit_ratio']:.2f}x | {r['amcommit_after_tasks_ms']:.0f} / {r['parquet_after_tasks_ms']:.0f} | "
            f"{r['after_tasks_ratio']:.2f}x | {r['amcommit_add_batch_ms']:.0f} / {r['parquet_add_batch_ms']:.0f} | "
            f"{r['add_batch_ratio']:.2f}x | {r['amcommit_trigger_ms']:.0f} / {r['parquet_trigger_ms']:.0f} | "
            f"{r['trigger_ratio']:.2f}x |"
        )
    print()
    print(
        "amcommit's after-tasks interval split at commit() (Python worker): Spark's hand-off "
        "(last task finished -> commit() entered), amcommit's commit (commit() entered -> "
        "batch visible), and the work after the batch is visible (cleanup, until commit() returns)"
    )
    print()
    print(
        "| files/batch | hand-off ms | commit() to visible ms | file sink after tasks ms | after visible ms |"
    )
    print("|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['files_per_batch']} | {r['amcommit_handoff_ms']:.1f} | {r['amcommit_enter_to_visible_ms']:.1f} | "
            f"{r['parquet_after_tasks_ms']:.1f} | {r['amcommit_visible_to_return_ms']:.1f} |"
        )
    if args.direct:
        print()
        print(
            "| files/batch | commit() to visible ms: direct / staged | direct hand-off ms | "
            "file sink after tasks ms | direct commit() to visible / file sink after tasks |"
        )
        print("|---|---|---|---|---|")
        for r in results:
            print(
                f"| {r['files_per_batch']} | {r['amcommit_direct_enter_to_visible_ms']:.1f} / "
                f"{r['amcommit_enter_to_visible_ms']:.1f} | {r['amcommit_direct_handoff_ms']:.1f} | "
                f"{r['parquet_after_tasks_ms']:.1f} | {r['direct_enter_to_visible_vs_parquet_after_tasks']:.2f}x |"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "stream_direct" if args.direct else "stream_commit"
    payload = {"run": run_info(), "benchmark": name, "quick": args.quick, "rows": results}
    if args.direct:
        payload["sinks"] = list(sinks)
        payload["files_moved_by_commit"] = renamed
    (out_dir / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
