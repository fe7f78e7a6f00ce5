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
file-sink query first). Per query also the CPU per batch of Spark's JVM and of its Python
processes (``/proc``; the first batch included). With ``AMCOMMIT_STREAM_TIMINGS`` the sink's ``commit()`` timings
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


def _cpu() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process's descendants, live now, by kind:
    ``jvm`` (Spark's JVM), ``python`` (Spark's Python workers and daemons, amcommit's
    keep-alive processes); empty where ``/proc`` cannot tell. Pids key the sums (:func:`_spent`)."""
    hz = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float, str]] = {}
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return {}
    for n in names:
        try:
            with open(f"/proc/{n}/stat") as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1 : st.rindex(")")]
        rest = st[st.rindex(")") + 2 :].split()
        procs[int(n)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / hz, name)
    mine, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, (ppid, _, _) in procs.items():
            if pid not in mine and ppid in mine:
                mine.add(pid)
                grew = True
    return {
        f"{'jvm' if procs[p][2] == 'java' else 'python'}:{p}:{procs[p][2]}": procs[p][1]
        for p in mine
        if p != os.getpid()
    }


def _spent(before: dict[str, float], after: dict[str, float], batches: int) -> dict[str, float | None]:
    """CPU ms per batch of the JVM and of the Python processes between two :func:`_cpu`
    looks (processes that ended meanwhile are not counted)."""
    if not after or not batches:
        return {"jvm_cpu_ms": None, "py_cpu_ms": None}
    out = {"jvm": 0.0, "python": 0.0}
    for key, cpu in after.items():
        out[key.split(":", 1)[0]] += cpu - before.get(key, 0.0)
    return {
        "jvm_cpu_ms": round(out["jvm"] * 1000 / batches),
        "py_cpu_ms": round(out["python"] * 1000 / batches),
    }


def run_query(spark: Any, sink: str, src: Path, out: Path) -> dict[str, Any]:
    """One query to the end of its input; its batches' durations (ms) and the CPU the
    session's processes spent per batch (ms; the first batch, with its process start-ups,
    included)."""
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
    cpu0 = _cpu()
    query = w.start() if sink != "amcommit" else w.start(dest.as_uri())
    query.awaitTermination()
    wall = time.monotonic() - t0
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    cpu = _spent(cpu0, _cpu(), len(batches))
    trig = [int(p.durationMs.get("triggerExecution", 0)) for p in batches]
    add = [int(p.durationMs.get("addBatch", 0)) for p in batches]
    return {
        "sink": sink,
        "batches": len(batches),
        "trigger_ms": trig,
        "add_ms": add,
        "wall_s": round(wall, 2),
        **cpu,
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
    cols = [
        "sink",
        "round",
        "first_ms",
        "steady_ms",
        "first_x",
        "steady_x",
        "jvm_cpu_ms",
        "py_cpu_ms",
        "wall_s",
        "load",
    ]
    print(table(rows, cols, f"stream batches: {a.files} files of 20 rows, one per trigger, local[2]"))
    path = write_json("stream_batches", {"rows": rows}, save=a.save)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
