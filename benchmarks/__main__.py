"""The benchmark suite in one command: tables, JSON, PNG plots and the targets.

    .venv/bin/python -m benchmarks [--quick] [--only emulators,latency,throttle,scale,spark,loop]
    ./run bench [--quick] [--only ...]

Scenarios (see each module's docstring for what exactly runs and is measured):

* ``emulators`` (benchmarks/job_commit.py): job commit on Azurite, fake-gcs-server and the GCS double (``objects.move``),
  2,000 and 20,000 files in 200 task manifests, amcommit at concurrency 8/32/128 vs v1
  sequential vs thread pool 32 vs the raw emulator ceiling;
* ``latency`` (benchmarks/latency_proxy.py): 50 ms added to every request by a loopback
  proxy, 20,000 files: amcommit vs thread pool vs sequential (sampled);
* ``throttle``: 10% of requests answered 503/429 with Retry-After, 5,000 files;
* ``scale`` (benchmarks/scale.py): 1,000,000 files in 10,000 synthetic manifests;
* ``spark`` (benchmarks/spark_committers.py): local job commit of 2,000 files, amcommit vs
  Hadoop's FileOutputCommitter v1/v2 and ManifestCommitter; rows/s of whole Spark writes;
* ``local`` (benchmarks/local_commit.py): local job commit of 20,000 files vs a sequential
  ``os.rename`` loop;
* ``loop`` (benchmarks/event_loop.py): the same job commit with amcommit on asyncio's own
  event loop and on uvloop, alternating rounds, local files and the emulators;
* ``shard`` (benchmarks/shard_commit.py): a job commit renaming in one process against two
  (``processes``), on a store with simulated latency (20 ms per request) and no server
  CPU, 80,000 files, alternating rounds.
* issue 26, table commits that copy nothing (benchmarks/direct_commit.py,
  benchmarks/stream_commit.py; each also writes its own result file and plot,
  ``direct_commit.json`` ..., into the results directory): ``direct`` (job commit of 2,000
  files in 20 tasks, direct vs staged vs plain, mutating requests counted, local / Azurite /
  fake-gcs-server), ``direct_latency`` (20,000 files on fake-gcs-server, 50 ms per request),
  ``direct_spark`` (whole Spark writes, staged vs direct), ``direct_stream`` (streaming
  micro-batches of 100 files, direct table sink vs Spark's file sink).

``--quick`` runs every scenario small (under 3 minutes on an idle 2-core machine) and
writes to ``benchmarks/results/quick/``; the full run writes ``benchmarks/results/``:
``benchmarks.json`` (every run), ``benchmarks.md`` (tables + targets) and one PNG per
scenario (:mod:`benchmarks.plot`, matplotlib from the ``bench`` extra). Every scenario's
results carry their own ``run`` (date, git commit, machine: :func:`benchmarks.common.run_info`),
kept when ``--merge`` adds other scenarios' results later.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import machine, run_info, run_isolated, table

SCENARIOS = (
    "emulators",
    "latency",
    "throttle",
    "scale",
    "spark",
    "local",
    "loop",
    "direct",
    "direct_latency",
    "direct_spark",
    "direct_stream",
    "shard",
)
DIRECT_FILES = {
    "direct": "direct_commit",
    "direct_latency": "direct_latency",
    "direct_spark": "direct_spark",
    "direct_stream": "stream_direct",
}
"""Issue 26's scenarios: the result file (and plot) each writes into the results directory."""
RESULTS = Path(__file__).parent / "results"

FULL: dict[str, dict[str, Any]] = {
    # (backend, files, amcommit/raw concurrency, contenders or all). The full sweep at 2,000
    # files; at 20,000 fewer runs: Azurite's in-memory Delete Blob slows with every blob it
    # holds (~100 renames/s here at 2,000 files), so each 20,000-file run takes minutes.
    "emulators": {
        "cases": [
            ["gcs", 2000, [8, 32, 128], None],
            ["gcs", 20000, [32, 128], None],
            ["azurite", 2000, [8, 32, 128], None],
            # the GCS double: objects.move, the rename path of a real GCS bucket
            ["gcsmove", 2000, [8, 32, 128], None],
            # no Azurite 20,000: its in-memory store slows with every blob it holds; on
            # 2026-11-22 one 20,000-file contender was half done after 14 minutes
        ]
    },
    # issue 27 item 1: the defaults (adaptive in-flight limit) against the 32-thread SDK
    # committer and a sweep of fixed concurrencies, on fake-gcs-server and Azurite (whose
    # own CPU is the ceiling there: ~100-400 renames/s)
    "latency": {
        "backends": ["gcs", "azurite"],
        "files": 4000,
        "conc": [128, 256, 512],
        "lean": [256],
        "seq_tasks": 4,
    },
    # gcs only (Azurite's own ceiling is ~100 renames/s); 5,000 files: each contender's run
    # needs a fresh emulator and 5,000 uploads first
    "throttle": {"backends": ["gcs"], "files": 5000},
    "scale": {"files": 1_000_000, "manifests": 10_000},
    "spark": {"tasks": 200, "files_per_task": 10, "rounds": 2, "rows": 500_000},
    # amcommit's local job commit vs a sequential os.rename loop (benchmarks/local_commit.py)
    "local": {"tasks": 200, "files": 100, "rounds": 3},
    # amcommit on asyncio's loop vs uvloop, alternating rounds (benchmarks/event_loop.py)
    "loop": {
        "backends": ["local", "gcs", "azurite"],
        "files": 2000,
        "local_files": 20000,
        "conc": 32,
        "rounds": 3,
    },
    # issue 27 item 2: renames in one process against two (benchmarks/shard_commit.py)
    "shard": {"files": 80_000, "manifests": 400, "rounds": 2},
    # issue 26: one run of each at full size (see benchmarks/README.md for the sizes' reasons)
    "direct": {
        "backends": ["local", "azurite", "gcs"],
        "tasks": 20,
        "files": 100,
        "count_files": 10,
        "rounds": 3,
    },
    "direct_latency": {"files": 20000, "staged_files": [1000, 4000], "tasks": 20, "delay": 0.05, "rounds": 3},
    # fake-gcs-server: 200 files (its direct task side looks up 3 missing objects per file,
    # each a GET and a prefix listing, slower as the bucket fills)
    "direct_spark": {
        "backends": ["local", "gcs"],
        "rows": 200_000,
        "tasks": 20,
        "days": 100,
        "rounds": 3,
        "gcs_size": [20_000, 10],
    },
    "direct_stream": {"sizes": [100], "rounds": 3},
}
QUICK: dict[str, dict[str, Any]] = {
    "emulators": {"backends": ["gcs", "azurite", "gcsmove"], "sizes": [400], "concurrency": [32]},
    "latency": {"backends": ["gcs"], "files": 400, "conc": [64], "lean": [256], "seq_tasks": 1},
    "scale": {"files": 100_000, "manifests": 1_000},
    "spark": {"tasks": 200, "files_per_task": 10, "rounds": 1, "rows": 0},
    "local": {"tasks": 20, "files": 100, "rounds": 1},
    "loop": {"backends": ["local", "gcs"], "files": 400, "local_files": 2000, "conc": 32, "rounds": 1},
    "shard": {"files": 8_000, "manifests": 40, "rounds": 1},
    "direct": {"backends": ["local", "gcs"], "tasks": 4, "files": 20, "count_files": 10, "rounds": 1},
    "direct_latency": {"files": 400, "staged_files": [200, 400], "tasks": 4, "delay": 0.05, "rounds": 1},
    "direct_spark": {"backends": ["local"], "rows": 20_000, "tasks": 4, "days": 10, "rounds": 1},
    "direct_stream": {"sizes": [10], "rounds": 1, "quick": True},
}
SMOKE: dict[str, dict[str, Any]] = {
    "emulators": {"backends": ["gcs"], "sizes": [200], "concurrency": [8], "contenders": ["amcommit", "raw"]},
    "local": {"tasks": 5, "files": 20, "rounds": 1},
    "direct": {"backends": ["local"], "tasks": 2, "files": 20, "count_files": 10, "rounds": 1},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_emulators(cfg: dict[str, Any], partial: Path | None = None) -> dict[str, Any]:
    from benchmarks import job_commit

    if "cases" in cfg:
        runs = job_commit.run_cases(cfg["cases"], rounds=cfg.get("rounds", 1), partial=partial)
    else:
        runs = job_commit.run_matrix(
            cfg["backends"],
            cfg["sizes"],
            cfg["concurrency"],
            rounds=cfg.get("rounds", 1),
            kinds=cfg.get("contenders"),
        )
    rows = job_commit.summarize(runs)
    return {"rows": rows, "runs": runs, "table": table(rows, job_commit.COLUMNS)}


def rebuild_emulators(path: Path) -> dict[str, Any]:
    """The emulators scenario from the runs an earlier (interrupted) suite recorded."""
    from benchmarks import job_commit

    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = job_commit.summarize(runs)
    return {"rows": rows, "runs": runs, "table": table(rows, job_commit.COLUMNS)}


def run_latency(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import latency_proxy as lp

    rows = lp.run_latency(
        cfg["backends"],
        cfg["files"],
        amcommit_conc=cfg["conc"],
        lean_conc=cfg.get("lean", ()),
        seq_sample_tasks=cfg["seq_tasks"],
    )
    return {"rows": rows, "table": table(rows, lp.LAT_COLUMNS)}


def run_throttle(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import latency_proxy as lp

    rows = lp.run_throttle(cfg["backends"], cfg["files"])
    return {"rows": rows, "table": table(rows, lp.THR_COLUMNS)}


def scale_worker(files: int, manifests: int) -> None:
    """benchmarks/scale.py's run in this fresh process, with the peak RSS of this process's
    own address space (``ru_maxrss`` would include the parent's, see job_commit)."""
    from amcommit import loop as amcommit_loop
    from benchmarks import scale
    from benchmarks.job_commit import own_peak_rss_mb

    r = amcommit_loop.run(scale.run, files, manifests, 64, 16)
    r["peak_rss_mb_getrusage"] = r["peak_rss_mb"]
    r["peak_rss_mb"] = round(own_peak_rss_mb(), 1)
    print(json.dumps(r))


def run_scale(cfg: dict[str, Any]) -> dict[str, Any]:
    r = run_isolated("benchmarks", ["--scale-worker", f"{cfg['files']},{cfg['manifests']}"], timeout=1800)
    log(f"  scale {r['files']:,} files: {r['entries_per_s']:,} entries/s, {r['peak_rss_mb']} MB peak RSS")
    keys = ("files", "manifests", "entries_per_s", "engine_entries_per_s", "renames_per_s", "total_s")
    cols = [c for c in keys if c in r]
    cols += [c for c in ("cpu_ms_per_file", "peak_rss_mb") if c in r]
    return {"rows": [r], "table": table([r], cols)}


def run_spark(cfg: dict[str, Any]) -> dict[str, Any]:
    args = ["--tasks", str(cfg["tasks"]), "--files-per-task", str(cfg["files_per_task"])]
    args += ["--rounds", str(cfg["rounds"]), "--rows", str(cfg["rows"]), "--json-only"]
    from benchmarks import spark_committers as sc

    r = run_isolated("benchmarks.spark_committers", args)
    out = {"job_commit": r["job_commit"], "writes": r["writes"]}
    t = table(r["job_commit"], sc.COMMIT_COLUMNS)
    if r["writes"]:
        t += "\n\n" + table(r["writes"], sc.WRITE_COLUMNS)
    out["table"] = t
    return out


def run_local(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import local_commit

    return local_commit.run(cfg["tasks"], cfg["files"], cfg["rounds"])


def run_loop(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import event_loop

    return event_loop.run(cfg["backends"], cfg["files"], cfg["local_files"], cfg["conc"], cfg["rounds"])


def run_shard(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import shard_commit as sh

    out = sh.run(sh.DEFAULTS | cfg, [1, 2], log=log)
    out["rows"] = out["runs"]
    out["table"] = table(out["runs"], sh.COLUMNS) + f"\n\ntwo processes / one: {out['x2_vs_1']}x files/s"
    return out


def _write_direct(name: str, res: dict[str, Any], out: Path) -> None:
    """An issue 26 scenario's own result file in the results directory (its plot's source)."""
    payload = {"run": run_info(), **res}
    (out / f"{DIRECT_FILES[name]}.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")


def run_direct(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import direct_commit as dc

    res = dc.run_commit(cfg["backends"], cfg["tasks"], cfg["files"], cfg["count_files"], cfg["rounds"])
    _write_direct("direct", res, Path(cfg["out"]))
    return res


def run_direct_latency(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import direct_commit as dc

    res = dc.run_latency_scenario(
        cfg["files"], cfg["staged_files"], cfg["tasks"], cfg["delay"], cfg["rounds"]
    )
    _write_direct("direct_latency", res, Path(cfg["out"]))
    return res


def run_direct_spark(cfg: dict[str, Any]) -> dict[str, Any]:
    from benchmarks import direct_commit as dc

    sizes = {"gcs": tuple(cfg["gcs_size"])} if cfg.get("gcs_size") else None
    res = dc.run_spark(cfg["backends"], cfg["rows"], cfg["tasks"], cfg["days"], cfg["rounds"], sizes)  # type: ignore[arg-type]
    _write_direct("direct_spark", res, Path(cfg["out"]))
    return res


def run_direct_stream(cfg: dict[str, Any]) -> dict[str, Any]:
    """benchmarks/stream_commit.py with the direct sink, in a fresh process (its own Spark
    session): it writes ``stream_direct.json`` into the results directory itself."""
    import subprocess

    args = ["--direct", "--sizes", ",".join(str(n) for n in cfg["sizes"]), "--rounds", str(cfg["rounds"])]
    args += ["--out", cfg["out"]] + (["--quick"] if cfg.get("quick") else [])
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.stream_commit", *args],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=str(Path(__file__).parent.parent),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"stream_commit failed:\n{proc.stderr[-3000:]}")
    res = json.loads((Path(cfg["out"]) / "stream_direct.json").read_text())
    text = proc.stdout[proc.stdout.index("| files/batch") :] if "| files/batch" in proc.stdout else ""
    return {"rows": res["rows"], "table": text.strip()}


RUNNERS = {
    "emulators": run_emulators,
    "latency": run_latency,
    "throttle": run_throttle,
    "scale": run_scale,
    "spark": run_spark,
    "local": run_local,
    "loop": run_loop,
    "shard": run_shard,
    "direct": run_direct,
    "direct_latency": run_direct_latency,
    "direct_spark": run_direct_spark,
    "direct_stream": run_direct_stream,
}

TITLES = {
    "emulators": "Job commit on the emulators (fresh emulator and process per run)",
    "latency": "Job commit with 50 ms added to every request (loopback proxy)",
    "throttle": "Job commit with 10% of requests throttled (503/429 + Retry-After: 1)",
    "scale": "Scale: synthetic manifests on a store with no I/O cost",
    "spark": "Local files through PySpark (Hadoop 3.5 committers vs amcommit)",
    "local": "Local job commit vs a sequential os.rename loop (FileOutputCommitter v1's way)",
    "loop": "amcommit on asyncio's event loop vs uvloop (alternating rounds)",
    "shard": "Renames in one process against two, simulated latency, no server CPU",
    "direct": "Table commits that copy nothing: job commit, direct vs staged vs plain (issue 26)",
    "direct_latency": "Table commits that copy nothing: 50 ms per request, fake-gcs-server (issue 26)",
    "direct_spark": "Table commits that copy nothing: whole Spark writes, staged vs direct (issue 26)",
    "direct_stream": "Table commits that copy nothing: streaming micro-batches (issue 26)",
}


# -- targets ---------------------------------------------------------------------------


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3f}"


def targets(res: dict[str, Any]) -> list[dict[str, str]]:
    """Every target of the brief: met / not met with the measured figure."""
    out: list[dict[str, str]] = []

    def add(name: str, ok: bool | None, figure: str) -> None:
        out.append(
            {
                "target": name,
                "status": "n/a" if ok is None else "met" if ok else "NOT met",
                "measured": figure,
            }
        )

    em = res.get("emulators", {}).get("rows", [])
    for backend in sorted({r["backend"] for r in em}):
        biggest = max(r["files"] for r in em if r["backend"] == backend)
        rs = [
            r
            for r in em
            if r["backend"] == backend
            and r["kind"] == "amcommit"
            and r["files"] == biggest
            and r["files_per_s"]
        ]
        if rs:
            cpu = min(r["cpu_ms_per_file"] for r in rs)
            best = min(rs, key=lambda r: r["cpu_ms_per_file"])
            add(
                f"client CPU <= 0.5 ms/file ({backend}, {biggest:,} files)",
                cpu <= 0.5,
                f"{cpu:.3f} ms/file ({best['contender']}); all: "
                + ", ".join(f"c={r['concurrency']} {r['cpu_ms_per_file']:.3f}" for r in rs),
            )
            ratios = [r["cpu_vs_threadpool"] for r in rs if r.get("cpu_vs_threadpool")]
            if ratios:
                add(
                    f"client CPU <= 1/4 of thread pool ({backend})",
                    min(ratios) <= 0.25,
                    f"{min(ratios):.2f}x of the thread pool's CPU per file (best); worst {max(ratios):.2f}x",
                )
            pcts = [(r["concurrency"], r["pct_of_raw"]) for r in rs if r.get("pct_of_raw")]
            if pcts:
                add(
                    f">= 90% of the raw emulator ceiling ({backend}, rename phase)",
                    min(p for _, p in pcts) >= 90,
                    ", ".join(f"c={c}: {p:.0f}%" for c, p in pcts),
                )
    lat = res.get("latency", {}).get("rows", [])
    for backend in sorted({r["backend"] for r in lat}):
        rs = [r for r in lat if r["backend"] == backend and r["kind"] == "amcommit" and r["files_per_s"]]
        if not rs:
            continue
        best = max(rs, key=lambda r: r["files_per_s"])
        for r in rs:
            if r["contender"] == "amcommit defaults" and r.get("x_threadpool"):
                add(
                    f"50 ms latency, amcommit's defaults: >= 4x thread pool ({backend})",
                    r["x_threadpool"] >= 4,
                    f"{r['x_threadpool']}x, {r['files_per_s']:,.0f} files/s",
                )
            if r["contender"] == "amcommit defaults" and r.get("x_best_fixed"):
                add(
                    f"50 ms latency, amcommit's defaults: >= 0.9x the best fixed concurrency ({backend})",
                    r["x_best_fixed"] >= 0.9,
                    f"{r['x_best_fixed']}x",
                )
        add(
            f"50 ms latency: >= 1,500 files/s ({backend})",
            best["files_per_s"] >= 1500,
            f"{best['files_per_s']:,.0f} files/s ({best['contender']})",
        )
        if best.get("x_threadpool"):
            add(
                f"50 ms latency: >= 4x thread pool ({backend})",
                best["x_threadpool"] >= 4,
                f"{best['x_threadpool']}x",
            )
        if best.get("x_sequential"):
            add(
                f"50 ms latency: >= 50x sequential ({backend})",
                best["x_sequential"] >= 50,
                f"{best['x_sequential']}x (sequential measured on a sample)",
            )
    thr = res.get("throttle", {}).get("rows", [])
    for r in thr:
        if r["kind"] == "amcommit":
            add(
                f"10% throttled: output exact ({r['backend']}, {r['contender']})",
                r["verified"] == "exact",
                f"{r['verified']}, {r['files_per_s']:,.0f} files/s ({r.get('x_threadpool', '?')}x the thread "
                f"pool), {r.get('throttled_answers', 0)} throttled answers, {r['retries']} retries",
            )
    sc = res.get("scale", {}).get("rows", [])
    if sc:
        r = sc[0]
        add(
            f"scale {r['files']:,} files: peak RSS <= 400 MB",
            r["peak_rss_mb"] <= 400,
            f"{r['peak_rss_mb']} MB",
        )
        eng = r.get("engine_entries_per_s", r["entries_per_s"])
        add(
            f"scale {r['files']:,} files: >= 300k manifest entries/s",
            eng >= 300_000,
            f"{eng:,} entries/s loaded by the engine ({r['entries_per_s']:,}/s including the synthetic "
            "store generating the manifest JSON)",
        )
    sp = res.get("spark", {}).get("job_commit", [])
    if sp:
        by = {r["committer"]: r for r in sp}
        a = by.get("amcommit commit_job")
        for name in ("Hadoop ManifestCommitter", "Hadoop FileOutputCommitter v1"):
            other = by.get(name)
            if a and other:
                add(
                    f"local job commit of {a['files']:,} files faster than {name.removeprefix('Hadoop ')}",
                    a["job_commit_ms"] < other["job_commit_ms"],
                    f"{_fmt(a['job_commit_ms'])} ms vs {_fmt(other['job_commit_ms'])} ms "
                    f"({other['job_commit_ms'] / a['job_commit_ms']:.2f}x)",
                )
    sh = res.get("shard")
    if sh and "x2_vs_1" in sh:
        one, two = sh["best"][0], sh["best"][1]
        add(
            "two processes >= 1.7x one process's files/s (simulated latency, no server CPU)",
            sh["x2_vs_1"] >= 1.7,
            f"{sh['x2_vs_1']}x ({two['files_per_s']:,} vs {one['files_per_s']:,} files/s, load before "
            f"{two['load_before']})",
        )
    loc = res.get("local")
    if loc:
        add(
            f"local job commit of {loc['files']:,} files >= 1.0x the sequential rename loop",
            loc["speedup_vs_sequential"] >= 1.0,
            f"{loc['speedup_vs_sequential']:.2f}x (renaming one by one: {loc['one_by_one_vs_sequential']:.2f}x)",
        )
    out.extend(direct_targets(res))
    return out


def direct_targets(res: dict[str, Any]) -> list[dict[str, str]]:
    """Issue 26's targets (table commits that copy nothing) against the measured figures."""
    out: list[dict[str, str]] = []

    def add(name: str, ok: bool, figure: str) -> None:
        out.append({"target": name, "status": "met" if ok else "NOT met", "measured": figure})

    rows = res.get("direct", {}).get("rows", [])
    big = max((r["files"] for r in rows), default=0)
    for r in res.get("direct", {}).get("ratios", []):
        if r["files"] != big:
            continue
        if "direct_vs_staged" in r:
            add(
                f"direct table commit <= 0.3x staged ({r['backend']}, {big:,} files)",
                r["direct_vs_staged"] <= 0.3,
                f"{r['direct_vs_staged']:.2f}x",
            )
        if "direct_vs_plain" in r:
            add(
                f"direct table commit <= 0.5x plain ({r['backend']}, {big:,} files)",
                r["direct_vs_plain"] <= 0.5,
                f"{r['direct_vs_plain']:.2f}x",
            )
    for r in res.get("direct_spark", {}).get("ratios", []):
        add(
            f"whole Spark write, direct no slower than staged ({r['backend']})",
            r["wall_direct_vs_staged"] <= 1.0,
            f"{r['wall_direct_vs_staged']:.2f}x the staged write's wall time",
        )
    lat = res.get("direct_latency", {}).get("result", {})
    if lat.get("speedup"):
        how = "measured" if lat.get("staged_measured") else "staged extrapolated"
        add(
            f"{lat['files']:,} files, 50 ms per request: direct >= 10x faster than staged",
            lat["speedup"] >= 10,
            f"{lat['speedup']:.1f}x ({how})",
        )
    for r in res.get("direct_stream", {}).get("rows", []):
        v = r.get("direct_enter_to_visible_vs_parquet_after_tasks")
        if v is not None:
            add(
                f"streaming, {r['files_per_batch']} files per batch: commit() to visible <= file sink's after-tasks interval",
                v <= 1.0,
                f"{r['amcommit_direct_enter_to_visible_ms']:.1f} vs {r['parquet_after_tasks_ms']:.1f} ms ({v:.2f}x)",
            )
    return out


def load_average() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "?"


def report_md(res: dict[str, Any], meta: dict[str, Any]) -> str:
    m = meta["machine"]
    lines = [
        f"Run {m['date']} on {m['cpus']} cores / {m['memory_gib']} GiB, Python {m['python']}, "
        f"{m['platform']}; mode: {meta['mode']}; load average before: {meta['load_before']}, "
        f"after: {meta['load_after']}; {meta['seconds']:.0f} s.",
        "",
    ]
    lines += [f"Note: {n}" for n in meta.get("notes", [])] + ([""] if meta.get("notes") else [])
    for name in SCENARIOS:
        if name in res:
            lines += [f"### {TITLES[name]}", ""]
            run = res[name].get("run")
            if run:
                lines += [f"Run {run.get('date')}, commit {run.get('commit')}.", ""]
            lines += [res[name]["table"], ""]
        if name in meta.get("errors", {}):
            lines += [f"### {TITLES[name]}", "", f"FAILED: {meta['errors'][name]}", ""]
    tg = meta["targets"]
    if tg:
        lines += ["### Targets", "", table(tg, ["target", "status", "measured"]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (< 3 minutes)")
    ap.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scale-worker", help=argparse.SUPPRESS)
    ap.add_argument("--only", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    ap.add_argument("--out", help="results directory (default benchmarks/results[/quick])")
    ap.add_argument(
        "--rebuild",
        action="store_true",
        help="emulators: summarise the runs already in emulator-runs.jsonl instead of running",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the other scenarios' results already in the results directory (run parts separately)",
    )
    a = ap.parse_args(argv)
    if a.scale_worker:
        files, manifests = (int(x) for x in a.scale_worker.split(","))
        scale_worker(files, manifests)
        return 0
    plan = SMOKE if a.smoke else QUICK if a.quick else FULL
    only = [s.strip() for s in a.only.split(",")] if a.only else [s for s in SCENARIOS if s in plan]
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    out = Path(a.out) if a.out else RESULTS / ("smoke" if a.smoke else "quick" if a.quick else "")
    out.mkdir(parents=True, exist_ok=True)
    mode = "smoke" if a.smoke else "quick" if a.quick else "full"
    if not a.merge and not a.rebuild and "emulators" in only:
        (out / "emulator-runs.jsonl").unlink(missing_ok=True)
    meta: dict[str, Any] = {
        "run": run_info(),
        "machine": machine(),
        "mode": mode,
        "load_before": load_average(),
        "errors": {},
    }
    res: dict[str, Any] = {}
    previous: dict[str, Any] = {}
    if a.merge and (out / "benchmarks.json").exists():
        previous = json.loads((out / "benchmarks.json").read_text())
        for name, r in previous.get("results", {}).items():
            if name not in only and "table" in r:
                res[name] = r
    t0 = time.perf_counter()
    for name in only:
        if name not in plan:
            continue
        log(f"[bench] {name} ({mode})")
        try:
            if name == "emulators" and a.rebuild:
                res[name] = rebuild_emulators(out / "emulator-runs.jsonl")
                meta.setdefault("notes", []).append(
                    "the emulator table summarises the runs recorded in emulator-runs.jsonl by an "
                    "earlier invocation of the full suite (same day; see `runs`)."
                )
            elif name == "emulators":
                res[name] = run_emulators(plan[name], out / "emulator-runs.jsonl")
            elif name in DIRECT_FILES:
                res[name] = RUNNERS[name]({**plan[name], "out": str(out)})
            else:
                res[name] = RUNNERS[name](plan[name])
        except Exception as e:  # one scenario failing must not lose the others
            meta["errors"][name] = f"{type(e).__name__}: {str(e)[-500:]}"
            log(f"[bench] {name} FAILED: {meta['errors'][name]}")
        else:
            # each scenario's own date, commit and machine: kept with it when a later
            # invocation merges other scenarios into the same results
            res[name]["run"] = {**run_info(), "mode": mode}
            print(f"\n### {TITLES[name]}\n\n{res[name]['table']}\n", flush=True)
    meta["seconds"] = time.perf_counter() - t0
    meta["load_after"] = load_average()
    meta["targets"] = targets(res)
    if meta["targets"]:
        print(table(meta["targets"], ["target", "status", "measured"], "Targets"))
    config = {k: v for k, v in previous.get("config", {}).items() if k in res}
    config.update({k: plan[k] for k in only if k in plan})
    payload = {**meta, "config": config, "results": res}
    if previous:
        meta.setdefault("notes", []).append(
            "scenarios not run by this invocation were kept from the previous results ("
            + ", ".join(k for k in res if k not in only)
            + ")."
        )
        payload["notes"] = meta["notes"]
        payload["merged_from"] = {
            k: res[k].get("run", {}).get("date") or previous.get("machine", {}).get("date")
            for k in res
            if k not in only
        }
    (out / "benchmarks.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    (out / "benchmarks.md").write_text(report_md(res, meta) + "\n")
    try:
        from benchmarks.plot import plot_all

        for png in plot_all(payload, out):
            log(f"[bench] plot: {png}")
        from benchmarks.plot import FILE_PLOTS

        for name in only:
            if name in DIRECT_FILES and name in res:
                png = FILE_PLOTS[DIRECT_FILES[name]](out, out / f"{DIRECT_FILES[name]}.png")
                log(f"[bench] plot: {png}")
    except Exception as e:
        log(f"[bench] plot failed: {type(e).__name__}: {e}")
    log(f"[bench] wrote {out / 'benchmarks.json'} and {out / 'benchmarks.md'} in {meta['seconds']:.0f} s")
    return 1 if meta["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
