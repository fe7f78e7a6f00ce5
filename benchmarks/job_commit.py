"""Job commit on the emulators: amcommit against the committers users have today.

    .venv/bin/python -m benchmarks.job_commit [--backends azurite,gcs] [--files 2000,20000]
        [--concurrency 8,32,128] [--rounds 1] [--seq-sample-tasks 20] [--compare-src DIR] [--save]

A job of N files (1 KiB each) in 200 task manifests is written with amcommit's task side
(setup_job, setup_task, put, commit_task) into a *fresh* emulator (Azurite,
fake-gcs-server, or ``gcsmove``: the repository's GCS double, which enforces preconditions
and has ``objects.move``, the rename path of a real GCS bucket; emulators' cost grows with
the objects they ever held), then one contender
commits it, in its own fresh process (``python -m benchmarks.job_commit --worker``), so
that its CPU time and peak RSS are its own. The output is then listed and compared with
what the tasks wrote: every file at its destination with its size, nothing else there,
``_SUCCESS`` present, ``_temporary`` gone. Contenders, interleaved (the order alternates
from round to round):

* ``amcommit c=N``: ``commit_job`` with ``io_threads=N`` (and a store limiter of N);
* ``v1 sequential``: Hadoop's FileOutputCommitter v1 job commit as users run it with the
  official SDK: list the task directories, rename (copy + delete) each file, one at a
  time, write ``_SUCCESS``, delete ``_temporary``. With ``--seq-sample-tasks K`` it commits
  only the first K tasks' files and reports that rate (marked "sample");
* ``thread pool 32``: the Hadoop manifest committer's algorithm in Python with the SDK: 32
  threads load the manifests, rename the files, delete the job directory;
* ``raw c=N``: the emulator's ceiling for amcommit's operation mix: a minimal aiohttp loop
  sending exactly the requests amcommit's store sends per rename (no retries, limiter,
  recovery), over the precomputed list of renames. Only a rename phase, so compare it
  with the *rename* rate of the others (``renames/s``), not with whole-job ``files/s``;
* ``amcommit c=N [name]``: with ``--compare-src DIR``, also amcommit imported from the
  source tree ``DIR`` (put first on ``PYTHONPATH``; e.g. main's ``src``), interleaved with
  the others: a before/after comparison in one run.

Measured per run: whole-job files/s, rename-phase renames/s, client CPU ms per committed
file (process CPU time of the commit / files), peak RSS of the contender's process, p50/p99
latency of one file's rename, retries, recovered renames, emulator CPU ms per file.
Results: ``benchmarks/results/tmp/job_commit.json``; with ``--save``
``benchmarks/results/job_commit.json`` (tracked).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.clients import ALL_KINDS, KINDS, Target, emulator, server_cpu
from benchmarks.common import (
    Measure,
    add_save_arg,
    loop_env,
    peak_rss_mb,
    percentile,
    run_isolated,
    running_loop,
    table,
    write_json,
)


def own_peak_rss_mb() -> float:
    """Peak RSS of this process's own address space (``VmHWM``), in MB.

    Not ``getrusage().ru_maxrss``: Linux carries ``maxrss`` across ``execve``, so a child
    started by subprocess (vfork + exec) reports at least its *parent's* peak RSS."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


JOB = "202611220100_0007"
DEST = "warehouse/events"
TASKS = 200
FILE_SIZE = 1024
SDK_THREADS = 32
PARTITIONS = 10


@dataclass
class Job:
    """What the tasks wrote: renames (src, dst, etag, size) in task order."""

    files: int
    entries: list[tuple[str, str, str, int]] = field(default_factory=list)
    task_ends: list[int] = field(default_factory=list)  # entries index after each task

    def expected(self, sample_tasks: int | None = None) -> dict[str, int]:
        n = len(self.entries) if sample_tasks is None else self.task_ends[sample_tasks - 1]
        return {dst: size for _, dst, _, size in self.entries[:n]}


# -- setup (orchestrator side) ---------------------------------------------------------


async def _setup(t: Target, files: int) -> Job:
    import anyio

    from amcommit.api import setup_job
    from amcommit.committer import commit_task, setup_task
    from benchmarks.clients import amcommit_store

    store = amcommit_store(t, 64)
    layout = await setup_job(store, DEST, JOB)
    per = max(1, files // TASKS)
    job = Job(files=per * TASKS)
    data = os.urandom(FILE_SIZE)
    written: list[list[tuple[str, str, str, int]]] = [[] for _ in range(TASKS)]
    sem = anyio.Semaphore(48)

    async def task(ti: int) -> None:
        attempt = f"attempt_{JOB}_m_{ti:06d}_0"
        work = await setup_task(store, layout, attempt)

        async def put(i: int) -> None:
            rel = f"day={i % PARTITIONS:02d}/part-{ti:05d}-{i:05d}.bin"
            async with sem:
                info = await store.put(f"{work}/{rel}", data)
            written[ti].append((f"{work}/{rel}", f"{DEST}/{rel}", info.etag or "", FILE_SIZE))

        async with anyio.create_task_group() as tg:
            for i in range(per):
                tg.start_soon(put, i)
        await commit_task(store, layout, f"task_{JOB}_m_{ti:06d}", attempt)

    tsem = anyio.Semaphore(16)

    async def bounded(ti: int) -> None:
        async with tsem:
            await task(ti)

    async with anyio.create_task_group() as tg:
        for ti in range(TASKS):
            tg.start_soon(bounded, ti)
    await store.aclose()
    for w in written:
        job.entries.extend(sorted(w))
        job.task_ends.append(len(job.entries))
    return job


def setup(t: Target, files: int) -> Job:
    import anyio

    return anyio.run(_setup, t, files)  # type: ignore[no-any-return]


async def _verify(t: Target, job: Job, sample_tasks: int | None, whole_job: bool) -> str:
    """'exact' if the destination holds exactly what it should, else what is wrong."""
    from benchmarks.clients import amcommit_store

    store = amcommit_store(t, 32)
    found: dict[str, int] = {}
    temp = 0
    success = False
    async with store:
        async for info in store.list(DEST):
            if info.path.startswith(f"{DEST}/_temporary/"):
                temp += 1
            elif info.path == f"{DEST}/_SUCCESS":
                success = True
            else:
                found[info.path] = info.size
    want = job.expected(sample_tasks)
    problems = []
    missing = want.keys() - found.keys()
    extra = found.keys() - want.keys()
    wrong = sum(1 for k in want.keys() & found.keys() if found[k] != want[k])
    if missing:
        problems.append(f"{len(missing)} missing")
    if extra:
        problems.append(f"{len(extra)} unexpected")
    if wrong:
        problems.append(f"{wrong} wrong size")
    if sample_tasks is None and whole_job:
        if not success:
            problems.append("no _SUCCESS")
        if temp:
            problems.append(f"{temp} left in _temporary")
    return "exact" if not problems else "; ".join(problems)


def verify(t: Target, job: Job, sample_tasks: int | None = None, whole_job: bool = True) -> str:
    """``whole_job=False``: only the renamed files are checked (the raw ceiling renames,
    it writes no ``_SUCCESS`` and cleans nothing up)."""
    import anyio

    return anyio.run(_verify, t, job, sample_tasks, whole_job)  # type: ignore[no-any-return]


# -- contenders (worker side, each in a fresh process) ---------------------------------


def _result(files: int, m: Measure, rename_s: float, lat: Sequence[float], **extra: Any) -> dict[str, Any]:
    return {
        "files": files,
        "wall_s": round(m.wall, 3),
        "files_per_s": round(files / m.wall, 1) if m.wall else 0.0,
        "rename_s": round(rename_s, 3),
        "renames_per_s": round(len(lat) / rename_s, 1) if rename_s else 0.0,
        "cpu_s": round(m.cpu, 3),
        "cpu_ms_per_file": round(m.cpu * 1000 / files, 3) if files else 0.0,
        "peak_rss_mb": round(own_peak_rss_mb(), 1),
        "p50_ms": round(percentile(lat, 50) * 1000, 2),
        "p99_ms": round(percentile(lat, 99) * 1000, 2),
        "retries": 0,
        "recovered": 0,
        **extra,
    }


def work_amcommit(
    t: Target,
    conc: int,
    lean: bool = False,
    defaults: bool = False,
    io_threads: int = 0,
    store_opts: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from amcommit import loop
    from amcommit.api import commit_job
    from amcommit.committer import CommitterConfig
    from benchmarks.clients import TimedStore, amcommit_default_store, amcommit_store

    async def main() -> dict[str, Any]:
        # defaults: literally CommitterConfig() and the store's default options (with
        # ``store_opts`` / ``io_threads``: those settings changed, the rest default)
        inner = amcommit_default_store(t, **(store_opts or {})) if defaults else amcommit_store(t, conc, lean)
        store = TimedStore(inner)
        if defaults:
            cfg = CommitterConfig(io_threads=io_threads) if io_threads else CommitterConfig()
        else:
            cfg = CommitterConfig(io_threads=conc)
        with Measure() as m:
            report = await commit_job(store, DEST, JOB, config=cfg)  # type: ignore[arg-type]
        await inner.aclose()
        retries = inner.iostats.counters.get("store_io_retry", 0) + report.job_stats.counters.get(
            "store_io_retry", 0
        )
        throttled = inner.iostats.counters.get("store_io_throttled", 0) + report.job_stats.counters.get(
            "store_io_throttled", 0
        )
        res = _result(
            report.files,
            m,
            report.stage_seconds.get("rename_files", 0.0),
            store.latencies,
            stages={k: round(v, 3) for k, v in report.stage_seconds.items()},
            throttled=throttled,
            store_limiter=inner.limiter.describe(),
        )
        gate = getattr(inner, "write_limiter", None)
        if gate is not None:
            res["write_gate"] = gate.describe()
        res["retries"] = retries
        res["recovered"] = report.recovered_renames
        res["requests_per_file"] = round(store_requests(inner) / report.files, 3) if report.files else 0.0
        if report.files:
            res["rename_cpu_ms_per_file"] = round(store.rename_cpu * 1000 / report.files, 3)
        res["loop"] = running_loop()
        return res

    return loop.run(main)


def store_requests(store: Any) -> int:
    """HTTP requests an amcommit store sent (answered or failed), from its IO statistics:
    every request is recorded once under its operation; on GCS the requests are the
    ``gcs_*`` operations (``stat``/``put``/``rename``/... there time whole calls)."""
    ops = store.iostats._ops
    gcs = store.capabilities.name == "gcs"
    return sum(st.count + st.fail_count for op, st in ops.items() if not gcs or op.startswith("gcs_"))


RAW_REQUESTS = {"azurite": 2, "gcs": 4, "gcsmove": 2}
"""Requests per rename of the raw loop (``benchmarks.clients.raw_renamer``)."""


def work_raw(t: Target, conc: int, entries: list[list[Any]]) -> dict[str, Any]:
    import anyio

    from amcommit import loop
    from benchmarks.clients import raw_renamer

    lat: list[float] = []

    async def main() -> Measure:
        async with raw_renamer(t, conc) as rename:
            it = iter(entries)

            async def worker() -> None:
                for src, dst, etag, _size in it:
                    t0 = time.perf_counter()
                    await rename(src, dst, etag)
                    lat.append(time.perf_counter() - t0)

            with Measure() as m:
                async with anyio.create_task_group() as tg:
                    for _ in range(conc):
                        tg.start_soon(worker)
        ran_on.append(running_loop())
        return m

    ran_on: list[str] = []
    m = loop.run(main)
    res = _result(len(entries), m, m.wall, lat, loop=ran_on[0], requests_per_file=RAW_REQUESTS[t.kind])
    res["rename_cpu_ms_per_file"] = res["cpu_ms_per_file"]  # it is only a rename phase
    return res


def _layout() -> Any:
    from amcommit.committer.layout import JobLayout

    return JobLayout(DEST, JOB)


def work_threadpool(t: Target, threads: int) -> dict[str, Any]:
    """The manifest committer's job commit, in Python, with the SDK and a thread pool."""
    from benchmarks.clients import SdkClient, object_name

    lay = _layout()
    sdk = SdkClient(t, threads)
    lat: list[float] = []

    def rename(e: tuple[str, str, str]) -> None:
        t0 = time.perf_counter()
        sdk.rename(*e)
        lat.append(time.perf_counter() - t0)

    with ThreadPoolExecutor(threads) as pool, Measure() as m:
        names = [n for n, _, _ in sdk.list(lay.manifests_dir + "/") if n.endswith("-manifest.json")]
        entries: list[tuple[str, str, str]] = []
        for body in pool.map(sdk.get, names):
            man = json.loads(body)
            entries.extend((object_name(f["s"]), object_name(f["d"]), f["e"]) for f in man["files"])
        r0 = time.perf_counter()
        list(pool.map(rename, entries))
        rename_s = time.perf_counter() - r0
        sdk.put(f"{DEST}/_SUCCESS", json.dumps({"success": True, "files": len(entries)}).encode())
        leftovers = [n for n, _, _ in sdk.list(lay.temp_root + "/")]
        list(pool.map(sdk.delete, leftovers))
    sdk.close()
    return _result(len(entries), m, rename_s, lat, requests_per_file=1 if t.kind == "gcsmove" else 2)


def work_sequential(t: Target, sample_tasks: int | None) -> dict[str, Any]:
    """FileOutputCommitter v1's job commit with the SDK: one file at a time."""
    from benchmarks.clients import SdkClient

    lay = _layout()
    sdk = SdkClient(t, 1)
    lat: list[float] = []
    with Measure() as m:
        listed = sdk.list(lay.tasks_dir + "/")
        attempts = sorted({n[len(lay.tasks_dir) + 1 :].split("/", 1)[0] for n, _, _ in listed})
        if sample_tasks is not None:
            keep = set(attempts[:sample_tasks])
            listed = [x for x in listed if x[0][len(lay.tasks_dir) + 1 :].split("/", 1)[0] in keep]
        r0 = time.perf_counter()
        for name, etag, _size in listed:
            _attempt, rel = name[len(lay.tasks_dir) + 1 :].split("/", 1)
            t0 = time.perf_counter()
            sdk.rename(name, f"{DEST}/{rel}", etag)
            lat.append(time.perf_counter() - t0)
        rename_s = time.perf_counter() - r0
        if sample_tasks is None:
            sdk.put(f"{DEST}/_SUCCESS", b"")
            for name, _, _ in sdk.list(lay.temp_root + "/"):
                sdk.delete(name)
    sdk.close()
    return _result(len(listed), m, rename_s, lat, sample=sample_tasks is not None)


def worker_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    t = Target.from_json(spec["target"])
    kind, conc = spec["contender"], spec.get("concurrency", 0)
    os.environ.update(loop_env(spec.get("loop")))  # before any loop starts
    if kind == "amcommit":
        res = work_amcommit(
            t,
            conc,
            bool(spec.get("lean")),
            bool(spec.get("defaults")),
            int(spec.get("io_threads") or 0),
            dict(spec.get("store_opts") or {}),
        )
    elif kind == "raw":
        res = work_raw(t, conc, spec["entries"])
    elif kind == "threadpool":
        res = work_threadpool(t, conc)
    elif kind == "sequential":
        res = work_sequential(t, spec.get("sample_tasks"))
    else:
        raise SystemExit(f"unknown contender {kind!r}")
    print(json.dumps(res))


# -- orchestration ---------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    kind: str  # amcommit | raw | threadpool | sequential
    concurrency: int = 0
    sample_tasks: int | None = None
    lean: bool = False  # amcommit with 2-request renames (see clients.amcommit_store)
    loop: str | None = None  # amcommit/raw: asyncio | uvloop; None: amcommit.loop's choice
    defaults: bool = False  # amcommit with CommitterConfig() and default store options
    src: str | None = None  # amcommit imported from this source tree (``--compare-src``)
    io_threads: int = 0  # defaults: with CommitterConfig(io_threads=N) (0: the default)
    store_opts: tuple[tuple[str, Any], ...] = ()  # defaults: with these store options

    @property
    def label(self) -> str:
        on = f" ({self.loop})" if self.loop else ""
        if self.src:
            on += f" [{Path(self.src).parent.name or self.src}]"
        if self.kind == "amcommit" and self.defaults:
            extra = "".join(f" {k}={str(v).lower()}" for k, v in self.store_opts)
            extra += f" io_threads={self.io_threads}" if self.io_threads else ""
            return "amcommit defaults" + extra + on
        if self.kind == "amcommit":
            return f"amcommit c={self.concurrency}" + (" lean (2 req)" if self.lean else "") + on
        if self.kind == "raw":
            return f"raw ceiling c={self.concurrency}{on}"
        if self.kind == "threadpool":
            return f"thread pool {self.concurrency}"
        return "v1 sequential" + (f" (sample: {self.sample_tasks} tasks)" if self.sample_tasks else "")


def run_one(
    kind: str,
    files: int,
    c: Contender,
    *,
    proxy: Any = None,
    timeout: float = 3600,
    log: Any = None,
) -> dict[str, Any]:
    """Fresh emulator, job setup, one contender in a fresh process, verification.

    ``proxy(target) -> context manager yielding (proxied target, stats())`` puts a proxy
    between the contender and the emulator (setup and verification go direct).
    """
    with emulator(kind) as (t, pid), tempfile.TemporaryDirectory(prefix="amcommit-bench-") as tmp:
        t_setup = time.perf_counter()
        job = setup(t, files)
        setup_s = time.perf_counter() - t_setup
        spec: dict[str, Any] = {
            "contender": c.kind,
            "concurrency": c.concurrency,
            "sample_tasks": c.sample_tasks,
            "lean": c.lean,
            "defaults": c.defaults,
            "loop": c.loop,
            "io_threads": c.io_threads,
            "store_opts": dict(c.store_opts),
        }
        if c.kind == "raw":
            spec["entries"] = job.entries
        path = Path(tmp) / "spec.json"
        proxy_stats: dict[str, Any] = {}
        cm = proxy(t) if proxy is not None else _direct(t)
        with cm as (ct, stats):
            spec["target"] = ct.to_json()
            path.write_text(json.dumps(spec))
            s0 = server_cpu(pid)
            env = None
            if c.src:  # this contender's amcommit comes from another source tree
                env = {"PYTHONPATH": os.pathsep.join(filter(None, (c.src, os.environ.get("PYTHONPATH"))))}
            try:
                res = run_isolated("benchmarks.job_commit", ["--worker", str(path)], timeout=timeout, env=env)
            except Exception as e:  # a failed contender is a finding: keep going
                res = _failed(e)
            s1 = server_cpu(pid)
            proxy_stats = stats()
        res["verified"] = (
            verify(t, job, c.sample_tasks, c.kind != "raw")
            if "error" not in res
            else f"FAILED: {res['error']}"
        )
    res.update(
        backend=kind,
        job_files=job.files,
        contender=c.label,
        kind=c.kind,
        concurrency=c.concurrency,
        setup_s=round(setup_s, 1),
    )
    if s0 is not None and s1 is not None and res["files"]:
        res["server_cpu_ms_per_file"] = round((s1 - s0) * 1000 / res["files"], 3)
    if proxy_stats:
        res["proxy"] = proxy_stats
    if log is not None:
        print(
            f"  {kind} {job.files:>6} {c.label:<34} {res['files_per_s']:>8,.0f} files/s "
            f"{res['renames_per_s']:>8,.0f} renames/s {res['cpu_ms_per_file']:.3f} CPU ms/file "
            f"{res['peak_rss_mb']:.0f} MB  {res['verified']}",
            file=log,
            flush=True,
        )
    return res


def _failed(e: BaseException) -> dict[str, Any]:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return {
        **{k: 0.0 for k in ("files_per_s", "renames_per_s", "cpu_ms_per_file", "peak_rss_mb")},
        **{k: 0.0 for k in ("wall_s", "rename_s", "cpu_s", "p50_ms", "p99_ms")},
        "files": 0,
        "retries": 0,
        "recovered": 0,
        "error": lines[-1][:300] if lines else repr(e),
    }


class _direct:
    def __init__(self, t: Target) -> None:
        self.t = t

    def __enter__(self) -> tuple[Target, Any]:
        return self.t, dict

    def __exit__(self, *exc: object) -> None:
        return None


def contenders(
    concurrency: Sequence[int], seq_sample: int | None, compare_src: str | None = None
) -> list[Contender]:
    """The plan; with ``compare_src`` (a ``src`` directory, e.g. of another checkout) an
    ``amcommit`` contender per concurrency runs that tree's amcommit too, interleaved."""
    out = [Contender("amcommit", c) for c in concurrency]
    if compare_src:
        out += [Contender("amcommit", c, src=compare_src) for c in concurrency]
    out += [Contender("raw", c) for c in concurrency]
    out += [Contender("threadpool", SDK_THREADS), Contender("sequential", 0, seq_sample)]
    return out


def run_matrix(
    backends: Sequence[str],
    sizes: Sequence[int],
    concurrency: Sequence[int] | dict[int, Sequence[int]],
    rounds: int = 1,
    seq_sample_above: int = 5000,
    seq_sample_tasks: int = 20,
    log: Any = sys.stderr,
    kinds: Sequence[str] | None = None,
    compare_src: str | None = None,
) -> list[dict[str, Any]]:
    """Every backend x size x contender (``kinds``: a subset of amcommit, raw,
    threadpool, sequential; ``compare_src``: see :func:`contenders`), ``rounds`` times,
    interleaved; one row per run."""
    runs: list[dict[str, Any]] = []
    for kind in backends:
        for files in sizes:
            sample = seq_sample_tasks if files > seq_sample_above else None
            conc = concurrency[files] if isinstance(concurrency, dict) else concurrency
            plan = [c for c in contenders(conc, sample, compare_src) if kinds is None or c.kind in kinds]
            for rnd in range(rounds):
                order = plan if rnd % 2 == 0 else list(reversed(plan))
                for c in order:
                    r = run_one(kind, files, c, log=log)
                    r["round"] = rnd
                    runs.append(r)
    return runs


def run_cases(
    cases: Sequence[Sequence[Any]],
    *,
    rounds: int = 1,
    seq_sample_above: int = 5000,
    seq_sample_tasks: int = 20,
    partial: Path | None = None,
    log: Any = sys.stderr,
) -> list[dict[str, Any]]:
    """Like :func:`run_matrix` for explicit cases ``(backend, files, concurrency list,
    contender kinds or None)``, in order; every run is also appended to ``partial``
    (JSON lines) as soon as it ends, so an interrupted suite loses nothing."""
    runs: list[dict[str, Any]] = []
    for kind, files, conc, kinds in cases:
        sample = seq_sample_tasks if files > seq_sample_above else None
        plan = [c for c in contenders(conc, sample) if kinds is None or c.kind in kinds]
        for rnd in range(rounds):
            for c in plan if rnd % 2 == 0 else list(reversed(plan)):
                r = run_one(kind, files, c, log=log)
                r["round"] = rnd
                runs.append(r)
                if partial is not None:
                    with open(partial, "a") as f:
                        f.write(json.dumps(r, default=str) + "\n")
    return runs


def _median_of(rs: list[dict[str, Any]], key: str) -> float | None:
    import statistics

    vals = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median over rounds per (backend, size, contender), with ratios to the baselines."""
    import statistics

    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["backend"], r["job_files"], r["contender"]), []).append(r)
    rows = []
    for (backend, files, label), rs in groups.items():
        med = sorted(rs, key=lambda r: r["files_per_s"])[len(rs) // 2]
        row = {
            "backend": backend,
            "files": files,
            "contender": label,
            "kind": med["kind"],
            "concurrency": med["concurrency"],
            "files_per_s": statistics.median(r["files_per_s"] for r in rs),
            "renames_per_s": statistics.median(r["renames_per_s"] for r in rs),
            "cpu_ms_per_file": statistics.median(r["cpu_ms_per_file"] for r in rs),
            "rename_cpu_ms_per_file": _median_of(rs, "rename_cpu_ms_per_file"),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "p50_ms": med["p50_ms"],
            "p99_ms": med["p99_ms"],
            "retries": med["retries"],
            "recovered": med["recovered"],
            "server_cpu_ms_per_file": med.get("server_cpu_ms_per_file"),
            "requests_per_file": med.get("requests_per_file"),
            "verified": "exact" if all(r["verified"] == "exact" for r in rs) else med["verified"],
            "runs": len(rs),
            "sample": bool(med.get("sample")),
        }
        rows.append(row)
    # ratios: amcommit vs raw at the same concurrency (rename phase), CPU vs thread pool
    by = {(r["backend"], r["files"], r["contender"]): r for r in rows}
    for r in rows:
        if r["kind"] == "amcommit":
            raw = by.get((r["backend"], r["files"], f"raw ceiling c={r['concurrency']}"))
            if "lean" in r["contender"]:
                raw = None  # the raw loop sends the default mix, not the lean one
            tp = by.get((r["backend"], r["files"], f"thread pool {SDK_THREADS}"))
            if raw and raw["renames_per_s"]:
                r["pct_of_raw"] = round(100 * r["renames_per_s"] / raw["renames_per_s"], 1)
            if raw and raw["cpu_ms_per_file"] and r.get("rename_cpu_ms_per_file"):
                # rename phase against rename phase: the raw loop loads no manifests and
                # cleans nothing up
                r["cpu_vs_raw"] = round(r["rename_cpu_ms_per_file"] / raw["cpu_ms_per_file"], 3)
            if tp and tp["cpu_ms_per_file"]:
                r["cpu_vs_threadpool"] = round(r["cpu_ms_per_file"] / tp["cpu_ms_per_file"], 3)
            if tp and tp["files_per_s"]:
                r["x_threadpool"] = round(r["files_per_s"] / tp["files_per_s"], 2)
    order = {"amcommit": 0, "raw": 1, "threadpool": 2, "sequential": 3}
    rows.sort(key=lambda r: (r["backend"], r["files"], order[r["kind"]], r["concurrency"]))
    return rows


COLUMNS = [
    "backend",
    "files",
    "contender",
    "files_per_s",
    "renames_per_s",
    "pct_of_raw",
    "requests_per_file",
    "cpu_ms_per_file",
    "rename_cpu_ms_per_file",
    "cpu_vs_raw",
    "cpu_vs_threadpool",
    "peak_rss_mb",
    "p50_ms",
    "p99_ms",
    "retries",
    "server_cpu_ms_per_file",
    "verified",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--backends", default=",".join(KINDS), help=f"some of {','.join(ALL_KINDS)}")
    ap.add_argument("--contenders", default=None, help="some of amcommit,raw,threadpool,sequential")
    ap.add_argument("--files", default="2000,20000")
    ap.add_argument("--concurrency", default="8,32,128")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seq-sample-tasks", type=int, default=20)
    ap.add_argument(
        "--compare-src",
        default=None,
        help="also run amcommit from this src directory (e.g. another checkout's), interleaved: "
        "a before/after comparison in one run",
    )
    add_save_arg(ap)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main(a.worker)
        return 0
    runs = run_matrix(
        a.backends.split(","),
        [int(x) for x in a.files.split(",")],
        [int(x) for x in a.concurrency.split(",")],
        rounds=a.rounds,
        seq_sample_tasks=a.seq_sample_tasks,
        kinds=a.contenders.split(",") if a.contenders else None,
        compare_src=a.compare_src,
    )
    rows = summarize(runs)
    print(table(rows, COLUMNS, "Job commit on the emulators"))
    out = write_json("job_commit", {"benchmark": "job_commit", "rows": rows, "runs": runs}, save=a.save)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
