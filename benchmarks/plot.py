"""The results plots (PNG, matplotlib from the ``bench`` extra): one per scenario.

    .venv/bin/python -m benchmarks.plot [benchmarks/results/benchmarks.json] [out dir]

Reads ``benchmarks.json`` (nothing is rerun) and writes, next to it by default:

* ``emulators.png``: renames per second in the rename phase and client CPU per file, on
  Azurite and fake-gcs-server, for the largest job measured on each;
* ``latency.png``: files per second with 50 ms added to every request;
* ``throttle.png``: files per second when 10% of the requests are throttled;
* ``spark_commit.png``: local job commit time against Hadoop's committers;
* ``spark_write.png``: rows per second of whole Spark writes.

Every plot is horizontal bars, one colour per kind of contender (amcommit, the raw client
ceiling, a thread pool, the sequential v1-style loop, Hadoop), the value printed at the end
of each bar, and in the title what is measured and which way is better.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter

COLORS = {
    "amcommit": "#1f77b4",
    "raw": "#9a9a9a",
    "threadpool": "#ff7f0e",
    "sequential": "#d62728",
    "hadoop": "#7b4fa6",
    "spark": "#7b4fa6",
}
LEGEND = {
    "amcommit": "amcommit",
    "raw": "raw client (ceiling)",
    "threadpool": "thread pool",
    "sequential": "sequential (v1 style)",
    "hadoop": "Hadoop / Spark",
}
BACKENDS = {"azurite": "Azurite", "gcs": "fake-gcs-server", "gcsmove": "GCS double (objects.move)"}

Bar = tuple[str, float, str, str]
"""label, value, value as printed, kind (a key of :data:`COLORS`)."""


def kind_of(label: str) -> str:
    """The colour key of a contender's label."""
    lo = label.lower()
    for key, kind in (
        ("amcommit", "amcommit"),
        ("raw", "raw"),
        ("thread", "threadpool"),
        ("sequential", "sequential"),
        ("hadoop", "hadoop"),
        ("spark", "hadoop"),
        ("rdd", "hadoop"),
    ):
        if key in lo:
            return kind
    return "raw"


def bars(ax: Axes, rows: list[Bar], title: str, xlabel: str, *, log: bool = False) -> None:
    """One horizontal bar per row, top to bottom in the given order, values at the ends."""
    labels = [r[0] for r in rows]
    values = [r[1] for r in rows]
    y = list(range(len(rows)))[::-1]
    ax.barh(y, values, color=[COLORS.get(r[3], "#9a9a9a") for r in rows], height=0.7)
    ax.set_yticks(y, labels)
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("log")
    top = max(values, default=1.0) or 1.0
    ax.set_xlim(right=top * (3.0 if log else 1.18))
    for yy, (_, v, text, _) in zip(y, rows, strict=True):
        ax.text(v * (1.06 if log else 1.0) + (0 if log else top * 0.01), yy, text, va="center", fontsize=9)
    if log or top >= 1000:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    ax.grid(axis="x", color="#e6e6e6")
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend(fig: Any, kinds: set[str]) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=COLORS[k], label=LEGEND[k]) for k in LEGEND if k in kinds]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)


def _machine(payload: dict[str, Any]) -> str:
    m = payload.get("machine", {})
    return f"{m.get('date', '')}, {m.get('cpus', '?')} cores / {m.get('memory_gib', '?')} GiB"


def _figure(n: int, rows_per_panel: int, payload: dict[str, Any], title: str) -> tuple[Any, list[Axes]]:
    height = 1.3 + n * (0.75 + 0.36 * rows_per_panel) + 0.5
    fig, axes = plt.subplots(n, 1, figsize=(9, height), squeeze=False)
    fig.suptitle(f"{title}\n{_machine(payload)}", x=0.02, ha="left", fontsize=13)
    return fig, [a for row in axes for a in row]


def _save(fig: Any, kinds: set[str], path: Path) -> Path:
    _legend(fig, kinds)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_emulators(payload: dict[str, Any], path: Path) -> Path | None:
    rows = payload.get("results", {}).get("emulators", {}).get("rows", [])
    if not rows:
        return None
    panels: list[tuple[list[Bar], str, str]] = []
    for backend in sorted({r["backend"] for r in rows}):
        biggest = max(r["files"] for r in rows if r["backend"] == backend)
        rs = [r for r in rows if r["backend"] == backend and r["files"] == biggest]
        name = BACKENDS.get(backend, backend)
        panels.append(
            (
                [(r["contender"], r["renames_per_s"], f"{r['renames_per_s']:,.0f}", r["kind"]) for r in rs],
                f"{name}, {biggest:,} files: renames per second (higher is better)",
                "renames/s in the rename phase",
            )
        )
        panels.append(
            (
                [
                    (r["contender"], r["cpu_ms_per_file"], f"{r['cpu_ms_per_file']:.2f}", r["kind"])
                    for r in rs
                ],
                f"{name}, {biggest:,} files: client CPU per file (lower is better)",
                "client CPU ms per file",
            )
        )
    fig, axes = _figure(len(panels), max(len(p[0]) for p in panels), payload, "Job commit on emulators")
    kinds: set[str] = set()
    for ax, (bs, title, xlabel) in zip(axes, panels, strict=True):
        bars(ax, bs, title, xlabel)
        kinds |= {b[3] for b in bs}
    return _save(fig, kinds, path)


def _files_per_s(scenario: str, title: str) -> Callable[[dict[str, Any], Path], Path | None]:
    def draw(payload: dict[str, Any], path: Path) -> Path | None:
        rows = payload.get("results", {}).get(scenario, {}).get("rows", [])
        if not rows:
            return None
        backends = sorted({r["backend"] for r in rows})
        fig, axes = _figure(len(backends), max(len(rows), 1), payload, title)
        kinds: set[str] = set()
        for ax, backend in zip(axes, backends, strict=True):
            rs = [r for r in rows if r["backend"] == backend]
            bs = [(r["contender"], r["files_per_s"], f"{r['files_per_s']:,.0f}", r["kind"]) for r in rs]
            spread = max(b[1] for b in bs) / max(min(b[1] for b in bs), 1e-9)
            bars(
                ax,
                bs,
                f"{BACKENDS.get(backend, backend)}, {rs[0]['files']:,} files: files per second (higher is better)",
                "files/s, whole job commit" + (" (log scale)" if spread > 20 else ""),
                log=spread > 20,
            )
            kinds |= {b[3] for b in bs}
        return _save(fig, kinds, path)

    return draw


def plot_spark_commit(payload: dict[str, Any], path: Path) -> Path | None:
    rows = payload.get("results", {}).get("spark", {}).get("job_commit", [])
    if not rows:
        return None
    fig, axes = _figure(1, len(rows), payload, "Local job commit against Hadoop's committers")
    bs = [
        (r["committer"], r["job_commit_ms"], f"{r['job_commit_ms']:,.0f} ms", kind_of(r["committer"]))
        for r in rows
    ]
    bars(axes[0], bs, f"{rows[0]['files']:,} files: job commit time (lower is better)", "milliseconds")
    return _save(fig, {b[3] for b in bs}, path)


def plot_spark_write(payload: dict[str, Any], path: Path) -> Path | None:
    rows = payload.get("results", {}).get("spark", {}).get("writes", [])
    if not rows:
        return None
    fig, axes = _figure(1, len(rows), payload, "Whole Spark writes (local files)")
    bs = [(r["writer"], r["rows_per_s"], f"{r['rows_per_s']:,.0f}", kind_of(r["writer"])) for r in rows]
    bars(axes[0], bs, f"{rows[0]['rows']:,} rows: rows per second (higher is better)", "rows/s, job included")
    return _save(fig, {b[3] for b in bs}, path)


PLOTS: dict[str, Callable[[dict[str, Any], Path], Path | None]] = {
    "emulators": plot_emulators,
    "latency": _files_per_s("latency", "Job commit with 50 ms added to every request"),
    "throttle": _files_per_s("throttle", "Job commit with 10% of the requests throttled"),
    "spark_commit": plot_spark_commit,
    "spark_write": plot_spark_write,
}
"""Scenario plot name -> drawing function (None when the results lack that scenario)."""


def plot_all(payload: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write ``<name>.png`` for every scenario present in ``payload``; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in PLOTS.items():
        p = draw(payload, out / f"{name}.png")
        if p is not None:
            written.append(p)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path(__file__).parent / "results" / "benchmarks.json"
    dst = Path(args[1]) if len(args) > 1 else src.parent
    for p in plot_all(json.loads(src.read_text()), dst):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
