"""A job commit's renames in one process against several (``processes``, issue 27 item 2),
on a store with simulated latency and no server CPU.

**The store** (:class:`SimStore`): the synthetic store of :mod:`benchmarks.scale` (task
manifests formatted on request, no data kept) whose every rename is two requests (a copy
and a delete, as on Blob or GCS). Each request takes a slot and a token of the store's
limiter (the HTTP stores' own: an in-flight limit, and the Azure account's 20,000
requests/s as the rate: the budget the coordinator shares out to the workers), then spends
``request_cpu`` of client CPU (a busy loop holding the GIL, standing in for what an HTTP
client does per request: building and signing the request, writing it, parsing the
answer) and sleeps ``latency`` (the network and the service: no CPU on this machine).

**Why it is representative.** A real store's CPU is not on the client's machine: what
bounds one committing process is its own CPU per file (measured on Azure: ~2,400 files/s
on one core, 0.42 ms of client CPU per file, two requests per rename), once enough renames
are in flight to hide the latency. The default ``request_cpu`` (0.19 ms per request) plus
the engine's own real per-file work (the spool, the rename's recovery logic, the retry
layer, both limiters, progress; and with workers the hand-out of units and tokens over
the pipes) gives about that per file in one process (``cpu_ms_per_file`` below says what
it was). Emulators cannot measure this: their own CPU shares the 2 cores.

Each run is a fresh process (``--worker``): wall and CPU time of the whole commit and of
its rename stage, CPU of the process and its rename workers (``RUSAGE_CHILDREN``), peak
RSS of the committing process and of each worker (``VmHWM``, sampled while it runs).
Contenders alternate between rounds. ``--scale N`` instead measures N files with no
latency, no client work per request and no rate limit (the engine's own cost and memory,
with and without sharding).

    python -m benchmarks.shard_commit                       # 80,000 files, 20 ms, 2 rounds
    python -m benchmarks.shard_commit --files 4000 --rounds 1 --out /tmp/x
    python -m benchmarks.shard_commit --scale 1000000       # time and RSS at 1M files
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from amcommit import loop as amcommit_loop
from amcommit.api import commit_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.store.base import RenameResult, StoreRecipe
from amcommit.store.limits import Limiter
from benchmarks.common import add_save_arg, alternate, load_average, run_info, run_isolated, table
from benchmarks.job_commit import own_peak_rss_mb
from benchmarks.scale import JOB, SyntheticStore

AZURE_ACCOUNT_REQUESTS = 20_000.0
DEFAULTS: dict[str, Any] = {
    "files": 80_000,
    "manifests": 400,
    "latency_ms": 20.0,
    "request_cpu_ms": 0.19,
    "io_threads": 256,
    "rounds": 2,
}


def spin(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU (holding the GIL)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class SimStore(SyntheticStore):
    """The synthetic store with two requests per rename, each through the store's limiter,
    ``request_cpu`` of client CPU and ``latency`` of sleep (see the module doc). Opened
    again in the rename workers from its recipe."""

    def __init__(
        self,
        layout: JobLayout,
        manifests: int,
        per: int,
        *,
        latency: float,
        request_cpu: float,
        concurrency: int,
        rate: float | None,
        limiter: Limiter | None = None,
    ) -> None:
        super().__init__(layout, manifests, per)
        self.small[layout.job_marker] = b"{}"
        self.latency = latency
        self.request_cpu = request_cpu
        self.limiter = limiter or Limiter(max_concurrency=concurrency, rate=rate)
        self.recipe = StoreRecipe(
            type(self),
            (layout, manifests, per),
            {"latency": latency, "request_cpu": request_cpu, "concurrency": concurrency, "rate": rate},
        )
        self.requests = 0

    async def _request(self) -> None:
        lim = self.limiter
        async with lim.slot():
            self.requests += 1
            if self.request_cpu:
                spin(self.request_cpu)
            if self.latency:
                await anyio.sleep(self.latency)
            elif not self.requests % 256:
                await anyio.lowlevel.checkpoint()
        lim.succeeded()

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        await self._request()  # the copy
        await self._request()  # the delete of the source
        return RenameResult(dst, src_etag)


class ChildRss:
    """Peak RSS (``VmHWM``) of this process's rename workers, sampled every 0.1 s in a
    thread."""

    def __init__(self) -> None:
        self.peaks: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.1):
            try:
                kids = Path(f"/proc/{me}/task/{me}/children").read_text().split()
            except OSError:
                continue
            for k in kids:
                try:
                    # only once it runs the worker: between fork and exec a child still
                    # shows its parent's memory
                    if b"shard_worker" not in Path(f"/proc/{k}/cmdline").read_bytes():
                        continue
                    for line in Path(f"/proc/{k}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            mb = int(line.split()[1]) / 1024
                            self.peaks[int(k)] = max(self.peaks.get(int(k), 0.0), mb)
                except (OSError, ValueError):
                    pass

    def __enter__(self) -> ChildRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def one_run(cfg: dict[str, Any]) -> dict[str, Any]:
    """One job commit (in this process, and its rename workers)."""
    manifests = cfg["manifests"]
    per = cfg["files"] // manifests
    layout = JobLayout("warehouse/events", JOB)
    # the class as the workers import it (run as ``-m``, this module is ``__main__``)
    sim: type[SimStore] = importlib.import_module("benchmarks.shard_commit").SimStore
    store = sim(
        layout,
        manifests,
        per,
        latency=cfg["latency_ms"] / 1000,
        request_cpu=cfg["request_cpu_ms"] / 1000,
        concurrency=2 * cfg["io_threads"],
        rate=cfg.get("rate", AZURE_ACCOUNT_REQUESTS),
    )
    config = CommitterConfig(
        io_threads=cfg["io_threads"], processes=cfg["processes"], destination_lock=False, success_filenames=10
    )
    r0, k0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with ChildRss() as kids:
        report = await commit_job(store, layout.dest, JOB, config=config)
    wall = time.perf_counter() - t0
    r1, k1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    own_cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    kids_cpu = (k1.ru_utime + k1.ru_stime) - (k0.ru_utime + k0.ru_stime)
    rename_s = report.stage_seconds["rename_files"]
    files = report.files
    assert report.success and report.renamed == files == per * manifests, report
    return {
        "processes": cfg["processes"],
        "files": files,
        "rename_s": round(rename_s, 2),
        "files_per_s": round(files / rename_s),
        "total_s": round(wall, 2),
        "commit_files_per_s": round(files / wall),
        "cpu_ms_per_file": round((own_cpu + kids_cpu) * 1000 / files, 3),
        # cores the scheduler gave the run (its CPU over its wall time): on a shared Linux
        # machine one session's processes share one fair share (autogroup)
        "cores_used": round((own_cpu + kids_cpu) / wall, 2),
        "coordinator_cpu_s": round(own_cpu, 2),
        "workers_cpu_s": round(kids_cpu, 2),
        "peak_rss_mb": round(own_peak_rss_mb(), 1),
        "worker_peak_rss_mb": round(max(kids.peaks.values()), 1) if kids.peaks else None,
        "requests_in_coordinator": store.requests,
        "rename_processes": report.job_stats.counters.get("committer_rename_processes", 1),
        # from a worker's start to its first message (interpreter, imports, store), mean
        "worker_start_s": round(report.job_stats.mean_ms("rename_worker_start") / 1000, 2) or None,
    }


def run(cfg: dict[str, Any], contenders: list[int], log: Any = None) -> dict[str, Any]:
    """Every contender (a number of processes) for ``cfg["rounds"]`` alternating rounds,
    each in a fresh process; the rows, the best of each and their ratio."""
    runs = []
    for rnd, n in alternate(cfg["rounds"], [str(c) for c in contenders]):
        before = load_average()
        row = run_isolated("benchmarks.shard_commit", ["--worker", json.dumps({**cfg, "processes": int(n)})])
        row |= {"round": rnd, "load_before": before, "load_after": load_average()}
        runs.append(row)
        if log:
            log(f"round {rnd}, {n} process(es): {row}")
    best = [max((r for r in runs if r["processes"] == n), key=lambda r: r["files_per_s"]) for n in contenders]
    one = best[0]
    ratios = {f"x{b['processes']}_vs_1": round(b["files_per_s"] / one["files_per_s"], 2) for b in best[1:]}
    return {"config": cfg, "runs": runs, "best": best, **ratios}


COLUMNS = [
    "processes",
    "round",
    "files",
    "rename_s",
    "files_per_s",
    "total_s",
    "commit_files_per_s",
    "cpu_ms_per_file",
    "cores_used",
    "peak_rss_mb",
    "worker_peak_rss_mb",
    "worker_start_s",
    "load_before",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--files", type=int, default=DEFAULTS["files"])
    ap.add_argument("--manifests", type=int, default=DEFAULTS["manifests"])
    ap.add_argument("--latency-ms", type=float, default=DEFAULTS["latency_ms"])
    ap.add_argument("--request-cpu-ms", type=float, default=DEFAULTS["request_cpu_ms"])
    ap.add_argument("--io-threads", type=int, default=DEFAULTS["io_threads"])
    ap.add_argument("--rounds", type=int, default=DEFAULTS["rounds"])
    ap.add_argument(
        "--rate", type=float, default=AZURE_ACCOUNT_REQUESTS, help="the store's requests/s (0: no limit)"
    )
    ap.add_argument("--processes", default="1,2", help="contenders: numbers of processes")
    ap.add_argument("--scale", type=int, help="N files, no latency, no client work per request")
    ap.add_argument("--out", help="write the JSON here (default benchmarks/results[/tmp])")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    add_save_arg(ap)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(amcommit_loop.run(one_run, json.loads(a.worker))))
        return
    cfg: dict[str, Any] = {
        "files": a.files,
        "manifests": a.manifests,
        "latency_ms": a.latency_ms,
        "request_cpu_ms": a.request_cpu_ms,
        "io_threads": a.io_threads,
        "rounds": a.rounds,
        "rate": a.rate or None,
    }
    name = "shard_commit"
    if a.scale:
        cfg |= {"files": a.scale, "manifests": a.scale // 100, "latency_ms": 0.0, "request_cpu_ms": 0.0}
        cfg |= {"io_threads": 64, "rounds": 1, "rate": None}
        name = "shard_commit_scale"
    result = run(cfg, [int(x) for x in a.processes.split(",")], log=lambda m: print(m, file=sys.stderr))
    print(table(result["runs"], COLUMNS))
    for k, v in result.items():
        if k.startswith("x"):
            print(f"{k}: {v}")
    payload = {"run": run_info(), **result}
    if a.out:
        path = Path(a.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    else:
        from benchmarks.common import write_json

        path = write_json(name, result, save=a.save)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
