"""Local job commit: amcommit vs a sequential rename loop, same files, same run.

Each round prepares a fresh job (``--tasks`` task attempts x ``--files`` files, task
commits done through amcommit), then runs one contender in a fresh process (so its CPU
time and peak RSS are its own):

* ``amcommit``: ``commit_job`` with default settings (renames in batches of 256 in a
  worker thread: ``LocalStore.rename_batch``);
* ``amcommit one by one``: the same with ``rename_batch_size=1`` (one coroutine per
  rename, the path every remote store takes), to show what batching is worth;
* ``sequential``: the FileOutputCommitter v1 way: one thread renames every file of every
  committed attempt into place, one at a time (``os.renames``), then writes ``_SUCCESS``;
* ``rename loop``: the same with a bare ``os.rename`` per file (each destination directory
  made once, no ``os.renames`` bookkeeping);
* ``amcommit fsync``: ``commit_job`` on the store's default ``fsync=True`` (renames made
  durable before the journal records them, as ``dir_sync_rule`` says for the file system
  of ``--where``); ``amcommit fsync each``: the same with the rule before issue 35 (both
  directories of every rename fsynced), the baseline of the same run.

Rounds alternate between contenders. The destination is verified after every round.
Besides each contender's best round, the result gives medians and ranges over the rounds,
the ratio to the loop of each round (the loop's time over amcommit's, both of the same
round), amcommit's stage times and the load average before every round.

    python -m benchmarks.local_commit --tasks 200 --files 100 --rounds 2
    python -m benchmarks.local_commit --rounds 7 --contenders amcommit,sequential
    python -m benchmarks.local_commit --dirs 100 --where /var/tmp \
        --contenders "rename loop,amcommit fsync,amcommit fsync each,amcommit"

Results: ``benchmarks/results/tmp/local_commit.json`` (``--save``: ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from typing import Any

import anyio

from amcommit import loop as amcommit_loop
from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig, commit_task
from amcommit.committer.layout import JobLayout
from amcommit.store.local import LocalStore
from benchmarks.common import (
    Measure,
    add_save_arg,
    alternate,
    best_of,
    peak_rss_mb,
    run_isolated,
    running_loop,
    scratch_dir,
    table,
    write_json,
)

JOB = "202611220200_0001"
ONE_BY_ONE = "amcommit one by one"
DURABLE = "amcommit fsync"
DURABLE_EACH = "amcommit fsync each"
RENAME_LOOP = "rename loop"
CONTENDERS = ("amcommit", ONE_BY_ONE, "sequential", DURABLE, DURABLE_EACH, RENAME_LOOP)
DEFAULT_CONTENDERS = ("amcommit", ONE_BY_ONE, "sequential")


def write_task_files(root: str, layout: JobLayout, tasks: int, files: int, dirs: int = 10) -> None:
    for t in range(tasks):
        work = os.path.join(root, layout.task_attempt_dir(f"attempt_{JOB}_m_{t:06d}_0"))
        for i in range(files):
            d = os.path.join(work, f"day={i % dirs}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"part-{t:05d}-{i:04d}.parquet"), "wb") as f:
                f.write(b"x" * 1024)


async def prepare(root: str, tasks: int, files: int, dirs: int = 10) -> None:
    store = LocalStore(root, fsync=False)
    layout = await setup_job(store, "dest", JOB)
    write_task_files(root, layout, tasks, files, dirs)
    async with anyio.create_task_group() as tg:
        for t in range(tasks):
            tg.start_soon(commit_task, store, layout, f"task_{JOB}_m_{t:06d}", f"attempt_{JOB}_m_{t:06d}_0")


def contender(name: str, root: str) -> dict[str, Any]:
    layout = JobLayout("dest", JOB)
    dest = os.path.join(root, "dest")
    ran_on = ""  # the loop amcommit ran on
    stages: dict[str, float] = {}  # amcommit's stage times (ms)
    with Measure() as m:
        if name.startswith("amcommit"):
            config = CommitterConfig(rename_batch_size=1) if name == ONE_BY_ONE else CommitterConfig()

            if name == DURABLE_EACH:  # the rule before issue 35: both parents of every rename
                import amcommit.store.local as local_mod

                local_mod.dir_sync_rule = lambda path: "each"  # type: ignore[assignment,unused-ignore]

            async def run() -> tuple[Any, str]:
                # fsync: the store's default (durable renames), else off
                store = LocalStore(root, fsync=name in (DURABLE, DURABLE_EACH))
                async with store:
                    report = await commit_job(store, "dest", JOB, config=config)
                return report, running_loop()

            report, ran_on = amcommit_loop.run(run)
            files = report.files
            stages = {k: round(v * 1000, 1) for k, v in report.stage_seconds.items()}
        else:
            files = 0
            tasks_dir = os.path.join(root, layout.tasks_dir)
            for attempt in sorted(os.listdir(tasks_dir)):
                base = os.path.join(tasks_dir, attempt)
                made: set[str] = set()
                for dirpath, _, names in os.walk(base):
                    for n in names:
                        src = os.path.join(dirpath, n)
                        dst = os.path.join(dest, os.path.relpath(src, base))
                        if name == "sequential":
                            os.renames(src, dst)  # no fsync
                        else:  # RENAME_LOOP: each directory made once, then os.rename only
                            d = os.path.dirname(dst)
                            if d not in made:
                                os.makedirs(d, exist_ok=True)
                                made.add(d)
                            os.rename(src, dst)
                        files += 1
            with open(os.path.join(dest, "_SUCCESS"), "wb"):
                pass
            shutil.rmtree(os.path.join(dest, "_temporary"))
    return {
        "contender": name,
        "files": files,
        "seconds": m.wall,
        "files_per_s": files / m.wall,
        "cpu_ms_per_file": m.cpu * 1000 / files,
        "peak_rss_mb": peak_rss_mb(),
        "loop": ran_on,
        "stage_ms": stages,
    }


def verify(root: str, expected: int) -> None:
    dest = os.path.join(root, "dest")
    n = sum(len([f for f in fs if f != "_SUCCESS"]) for d, _, fs in os.walk(dest))
    if n != expected or os.path.exists(os.path.join(dest, "_temporary")):
        raise SystemExit(f"verification failed: {n} files, expected {expected}")


COLUMNS = ["contender", "files", "seconds", "files_per_s", "cpu_ms_per_file", "peak_rss_mb"]


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run(
    tasks: int,
    files: int,
    rounds: int,
    log: Any = sys.stderr,
    contenders: tuple[str, ...] = DEFAULT_CONTENDERS,
    dirs: int = 10,
    where: str | None = None,
) -> dict[str, Any]:
    """Every contender ``rounds`` times, alternating, each on a freshly prepared job;
    returns the rows, each contender's best, the ratios to the sequential loop (of the
    best rounds, and per round with median and range) and amcommit's median stage times."""
    rows = []
    for r, name in alternate(rounds, contenders):
        with scratch_dir("amc-local-", where) as root:
            anyio.run(prepare, root, tasks, files, dirs)
            if where is not None:  # a disk: the tasks' output on it first (the round measures the commit)
                os.sync()
            load = os.getloadavg()[0]
            row = run_isolated("benchmarks.local_commit", ["--worker", name, root])
            verify(root, tasks * files)
            rows.append(row | {"round": r, "verified": "exact", "load_before": load})
            print(f"round {r} {name}: {row['seconds']:.3f} s (load {load:.1f})", file=log)
    summary = best_of(rows, contenders)
    best = {x["contender"]: x for x in summary}
    seconds = {n: [x["seconds"] for x in rows if x["contender"] == n] for n in contenders}
    for x in summary:
        x["median_s"] = statistics.median(seconds[x["contender"]])
    out: dict[str, Any] = {"rows": summary, "runs": rows, "files": tasks * files, "dirs": dirs}
    if where is not None:
        out["where"] = where
        out["dir_sync_rule"] = run_isolated("benchmarks.local_commit", ["--rule", where])["rule"]
    columns = [*COLUMNS, "median_s"]
    if "sequential" in best:
        seq = best["sequential"]["seconds"]
        for x in summary:
            x["x_sequential"] = round(seq / x["seconds"], 2)
        columns.append("x_sequential")
        for name, key in (
            ("amcommit", "speedup_vs_sequential"),
            (ONE_BY_ONE, "one_by_one_vs_sequential"),
            (DURABLE, "fsync_vs_sequential"),
            (DURABLE_EACH, "fsync_each_vs_sequential"),
        ):
            if name in best:
                out[key] = seq / best[name]["seconds"]
                per_round = [s / a for s, a in zip(seconds["sequential"], seconds[name], strict=True)]
                out[key + "_per_round"] = _spread(per_round) | {"rounds": per_round}
    if RENAME_LOOP in best:  # the same ratios to the bare os.rename loop
        loop = best[RENAME_LOOP]["seconds"]
        for x in summary:
            x["x_rename_loop"] = round(loop / x["seconds"], 2)
        columns.append("x_rename_loop")
        for name in (DURABLE, DURABLE_EACH, "amcommit"):
            if name in best:
                per_round = [s / a for s, a in zip(seconds[RENAME_LOOP], seconds[name], strict=True)]
                out.setdefault("vs_rename_loop", {})[name] = (
                    {"best": loop / best[name]["seconds"]} | _spread(per_round) | {"rounds": per_round}
                )
    amc = [x["stage_ms"] for x in rows if x["contender"] == "amcommit"]
    if amc:
        out["amcommit_stage_ms_median"] = {k: statistics.median(a.get(k, 0.0) for a in amc) for k in amc[0]}
    out["load_before"] = _spread([x["load_before"] for x in rows])
    title = f"Local job commit, {tasks * files:,} files in {tasks} manifests, {dirs} directories (best of {rounds})"
    out["table"] = table(summary, columns, title)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--files", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dirs", type=int, default=10, help="partition directories (each task writes into all)")
    p.add_argument("--where", default=None, help="directory for the scratch trees (default: /dev/shm)")
    p.add_argument(
        "--contenders",
        default=",".join(DEFAULT_CONTENDERS),
        help="comma-separated, of: " + ", ".join(CONTENDERS),
    )
    p.add_argument("--worker", nargs=2, metavar=("CONTENDER", "ROOT"), help=argparse.SUPPRESS)
    p.add_argument("--rule", metavar="DIR", help=argparse.SUPPRESS)
    add_save_arg(p)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(contender(*a.worker)))
        return
    if a.rule:
        from amcommit.store.local import dir_sync_rule

        print(json.dumps({"rule": dir_sync_rule(a.rule)}))
        return
    chosen = tuple(c.strip() for c in a.contenders.split(",") if c.strip())
    unknown = set(chosen) - set(CONTENDERS)
    if unknown:
        p.error(f"unknown contenders: {', '.join(sorted(unknown))}")
    res = run(a.tasks, a.files, a.rounds, contenders=chosen, dirs=a.dirs, where=a.where)
    print(res["table"])
    if "speedup_vs_sequential" in res:
        pr = res["speedup_vs_sequential_per_round"]
        print(
            f"\namcommit is {res['speedup_vs_sequential']:.2f}x the sequential rename loop (best rounds); "
            f"per round median {pr['median']:.2f}x, range {pr['min']:.2f}-{pr['max']:.2f}x"
        )
    if "one_by_one_vs_sequential" in res:
        print(f"renaming one by one: {res['one_by_one_vs_sequential']:.2f}x (best rounds)")
    for key, what in (("fsync_vs_sequential", DURABLE), ("fsync_each_vs_sequential", DURABLE_EACH)):
        if key in res:
            pr = res[key + "_per_round"]
            print(
                f"{what}: {res[key]:.2f}x (best rounds); per round median {pr['median']:.2f}x, "
                f"range {pr['min']:.2f}-{pr['max']:.2f}x"
            )
    for name, r in res.get("vs_rename_loop", {}).items():
        print(
            f"{name} vs the bare rename loop: {r['best']:.2f}x (best rounds); per round median "
            f"{r['median']:.2f}x, range {r['min']:.2f}-{r['max']:.2f}x"
        )
    if "dir_sync_rule" in res:
        print(f"directory sync rule of {res['where']}: {res['dir_sync_rule']}")
    if "amcommit_stage_ms_median" in res:
        print("amcommit median stage ms:", res["amcommit_stage_ms_median"])
    ld = res["load_before"]
    print(f"load average before rounds: median {ld['median']:.1f}, range {ld['min']:.1f}-{ld['max']:.1f}")
    out = write_json("local_commit", {k: v for k, v in res.items() if k != "table"}, save=a.save)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
