"""A snapshot read of a Merge-on-Read table fetches the base and log files of many slices at
once (amcommit.table.query.read): GETs of different slices overlap, up to
REQUEST_CONCURRENCY in flight and never more; the rows are the same as those read one GET
at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa

from amcommit.store.local import LocalStore
from amcommit.table.mutate import engine as mutate
from amcommit.table.query import read as read_mod
from amcommit.table.query.read import read_store
from amcommit.table.settings import TableConfig

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string()), ("ts", pa.int64())])
KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "precombine_field": "ts"}
CFG = TableConfig(table_commit="direct", compact_every=0, io_threads=2)
GROUPS = 24
DELTAS = 3
HOLD = 0.4
"""Seconds each GET of a data file is held open: long against scheduling on a busy machine."""


def _rows(n: int, v: str, ts: int) -> pa.Table:
    return pa.table(
        {"id": list(range(n)), "p": ["a"] * n, "v": [f"{v}{i}" for i in range(n)], "ts": [ts] * n},
        schema=SCHEMA,
    )


class InFlight:
    """Delegates to a store; GETs of base and log files wait ``hold`` seconds and are
    counted while in flight (the most at once in ``peak``)."""

    def __init__(self, inner: Any, hold: float) -> None:
        self._inner = inner
        self.hold = hold
        self.now = 0
        self.peak = 0
        self.gets = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get(self, path: str, *a: Any, **kw: Any) -> Any:
        if "/.hoodie/" in path or path.endswith("hoodie.properties"):
            return await self._inner.get(path, *a, **kw)
        self.gets += 1
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await anyio.sleep(self.hold)
            return await self._inner.get(path, *a, **kw)
        finally:
            self.now -= 1


def test_snapshot_read_overlaps_slices_gets_up_to_the_bound(tmp_path: Path) -> None:
    n = GROUPS * 10

    async def build() -> None:
        async with LocalStore(str(tmp_path), fsync=False) as s:
            await mutate.upsert(
                s, "t", _rows(n, "a", 1), table_type="MERGE_ON_READ", max_file_rows=10, config=CFG, **KW
            )
            for d in range(DELTAS):
                await mutate.upsert(s, "t", _rows(n, f"d{d}-", 2 + d), config=CFG, **KW)

    anyio.run(build)

    async def read(hold: float) -> tuple[pa.Table, InFlight]:
        async with LocalStore(str(tmp_path), fsync=False) as s:
            counted = InFlight(s, hold)
            t = await read_store(counted, "t")  # type: ignore[arg-type]
            return t, counted

    t, counted = anyio.run(read, HOLD)
    assert counted.gets == GROUPS * (1 + DELTAS)
    # 24 slices of 4 files: more than the 8 slices x 4 files read at once before, and the bound
    assert counted.peak == read_mod.REQUEST_CONCURRENCY, counted.peak
    assert sorted(t.column("v").to_pylist()) == sorted(f"d{DELTAS - 1}-{i}" for i in range(n))
    # the same rows as a read that is not held
    plain, _ = anyio.run(read, 0.0)
    assert plain.equals(t)
