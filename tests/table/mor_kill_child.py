"""Child process of test_mor_write's kill test: a Merge-on-Read upsert through the engine
API SIGKILLed just before its N-th mutating store request (begin, log and base files,
markers, task commit, job commit).

    python -m tests.table.mor_kill_child ROOT DEST N ROWS_JSON

Prints ``completed <instant>`` if it was not killed."""

from __future__ import annotations

import json
import sys

import anyio
import pyarrow as pa

from amcommit.store.local import LocalStore
from amcommit.table.mutate import engine as mutate
from amcommit.table.settings import TableConfig
from tests.table.kill_child import KillAt
from tests.table.test_mutate import SCHEMA


def main() -> None:
    root, dest, n, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    cfg = TableConfig(io_threads=1, writer_ttl=600.0, lock_ttl=60.0, table_commit="direct")

    async def run() -> str:
        store = KillAt(LocalStore(root, fsync=False), n)
        rep = await mutate.upsert(
            store,  # type: ignore[arg-type]
            dest,
            pa.Table.from_pylist(rows, schema=SCHEMA),
            record_key="id",
            partition_by="p",
            precombine_field="ts",
            config=cfg,
            table_type="MERGE_ON_READ",
        )
        return rep.instant

    print(f"completed {anyio.run(run)}", flush=True)


if __name__ == "__main__":
    main()
