"""The results plots (PNG, matplotlib from the ``bench`` extra): one per scenario of the
benchmark report (``benchmarks/README.md``), drawn from the recorded results (nothing is rerun).

    .venv/bin/python -m benchmarks.plot [results dir | benchmarks.json] [out dir]

From the suite's ``benchmarks.json`` (:data:`PLOTS`, also drawn by ``python -m benchmarks``):

* ``emulators.png``: renames per second in the rename phase and client CPU per file, on
  Azurite, fake-gcs-server and the GCS double, for the largest job measured on each;
* ``latency.png``: files per second with 50 ms added to every request;
* ``throttle.png``: files per second when 10% of the requests are throttled;
* ``requests_per_rename.png``: requests per committed file, amcommit against the raw loop and
  the SDK thread pool;
* ``local.png``: local job commit time against a sequential rename loop;
* ``spark_commit.png``: local job commit time against Hadoop's committers;
* ``spark_write.png``: rows per second of whole Spark writes.

From the other result files next to it (:data:`FILE_PLOTS`; skipped where a file is missing):
``scale.png``, ``table_commit.png``, ``table_changes.png``, ``table_upsert.png``, ``table_footers.png``,
``stream_commit.png``, ``event_loop.png``, ``azurite_before_after.png``, ``store_renames.png``, and issue 26's
``direct_commit.png``, ``direct_latency.png``, ``direct_spark.png``, ``stream_direct.png``.

Bars are horizontal, one colour per kind of contender (amcommit, the raw client ceiling, a
thread pool, the sequential v1-style loop, Hadoop / Spark / hudi-rs), the value printed at
the end of each bar; stacked bars split a time into its stages. Each plot's title says what is
measured and which way is better; under it the run's date, git commit and machine (the
result's ``run``, :func:`benchmarks.common.run_info`).
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
from matplotlib.ticker import FuncFormatter, NullFormatter

COLORS = {
    "amcommit": "#1f77b4",
    "before": "#aec7e8",
    "raw": "#9a9a9a",
    "threadpool": "#ff7f0e",
    "sequential": "#d62728",
    "hadoop": "#7b4fa6",
    "spark": "#7b4fa6",
}
LEGEND = {
    "amcommit": "amcommit",
    "before": "amcommit before the change",
    "raw": "raw client (ceiling)",
    "threadpool": "thread pool",
    "sequential": "sequential (v1 style)",
    "hadoop": "Hadoop / Spark",
}
STAGES = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#7f7f7f",
    "#aec7e8",
    "#ffbb78",
]
"""Colours of the segments of stacked bars, in order of first appearance."""
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


def bars(
    ax: Axes,
    rows: list[Bar],
    title: str,
    xlabel: str,
    *,
    log: bool = False,
    spread: list[tuple[float, float]] | None = None,
) -> None:
    """One horizontal bar per row, top to bottom in the given order, values at the ends;
    ``spread``: each row's (lowest, highest) over the rounds, drawn as an error bar."""
    labels = [r[0] for r in rows]
    values = [r[1] for r in rows]
    y = list(range(len(rows)))[::-1]
    xerr = None
    if spread is not None:
        xerr = [[max(0.0, v - lo) for v, (lo, _) in zip(values, spread, strict=True)]]
        xerr.append([max(0.0, hi - v) for v, (_, hi) in zip(values, spread, strict=True)])
        values_top = [hi for _, hi in spread]
    else:
        values_top = values
    ax.barh(y, values, color=[COLORS.get(r[3], "#9a9a9a") for r in rows], height=0.7, xerr=xerr, capsize=3)
    ax.set_yticks(y, labels)
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("log")
    top = max(values_top, default=1.0) or 1.0
    ax.set_xlim(right=top * (3.0 if log else 1.18))
    for yy, vt, (_, _, text, _) in zip(y, values_top, rows, strict=True):
        ax.text(vt * (1.06 if log else 1.0) + (0 if log else top * 0.01), yy, text, va="center", fontsize=9)
    if log or top >= 1000:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    if log:
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(axis="x", color="#e6e6e6")
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


Stacks = list[tuple[str, list[tuple[str, float]]]]
"""Rows of stacked bars: label, then (segment name, value) from left to right."""


def segment_colors(*panels: Stacks) -> dict[str, str]:
    """A colour per segment name, in order of first appearance over ``panels``."""
    names: list[str] = []
    for rows in panels:
        for _, segs in rows:
            names += [n for n, _ in segs if n not in names]
    return {n: STAGES[i % len(STAGES)] for i, n in enumerate(names)}


def stacked(ax: Axes, rows: Stacks, colors: dict[str, str], title: str, xlabel: str, unit: str = "") -> None:
    """One horizontal bar per row, split into its named segments (``colors``: the same
    colour for a name in every panel), the row's total at its end."""
    y = list(range(len(rows)))[::-1]
    totals = [sum(v for _, v in segs) for _, segs in rows]
    top = max(totals, default=1.0) or 1.0
    for yy, (_, segs) in zip(y, rows, strict=True):
        left = 0.0
        for n, v in segs:
            ax.barh(yy, v, left=left, color=colors[n], height=0.7)
            left += v
        ax.text(left + top * 0.01, yy, f"{left:,.1f}{unit}", va="center", fontsize=9)
    ax.set_yticks(y, [r[0] for r in rows])
    ax.set_xlim(right=top * 1.18)
    ax.set_title(title, loc="left", fontsize=11, fontweight="bold")
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", color="#e6e6e6")
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend(fig: Any, kinds: set[str], labels: dict[str, str] | None = None) -> None:
    from matplotlib.patches import Patch

    names = {**LEGEND, **(labels or {})}
    handles = [Patch(color=COLORS[k], label=names[k]) for k in names if k in kinds]
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)


def run_of(payload: dict[str, Any], scenario: str | None = None) -> dict[str, Any]:
    """The run (date, commit, machine) of a result: the scenario's own ``run`` in the suite's
    results, else the file's ``run``, else the older files' ``machine`` (and ``date``)."""
    if scenario is not None:
        own = payload.get("results", {}).get(scenario, {}).get("run")
        if own:
            return dict(own)
    if payload.get("run"):
        return dict(payload["run"])
    m = dict(payload.get("machine") or {})
    return {"date": m.pop("date", payload.get("date")), "commit": None, "machine": m}


def describe(runs: list[dict[str, Any]]) -> str:
    """One line for a plot's title: date (or range), commit(s) and machine of its runs."""
    dates = sorted({r.get("date") or "?" for r in runs})
    date = dates[0]
    if len(dates) > 1:
        first, last = dates[0], dates[-1]
        same_day = first[:10] == last[:10] and first.endswith(" UTC") and last.endswith(" UTC")
        date = f"{first[:-4]}–{last[11:]}" if same_day else f"{first} to {last}"
    commits = list(dict.fromkeys(str(r.get("commit") or "?") for r in runs))
    m = runs[0].get("machine") or {} if runs else {}
    where = f"{m.get('cpus', '?')} cores / {m.get('memory_gib', '?')} GiB, Python {m.get('python', '?')}"
    return f"{date}, commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}; {where}"


def _figure(
    n: int, rows_per_panel: int, runs: list[dict[str, Any]], title: str, width: float = 9
) -> tuple[Any, list[Axes]]:
    height = 1.3 + n * (0.75 + 0.36 * rows_per_panel) + 0.5
    fig, axes = plt.subplots(n, 1, figsize=(width, height), squeeze=False)
    fig.suptitle(f"{title}\n{describe(runs)}", x=0.02, y=1 - 0.1 / height, ha="left", va="top", fontsize=13)
    return fig, [a for row in axes for a in row]


def _save(
    fig: Any,
    kinds: set[str],
    path: Path,
    labels: dict[str, str] | None = None,
    segments: dict[str, str] | None = None,
) -> Path:
    """Legend (of the ``kinds`` of contenders, or of stacked ``segments``) at the bottom,
    then the PNG."""
    bottom = 0.05 if kinds else 0.0
    if segments:
        from matplotlib.patches import Patch

        ncol = 2
        handles = [Patch(color=c, label=n) for n, c in segments.items()]
        fig.legend(handles=handles, loc="lower center", ncol=ncol, frameon=False, fontsize=9)
        bottom = (0.3 + 0.22 * -(-len(handles) // ncol)) / fig.get_size_inches()[1]
    else:
        _legend(fig, kinds, labels)
    fig.tight_layout(rect=(0, bottom, 1, 1))
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
    fig, axes = _figure(
        len(panels), max(len(p[0]) for p in panels), [run_of(payload, "emulators")], "Job commit on emulators"
    )
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
        fig, axes = _figure(len(backends), max(len(rows), 1), [run_of(payload, scenario)], title)
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
    fig, axes = _figure(
        1, len(rows), [run_of(payload, "spark")], "Local job commit against Hadoop's committers"
    )
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
    fig, axes = _figure(1, len(rows), [run_of(payload, "spark")], "Whole Spark writes (local files)")
    bs = [(r["writer"], r["rows_per_s"], f"{r['rows_per_s']:,.0f}", kind_of(r["writer"])) for r in rows]
    bars(axes[0], bs, f"{rows[0]['rows']:,} rows: rows per second (higher is better)", "rows/s, job included")
    return _save(fig, {b[3] for b in bs}, path)


def plot_local(payload: dict[str, Any], path: Path) -> Path | None:
    loc = payload.get("results", {}).get("local", {})
    rows = loc.get("rows", [])
    if not rows:
        return None
    fig, axes = _figure(
        1, len(rows), [run_of(payload, "local")], "Local job commit against a sequential rename loop"
    )
    bs = [
        (r["contender"], r["seconds"] * 1000, f"{r['seconds'] * 1000:,.0f} ms", kind_of(r["contender"]))
        for r in rows
    ]
    title = f"{loc.get('files', rows[0]['files']):,} files in 200 manifests: job commit time, best round (lower is better)"
    bars(axes[0], bs, title, "milliseconds")
    return _save(fig, {b[3] for b in bs}, path)


def plot_requests(payload: dict[str, Any], path: Path) -> Path | None:
    rows = payload.get("results", {}).get("emulators", {}).get("rows", [])
    rows = [
        r for r in rows if r.get("requests_per_file") and r["files"] == 2000 and r["concurrency"] in (0, 32)
    ]
    backends = sorted({r["backend"] for r in rows})
    if not backends:
        return None
    per = {b: [r for r in rows if r["backend"] == b] for b in backends}
    fig, axes = _figure(
        len(backends), max(len(v) for v in per.values()), [run_of(payload, "emulators")], "Requests per file"
    )
    kinds: set[str] = set()
    for ax, b in zip(axes, backends, strict=True):
        bs = [
            (r["contender"], r["requests_per_file"], f"{r['requests_per_file']:.2f}", r["kind"])
            for r in per[b]
        ]
        bars(
            ax, bs, f"{BACKENDS.get(b, b)}, 2,000 files: requests per committed file (whole job)", "requests"
        )
        kinds |= {x[3] for x in bs}
    return _save(fig, kinds, path)


PLOTS: dict[str, Callable[[dict[str, Any], Path], Path | None]] = {
    "emulators": plot_emulators,
    "latency": _files_per_s("latency", "Job commit with 50 ms added to every request"),
    "throttle": _files_per_s("throttle", "Job commit with 10% of the requests throttled"),
    "requests_per_rename": plot_requests,
    "local": plot_local,
    "spark_commit": plot_spark_commit,
    "spark_write": plot_spark_write,
}
"""Scenario plot name -> drawing function (None when the results lack that scenario)."""


# -- plots of the other result files --------------------------------------------------


def _load(results: Path, *names: str) -> list[dict[str, Any]] | None:
    """The JSON result files ``names`` in ``results``; None if any is missing."""
    paths = [results / n for n in names]
    if not all(p.exists() for p in paths):
        return None
    return [json.loads(p.read_text()) for p in paths]


def plot_scale(results: Path, path: Path) -> Path | None:
    got = _load(results, "scale.json")
    if got is None:
        return None
    (main,) = got
    extra = _load(results, "scale_no_numpy.json")
    runs = [run_of(main)] + ([run_of(extra[0])] if extra else [])
    rows = [(r, "amcommit") for r in main["rows"]] + [
        (r, "before") for r in (extra[0]["rows"] if extra else [])
    ]

    def label(r: dict[str, Any], kind: str) -> str:
        return f"{r['files'] / 1e6:g}M files" + (", no numpy" if kind == "before" else "")

    fig, axes = _figure(
        2, len(rows), runs, "Scale: job commit of synthetic manifests, store without I/O cost"
    )
    bars(
        axes[0],
        [(label(r, k), r["engine_entries_per_s"], f"{r['engine_entries_per_s']:,.0f}", k) for r, k in rows],
        "manifest entries loaded per second by the engine (higher is better)",
        "entries/s",
    )
    bars(
        axes[1],
        [(label(r, k), r["peak_rss_mb"], f"{r['peak_rss_mb']:,.0f} MB", k) for r, k in rows],
        "peak RSS of the committing process (lower is better)",
        "MB",
    )
    return _save(
        fig, {k for _, k in rows}, path, {"amcommit": "amcommit (numpy index)", "before": "without numpy"}
    )


STAGE_NAMES = {
    "check_order": "order check",
    "load_manifests": "load manifests",
    "plan_commit": "plan",
    "prepare_dirs": "prepare directories",
    "rename_files": "renames",
    "partition_meta": "partition metadata",
    "publish": "publish instant",
    "save_success": "_SUCCESS",
    "cleanup": "cleanup",
}


def plot_table_commit(results: Path, path: Path) -> Path | None:
    got = _load(results, "table_commit.json")
    if got is None:
        return None
    (d,) = got
    rows = []
    for r in d["best"]:
        st = r["stage_ms"]
        segs = [(STAGE_NAMES.get(k, k), v) for k, v in st.items() if v >= 0.05]
        other = r["seconds"] * 1000 - sum(v for _, v in segs)
        segs.append(("other (event loop, store, lock, journal)", max(0.0, other)))
        rows.append((f"{r['contender']} commit", segs))
    colors = segment_colors(rows)
    fig, axes = _figure(
        1, 2 + len(colors) // 2, [run_of(d)], "Hudi table commit against a plain commit (local files)"
    )
    title = f"{d['files']:,} files in 20 manifests, best of {d['rounds']}: time by stage (lower is better)"
    stacked(axes[0], rows, colors, title, "milliseconds", " ms")
    return _save(fig, set(), path, segments=colors)


def plot_table_changes(results: Path, path: Path) -> Path | None:
    got = _load(results, "table_changes.json")
    if got is None:
        return None
    (d,) = got
    rows = [r for r in d["rows"] if r["instants"] == d["instants"]]
    fig, axes = _figure(len(rows), 4, [run_of(d)], "Reading a table's changes between two instants")
    for ax, r in zip(axes, rows, strict=True):
        bs = [
            ("amcommit Timeline.changes()", r["amcommit_ms"], f"{r['amcommit_ms']:,.0f} ms", "amcommit"),
            ("hudi-rs incremental file slices", r["hudi_rs_ms"], f"{r['hudi_rs_ms']:,.0f} ms", "hadoop"),
            (
                "hudi-rs, table already open",
                r["hudi_rs_warm_ms"],
                f"{r['hudi_rs_warm_ms']:,.0f} ms",
                "hadoop",
            ),
            ("recursive listing of the table", r["list_table_ms"], f"{r['list_table_ms']:,.0f} ms", "raw"),
        ]
        title = (
            f"{r['instants']:,} instants x {d['files']} files: a range of {r['range']} instant"
            f"{'s' if r['range'] > 1 else ''} (lower is better)"
        )
        bars(ax, bs, title, "milliseconds (log scale)", log=True)
    return _save(fig, {"amcommit", "hadoop", "raw"}, path, {"hadoop": "hudi-rs", "raw": "listing"})


def plot_table_upsert(results: Path, path: Path) -> Path | None:
    got = _load(results, "table_upsert.json")
    if got is None:
        return None
    (d,) = got
    panels = list(dict.fromkeys((r["backend"], r["scenario"]) for r in d["summary"]))
    title = f"Upsert against rewriting the whole table ({d['rows_in_table']:,} rows, {d['files']} files)"
    fig, axes = _figure(len(panels), 2, [run_of(d)], title)
    names = {"local": "local files", "gcs": "fake-gcs-server", "gcs+50ms": "fake-gcs +50 ms"}
    for ax, (be, sc) in zip(axes, panels, strict=True):
        rows = [r for r in d["summary"] if (r["backend"], r["scenario"]) == (be, sc)]
        bs = [
            (
                f"{r['contender']} ({r['files_rewritten']} files rewritten)",
                r["seconds"],
                f"{r['seconds']:.2f} s ({r['over_whole']:.2f}x)",
                "amcommit" if r["contender"] == "upsert" else "raw",
            )
            for r in rows
        ]
        title = f"{names.get(be, be)}, {sc}: {rows[0]['keys']:,} keys updated (lower is better)"
        bars(ax, bs, title, "seconds")
    return _save(fig, {"amcommit", "raw"}, path, {"amcommit": "upsert", "raw": "whole rewrite"})


def plot_table_footers(results: Path, path: Path) -> Path | None:
    """Issue 36: file sizes, then per backend the footer pass's and the upsert's time, of
    sized bloom filters against the fixed 60,000-entry filter."""
    got = _load(results, "table_footers.json")
    if got is None:
        return None
    (d,) = got
    backends = list(dict.fromkeys(r["backend"] for r in d["summary"]))
    title = f"Bloom filters sized to each file's keys ({d['rows_in_table']:,} rows, {d['files']} files)"
    fig, axes = _figure(1 + len(backends), 6, [run_of(d)], title)
    kind = {"sized": "amcommit", "fixed": "raw"}
    sizes = [
        (
            f"{r['contender']}, {r['rows']:,} row{'s' if r['rows'] > 1 else ''} in {r['files']} file{'s' if r['files'] > 1 else ''}",
            r["file_bytes"] / 1000,
            f"{r['file_bytes'] / 1000:,.1f} KB (filter {r['filter_bytes'] / 1000:,.1f} KB)",
            kind[r["contender"]],
        )
        for r in sorted(d["sizes"], key=lambda r: (r["rows"], r["contender"] != "fixed"))
    ]
    bars(axes[0], sizes, "File sizes (lower is better)", "KB (log scale)", log=True)
    names = {"local": "local files", "gcs": "fake-gcs-server"}
    for ax, be in zip(axes[1:], backends, strict=True):
        rows = [r for r in d["summary"] if r["backend"] == be]
        bs = [
            (
                f"footer pass, {r['contender']}",
                r["index_ms"],
                f"{r['index_ms']:,.0f} ms, {r['footer_bytes'] / 1e6:.2f} MB read",
                kind.get(r["contender"], "before"),
            )
            for r in rows
        ]
        bs += [
            (
                f"upsert, {r['contender']}",
                1000 * r["upsert_s"],
                f"{r['upsert_s']:.2f} s",
                kind[r["contender"]],
            )
            for r in rows
            if r.get("upsert_s") is not None
        ]
        bars(ax, bs, f"{names.get(be, be)}: late batch, medians (lower is better)", "milliseconds")
    return _save(
        fig,
        {"amcommit", "raw", "before"},
        path,
        {"amcommit": "sized", "raw": "fixed 60,000 entries", "before": "fixed, the reader before"},
    )


def plot_stream(results: Path, path: Path) -> Path | None:
    got = _load(results, "stream_commit.json")
    if got is None:
        return None
    (d,) = got
    panels: list[Stacks] = []
    for r in d["rows"]:
        panels.append(
            [
                (
                    "amcommit sink",
                    [
                        ("Spark hands the batch to the Python worker", r["amcommit_handoff_ms"]),
                        ("amcommit: commit() entered to batch visible", r["amcommit_enter_to_visible_ms"]),
                    ],
                ),
                (
                    "Spark file sink",
                    [("file sink: its commit in the driver's JVM", r["parquet_after_tasks_ms"])],
                ),
            ]
        )
    colors = segment_colors(*panels)
    title = "Streaming micro-batches: last task finished to batch visible"
    fig, axes = _figure(len(panels), 3, [run_of(d)], title)
    for ax, r, rows in zip(axes, d["rows"], panels, strict=True):
        what = f"{r['files_per_batch']} files per batch: medians (lower is better)"
        stacked(ax, rows, colors, what, "milliseconds", " ms")
    return _save(fig, set(), path, segments=colors)


def plot_event_loop(results: Path, path: Path) -> Path | None:
    got = _load(results, "event_loop.json", "event_loop_gcs_c8.json", "event_loop_azurite.json")
    if got is None:
        return None
    rows = []
    for d in got:
        conc = d.get("config", {}).get("concurrency")
        for r in d["rows"]:
            if "ratio" not in r["contender"]:
                continue
            where = (
                "local files"
                if r["backend"] == "local"
                else f"{BACKENDS.get(r['backend'], r['backend'])}, c={conc}"
            )
            who = r["contender"].split(":")[0]
            rows.append((f"{who}: {where}, {r['files']:,} files", r, kind_of(who)))
    title = "uvloop against asyncio's event loop (same job)"
    fig, axes = _figure(2, len(rows), [run_of(d) for d in got], title, width=11)
    for ax, key, what in (
        (axes[0], "best_files_per_s", "files/s, uvloop / asyncio (above 1: uvloop faster)"),
        (axes[1], "best_cpu_ms_per_file", "client CPU per file, uvloop / asyncio (below 1: uvloop cheaper)"),
    ):
        bars(ax, [(lbl, r[key], f"{r[key]:.2f}", k) for lbl, r, k in rows], what, "ratio of the best rounds")
        ax.axvline(1.0, color="#444444", linewidth=1)
    return _save(fig, {k for _, _, k in rows}, path, {"raw": "raw aiohttp loop"})


def _median_spread(values: list[float]) -> tuple[float, tuple[float, float]]:
    import statistics

    return statistics.median(values), (min(values), max(values))


def plot_azurite(results: Path, path: Path) -> Path | None:
    got = _load(results, "azurite_batch_before_after.json", "azurite_cpu_before_after.json")
    if got is None:
        return None
    batch, cpu = got
    last = [r for r in batch["runs"] if r.get("after_commit") == batch["run"]["commit"]]
    b_rows = [
        ("amcommit c=8 (after: Blob Batch)", "amcommit c=8", "amcommit"),
        ("amcommit c=8 (before)", "amcommit c=8 [main]", "before"),
        ("raw Copy + Delete loop c=8", "raw ceiling c=8", "raw"),
    ]
    c_rows = [
        ("amcommit c=8 (after)", "after", "amcommit", 8),
        ("amcommit c=8 (before)", "before", "before", 8),
        ("raw loop c=8", "raw", "raw", 8),
        ("amcommit c=32 (after)", "after", "amcommit", 32),
        ("amcommit c=32 (before)", "before", "before", 32),
        ("raw loop c=32", "raw", "raw", 32),
    ]
    title = "Azurite: client CPU per file, before and after"
    fig, axes = _figure(2, 6, [run_of(batch), run_of(cpu)], title, width=11)
    kinds: set[str] = set()
    bs, spread = [], []
    for label, contender, kind in b_rows:
        med, sp = _median_spread([r["cpu_ms_per_file"] for r in last if r["contender"] == contender])
        bs.append((label, med, f"{med:.3f}", kind))
        spread.append(sp)
    title = (
        f"Blob Batch deletes ({batch['run']['commit']} vs {batch['run']['before_commit']}), 2,000 files: "
        "median and range of 5 rounds (lower is better)"
    )
    bars(axes[0], bs, title, "client CPU ms per file, whole job", spread=spread)
    kinds |= {b[3] for b in bs}
    bs, spread = [], []
    for label, tag, kind, conc in c_rows:
        vals = [r["cpu_ms_per_file"] for r in cpu["runs"] if r.get("tag") == tag and r["concurrency"] == conc]
        med, sp = _median_spread(vals)
        bs.append((label, med, f"{med:.3f}", kind))
        spread.append(sp)
    title = (
        f"Signing and send path ({cpu['run']['commit']} vs {cpu['run']['before_commit']}), loaded machine: "
        "median and range of 5 rounds (lower is better)"
    )
    bars(axes[1], bs, title, "client CPU ms per file, whole job", spread=spread)
    kinds |= {b[3] for b in bs}
    return _save(fig, kinds, path, {"raw": "raw client loop"})


def plot_store_renames(results: Path, path: Path) -> Path | None:
    got = _load(results, "azure_rename.json", "gcs_rename.json")
    if got is None:
        return None
    panels = [(got[0], "Azurite: Blob renames"), (got[1], "fake-gcs-server: GCS renames")]
    fig, axes = _figure(
        2,
        max(len(d["rows"]) for d, _ in panels),
        [run_of(d) for d, _ in panels],
        "Store-level renames against the official SDKs",
        width=11,
    )
    kinds: set[str] = set()
    for ax, (d, name) in zip(axes, panels, strict=True):
        bs = []
        for r in d["rows"]:
            sdk = not r["client"].startswith(("BlobStore", "GcsStore"))
            bs.append(
                (
                    f"{r['client']} c={r['concurrency']}",
                    r["client_cpu_ms_per_rename"],
                    f"{r['client_cpu_ms_per_rename']:.2f}",
                    "threadpool" if sdk else "amcommit",
                )
            )
        bars(ax, bs, f"{name}, {d['params']['n']:,} renames: client CPU per rename (lower is better)", "ms")
        kinds |= {b[3] for b in bs}
    return _save(fig, kinds, path, {"amcommit": "amcommit store", "threadpool": "official SDK (threads)"})


def plot_shard(results: Path, path: Path) -> Path | None:
    """Renames in one process against two (``shard_commit.json``): files/s of every round;
    with ``shard_commit_scale.json``, the time and peak RSS at scale."""
    got = _load(results, "shard_commit.json")
    if got is None:
        return None
    (main,) = got
    scale = _load(results, "shard_commit_scale.json")
    runs = [run_of(main)] + ([run_of(scale[0])] if scale else [])
    fig, axes = _figure(
        2 if scale else 1,
        max(len(main["runs"]), 2),
        runs,
        "Renames in one process and in two, simulated latency, no server CPU",
    )

    def kind(r: dict[str, Any]) -> str:
        return "amcommit" if r["processes"] > 1 else "before"

    cfg = main["config"]
    bars(
        axes[0],
        [
            (
                f"{r['processes']} process{'es' if r['processes'] > 1 else ''}, round {r['round']}",
                r["files_per_s"],
                f"{r['files_per_s']:,} files/s, {r['cpu_ms_per_file']} ms CPU/file",
                kind(r),
            )
            for r in main["runs"]
        ],
        f"{cfg['files']:,} files, {cfg['latency_ms']:g} ms per request: rename stage files/s (higher is better)",
        "files/s",
    )
    if scale:
        rows = scale[0]["runs"]
        bars(
            axes[1],
            [
                (
                    f"{r['files'] / 1e6:g}M files, {r['processes']} process(es)",
                    r["total_s"],
                    f"{r['total_s']:,.0f} s, {r['peak_rss_mb']:,.0f} MB"
                    + (
                        f" (+{r['worker_peak_rss_mb']:,.0f} MB a worker)"
                        if r.get("worker_peak_rss_mb")
                        else ""
                    ),
                    kind(r),
                )
                for r in rows
            ],
            "no latency, no client work per request: whole commit (lower is better), peak RSS",
            "seconds",
        )
    return _save(
        fig, {kind(r) for r in main["runs"]}, path, {"amcommit": "two processes", "before": "one process"}
    )


# -- issue 26: table commits that copy nothing -----------------------------------------

DIRECT_KINDS = {"direct": "amcommit", "staged": "before", "plain": "raw"}
DIRECT_LEGEND = {
    "amcommit": "table, direct (files written in place)",
    "before": "table, staged (renamed at commit)",
    "raw": "plain commit (renamed at commit)",
}


def _seconds_bars(
    rows: list[dict[str, Any]], label: Callable[[dict[str, Any]], str]
) -> tuple[list[Bar], Any]:
    bs: list[Bar] = [
        (label(r), r["seconds"], f"{r['seconds']:.2f} s", DIRECT_KINDS[r["contender"]]) for r in rows
    ]
    return bs, [(r["min_s"], r["max_s"]) for r in rows]


def plot_direct_commit(results: Path, path: Path) -> Path | None:
    got = _load(results, "direct_commit.json")
    if got is None:
        return None
    (d,) = got
    big = max(r["files"] for r in d["rows"])
    backends = list(dict.fromkeys(r["backend"] for r in d["rows"]))
    fig, axes = _figure(len(backends) + 1, 4, [run_of(d)], "Table commits that copy nothing: the job commit")
    for ax, be in zip(axes, backends, strict=False):
        rows = [r for r in d["rows"] if r["backend"] == be and r["files"] == big and r.get("seconds")]
        bs, spread = _seconds_bars(rows, lambda r: r["contender"])
        failed = [
            r["contender"]
            for r in d["rows"]
            if r["backend"] == be and r["files"] == big and not r.get("seconds")
        ]
        bs += [(f"{k}: every run failed", 0.0, "failed", DIRECT_KINDS[k]) for k in failed]
        spread += [(0.0, 0.0) for _ in failed]
        name = "local files" if be == "local" else BACKENDS.get(be, be)
        title = f"{name}, {big:,} files in {d['tasks']} tasks: job commit, median and range of {d['rounds']} (lower is better)"
        bars(ax, bs, title, "seconds", spread=spread)
    req: Stacks = []
    for r in d["rows"]:
        if r["contender"] == "plain" or not r.get("seconds"):
            continue
        name = "local" if r["backend"] == "local" else BACKENDS.get(r["backend"], r["backend"])
        segs = [
            ("other mutating requests", float(r["other_requests"])),
            ("marker removal", float(r["marker_requests"])),
        ]
        req.append((f"{name} {r['contender']} {r['files']:,}", segs))
    colors = segment_colors(req)
    stacked(
        axes[-1],
        req,
        colors,
        "mutating requests of the job commit, a batch call = 1: other (blue) + marker removal (orange)",
        "requests",
    )
    return _save(fig, {"amcommit", "before", "raw"}, path, DIRECT_LEGEND)


def plot_direct_latency(results: Path, path: Path) -> Path | None:
    got = _load(results, "direct_latency.json")
    if got is None:
        return None
    (d,) = got
    rows = sorted(d["rows"], key=lambda r: (r["files"], r["contender"]))
    bs, spread = _seconds_bars(rows, lambda r: f"{r['contender']}, {r['files']:,} files")
    res = d.get("result", {})
    if res.get("staged_s") and not res.get("staged_measured"):
        bs.append(
            (
                f"staged, {res['files']:,} files (extrapolated)",
                res["staged_s"],
                f"{res['staged_s']:.1f} s (extrapolated)",
                "before",
            )
        )
        spread.append((res["staged_s"], res["staged_s"]))
    fig, axes = _figure(
        1, len(bs), [run_of(d)], "Table commits that copy nothing: 50 ms added to every request"
    )
    title = f"fake-gcs-server, {int(d['delay_s'] * 1000)} ms per request: job commit, median and range (lower is better)"
    bars(axes[0], bs, title, "seconds", spread=spread)
    return _save(fig, {"amcommit", "before"}, path, DIRECT_LEGEND)


def plot_direct_spark(results: Path, path: Path) -> Path | None:
    got = _load(results, "direct_spark.json")
    if got is None:
        return None
    (d,) = got
    backends = list(dict.fromkeys(r["backend"] for r in d["rows"]))
    fig, axes = _figure(len(backends), 2, [run_of(d)], "Table commits that copy nothing: whole Spark writes")
    for ax, be in zip(axes, backends, strict=True):
        rows = [r for r in d["rows"] if r["backend"] == be]
        bs: list[Bar] = [
            (
                f"table_commit={r['contender']}",
                r["wall_s"],
                f"{r['wall_s']:.2f} s",
                DIRECT_KINDS[r["contender"]],
            )
            for r in rows
        ]
        name = "local files" if be == "local" else BACKENDS.get(be, be)
        title = f"{name}: save() of {rows[0]['rows']:,} rows into {rows[0]['files']:,} files, median and range (lower is better)"
        bars(ax, bs, title, "seconds", spread=[(r["min_s"], r["max_s"]) for r in rows])
    return _save(fig, {"amcommit", "before"}, path, DIRECT_LEGEND)


def plot_stream_direct(results: Path, path: Path) -> Path | None:
    got = _load(results, "stream_direct.json")
    if got is None:
        return None
    (d,) = got
    panels: list[Stacks] = []
    for r in d["rows"]:
        panels.append(
            [
                (
                    f"amcommit sink, {label}",
                    [
                        ("Spark hands the batch to the Python worker", r[f"{key}_handoff_ms"]),
                        ("amcommit: commit() entered to batch visible", r[f"{key}_enter_to_visible_ms"]),
                    ],
                )
                for key, label in (("amcommit_direct", "direct"), ("amcommit", "staged"))
            ]
            + [
                (
                    "Spark file sink",
                    [("file sink: its commit in the driver's JVM", r["parquet_after_tasks_ms"])],
                )
            ]
        )
    colors = segment_colors(*panels)
    title = "Streaming micro-batches, direct table sink: last task finished to batch visible"
    fig, axes = _figure(len(panels), 3, [run_of(d)], title)
    for ax, r, rows in zip(axes, d["rows"], panels, strict=True):
        what = f"{r['files_per_batch']} files per batch: medians (lower is better)"
        stacked(ax, rows, colors, what, "milliseconds", " ms")
    return _save(fig, set(), path, segments=colors)


def plot_follow_limit(results: Path, path: Path) -> Path | None:
    """Issue 35 item 3: files per second at 50 ms per request on fake-gcs-server, renames
    following the adaptive limit against the previous defaults and the thread pool, one
    panel per round of the latest run."""
    got = _load(results, "latency_follow_gcs_b.json")
    if got is None:
        return None
    (d,) = got
    rounds = sorted({r["round"] for r in d["rows"]})
    fig, axes = _figure(
        len(rounds), 4, [run_of(d)], "Renames that follow the adaptive limit (50 ms, fake-gcs)"
    )
    kinds: set[str] = set()
    for ax, rnd in zip(axes, rounds, strict=True):
        rows = [r for r in d["rows"] if r["round"] == rnd]
        bs: list[Bar] = [
            (r["contender"], r["files_per_s"], f"{r['files_per_s']:.0f} files/s", r["kind"]) for r in rows
        ]
        kinds.update(r["kind"] for r in rows)
        bars(ax, bs, f"round {rnd}", "files per second")
    return _save(fig, kinds, path)


def plot_local_fsync(results: Path, path: Path) -> Path | None:
    """Issue 35 item 4: a durable local job commit (20,000 files, tmpfs) against a bare
    rename loop and the rule before (both directories of every rename fsynced)."""
    got = _load(results, "local_fsync_tmpfs.json")
    if got is None:
        return None
    (d,) = got
    best: dict[str, dict[str, Any]] = {}
    for r in d["rows"]:
        if r["contender"] not in best or r["seconds"] < best[r["contender"]]["seconds"]:
            best[r["contender"]] = r
    kind = {"rename loop": "raw"}
    bs: list[Bar] = [
        (name, r["seconds"], f"{r['seconds']:.2f} s", kind.get(name, "amcommit")) for name, r in best.items()
    ]
    fig, axes = _figure(
        1, len(bs), [run_of(d)], "Durable local commits: 20,000 files on tmpfs (best of the rounds)"
    )
    bars(axes[0], bs, "job commit time", "seconds")
    return _save(fig, {b[3] for b in bs}, path)


def plot_store_ceiling(results: Path, path: Path) -> Path | None:
    """Issue 35 item 3, the write-gate bound: renames per second at 50 ms per request on
    fake-gcs-server (the rename phase), the previous defaults on the quiet machine, then
    the first round of the interleaved run (defaults, ``bucket_warm=true``, previous
    defaults, thread pool), each panel with its load."""
    got = _load(results, "latency_ceiling_gcs_quiet_base.json", "latency_ceiling_gcs.json")
    if got is None:
        return None
    quiet, run = got
    panels = [
        (f"quiet machine (load {quiet['run']['load_average'][0]:.1f}): the previous defaults", quiet["rows"]),
        (
            "interleaved run, round 0 (load per row)",
            [r for r in run["rows"] if r.get("round", 0) == 0],
        ),
    ]
    fig, axes = _figure(
        len(panels), 4, [run_of(run)], "Stores at their ceiling (50 ms, fake-gcs, 4,000 files)"
    )
    kinds: set[str] = set()
    for ax, (what, rows) in zip(axes, panels, strict=True):
        bs: list[Bar] = [
            (
                r["contender"] + (f" (load {r['load']})" if r.get("load") else ""),
                r["renames_per_s"],
                f"{r['renames_per_s']:.0f}/s, p50 {r['p50_ms']:.0f} ms",
                r["kind"],
            )
            for r in rows
        ]
        kinds.update(r["kind"] for r in rows)
        bars(ax, bs, what, "renames per second (rename phase)")
    return _save(fig, kinds, path)


def plot_stream_batches(results: Path, path: Path) -> Path | None:
    """Issue 35 item 6: each sink's first and steady micro-batch against Spark's file sink,
    per round (the session's first queries in round 0)."""
    got = _load(results, "stream_batches.json")
    if got is None:
        return None
    (d,) = got
    rounds = sorted({r["round"] for r in d["rows"]})
    fig, axes = _figure(
        2, len(d["rows"]), [run_of(d)], "A stream's micro-batches: amcommit against Spark's file sink"
    )
    kind = {"parquet": "spark"}
    for ax, key, what in (
        (axes[0], "first_ms", "first batch"),
        (axes[1], "steady_ms", "steady batches (median)"),
    ):
        bs: list[Bar] = [
            (
                f"round {r['round']}: {r['sink']}",
                r[key] / 1000,
                f"{r[key] / 1000:.2f} s",
                kind.get(r["sink"], "amcommit"),
            )
            for rnd in rounds
            for r in d["rows"]
            if r["round"] == rnd and r.get(key)
        ]
        bars(ax, bs, f"{what}: triggerExecution (lower is better)", "seconds", log=key == "first_ms")
    return _save(fig, {"spark", "amcommit"}, path, labels={"spark": "Spark's parquet file sink"})


def plot_lock_release(results: Path, path: Path) -> Path | None:
    """Issue 35 item 6: back-to-back table commits into one GCS destination under the
    per-object limit, the lock released by a marker or a rewrite against a delete (best
    round)."""
    got = _load(results, "lock_release.json")
    if got is None:
        return None
    (d,) = got
    best: dict[str, dict[str, Any]] = {}
    for r in d["rows"]:
        if r["contender"] not in best or r["commits_per_s"] > best[r["contender"]]["commits_per_s"]:
            best[r["contender"]] = r
    kind = {
        "marker": "amcommit",
        "rewrite": "before",
        "delete": "before",
        "unlimited": "raw",
        "unlimited-delete": "raw",
    }
    bs: list[Bar] = [
        (name, r["commits_per_s"], f"{r['commits_per_s']:.2f} commits/s", kind[name])
        for name, r in best.items()
    ]
    fig, axes = _figure(1, len(bs), [run_of(d)], "Back-to-back table commits into one GCS destination")
    bars(
        axes[0],
        bs,
        "GCS double, one change per second of one name: commits per second (best round)",
        "commits/s",
    )
    return _save(fig, {b[3] for b in bs}, path, labels={"raw": "no per-object limit"})


FILE_PLOTS: dict[str, Callable[[Path, Path], Path | None]] = {
    "scale": plot_scale,
    "shard_commit": plot_shard,
    "table_commit": plot_table_commit,
    "table_changes": plot_table_changes,
    "table_upsert": plot_table_upsert,
    "table_footers": plot_table_footers,
    "stream_commit": plot_stream,
    "event_loop": plot_event_loop,
    "azurite_before_after": plot_azurite,
    "store_renames": plot_store_renames,
    "direct_commit": plot_direct_commit,
    "direct_latency": plot_direct_latency,
    "direct_spark": plot_direct_spark,
    "stream_direct": plot_stream_direct,
    "follow_limit": plot_follow_limit,
    "local_fsync": plot_local_fsync,
    "store_ceiling": plot_store_ceiling,
    "stream_batches": plot_stream_batches,
    "lock_release": plot_lock_release,
}
"""Plot name -> drawing function over a results directory (None when its files are missing)."""


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


def plot_files(results: str | Path, out_dir: str | Path) -> list[Path]:
    """Write ``<name>.png`` for every plot of :data:`FILE_PLOTS` whose result files are in
    ``results``; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in FILE_PLOTS.items():
        p = draw(Path(results), out / f"{name}.png")
        if p is not None:
            written.append(p)
    return written


def plot_everything(results: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Every plot of the report from the results directory ``results`` (its
    ``benchmarks.json`` and the other result files), into ``out_dir`` (default: the same)."""
    results = Path(results)
    out = Path(out_dir) if out_dir is not None else results
    written = []
    if (results / "benchmarks.json").exists():
        written += plot_all(json.loads((results / "benchmarks.json").read_text()), out)
    return written + plot_files(results, out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path(__file__).parent / "results"
    results = src if src.is_dir() else src.parent
    dst = Path(args[1]) if len(args) > 1 else results
    if src.is_dir():
        written = plot_everything(src, dst)
    else:
        written = plot_all(json.loads(src.read_text()), dst) + plot_files(results, dst)
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
