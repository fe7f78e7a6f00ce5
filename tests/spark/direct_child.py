"""A second writer process for test_tables' two-writer test (the engine's direct writes, no
JVM): begins a write into an existing table ``DEST`` (columns ``id``, ``cat``; partitioned
by ``cat``), writes one base file per partition in place under its marker (ids ``START`` to
``START + 299``, three tasks), commits the tasks, writes its instant into the file ``READY``,
then waits for the file ``RELEASE`` and commits the write. Prints ``done``.

    python -m tests.spark.direct_child ROOT DEST START READY RELEASE
"""

from __future__ import annotations

import os
import sys
import time

import anyio
import pyarrow as pa

from amcommit.api import commit_job
from amcommit.store.local import LocalStore
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import base_file_name, new_file_id, write_token
from amcommit.table.format.schema import avro_schema
from amcommit.table.write.direct import commit_direct_task, write_in_place
from amcommit.table.write.task import begin_write
from tests.table.writehelpers import parquet_bytes

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("cat", pa.string(), nullable=False)])


async def begin_and_write(root: str, dest: str, start: int) -> str:
    """Begin the write and commit its three tasks; its instant."""
    store = LocalStore(root)
    async with store:
        # (with its schema: a direct write's commit cannot yet derive it from a written file)
        w = await begin_write(store, dest, operation=Operation.INSERT, avro_schema=avro_schema(SCHEMA, "two"))
        for k in range(3):
            ids = [i for i in range(start, start + 300) if i % 3 == k]
            part = f"cat={k}"
            name = base_file_name(new_file_id(), write_token(k, 0, 0), w.instant)
            data = parquet_bytes(
                [{"id": i, "cat": str(k)} for i in ids], SCHEMA, meta=(w.instant, part, name, k)
            )
            info = await write_in_place(store, dest, w.instant, f"{part}/{name}", data)
            assert info is not None
            attempt = f"attempt_{w.instant}_m_{k:06d}_0"
            files = [(f"{part}/{name}", info.size, info.etag, len(ids))]
            await commit_direct_task(store, w.layout, f"task_{w.instant}_m_{k:06d}", attempt, files)
        return w.instant


async def commit(root: str, dest: str, instant: str) -> None:
    store = LocalStore(root)
    async with store:
        await commit_job(store, dest, instant)


def main(root: str, dest: str, start: int, ready: str, release: str) -> None:
    instant = anyio.run(begin_and_write, root, dest, start)
    with open(ready + ".tmp", "w") as f:
        f.write(instant)
    os.replace(ready + ".tmp", ready)
    deadline = time.monotonic() + 180
    while not os.path.exists(release):
        assert time.monotonic() < deadline, "never released"
        time.sleep(0.05)
    anyio.run(commit, root, dest, instant)
    print("done", flush=True)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), a[3], a[4])
