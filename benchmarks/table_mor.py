"""Merge-on-Read compaction against a Copy-on-Write upsert of the same keys (issue 34).

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

    python -m benchmarks.table_mor                       # 1,000,000 rows x 200 files
    python -m benchmarks.table_mor --rows 200000 --files 40
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pyarrow as pa

from amcommit.store.local import LocalStore
from amcommit.table.commit.compaction import compact_store
from amcommit.table.mutate import engine as mutate
from amcommit.table.query.read import read_store
from amcommit.table.settings import TableConfig

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="table_mor-") as d:
            res = anyio.run(run, args.rows, args.files, args.partitions, Path(d))
        print(json.dumps(res, indent=2), flush=True)


if __name__ == "__main__":
    main()
