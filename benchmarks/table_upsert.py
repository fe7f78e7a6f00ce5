"""Upsert into a Hudi table (``amcommit.table.mutate.engine``) against rewriting the whole table.

A table of ``--rows`` rows (default 1,000,000) in ``--files`` base files (default 200: 20
partitions x 10 files of 5,000 rows; keys ``1000000``.. so each file holds one key range), built
once by an upsert into an empty table (so every file carries Hudi's footer index: key range and
bloom filter). Each measured run gets a fresh copy of it (local files: a copy of the folder;
fake-gcs-server: an upload into a fresh prefix). Two batches of updates:

* ``late``: 10,000 updated keys that live in 10 of the 200 files (5 files in each of 2
  partitions; late-arriving data): the index should read key columns only of files it cannot
  rule out (10) and rewrite exactly those 10;
* ``spread``: 10% of the keys, drawn at random over every file: every file is rewritten.

Contenders, in the same run, alternating (``--rounds``):

* ``upsert``: :func:`amcommit.table.mutate.engine.upsert` (index lookup, rewrite of the file groups
  holding the keys, one commit);
* ``whole rewrite``: what a user without upsert does: read every base file, merge the updates
  into it (vectorised: ``pyarrow.compute.is_in``), write every file anew (with Hudi's footer
  index) and commit an ``INSERT_OVERWRITE_TABLE`` (a replacecommit), through the same engine
  (begin_write, one task, the job commit).

Reported per run: wall seconds, footers read, key columns read (the whole rewrite reads every
file whole), files rewritten, and the upsert's time over the whole rewrite's. Every result is
checked: the upsert's counts (updated = the batch, nothing inserted, the files rewritten) and
each run's snapshot (row count, file count; ``late``: exactly the 10 files have new versions).

    python -m benchmarks.table_upsert                       # local and fake-gcs-server
    python -m benchmarks.table_upsert --backends local --rounds 3
    python -m benchmarks.table_upsert --backends local,gcs --delay 0.05   # 50 ms per GCS request
    python -m benchmarks.table_upsert --quick               # 20,000 rows x 20 files (smoke test)
    python -m benchmarks.table_upsert --profile late        # cProfile of one local late-data upsert
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pyarrow as pa

from benchmarks.common import RESULTS, TMP, add_save_arg, load_average, run_info, table

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("p", pa.string()),
        ("v", pa.string()),
        ("x", pa.float64()),
        ("ts", pa.int64()),
    ]
)
KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "precombine_field": "ts"}
FIRST_ID = 1_000_000
LATE_KEYS = 10_000
LATE_FILES = 10


def shape(rows: int, files: int) -> tuple[int, int]:
    """(partitions, rows per file) of a table of ``rows`` in ``files`` (10 files per partition)."""
    parts = max(1, files // 10)
    return parts, rows // files


def base_rows(rows: int, files: int) -> pa.Table:
    parts, per_file = shape(rows, files)
    per_part = per_file * (files // parts)
    ids = np.arange(FIRST_ID, FIRST_ID + rows, dtype=np.int64)
    part = [f"2026-10-{1 + i:02d}" for i in range(parts)]
    return pa.table(
        {
            "id": ids,
            "p": pa.array(part, pa.string()).take(pa.array((ids - FIRST_ID) // per_part)),
            "v": pa.array([f"value-{i}" for i in range(rows)], pa.string()),
            "x": np.random.default_rng(1).random(rows),
            "ts": np.ones(rows, dtype=np.int64),
        },
        schema=SCHEMA,
    )


def updates(base: pa.Table, which: str, rows: int, files: int) -> pa.Table:
    """The batch of updates of scenario ``which`` (module doc): same keys and partitions, new
    values and a greater precombine value."""
    parts, per_file = shape(rows, files)
    if which == "late":
        # 5 files in each of 2 partitions (the 4th and the 8th; the 1st and 2nd if fewer)
        p1, p2 = (3, 7) if parts >= 8 else (0, min(1, parts - 1))
        fpp = files // parts
        chosen = [p1 * fpp + j for j in range(LATE_FILES // 2)] + [
            p2 * fpp + j for j in range(LATE_FILES // 2)
        ]
        per = min(LATE_KEYS // LATE_FILES, per_file)
        rng = np.random.default_rng(2)
        idx = np.concatenate([f * per_file + rng.choice(per_file, per, replace=False) for f in chosen])
    else:
        idx = np.random.default_rng(3).choice(rows, rows // 10, replace=False)
    idx.sort()
    t = base.take(pa.array(idx))
    n = t.num_rows
    return t.set_column(2, "v", pa.array([f"updated-{i}" for i in range(n)], pa.string())).set_column(
        4, "ts", pa.array(np.full(n, 2, dtype=np.int64))
    )


# -- stores ---------------------------------------------------------------------------------


class Backend:
    """Where the tables live: ``local`` (a folder under /dev/shm) or ``gcs`` (fake-gcs-server;
    with ``delay``, behind :mod:`benchmarks.latency_proxy` adding ``delay`` seconds to every
    request the contenders make: backend ``gcs+<ms>ms``; the copies of the table are uploaded
    around the proxy)."""

    def __init__(self, name: str, work: Path, delay: float = 0.0) -> None:
        self.name = name if name == "local" or not delay else f"{name}+{round(delay * 1000)}ms"
        self.work = work
        self.server: Any = None
        self.proxy: Any = None
        self.endpoint = ""
        self.n = 0
        if name == "gcs":
            from amcommit.emulators.fakegcs import FakeGcsServer

            self.server = FakeGcsServer().start()
            self.server.create_bucket("bench")
            self.endpoint = self.server.url
            if delay:
                from benchmarks.clients import Target
                from benchmarks.latency_proxy import proxied

                self.proxy = proxied(Target("gcs", self.server.url, "bench"), delay=delay)
                target, _ = self.proxy.__enter__()
                self.endpoint = target.endpoint

    def store(self, direct: bool = False) -> Any:
        """The contenders' store (``direct``: around the latency proxy)."""
        from amcommit.store.local import LocalStore

        if self.name == "local":
            return LocalStore(str(self.work / "runs"), fsync=False)
        from amcommit.store.gcs import GcsStore

        return GcsStore("bench", endpoint=self.server.url if direct else self.endpoint, use_move=False)

    async def fresh(self, built: Path) -> str:
        """A fresh copy of the table built at ``built``: its path in :meth:`store`."""
        self.n += 1
        dest = f"t{self.n}"
        if self.name == "local":
            await anyio.to_thread.run_sync(lambda: shutil.copytree(built, self.work / "runs" / dest))
            return dest
        files = await anyio.to_thread.run_sync(lambda: [p for p in built.rglob("*") if p.is_file()])
        store = self.store(direct=True)
        async with store:
            limit = anyio.Semaphore(32)

            async def put(p: Path) -> None:
                async with limit:
                    body = await anyio.to_thread.run_sync(p.read_bytes)
                    await store.put(f"{dest}/{p.relative_to(built).as_posix()}", body)

            async with anyio.create_task_group() as tg:
                for p in files:
                    tg.start_soon(put, p)
        return dest

    def drop(self, dest: str) -> None:
        if self.name == "local":
            shutil.rmtree(self.work / "runs" / dest, ignore_errors=True)

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.__exit__(None, None, None)
        if self.server is not None:
            self.server.stop()


def build(root: Path, rows: int, files: int) -> pa.Table:
    """The table, built by an upsert into an empty folder: returns its rows."""
    from amcommit.store.local import LocalStore
    from amcommit.table import mutate

    base = base_rows(rows, files)
    _, per_file = shape(rows, files)

    async def run() -> None:
        store = LocalStore(str(root), fsync=False)
        async with store:
            await mutate.upsert(store, "t", base, max_file_rows=per_file, small_file_limit=0, **KW)

    anyio.run(run)
    return base


# -- the contenders ---------------------------------------------------------------------------


async def run_upsert(store: Any, dest: str, batch: pa.Table) -> dict[str, Any]:
    from amcommit.table import mutate

    t0, c0 = time.perf_counter(), time.process_time()
    r = await mutate.upsert(store, dest, batch, **KW)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if r.updated != batch.num_rows or r.inserted or r.files_created:
        raise SystemExit(f"upsert: updated {r.updated} of {batch.num_rows}, inserted {r.inserted}")
    return {
        "seconds": wall,
        "cpu_s": cpu,
        "footers_read": r.footers_read,
        "key_columns_read": r.key_columns_read,
        "files_rewritten": r.files_rewritten,
        "instant": r.instant,
    }


async def run_whole_rewrite(store: Any, dest: str, batch: pa.Table) -> dict[str, Any]:
    """Read every base file, merge the batch into it, write every file anew, commit an
    INSERT_OVERWRITE_TABLE (module doc)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from amcommit.api import commit_job
    from amcommit.committer.task import commit_task, setup_task
    from amcommit.paths import join
    from amcommit.store.base import local_os_path
    from amcommit.table.file_group.merge import KEY_COLUMN, parquet_with_index, with_meta
    from amcommit.table.format.keys import partition_dir
    from amcommit.table.format.model import Operation
    from amcommit.table.format.naming import META_COLUMNS, base_file_name, new_file_id, write_token
    from amcommit.table.format.schema import avro_schema
    from amcommit.table.format.tasknames import ROWS_KEY
    from amcommit.table.settings import TableConfig
    from amcommit.table.timeline.heartbeat import heartbeat
    from amcommit.table.timeline.instants import load_timeline, snapshot
    from amcommit.table.write.task import TableSpec, begin_write, read_properties

    cfg = TableConfig()
    t0, c0 = time.perf_counter(), time.process_time()
    props = await read_properties(store, dest, cfg)
    assert props is not None
    spec = TableSpec(props.name, partition_fields=("p",), record_key_fields=("id",))
    w = await begin_write(
        store,
        dest,
        operation=Operation.INSERT_OVERWRITE_TABLE,
        spec=spec,
        avro_schema=avro_schema(batch.schema, props.name),
        config=cfg,
    )
    instant = w.instant
    # the batch by partition (as a join by partition and key would split it)
    by_part: dict[str, pa.Table] = {}
    for part in pc.unique(batch.column("p")).to_pylist():
        by_part[partition_dir(("p",), (part,))] = batch.filter(pc.equal(batch.column("p"), part))
    async with heartbeat(store, dest, instant, ttl=cfg.writer_ttl):
        _, commits = await load_timeline(store, dest)
        snap = snapshot(commits)
        attempt = f"attempt_{instant}_m_000000_0"
        work = await setup_task(store, w.layout, attempt, config=cfg)
        token = write_token(0, 0, 0)
        rows_of: dict[str, int] = {}
        seq = [0]
        seq_lock = threading.Lock()

        def rewrite(raw: Any) -> tuple[bytes, int, str]:
            stored = pq.read_table(raw)
            fname = base_file_name(new_file_id(), token, instant)
            part = stored.column(META_COLUMNS[3])[0].as_py() if stored.num_rows else ""
            batch_part = by_part.get(part, batch.slice(0, 0))
            inc_keys = pc.cast(batch_part.column("id"), pa.string())
            keys = stored.column(KEY_COLUMN)
            hit = pc.is_in(keys, value_set=inc_keys)
            kept = stored.filter(pc.invert(hit))
            mine = pc.is_in(inc_keys, value_set=keys)
            rows = batch_part.filter(mine)
            with seq_lock:
                first, seq[0] = seq[0], seq[0] + rows.num_rows
            new = with_meta(rows, inc_keys.filter(mine).to_pylist(), instant, 0, first, part, fname)
            kept = kept.set_column(4, META_COLUMNS[4], pa.repeat(pa.scalar(fname), kept.num_rows))
            out = pa.concat_tables([kept, new.select(kept.column_names).cast(kept.schema)])
            return parquet_with_index(out), out.num_rows, f"{part}/{fname}" if part else fname

        async def one(f: Any) -> None:
            local = local_os_path(store, join(dest, f.path))
            raw = local if local is not None else pa.BufferReader(await store.get(join(dest, f.path)))
            body, n, rel = await anyio.to_thread.run_sync(rewrite, raw)
            await store.put(join(work, rel), body)
            rows_of[rel] = n

        limit = anyio.Semaphore(8)

        async def bounded(f: Any) -> None:
            async with limit:
                await one(f)

        async with anyio.create_task_group() as tg:
            for f in snap:
                tg.start_soon(bounded, f)
        await commit_task(
            store,
            w.layout,
            f"task_{instant}_m_000000",
            attempt,
            config=cfg,
            extra_data={ROWS_KEY: json.dumps(rows_of)},
        )
    await commit_job(store, dest, instant, config=cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": wall,
        "cpu_s": cpu,
        "footers_read": 0,
        "key_columns_read": len(snap),
        "files_rewritten": len(rows_of),
        "instant": instant,
    }


async def check(store: Any, dest: str, rows: int, files: int, before: set[str], res: dict[str, Any]) -> str:
    """The table after a run: ``rows`` rows in ``files`` files of the snapshot, of which
    ``files_rewritten`` are new versions (the rest unchanged)."""
    from amcommit.table.timeline.instants import load_timeline, snapshot

    _, commits = await load_timeline(store, dest)
    snap = snapshot(commits)
    got_rows = sum(f.rows for f in snap)
    new = [f for f in snap if f.instant == res["instant"]]
    kept = {f.path for f in snap} & before
    if got_rows != rows or len(snap) != files or len(new) != res["files_rewritten"]:
        raise SystemExit(f"{dest}: {got_rows} rows in {len(snap)} files, {len(new)} new")
    if len(kept) != files - len(new):
        raise SystemExit(f"{dest}: {len(kept)} files unchanged, expected {files - len(new)}")
    return "exact"


CONTENDERS: dict[str, Callable[[Any, str, pa.Table], Any]] = {
    "upsert": run_upsert,
    "whole rewrite": run_whole_rewrite,
}


def measure(
    backend: Backend,
    built: Path,
    base: pa.Table,
    scenario: str,
    rows: int,
    files: int,
    rounds: int,
    *,
    record: bool = True,
) -> list[dict[str, Any]]:
    """``rounds`` runs of each contender, alternating; ``record=False``: a warm-up (imports,
    connections), not printed."""
    batch = updates(base, scenario, rows, files)
    out: list[dict[str, Any]] = []
    for rnd in range(rounds):
        order = list(CONTENDERS) if rnd % 2 == 0 else list(reversed(CONTENDERS))
        for name in order:

            async def go(name: str = name) -> dict[str, Any]:
                from amcommit.table.timeline.instants import load_timeline, snapshot

                dest = await backend.fresh(built)
                store = backend.store()
                async with store:
                    _, commits = await load_timeline(store, dest)
                    before = {f.path for f in snapshot(commits)}
                    load = load_average()
                    res: dict[str, Any] = await CONTENDERS[name](store, dest, batch)
                    res["verified"] = await check(store, dest, rows, files, before, res)
                backend.drop(dest)
                res["load_1m"] = load[0] if load else None
                return res

            res = anyio.run(go)
            if not record:
                continue
            res.update(
                backend=backend.name, scenario=scenario, contender=name, round=rnd, keys=batch.num_rows
            )
            print(
                f"  {backend.name} {scenario} round {rnd + 1} {name}: {res['seconds']:.2f} s "
                f"(CPU {res['cpu_s']:.2f} s), "
                f"footers {res['footers_read']}, key columns {res['key_columns_read']}, "
                f"rewritten {res['files_rewritten']} (load {res['load_1m']})",
                flush=True,
            )
            out.append(res)
    return out


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for be in dict.fromkeys(r["backend"] for r in runs):
        for sc in dict.fromkeys(r["scenario"] for r in runs):
            mine = [r for r in runs if r["backend"] == be and r["scenario"] == sc]
            if not mine:
                continue
            whole = statistics.median(r["seconds"] for r in mine if r["contender"] == "whole rewrite")
            for name in CONTENDERS:
                rs = [r for r in mine if r["contender"] == name]
                sec = statistics.median(r["seconds"] for r in rs)
                rows.append(
                    {
                        "backend": be,
                        "scenario": sc,
                        "keys": rs[0]["keys"],
                        "contender": name,
                        "seconds": sec,
                        "best_s": min(r["seconds"] for r in rs),
                        "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                        "over_whole": sec / whole,
                        "footers_read": rs[0]["footers_read"],
                        "key_columns_read": rs[0]["key_columns_read"],
                        "files_rewritten": rs[0]["files_rewritten"],
                        "load_1m": statistics.median(r["load_1m"] or 0.0 for r in rs),
                        "verified": "exact" if all(r["verified"] == "exact" for r in rs) else "WRONG",
                    }
                )
    return rows


def profile(built: Path, base: pa.Table, rows: int, files: int, scenario: str, out: Path) -> None:
    """cProfile of one upsert of ``scenario`` on a local copy; the top functions printed."""
    import cProfile
    import pstats

    from amcommit.store.local import LocalStore
    from amcommit.table import mutate

    batch = updates(base, scenario, rows, files)
    copy = built.parent / "profiled"
    shutil.copytree(built, copy)

    async def run() -> None:
        store = LocalStore(str(built.parent), fsync=False)
        async with store:
            t0 = time.perf_counter()
            await mutate.upsert(store, "profiled", batch, **KW)
            print(f"upsert {scenario}: {time.perf_counter() - t0:.3f} s", flush=True)

    prof = cProfile.Profile()
    prof.enable()
    anyio.run(run)
    prof.disable()
    path = out / f"table_upsert_{scenario}.prof"
    prof.dump_stats(str(path))
    pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    print(f"profile: {path}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--backends", default="local,gcs", help="local, gcs (fake-gcs-server), comma-separated")
    p.add_argument("--scenarios", default="late,spread")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--delay", type=float, default=0.0, help="seconds added to every fake-gcs-server request (a proxy)"
    )
    p.add_argument("--quick", action="store_true", help="20,000 rows x 20 files, local, 1 round (smoke test)")
    p.add_argument("--profile", choices=["late", "spread"], help="profile one local upsert instead")
    p.add_argument(
        "--out", type=Path, help="results directory (default benchmarks/results/tmp, --quick: results/quick)"
    )
    add_save_arg(p)
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.files, args.rounds, args.backends = 20_000, 20, 1, "local"
    out_dir: Path = args.out or (RESULTS / "quick" if args.quick else RESULTS if args.save else TMP)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_dir = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="amcommit-upsert-bench-", dir=base_dir))
    runs: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        base = build(work / "built", args.rows, args.files)
        built = work / "built" / "t"
        print(f"table of {args.rows:,} rows x {args.files} files built in {time.perf_counter() - t0:.1f} s")
        if args.profile:
            profile(built, base, args.rows, args.files, args.profile, out_dir)
            return
        tiny = base_rows(2000, 20)
        build(work / "tiny", 2000, 20)
        for be_name in args.backends.split(","):
            backend = Backend(be_name, work, args.delay)
            try:
                measure(backend, work / "tiny" / "t", tiny, "late", 2000, 20, 1, record=False)
                for sc in args.scenarios.split(","):
                    runs += measure(backend, built, base, sc, args.rows, args.files, args.rounds)
            finally:
                backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = summarise(runs)
    cols = [
        "backend",
        "scenario",
        "keys",
        "contender",
        "seconds",
        "best_s",
        "cpu_s",
        "over_whole",
        "footers_read",
        "key_columns_read",
        "files_rewritten",
        "load_1m",
        "verified",
    ]
    print(table(rows, cols, f"upsert vs whole rewrite, {args.rows:,} rows in {args.files} files (median s)"))
    path = out_dir / "table_upsert.json"
    payload = {
        "run": run_info(),
        "rows_in_table": args.rows,
        "files": args.files,
        "summary": rows,
        "runs": runs,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results: {path}")
    if any(r["verified"] != "exact" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
