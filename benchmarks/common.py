"""Shared benchmark helpers: measurement, tables, JSON results.

Every result JSON carries ``"run"`` (:func:`run_info`): when it was measured (UTC), on which
code (the git commit of this checkout) and on which machine. A benchmark run by hand writes
to ``benchmarks/results/tmp/`` (ignored by git); ``--save`` (:func:`add_save_arg`) writes to
``benchmarks/results/``, the tracked results that ``benchmarks/README.md`` reports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
"""The tracked results: the runs ``benchmarks/README.md`` reports."""
TMP = RESULTS / "tmp"
"""Where a benchmark run by hand writes its JSON unless asked to save it (ignored by git)."""
REPO = Path(__file__).resolve().parent.parent


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine() -> dict[str, Any]:
    """What ran the benchmark (for the results table)."""
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024 // 1024
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def git_commit(root: Path = REPO) -> str | None:
    """The short hash of the checkout's ``HEAD``: the code a benchmark measures. ``+dirty``
    is appended when ``src/`` or ``benchmarks/`` (results aside) have uncommitted changes;
    None outside a git checkout."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return None
    changed = git("status", "--porcelain", "--", "src", "benchmarks", ":(exclude)benchmarks/results")
    return f"{head}+dirty" if changed else head


def run_info() -> dict[str, Any]:
    """When, on which code and on which machine a result was measured: the ``"run"`` of
    every result JSON. ``date`` (UTC, to the minute), ``commit`` (:func:`git_commit`),
    ``machine`` (:func:`machine`, without the date) and the 1/5/15-minute load averages."""
    m = machine()
    return {"date": m.pop("date"), "commit": git_commit(), "machine": m, "load_average": load_average()}


def add_save_arg(ap: argparse.ArgumentParser) -> None:
    """``--save``: write the JSON into ``benchmarks/results/`` (the tracked results the report
    shows) instead of ``benchmarks/results/tmp/``."""
    ap.add_argument(
        "--save",
        action="store_true",
        help="write the results into benchmarks/results/ (tracked: the runs the report shows) "
        "instead of benchmarks/results/tmp/",
    )


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Measure:
    """Wall time and process CPU time of a block (``with Measure() as m: ...``)."""

    wall: float = 0.0
    cpu: float = 0.0
    _w: float = field(default=0.0, repr=False)
    _c: float = field(default=0.0, repr=False)

    def __enter__(self) -> Measure:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._w
        self.cpu = time.process_time() - self._c


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (1..99) of ``values``, interpolated between the nearest
    samples (:func:`statistics.quantiles`, inclusive method); 0.0 when there are none."""
    if len(values) < 2:
        return float(values[0]) if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[min(99, max(1, round(q))) - 1]


def table(rows: list[dict[str, Any]], columns: list[str], title: str = "") -> str:
    """A Markdown table of ``rows`` (dicts) with the given ``columns``."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            if abs(v) >= 100:
                return f"{v:,.0f}"
            if abs(v) >= 1:
                return f"{v:.2f}"
            return f"{v:.3f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    out = [f"### {title}", ""] if title else []
    out.append("| " + " | ".join(columns) + " |")
    out.append("|" + "|".join("---" for _ in columns) + "|")
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(out)


def write_json(name: str, payload: dict[str, Any], *, save: bool = False) -> Path:
    """Write ``payload`` with its :func:`run_info` as ``<name>.json``: into
    ``benchmarks/results/`` with ``save``, else into ``benchmarks/results/tmp/`` (a run by
    hand never replaces the tracked results); return the path."""
    out = RESULTS if save else TMP
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"run": run_info(), **payload}, indent=2, default=str) + "\n")
    return path


def run_isolated(
    module: str, args: Sequence[str], timeout: float = 3600, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``python -m module args`` in a fresh process (so peak RSS is its own), with
    ``env`` added to this process's environment, and return the JSON it prints on its last
    stdout line."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(Path(__file__).parent.parent),
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


async def timed_renames(store: Any, etags: Sequence[str], concurrency: int) -> tuple[float, float]:
    """Rename ``src/NNNNNN`` to ``dst/NNNNNN`` (each with its source etag) by
    ``concurrency`` workers; return (wall seconds, process CPU seconds)."""
    import anyio

    it = iter(range(len(etags)))

    async def worker() -> None:
        for i in it:
            await store.rename(f"src/{i:06d}", f"dst/{i:06d}", src_etag=etags[i], rename_id=f"bench-{i}")

    w0, c0 = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return time.perf_counter() - w0, time.process_time() - c0


def loop_env(loop: str | None) -> dict[str, str]:
    """The environment that makes amcommit run on ``loop`` (``asyncio`` / ``uvloop``, see
    :mod:`amcommit.loop`); ``None``: amcommit's own choice (uvloop where installed)."""
    if loop is None:
        return {}
    if loop not in ("asyncio", "uvloop"):
        raise ValueError(f"unknown event loop {loop!r}: asyncio or uvloop")
    return {"AMCOMMIT_UVLOOP": "1" if loop == "uvloop" else "0"}


def running_loop() -> str:
    """The event loop running this coroutine, as ``uvloop 0.21.0`` or ``asyncio``: what a
    worker really ran on (not what it was asked for)."""
    from amcommit.loop import running

    return running()


def load_average() -> list[float]:
    """The 1, 5 and 15-minute load averages (empty where unknown)."""
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return []


def alternate(rounds: int, contenders: Sequence[str]) -> Iterator[tuple[int, str]]:
    """``(round, contender)`` for every round; the order is reversed every other round, so no
    contender always runs first (or always second, on a warmer machine)."""
    for r in range(rounds):
        for name in contenders if r % 2 == 0 else tuple(reversed(contenders)):
            yield r, name


def best_of(
    rows: Sequence[dict[str, Any]], contenders: Sequence[str], key: str = "seconds"
) -> list[dict[str, Any]]:
    """Each contender's best row (smallest ``key``), in the order of ``contenders``."""
    return [min((x for x in rows if x["contender"] == n), key=lambda x: x[key]) for n in contenders]


@contextmanager
def scratch_dir(prefix: str, where: str | None = None) -> Iterator[str]:
    """A fresh temporary directory (in ``where``, else in ``/dev/shm`` where writable),
    removed afterwards."""
    base = where if where is not None else "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    root = tempfile.mkdtemp(prefix=prefix, dir=base)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
