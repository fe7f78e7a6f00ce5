"""``Timeline.changes()`` between two instants: O(instants in range), not O(table).

A generated Hudi table (version 6) of ``--instants`` commits x ``--files`` base files each
(stub files: planning never opens them), on local files. For ranges of 1, 10 and 100 instants
(``--repeats`` ranges each, in the middle of the timeline; the median is reported):

* ``amcommit``: a fresh ``Timeline.open`` + ``changes(since, until)``: one listing of
  ``.hoodie/`` plus one read per commit in the range;
* ``hudi-rs``: a fresh ``HudiTable(path)`` + ``get_file_slices`` of an incremental query
  (hudi-rs's own incremental planning), and once per range size the same on an already open table (``warm``);
* ``list table``: a recursive listing of the whole table (what a reader without a timeline
  must do to find new files), once.

Every amcommit answer is checked against hudi-rs's file set. The same ranges run on a table
with a tenth of the instants: amcommit's time should follow the range, not the table.

    python -m benchmarks.table_changes                 # 1,000 instants x 100 files
    python -m benchmarks.table_changes --quick         # 100 x 10 (smoke test)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from amcommit import loop as amcommit_loop
from amcommit.store.schemes import open_location
from amcommit.table.timeline.reader import Timeline
from amcommit.testing.tablegen import Write, generate, write_local
from benchmarks.common import RESULTS, TMP, add_save_arg, run_info, table

RANGES = (1, 10, 100)


def build(root: Path, instants: int, files: int) -> list[str]:
    gen = generate([Write(files={f"p{i % 10}": files}, rows=10) for i in range(instants)], files="stub")
    write_local(gen, root)
    return gen.completed


def _ranges(times: list[str], size: int, count: int) -> list[tuple[str, str]]:
    mid = len(times) // 2 - size // 2
    starts = [max(0, min(len(times) - size - 1, mid + k * 3 - count)) for k in range(count)]
    return [(times[s], times[s + size]) for s in starts]


async def _amcommit(root: Path, since: str, until: str) -> tuple[float, float, list[str]]:
    """(wall seconds in all, of which listing ``.hoodie/``, the files)."""
    store, dest = open_location(str(root))
    try:
        t0 = time.perf_counter()
        tl = await Timeline.open(store, dest)  # the listing; changes() reuses it
        t1 = time.perf_counter()
        c = await tl.changes(since, until)
        wall = time.perf_counter() - t0
    finally:
        await store.aclose()
    return wall, t1 - t0, sorted(f.path for f in c.visible())


async def _list_table(root: Path) -> tuple[float, int]:
    store, dest = open_location(str(root))
    try:
        t0 = time.perf_counter()
        n = len([o async for o in store.list(dest, recursive=True)])
        return time.perf_counter() - t0, n
    finally:
        await store.aclose()


def measure(root: Path, times: list[str], repeats: int) -> list[dict[str, Any]]:
    import hudi

    rows: list[dict[str, Any]] = []
    list_s, listed = anyio.run(_list_table, root)
    warm = hudi.HudiTable(str(root))
    for size in RANGES:
        if size >= len(times):
            continue
        am, lists, cold, hot = [], [], [], []
        files = 0
        for since, until in _ranges(times, size, repeats):
            wall, listing, ours = amcommit_loop.run(_amcommit, root, since, until)
            lists.append(listing)
            opts = (
                hudi.HudiReadOptions()
                .with_query_type(hudi.HudiQueryType.Incremental)
                .with_start_timestamp(since)
                .with_end_timestamp(until)
            )
            t0 = time.perf_counter()
            fresh = hudi.HudiTable(str(root))
            theirs = sorted(s.base_file_relative_path() for s in fresh.get_file_slices(opts))
            cold.append(time.perf_counter() - t0)
            if not hot:  # once per range size: hudi-rs takes seconds per query on big tables
                t0 = time.perf_counter()
                warm.get_file_slices(opts)
                hot.append(time.perf_counter() - t0)
            if ours != theirs:
                raise SystemExit(f"amcommit and hudi-rs disagree on ({since}, {until}]")
            am.append(wall)
            files = len(ours)
        a, c, h = statistics.median(am), statistics.median(cold), statistics.median(hot)
        print(
            f"  {len(times)} instants, range {size}: amcommit {a * 1000:.1f} ms, hudi-rs {c * 1000:.0f} ms",
            flush=True,
        )
        rows.append(
            {
                "instants": len(times),
                "range": size,
                "files": files,
                "amcommit_ms": a * 1000,
                "amcommit_list_ms": statistics.median(lists) * 1000,
                "amcommit_reads_ms": (a - statistics.median(lists)) * 1000,
                "hudi_rs_ms": c * 1000,
                "hudi_rs_warm_ms": h * 1000,
                "list_table_ms": list_s * 1000,
                "listed": listed,
                "hudi_rs_over_amcommit": c / a,
                "list_over_amcommit": list_s / a,
                "verified": "exact",
            }
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instants", type=int, default=1000)
    p.add_argument("--files", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="100 instants x 10 files (smoke test)")
    p.add_argument(
        "--out", type=Path, help="results directory (default benchmarks/results/tmp, --quick: results/quick)"
    )
    add_save_arg(p)
    args = p.parse_args()
    if args.quick:
        args.instants, args.files, args.repeats = 100, 10, 2
    out_dir: Path = args.out or (RESULTS / "quick" if args.quick else RESULTS if args.save else TMP)
    work = Path(tempfile.mkdtemp(prefix="amcommit-table-bench-"))
    rows: list[dict[str, Any]] = []
    try:
        for n in (args.instants, max(2, args.instants // 10)):
            root = work / f"t{n}"
            t0 = time.perf_counter()
            times = build(root, n, args.files)
            print(
                f"table of {n} instants x {args.files} files built in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            rows += measure(root, times, args.repeats)
            shutil.rmtree(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cols = [
        "instants",
        "range",
        "files",
        "amcommit_ms",
        "amcommit_list_ms",
        "amcommit_reads_ms",
        "hudi_rs_ms",
        "hudi_rs_warm_ms",
        "list_table_ms",
        "hudi_rs_over_amcommit",
        "list_over_amcommit",
        "verified",
    ]
    print(table(rows, cols, f"changes() between two instants, {args.files} files per instant (median ms)"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "table_changes.json"
    payload = {"run": run_info(), "instants": args.instants, "files": args.files, "rows": rows}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
