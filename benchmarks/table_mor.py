"""Merge-on-Read tables (issue 34): one function per scenario, selected with ``--scenario``.

``compaction`` (:func:`run`): compaction against a Copy-on-Write upsert of the same keys.
A table of ``--rows`` rows in ``--files`` base files (``--partitions`` partitions) is written
twice on local files: as a Merge-on-Read table and as a Copy-on-Write one. The MoR table gets 5
deltacommits of 1% of the keys each (drawn at random over every file; amcommit's own
deltacommit writer, ``amcommit.table.mutate.engine.upsert(table_type="MERGE_ON_READ")``); then

* ``compaction``: :func:`amcommit.table.commit.compaction.compact_store` of those 5
  deltacommits (every file slice has logs: every base file is rewritten);
* ``cow upsert``: one upsert of the same keys (the union of the 5 batches, their last values)
  into the CoW table (every file group holding a key rewritten).

Reported: wall seconds, bytes written (new base files), store requests (every call to the
store: get, put, list, stat, delete, rename), and compaction / CoW upsert. Checked: both tables
then hold the same records (amcommit's read).

``reads`` (:func:`snapshot_vs_read_optimized`): a Merge-on-Read table of ``--rows`` rows in
``--files`` base files (10 files per partition), built by an upsert into an empty folder with
``table_type="MERGE_ON_READ"``, then 5 deltacommits of 1% of the keys each (drawn at random
over every file: nearly every file group gets one log file per deltacommit), all written by
amcommit's MoR writer. Measured on the same table, alternating (``--rounds``, default 3):
:func:`amcommit.table.query.read.read_store` with ``query_type="snapshot"`` (every base file
merged with its log files) against ``query_type="read_optimized"`` (the base files only).
Reported per read: wall seconds, process CPU, bytes read (the bodies of GETs) and requests
(GET, LIST, stat), the snapshot's time over the read-optimized read's (target <= 2x). Local
files (a folder under /dev/shm), fake-gcs-server and fake-gcs-server behind a loopback proxy
adding 50 ms to every request (``--backends local,gcs,gcs50``; the built table uploaded once). Every read is checked: row count, and the snapshot holds exactly the updated values of
the keys the deltacommits updated (their ``_hoodie_commit_time`` the deltacommit's), the
read-optimized read none of them. Results: ``table_mor_reads.json``.

``upserts`` (:func:`upserts`): the same batch upserted into a Merge-on-Read table (a log file
per touched file group) and into a Copy-on-Write one (every touched file group rewritten), each
into a fresh copy of the same rows (``--rows`` in ``--files`` base files, local files under
/dev/shm), alternating (``--rounds``, default 1; a warm-up pair first, not recorded): ``spread``, 10% of the keys over every file
(target: MoR <= 0.25x CoW), and ``late``, 10,000 keys in 10 files (target <= 0.5x); the batches
of :func:`benchmarks.table_upsert.updates`. On local files and on fake-gcs-server behind the
latency proxy (``--backends``, ``--delay``: 50 ms per request by default; the copies uploaded
around the proxy). Reported: wall and CPU seconds, bytes put, store requests, load; checked:
the MoR snapshot equals the CoW table. Results: ``table_mor_upserts.json``.

    python -m benchmarks.table_mor --scenario upserts --rows 200000 --files 40
    python -m benchmarks.table_mor                       # every scenario, 1,000,000 rows x 200 files
    python -m benchmarks.table_mor --scenario compaction --rows 200000 --files 40
    python -m benchmarks.table_mor --scenario reads --quick   # 20,000 rows x 20 files, local, 1 round
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amcommit.store.local import LocalStore
from amcommit.table.commit.compaction import compact_store
from amcommit.table.mutate import engine as mutate
from amcommit.table.query.read import read_store
from amcommit.table.settings import TableConfig
from benchmarks.common import RESULTS, TMP, add_save_arg, load_average, run_info, table
from benchmarks.table_upsert import KW, base_rows, shape

# -- scenario: compaction against a CoW upsert ----------------------------------------------------

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string()), ("ts", pa.int64())])
CFG = TableConfig(table_commit="direct", compact_every=0, io_threads=8)


class Counting:
    """A store that counts its requests (and the bytes of its puts)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests = 0
        self.bytes_put = 0
        self.capabilities = inner.capabilities
        self.iostats = inner.iostats

    @property
    def root_uri(self) -> str:
        return str(self.inner.root_uri)

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if name not in ("get", "get_range", "put", "list", "stat", "delete", "rename", "mkdirs"):
            return fn

        if name == "list":

            def lister(*a: Any, **kw: Any) -> Any:
                self.requests += 1
                return fn(*a, **kw)

            return lister

        async def call(*a: Any, **kw: Any) -> Any:
            self.requests += 1
            if name == "put":
                self.bytes_put += len(a[1])
            return await fn(*a, **kw)

        return call


def _table(ids: np.ndarray, parts: int, v: str, ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "p": pa.array([f"p{int(i) % parts:02d}" for i in ids], pa.string()),
            "v": pa.array([f"{v}{int(i)}" for i in ids], pa.string()),
            "ts": pa.array(np.full(len(ids), ts), pa.int64()),
        },
        schema=SCHEMA,
    )


async def run(rows: int, files: int, parts: int, root: Path) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    ids = np.arange(rows, dtype=np.int64)
    per_file = max(1, rows // files)
    kw: dict[str, Any] = {
        "record_key": "id",
        "partition_by": "p",
        "precombine_field": "ts",
        "config": CFG,
        "max_file_rows": per_file,
    }
    out: dict[str, Any] = {"rows": rows, "files": files, "partitions": parts}
    async with LocalStore(str(root), fsync=False) as local:
        t0 = time.perf_counter()
        await mutate.upsert(local, "mor", _table(ids, parts, "a", 1), table_type="MERGE_ON_READ", **kw)
        await mutate.upsert(local, "cow", _table(ids, parts, "a", 1), **kw)
        out["build_s"] = round(time.perf_counter() - t0, 2)
        batches = [rng.choice(ids, size=max(1, rows // 100), replace=False) for _ in range(5)]
        t0 = time.perf_counter()
        for k, b in enumerate(batches):
            await mutate.upsert(local, "mor", _table(np.sort(b), parts, f"d{k}-", 2 + k), **kw)
        out["deltacommits_s"] = round(time.perf_counter() - t0, 2)
        # the CoW upsert of the same keys: each key's last value
        last: dict[int, int] = {}
        for k, b in enumerate(batches):
            for i in b.tolist():
                last[i] = k
        keys = np.array(sorted(last), dtype=np.int64)
        cow_batch = pa.concat_tables(
            [
                _table(np.array([i for i in keys.tolist() if last[i] == k], np.int64), parts, f"d{k}-", 2 + k)
                for k in range(5)
            ]
        )

        cs = Counting(local)
        t0 = time.perf_counter()
        rep = await compact_store(cs, "mor", config=CFG)  # type: ignore[arg-type]
        comp_s = time.perf_counter() - t0
        out["compaction"] = {
            "wall_s": round(comp_s, 3),
            "bytes_written": rep.bytes_written,
            "bytes_put": cs.bytes_put,
            "requests": cs.requests,
            "file_slices": rep.file_groups,
            "log_files": rep.log_files,
        }
        us = Counting(local)
        t0 = time.perf_counter()
        urep = await mutate.upsert(us, "cow", cow_batch, **kw)  # type: ignore[arg-type]
        up_s = time.perf_counter() - t0
        out["cow_upsert"] = {
            "wall_s": round(up_s, 3),
            "bytes_put": us.bytes_put,
            "requests": us.requests,
            "files_rewritten": urep.files_rewritten,
            "keys": len(keys),
        }
        out["compaction_over_cow_upsert"] = round(comp_s / up_s, 3)
        a = (await read_store(local, "mor")).select(["id", "p", "v", "ts"]).sort_by("id")
        b = (await read_store(local, "cow")).select(["id", "p", "v", "ts"]).sort_by("id")
        assert a.equals(b), "the compacted MoR table and the CoW table differ"
        assert a.num_rows == rows
    return out


def compaction_main(args: argparse.Namespace) -> None:
    """The ``compaction`` scenario: ``--rounds`` runs (default 1), each printed as JSON."""
    for _ in range(args.rounds or 1):
        with tempfile.TemporaryDirectory(prefix="table_mor-") as d:
            res = anyio.run(run, args.rows, args.files, args.partitions, Path(d))
        print(json.dumps(res, indent=2), flush=True)


# -- scenario: MoR upsert against CoW upsert -----------------------------------------------------

UPSERT_TARGETS = {"spread": 0.25, "late": 0.5}
"""Issue 34's targets: a MoR upsert's time over the CoW upsert's of the same batch."""


async def _upsert_timed(backend: Any, dest: str, batch: pa.Table, table_type: str | None) -> dict[str, Any]:
    store = backend.store()
    async with store:
        cs = Counting(store)
        load = load_average()
        t0, c0 = time.perf_counter(), time.process_time()
        kw = {"table_type": table_type} if table_type else {}
        r = await mutate.upsert(cs, dest, batch, config=_mor_config(), **kw, **KW)  # type: ignore[arg-type]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    check = backend.store(direct=True)  # the check reads around the latency proxy
    async with check:
        got = (await read_store(check, dest)).select(["id", "p", "v", "x", "ts"]).sort_by("id")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "bytes_put": cs.bytes_put,
        "requests": cs.requests,
        "updated": r.updated,
        "files_rewritten": r.files_rewritten,
        "files_logged": r.files_logged,
        "load_1m": load[0] if load else None,
        "_table": got,
    }


def upserts(rows: int, files: int, rounds: int, work: Path, backend: Any) -> list[dict[str, Any]]:
    """For ``spread`` (10% of the keys over every file) and ``late`` (10,000 keys in 10
    files; :func:`benchmarks.table_upsert.updates`): the upsert of the batch into a fresh
    copy of a Merge-on-Read table (log files) against one into a fresh copy of the same rows
    as a Copy-on-Write table (file groups rewritten); alternating, ``rounds`` each, on
    ``backend`` (:class:`benchmarks.table_upsert.Backend`: local files, or fake-gcs-server
    behind the latency proxy; the copies uploaded around it). Checked: both tables then
    read the same records (MoR: its snapshot)."""
    from benchmarks.table_upsert import updates

    base = base_rows(rows, files)
    _, per_file = shape(rows, files)
    built = work / "built"

    async def build(dest: str, table_type: str | None) -> None:
        if (built / dest).exists():
            return
        async with LocalStore(str(built), fsync=False) as local:
            kw = {"table_type": table_type} if table_type else {}
            await mutate.upsert(
                local,
                dest,
                base,
                max_file_rows=per_file,
                small_file_limit=0,
                config=_mor_config(),
                **kw,
                **KW,
            )

    anyio.run(build, "mor", "MERGE_ON_READ")
    anyio.run(build, "cow", None)
    out = []
    for which in ("spread", "late"):
        batch = updates(base, which, rows, files)
        for rnd in range(-1 if which == "spread" else 0, rounds):  # -1: a warm-up, not recorded
            res: dict[str, Any] = {
                "scenario": f"upsert_{which}",
                "backend": backend.name,
                "round": rnd,
                "keys": batch.num_rows,
            }
            for kind in ("mor", "cow") if rnd % 2 == 0 else ("cow", "mor"):
                dest = anyio.run(backend.fresh, built / kind)
                res[kind] = anyio.run(
                    _upsert_timed, backend, dest, batch, "MERGE_ON_READ" if kind == "mor" else None
                )
                backend.drop(dest)
            same = res["mor"].pop("_table").equals(res["cow"].pop("_table"))
            res["verified"] = "exact" if same else "WRONG: the MoR snapshot and the CoW table differ"
            res["mor_over_cow"] = round(res["mor"]["wall_s"] / res["cow"]["wall_s"], 3)
            res["target"] = UPSERT_TARGETS[which]
            print(
                f"  {backend.name} {which} round {rnd + 1}: MoR {res['mor']['wall_s']:.2f} s "
                f"({res['mor']['files_logged']} logs, {res['mor']['requests']} requests, "
                f"{res['mor']['bytes_put']:,} B), CoW {res['cow']['wall_s']:.2f} s "
                f"({res['cow']['files_rewritten']} rewritten, {res['cow']['requests']} requests, "
                f"{res['cow']['bytes_put']:,} B), MoR/CoW {res['mor_over_cow']:.3f} (target <= {res['target']}), "
                f"{res['verified']} (load {res['mor']['load_1m']})",
                flush=True,
            )
            if rnd >= 0:
                out.append(res)
    return out


def upserts_main(args: argparse.Namespace) -> None:
    """The ``upserts`` scenario (:func:`upserts`) on every backend (``--backends``; gcs
    behind ``--delay``, default 50 ms per request): each round printed, then a table of the
    medians; results in ``table_mor_upserts.json``."""
    from benchmarks.table_upsert import Backend as UpsertBackend

    out_dir: Path = args.out or (RESULTS if args.save else TMP)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(
        prefix="table_mor_up-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    ) as d:
        # upserts put gcs behind --delay, so gcs50 names the same backend
        names = dict.fromkeys("gcs" if n == "gcs50" else n for n in args.backends.split(","))
        for be_name in names:
            backend = UpsertBackend(be_name, Path(d), args.delay)
            try:
                runs += upserts(args.rows, args.files, args.rounds or 1, Path(d), backend)
            finally:
                backend.close()
    rows = []
    for be in dict.fromkeys(r["backend"] for r in runs):
        for which in ("spread", "late"):
            mine = [r for r in runs if r["scenario"] == f"upsert_{which}" and r["backend"] == be]
            if not mine:
                continue
            med = statistics.median(r["mor_over_cow"] for r in mine)
            rows.append(
                {
                    "backend": be,
                    "scenario": which,
                    "keys": mine[0]["keys"],
                    "mor_s": statistics.median(r["mor"]["wall_s"] for r in mine),
                    "cow_s": statistics.median(r["cow"]["wall_s"] for r in mine),
                    "mor_over_cow": med,
                    "spread": f"{min(r['mor_over_cow'] for r in mine):.3f}-{max(r['mor_over_cow'] for r in mine):.3f}",
                    "target": UPSERT_TARGETS[which],
                    "mor_requests": mine[0]["mor"]["requests"],
                    "cow_requests": mine[0]["cow"]["requests"],
                    "mor_bytes": mine[0]["mor"]["bytes_put"],
                    "cow_bytes": mine[0]["cow"]["bytes_put"],
                    "load_1m": statistics.median(r["mor"]["load_1m"] or 0.0 for r in mine),
                    "verified": "exact" if all(r["verified"] == "exact" for r in mine) else "WRONG",
                }
            )
    cols = list(rows[0]) if rows else []
    print(table(rows, cols, f"MoR upsert vs CoW upsert, {args.rows:,} rows in {args.files} files (median)"))
    path = out_dir / "table_mor_upserts.json"
    path.write_text(json.dumps({"run": run_info(), "summary": rows, "runs": runs}, indent=2) + "\n")
    print(f"results: {path}")
    if any(r["verified"] != "exact" for r in rows):
        sys.exit(1)


# -- scenario: snapshot vs read-optimized reads ----------------------------------------------

DELTAS = 5
"""Deltacommits after the first write."""
DELTA_FRACTION = 0.01
"""Share of the keys each deltacommit updates."""


class ReadCounter:
    """Delegates to a store and counts its read requests: ``get`` (and the bytes of the
    bodies), ``list`` (one per listing started), ``stat``. Everything else passes through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.gets = 0
        self.lists = 0
        self.stats = 0
        self.bytes_read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get(self, path: str, *a: Any, **kw: Any) -> Any:
        self.gets += 1
        body = await self._inner.get(path, *a, **kw)
        self.bytes_read += len(body)
        return body

    async def stat(self, path: str, *a: Any, **kw: Any) -> Any:
        self.stats += 1
        return await self._inner.stat(path, *a, **kw)

    async def list(self, path: str, *a: Any, **kw: Any) -> AsyncIterator[Any]:
        self.lists += 1
        async for o in self._inner.list(path, *a, **kw):
            yield o

    @property
    def requests(self) -> int:
        return self.gets + self.lists + self.stats


# -- the table --------------------------------------------------------------------------------


def _mor_config() -> Any:
    """Direct table commits (MoR log files are written in place), no inline compaction
    (the 5 deltacommits stay in log files: that is what the scenario reads)."""
    return TableConfig(table_commit="direct", compact_every=0)


def build_mor(root: Path, rows: int, files: int) -> tuple[int, dict[int, tuple[str, str]]]:
    """The Merge-on-Read table at ``root/t``: the first write, then :data:`DELTAS`
    deltacommits of :data:`DELTA_FRACTION` of the keys each. Returns (log files written,
    key -> (its final value, the instant that wrote it)) of the updated keys."""
    from amcommit.store.local import LocalStore
    from amcommit.table import mutate

    base = base_rows(rows, files)
    _, per_file = shape(rows, files)
    rng = np.random.default_rng(34)
    expected: dict[int, tuple[str, str]] = {}
    logs = 0

    async def run() -> None:
        nonlocal logs
        store = LocalStore(str(root), fsync=False)
        async with store:
            t0 = time.perf_counter()
            await mutate.upsert(
                store,
                "t",
                base,
                max_file_rows=per_file,
                small_file_limit=0,
                table_type="MERGE_ON_READ",
                config=_mor_config(),
                **KW,
            )
            print(f"  first write: {time.perf_counter() - t0:.1f} s", flush=True)
            for d in range(DELTAS):
                idx = np.sort(rng.choice(rows, int(rows * DELTA_FRACTION), replace=False))
                batch = base.take(pa.array(idx))
                n = batch.num_rows
                values = pa.array([f"delta{d}-{i}" for i in range(n)], pa.string())
                batch = batch.set_column(2, "v", values).set_column(
                    4, "ts", pa.array(np.full(n, 2 + d, dtype=np.int64))
                )
                t0 = time.perf_counter()
                r = await mutate.upsert(store, "t", batch, config=_mor_config(), **KW)
                if r.updated != n or r.inserted or not r.files_logged:
                    raise SystemExit(f"deltacommit {d}: updated {r.updated} of {n}, logged {r.files_logged}")
                logs += r.files_logged
                for k, v in zip(batch.column("id").to_pylist(), values.to_pylist(), strict=True):
                    expected[k] = (v, r.instant)
                print(
                    f"  deltacommit {d + 1}: {n:,} keys, {r.files_logged} log files, "
                    f"{time.perf_counter() - t0:.1f} s",
                    flush=True,
                )

    anyio.run(run)
    return logs, expected


def verify(t: pa.Table, rows: int, expected: dict[int, tuple[str, str]], snapshot: bool) -> str:
    """``exact`` if ``t`` is the table's snapshot (``snapshot``) or its base files' state."""
    if t.num_rows != rows or pc.count_distinct(t.column("id")).as_py() != rows:
        return f"WRONG: {t.num_rows} rows"
    updated = pc.starts_with(t.column("v"), "delta")
    if not snapshot:
        return "exact" if not pc.any(updated).as_py() else "WRONG: log updates in a read-optimized read"
    got = t.filter(updated).select(["id", "v", "_hoodie_commit_time"]).to_pylist()
    seen = {r["id"]: (r["v"], r["_hoodie_commit_time"]) for r in got}
    return "exact" if seen == expected else f"WRONG: {len(seen)} updated keys, expected {len(expected)}"


# -- stores -----------------------------------------------------------------------------------


READ_DELAY = 0.05
"""Seconds the ``gcs50`` backend's loopback proxy adds to every request."""


class Backend:
    """``local`` (the built folder itself, read in place), ``gcs`` (fake-gcs-server, the
    table uploaded once) or ``gcs50`` (the same, read through a loopback proxy adding
    :data:`READ_DELAY` to every request; ``benchmarks.latency_proxy``)."""

    def __init__(self, name: str, built: Path) -> None:
        self.name = name
        self.built = built
        self.server: Any = None
        self.dest = "t"
        self.endpoint = ""
        self._proxy: Any = None
        if name in ("gcs", "gcs50"):
            from amcommit.emulators.fakegcs import FakeGcsServer

            self.server = FakeGcsServer().start()
            self.server.create_bucket("bench")
            self.endpoint = self.server.url
            anyio.run(self._upload)
        if name == "gcs50":
            from benchmarks.clients import Target
            from benchmarks.latency_proxy import proxied

            self._proxy = proxied(Target("gcs", self.server.url, "bench"), delay=READ_DELAY)
            via, _stats = self._proxy.__enter__()
            self.endpoint = via.endpoint

    def store(self) -> Any:
        if self.name == "local":
            from amcommit.store.local import LocalStore

            return LocalStore(str(self.built.parent), fsync=False)
        from amcommit.store.gcs import GcsStore

        return GcsStore("bench", endpoint=self.endpoint, use_move=False)

    async def _upload(self) -> None:
        files = [p for p in self.built.rglob("*") if p.is_file()]
        files.sort(key=lambda p: ".hoodie" in p.parts)  # the timeline last
        store = self.store()
        async with store:
            limit = anyio.Semaphore(32)

            async def put(p: Path) -> None:
                async with limit:
                    body = await anyio.to_thread.run_sync(p.read_bytes)
                    await store.put(f"{self.dest}/{p.relative_to(self.built).as_posix()}", body)

            async with anyio.create_task_group() as tg:
                for p in files:
                    tg.start_soon(put, p)

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.__exit__(None, None, None)
        if self.server is not None:
            self.server.stop()


QUERIES = ("snapshot", "read_optimized")


def snapshot_vs_read_optimized(
    backend: Backend, rows: int, expected: dict[int, tuple[str, str]], rounds: int
) -> list[dict[str, Any]]:
    """``rounds`` reads of each query type, alternating (a warm-up read first, not recorded)."""
    from amcommit.table.query.read import read_store

    async def one(query_type: str) -> dict[str, Any]:
        store = backend.store()
        async with store:
            counter = ReadCounter(store)
            load = load_average()
            t0, c0 = time.perf_counter(), time.process_time()
            t = await read_store(counter, backend.dest, query_type=query_type)  # type: ignore[arg-type]
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {
            "seconds": wall,
            "cpu_s": cpu,
            "bytes_read": counter.bytes_read,
            "gets": counter.gets,
            "lists": counter.lists,
            "requests": counter.requests,
            "rows": t.num_rows,
            "verified": verify(t, rows, expected, query_type == "snapshot"),
            "load_1m": load[0] if load else None,
        }

    anyio.run(one, "snapshot")  # warm-up: imports, connections, page cache
    out = []
    for rnd in range(rounds):
        for q in QUERIES if rnd % 2 == 0 else tuple(reversed(QUERIES)):
            res = anyio.run(one, q)
            res.update(backend=backend.name, scenario="snapshot_vs_read_optimized", query=q, round=rnd)
            print(
                f"  {backend.name} round {rnd + 1} {q}: {res['seconds']:.2f} s (CPU {res['cpu_s']:.2f} s), "
                f"{res['bytes_read']:,} bytes in {res['gets']:,} GETs, {res['lists']} LISTs, "
                f"{res['verified']} (load {res['load_1m']})",
                flush=True,
            )
            out.append(res)
    return out


def summarise_reads(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for be in dict.fromkeys(r["backend"] for r in runs):
        mine = [r for r in runs if r["backend"] == be]
        ro = statistics.median(r["seconds"] for r in mine if r["query"] == "read_optimized")
        for q in QUERIES:
            rs = [r for r in mine if r["query"] == q]
            sec = statistics.median(r["seconds"] for r in rs)
            rows.append(
                {
                    "backend": be,
                    "query": q,
                    "seconds": sec,
                    "best_s": min(r["seconds"] for r in rs),
                    "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                    "over_ro": sec / ro,
                    "bytes_read": rs[0]["bytes_read"],
                    "requests": rs[0]["requests"],
                    "gets": rs[0]["gets"],
                    "lists": rs[0]["lists"],
                    "load_1m": statistics.median(r["load_1m"] or 0.0 for r in rs),
                    "verified": "exact" if all(r["verified"] == "exact" for r in rs) else "WRONG",
                }
            )
    return rows


def reads_main(args: argparse.Namespace) -> None:
    """The ``reads`` scenario (:func:`snapshot_vs_read_optimized`), on every backend."""
    args.rounds = args.rounds or 3
    if args.quick:
        args.rows, args.files, args.rounds, args.backends = 20_000, 20, 1, "local"
    out_dir: Path = args.out or (RESULTS / "quick" if args.quick else RESULTS if args.save else TMP)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_dir = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="amcommit-mor-bench-", dir=base_dir))
    runs: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        logs, expected = build_mor(work / "built", args.rows, args.files)
        built = work / "built" / "t"
        print(
            f"MoR table of {args.rows:,} rows x {args.files} files + {DELTAS} deltacommits "
            f"({logs} log files, {len(expected):,} keys updated) built in {time.perf_counter() - t0:.1f} s"
        )
        for be_name in args.backends.split(","):
            backend = Backend(be_name, built)
            try:
                runs += snapshot_vs_read_optimized(backend, args.rows, expected, args.rounds)
            finally:
                backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = summarise_reads(runs)
    cols = [
        "backend",
        "query",
        "seconds",
        "best_s",
        "cpu_s",
        "over_ro",
        "bytes_read",
        "requests",
        "gets",
        "lists",
        "load_1m",
        "verified",
    ]
    title = (
        f"MoR snapshot vs read-optimized read, {args.rows:,} rows in {args.files} files, "
        f"{DELTAS} deltacommits of {DELTA_FRACTION:.0%} (median s)"
    )
    print(table(rows, cols, title))
    path = out_dir / "table_mor_reads.json"
    payload = {
        "run": run_info(),
        "rows_in_table": args.rows,
        "files": args.files,
        "deltacommits": DELTAS,
        "log_files": logs,
        "summary": rows,
        "runs": runs,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results: {path}")
    if any(r["verified"] != "exact" for r in rows):
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=["compaction", "reads", "upserts", "all"], default="all")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--partitions", type=int, default=20, help="compaction: partitions")
    p.add_argument("--rounds", type=int, default=None, help="compaction: 1, reads: 3")
    p.add_argument(
        "--backends",
        default="local,gcs,gcs50",
        help=(
            "reads: local, gcs (fake-gcs-server), gcs50 (the same + 50 ms per request); "
            "upserts: local, gcs (behind --delay; gcs50 means the same); comma-separated"
        ),
    )
    p.add_argument(
        "--delay", type=float, default=0.05, help="upserts: seconds added to every gcs request (a proxy)"
    )
    p.add_argument("--quick", action="store_true", help="reads: 20,000 rows x 20 files, local, 1 round")
    p.add_argument(
        "--out",
        type=Path,
        help="reads: results directory (default benchmarks/results/tmp, --quick: results/quick)",
    )
    add_save_arg(p)
    args = p.parse_args(argv)
    if args.scenario in ("compaction", "all"):
        compaction_main(args)
    if args.scenario in ("reads", "all"):
        reads_main(args)
    if args.scenario in ("upserts", "all"):
        upserts_main(args)


if __name__ == "__main__":
    main()
