"""A table's write cost against its age (issue 35 item 1): young table vs old table, same write.

Two tables, a young and an old one, each of N completed commits, aged as a table with archival on ages
(the default: ``keep_max_commits`` 30 / ``keep_min_commits`` 20): built fast by
:mod:`amcommit.testing.tablegen` (valid instant files, one real Parquet base file per commit,
hudi-rs reads it), written straight to the store, then archived once by
:func:`amcommit.table.commit.archive.archive` (untimed: what the commits' own archivals
would have left). Then ``--writes`` rounds of one engine-API write of one small file into
each table (``begin_write`` -> one task -> ``commit_job``, archival after each commit on, as
a user gets it), alternating young/old (the machine's load drifts alike for both), timed
in this process; every commit and file of both tables is verified through amcommit's reader
afterwards (archived commits included).

* ``local``: local files (a scratch folder), 10 commits vs ``--old`` (10,000) commits;
* ``gcs``: fake-gcs-server, every request of the timed writes through
  ``benchmarks.latency_proxy`` adding ``--delay`` (50 ms); 10 vs ``--old-gcs`` (2,000).

Figures: per table, the median and mean seconds per write (the mean includes the archival
a write triggers every ten commits), and the ratio old/young of each.

    python -m benchmarks.table_age [--backend local|gcs|all] [--writes 12] [--old 10000]
        [--old-gcs 2000] [--delay 0.05] [--save]

Results: ``benchmarks/results/tmp/table_age.json`` (``--save``: ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.parquet as pq

from amcommit.api import commit_job
from amcommit.committer.task import commit_task, setup_task
from amcommit.parallel import run_parallel
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.table.commit.archive import archive
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import base_file_name, commit_seqno, new_file_id, write_token
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.reader import Timeline
from amcommit.table.write.task import begin_write
from amcommit.testing.tablegen import Write, generate
from benchmarks.common import load_average, run_info, scratch_dir, table, write_json

YOUNG = 10
CONFIG = TableConfig()
"""What a user gets: archival after each commit on, keep 30 / 20."""


def build(commits: int) -> dict[str, bytes]:
    """The objects of a valid table of ``commits`` completed writes (one file of 2 rows each)."""
    return generate([Write(files={"a": 1}, rows=2) for _ in range(commits)], name="age").objects


async def upload(store: Store, dest: str, objects: dict[str, bytes], threads: int = 64) -> None:
    """Put ``objects`` under ``dest``: data files first, instant files last."""
    order = sorted(objects, key=lambda p: (p.startswith(".hoodie/"), p))
    data = [p for p in order if not p.startswith(".hoodie/")]
    meta = [p for p in order if p.startswith(".hoodie/")]

    async def put(rel: str) -> None:
        await store.put(join(dest, rel), objects[rel])

    await run_parallel(data, put, threads)
    await run_parallel(meta, put, threads)


def _file(instant: str, name: str, first: int) -> bytes:
    """One base file of 2 rows in the generated table's schema (meta columns first)."""
    ids = [first, first + 1]
    cols = {
        "_hoodie_commit_time": [instant] * 2,
        "_hoodie_commit_seqno": [commit_seqno(instant, 0, i) for i in range(2)],
        "_hoodie_record_key": [f"w{i}" for i in ids],
        "_hoodie_partition_path": ["p=a"] * 2,
        "_hoodie_file_name": [name] * 2,
        "id": pa.array(ids, pa.int64()),
        "value": [f"w{i}" for i in ids],
        "p": ["a"] * 2,
    }
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    return buf.getvalue()


async def one_write(store: Store, dest: str, n: int) -> float:
    """One engine-API write of one file; its seconds (begin to commit_job returned)."""
    t0 = time.perf_counter()
    w = await begin_write(store, dest, operation=Operation.INSERT, config=CONFIG)
    ta = f"attempt_{w.instant}_m_000000_0"
    work = await setup_task(store, w.layout, ta)
    name = base_file_name(new_file_id(), write_token(0, 0, 0), w.instant)
    await store.put(join(work, f"p=a/{name}"), _file(w.instant, name, 10_000_000 + 2 * n))
    await commit_task(
        store,
        w.layout,
        f"task_{w.instant}_m_000000",
        ta,
        extra_data={"hudi.rows": json.dumps({f"p=a/{name}": 2})},
    )
    report = await commit_job(store, dest, w.instant, config=CONFIG)
    if not report.success:
        raise RuntimeError(f"write {w.instant} failed")
    return time.perf_counter() - t0


async def verify(store: Store, dest: str, commits: int, writes: int) -> dict[str, Any]:
    """The table as amcommit's reader sees it: every commit (archived or not) and every file."""
    tl = await Timeline.open(store, dest)
    snap = await tl.snapshot()
    lst = await tl.current()
    expected = commits + writes
    if len(snap) != expected or len(await tl.commits()) != expected:
        raise RuntimeError(f"{dest}: {len(snap)} files read, {expected} expected")
    return {"files": len(snap), "active_writes": len(lst.writes), "verified": True}


def summary(name: str, commits: int, secs: list[float]) -> dict[str, Any]:
    return {
        "table": name,
        "commits": commits,
        "writes": len(secs),
        "median_s": round(statistics.median(secs), 4),
        "mean_s": round(statistics.fmean(secs), 4),
        "max_s": round(max(secs), 4),
    }


async def _build(direct: Store, dest: str, commits: int) -> float:
    """Build the table of ``commits`` (straight to the store) and archive it; its seconds."""
    t0 = time.perf_counter()
    await upload(direct, dest, build(commits))
    await archive(direct, dest, config=CONFIG)
    return time.perf_counter() - t0


async def _pair(
    stores: tuple[Store, Store], dests: tuple[str, str], sizes: tuple[int, int], writes: int
) -> list[dict[str, Any]]:
    """Build both tables, then ``writes`` rounds of one write into each, alternating (the
    machine's load drifts alike for both), then verify both. ``stores``: (the store the
    tables are built and verified through, the one the timed writes go through)."""
    direct, slow = stores
    built = [await _build(direct, d, n) for d, n in zip(dests, sizes, strict=True)]
    secs: list[list[float]] = [[], []]
    for n in range(writes):
        for k in (0, 1) if n % 2 == 0 else (1, 0):
            secs[k].append(await one_write(slow, dests[k], n))
    rows = []
    for k in (0, 1):
        row = summary("", sizes[k], secs[k])
        row.update(await verify(direct, dests[k], sizes[k], writes), build_s=round(built[k], 1))
        row["load_average"] = load_average()
        rows.append(row)
    return rows


def run_local(a: argparse.Namespace) -> list[dict[str, Any]]:
    from amcommit.store.local import LocalStore

    with scratch_dir("amc-age-") as root:
        store = LocalStore(root, fsync=True)
        rows = anyio.run(_pair, (store, store), ("young/t", "old/t"), (YOUNG, a.old), a.writes)
    for row in rows:
        row["table"] = f"local {row['commits']}"
        print(f"  {row}", file=sys.stderr, flush=True)
    return rows


def run_gcs(a: argparse.Namespace) -> list[dict[str, Any]]:
    from benchmarks.clients import amcommit_default_store, emulator
    from benchmarks.latency_proxy import proxied

    with emulator("gcs") as (target, _), proxied(target, delay=a.delay) as (via, _stats):

        async def pair() -> list[dict[str, Any]]:
            async with amcommit_default_store(target) as direct, amcommit_default_store(via) as slow:
                return await _pair((direct, slow), ("young/t", "old/t"), (YOUNG, a.old_gcs), a.writes)

        rows = anyio.run(pair)
    for row in rows:
        row["table"] = f"gcs+{int(a.delay * 1000)}ms {row['commits']}"
        print(f"  {row}", file=sys.stderr, flush=True)
    return rows


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i in range(0, len(rows), 2):
        young, old = rows[i], rows[i + 1]
        out.append(
            {
                "backend": old["table"].rsplit(" ", 1)[0],
                "young": young["commits"],
                "old": old["commits"],
                "median_ratio": round(old["median_s"] / young["median_s"], 3),
                "mean_ratio": round(old["mean_s"] / young["mean_s"], 3),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common import add_save_arg

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("local", "gcs", "all"), default="all")
    ap.add_argument("--writes", type=int, default=12)
    ap.add_argument("--old", type=int, default=10_000)
    ap.add_argument("--old-gcs", type=int, default=2_000)
    ap.add_argument("--delay", type=float, default=0.05)
    add_save_arg(ap)
    a = ap.parse_args(argv)
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    if a.backend in ("local", "all"):
        rows += run_local(a)
    if a.backend in ("gcs", "all"):
        rows += run_gcs(a)
    cols = [
        "table",
        "commits",
        "writes",
        "median_s",
        "mean_s",
        "max_s",
        "active_writes",
        "build_s",
        "load_average",
    ]
    print(table(rows, cols, "one-file engine-API writes into a young and an old table"))
    rs = ratios(rows)
    print(table(rs, ["backend", "young", "old", "median_ratio", "mean_ratio"], "old / young (target <= 1.2)"))
    payload = {
        **run_info(),
        "load_before": load_before,
        "load_after": load_average(),
        "rows": rows,
        "ratios": rs,
    }
    path = write_json("table_age", payload, save=a.save)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
