"""A table's write cost against its age (issue 35 item 1): young table vs old table, same write.

Each contender is a table of N completed commits, aged as a table with archival on ages
(the default: ``keep_max_commits`` 30 / ``keep_min_commits`` 20): built fast by
:mod:`amcommit.testing.tablegen` (valid instant files, one real Parquet base file per commit,
hudi-rs reads it), written straight to the store, then archived once by
:func:`amcommit.table.commit.archive.archive` (untimed: what the commits' own archivals
would have left). Then ``--writes`` engine-API writes of one small file each
(``begin_write`` -> one task -> ``commit_job``, archival after each commit on, as a user
gets it) are timed, back to back, in this process; the table's rows are verified after.

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


async def timed(store: Store, dest: str, writes: int) -> list[float]:
    return [await one_write(store, dest, n) for n in range(writes)]


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


async def _contender(store: Store, direct: Store, dest: str, commits: int, writes: int) -> dict[str, Any]:
    """Build (straight to the store: ``direct``), archive, time ``writes`` writes through
    ``store``, verify. One row (without its name)."""
    t0 = time.perf_counter()
    await upload(direct, dest, build(commits))
    await archive(direct, dest, config=CONFIG)
    built = time.perf_counter() - t0
    secs = await timed(store, dest, writes)
    row = summary("", commits, secs)
    row.update(await verify(direct, dest, commits, writes), build_s=round(built, 1))
    row["load_average"] = load_average()
    return row


def run_local(a: argparse.Namespace) -> list[dict[str, Any]]:
    from amcommit.store.local import LocalStore

    rows = []
    for commits in (YOUNG, a.old):
        with scratch_dir("amc-age-") as root:
            store = LocalStore(root, fsync=True)
            row = anyio.run(_contender, store, store, "t", commits, a.writes)
            row["table"] = f"local {commits}"
            print(f"  {row}", file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def run_gcs(a: argparse.Namespace) -> list[dict[str, Any]]:
    from benchmarks.clients import amcommit_default_store, emulator
    from benchmarks.latency_proxy import proxied

    rows = []
    with emulator("gcs") as (target, _), proxied(target, delay=a.delay) as (via, _stats):
        for commits in (YOUNG, a.old_gcs):

            async def one(commits: int = commits) -> dict[str, Any]:
                async with amcommit_default_store(target) as direct, amcommit_default_store(via) as slow:
                    return await _contender(slow, direct, f"age{commits}/t", commits, a.writes)

            row = anyio.run(one)
            row["table"] = f"gcs+{int(a.delay * 1000)}ms {commits}"
            print(f"  {row}", file=sys.stderr, flush=True)
            rows.append(row)
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
