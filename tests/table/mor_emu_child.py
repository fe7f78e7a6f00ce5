"""Child process of test_mor_kills: a Merge-on-Read upsert (a deltacommit through the engine
API) or a compaction on any backend of tests.matrix.stores, SIGKILLed just before its N-th
mutating store request. The target of a process forked from a fork server
(:func:`run_spec`, JSON ``{"backend": INFO, "dest": D, "op": "upsert"|"compact", "n": N,
"rows": [...]}``, and optionally ``"pattern": P``: only the mutating requests whose
description matches the regular expression ``P`` count, see tests.table.killstore); exits 0
if it was not killed."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import pyarrow as pa

from amcommit.table.settings import TableConfig
from tests.table.kill_child import KillAt
from tests.table.killstore import KillStore

CHILD_CFG: dict[str, Any] = {
    "io_threads": 1,
    "load_threads": 1,
    "retry_base_delay": 0.005,
    "retry_max_delay": 0.1,
    "writer_ttl": 600.0,
    "lock_ttl": 60.0,
    "table_commit": "direct",
    "compact_every": 0,
}


def run_spec(text: str) -> None:
    """Run one JSON spec (module doc) in this process, then exit it."""
    from amcommit.table.commit.compaction import compact_store
    from amcommit.table.mutate import engine as mutate
    from tests.matrix.stores import open_store
    from tests.table.test_mutate import SCHEMA

    spec = json.loads(text)
    cfg = TableConfig(**CHILD_CFG)

    async def run() -> None:
        inner = open_store(spec["backend"])
        pattern = spec.get("pattern")
        store = (
            KillAt(inner, int(spec["n"])) if pattern is None else KillStore(inner, pattern, int(spec["n"]))
        )
        async with store.inner:
            if spec["op"] == "upsert":
                await mutate.upsert(
                    store,  # type: ignore[arg-type]
                    spec["dest"],
                    pa.Table.from_pylist(spec["rows"], schema=SCHEMA),
                    record_key="id",
                    partition_by="p",
                    precombine_field="ts",
                    config=cfg,
                    table_type=spec.get("table_type", "MERGE_ON_READ"),
                )
            else:
                await compact_store(store, spec["dest"], config=cfg)  # type: ignore[arg-type]

    anyio.run(run)
    sys.exit(0)
