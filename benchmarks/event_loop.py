"""amcommit on uvloop vs on asyncio's own loop: the same job, in the same run.

    .venv/bin/python -m benchmarks.event_loop [--backends local,gcs,azurite] [--files 2000]
        [--local-files 20000] [--concurrency 32] [--rounds 3]

Two contenders, ``amcommit (asyncio)`` (``AMCOMMIT_UVLOOP=0``) and ``amcommit (uvloop)``
(``AMCOMMIT_UVLOOP=1``, see :mod:`amcommit.loop`), each run in a fresh process, the order
reversed every other round (:func:`benchmarks.common.alternate`):

* ``local``: the job of :mod:`benchmarks.local_commit` (200 task manifests of 1 KiB files
  in ``/dev/shm``, task commits done beforehand), ``commit_job`` with default settings;
* ``gcs`` / ``azurite``: the job of :mod:`benchmarks.job_commit` (200 task manifests) on a
  fresh emulator per run, ``commit_job`` with ``io_threads=N`` and the store's defaults.

Measured as in those modules: whole-job files/s and client CPU ms per committed file
(process CPU time of the commit / files); every output is verified (``exact``), and each
worker reports the loop it really ran on (checked). Summary per backend and loop: best of
the rounds (highest files/s; lowest CPU ms/file, each on its own) and the median; ratios
uvloop / asyncio. ``--raw`` adds the raw aiohttp rename loop of :mod:`benchmarks.job_commit`
(the same requests, no engine) on each loop: the loop's own share of the difference. The
load average before and after is recorded with the results: on a shared machine read the
numbers as rough. Results: ``results/tmp/event_loop.json`` (``--save``: ``results/``; or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import (
    add_save_arg,
    alternate,
    load_average,
    loop_env,
    run_info,
    run_isolated,
    scratch_dir,
    table,
    write_json,
)

LOOPS = ("asyncio", "uvloop")
LOCAL_TASKS = 200


KINDS = {"amcommit": "amcommit", "raw": "raw aiohttp"}


def _label(loop: str, kind: str = "amcommit") -> str:
    return f"{KINDS[kind]} ({loop})"


def _check_loop(row: dict[str, Any], loop: str) -> None:
    if not str(row.get("loop", "")).startswith(loop):
        raise RuntimeError(f"asked for {loop}, the worker ran on {row.get('loop')!r}")


def run_local(files: int, rounds: int, log: Any = sys.stderr) -> list[dict[str, Any]]:
    import anyio

    from benchmarks import local_commit

    per = max(1, files // LOCAL_TASKS)
    runs = []
    for r, loop in alternate(rounds, LOOPS):
        with scratch_dir("amc-loop-") as root:
            anyio.run(local_commit.prepare, root, LOCAL_TASKS, per)
            row = run_isolated("benchmarks.local_commit", ["--worker", "amcommit", root], env=loop_env(loop))
            local_commit.verify(root, LOCAL_TASKS * per)
        _check_loop(row, loop)
        row.update(backend="local", kind="amcommit", contender=_label(loop), round=r, verified="exact")
        runs.append(row)
        print(
            f"  local {row['files']:>6} {_label(loop):<18} {row['files_per_s']:>8,.0f} files/s "
            f"{row['cpu_ms_per_file']:.3f} CPU ms/file  ({row['loop']})",
            file=log,
            flush=True,
        )
    return runs


def run_emulator(
    backend: str, files: int, conc: int, rounds: int, raw: bool = False, log: Any = sys.stderr
) -> list[dict[str, Any]]:
    """``raw``: also the raw aiohttp rename loop of :mod:`benchmarks.job_commit` on each
    loop (the same requests without the engine: how much of the difference is the loop's)."""
    from benchmarks.job_commit import Contender, run_one

    plan = [(kind, loop) for kind in (("amcommit", "raw") if raw else ("amcommit",)) for loop in LOOPS]
    runs = []
    for r, (kind, loop) in alternate(rounds, plan):
        row = run_one(backend, files, Contender(kind, conc, loop=loop), log=log)
        if row["verified"] != "exact":
            raise RuntimeError(f"{backend} {_label(loop, kind)}: output not exact: {row['verified']}")
        _check_loop(row, loop)
        row.update(contender=_label(loop, kind), round=r)
        runs.append(row)
    return runs


def summarize(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per backend and contender kind: one row per loop (best and median) and one ratio row
    (uvloop / asyncio)."""
    rows: list[dict[str, Any]] = []
    for backend, kind in dict.fromkeys((r["backend"], r.get("kind", "amcommit")) for r in runs):
        per: dict[str, dict[str, Any]] = {}
        for loop in LOOPS:
            rs = [r for r in runs if r["backend"] == backend and r["contender"] == _label(loop, kind)]
            if not rs:
                continue
            per[loop] = {
                "backend": backend,
                "files": rs[0]["files"],
                "contender": _label(loop, kind),
                "rounds": len(rs),
                "best_files_per_s": max(r["files_per_s"] for r in rs),
                "median_files_per_s": statistics.median(r["files_per_s"] for r in rs),
                "best_cpu_ms_per_file": min(r["cpu_ms_per_file"] for r in rs),
                "median_cpu_ms_per_file": statistics.median(r["cpu_ms_per_file"] for r in rs),
                "loop": rs[0].get("loop", ""),
            }
            rows.append(per[loop])
        if len(per) == 2:
            a, u = per["asyncio"], per["uvloop"]
            rows.append(
                {
                    "backend": backend,
                    "files": a["files"],
                    "contender": f"{KINDS[kind]}: ratio uvloop / asyncio",
                    "rounds": min(a["rounds"], u["rounds"]),
                    **{
                        k: round(u[k] / a[k], 3) if a[k] else None
                        for k in (
                            "best_files_per_s",
                            "median_files_per_s",
                            "best_cpu_ms_per_file",
                            "median_cpu_ms_per_file",
                        )
                    },
                }
            )
    return rows


COLUMNS = [
    "backend",
    "files",
    "contender",
    "rounds",
    "best_files_per_s",
    "median_files_per_s",
    "best_cpu_ms_per_file",
    "median_cpu_ms_per_file",
    "loop",
]


def run(
    backends: Sequence[str],
    files: int,
    local_files: int,
    concurrency: int,
    rounds: int,
    raw: bool = False,
    log: Any = sys.stderr,
) -> dict[str, Any]:
    """Every backend, ``rounds`` rounds of both loops; rows, runs, table and load averages."""
    load_before = load_average()
    runs: list[dict[str, Any]] = []
    for backend in backends:
        if backend == "local":
            runs += run_local(local_files, rounds, log)
        else:
            runs += run_emulator(backend, files, concurrency, rounds, raw, log)
    rows = summarize(runs)
    return {
        "rows": rows,
        "runs": runs,
        "load_before": load_before,
        "load_after": load_average(),
        "table": table(rows, COLUMNS),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--backends", default="local,gcs,azurite", help="comma-separated: local, gcs, azurite")
    ap.add_argument("--files", type=int, default=2000, help="files per job on the emulators")
    ap.add_argument("--local-files", type=int, default=20000, help="files per job on local files")
    ap.add_argument("--concurrency", type=int, default=32, help="io_threads on the emulators")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--raw", action="store_true", help="emulators: also the raw aiohttp loop on each loop")
    ap.add_argument(
        "--out", help="JSON results file (default benchmarks/results/tmp/event_loop.json; --save: results/)"
    )
    add_save_arg(ap)
    a = ap.parse_args(argv)
    t0 = time.time()
    res = run(a.backends.split(","), a.files, a.local_files, a.concurrency, a.rounds, a.raw)
    print(f"### amcommit on asyncio vs uvloop (best of {a.rounds} rounds, alternating)\n")
    print(res["table"])
    print(f"\nload average before {res['load_before']}, after {res['load_after']}")
    payload = {
        "benchmark": "event_loop",
        "config": vars(a),
        "seconds": round(time.time() - t0, 1),
        **{k: v for k, v in res.items() if k != "table"},
    }
    if a.out:
        out = Path(a.out)
        out.write_text(json.dumps({"run": run_info(), **payload}, indent=2, default=str) + "\n")
    else:
        out = write_json("event_loop", payload, save=a.save)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
