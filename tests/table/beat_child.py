"""Child process for test_heartbeats: begin a table write, write its tasks while keeping it
alive (``heartbeat``), print the instant, then run "tasks" forever until SIGKILLed.

argv: ``root dest ttl`` (a local store), or ``--spec JSON`` with ``{"backend": INFO,
"dest", "ttl"}`` (any backend of ``tests.matrix.stores``)."""

from __future__ import annotations

import json
import sys

import anyio

from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.heartbeat import heartbeat
from tests.table.writehelpers import begin, rows, write_tasks


def run(store: Store, dest: str, ttl: float) -> None:
    async def go() -> None:
        cfg = TableConfig(writer_ttl=ttl)
        async with store:
            w = await begin(store, dest, config=cfg)
            async with heartbeat(store, dest, w.instant, ttl=ttl):
                await write_tasks(store, w, rows(100, 4, tag="k"))
                print(w.instant, flush=True)
                await anyio.sleep(3600)  # a long task, until killed

    anyio.run(go)


def main() -> None:
    if sys.argv[1] == "--spec":
        from tests.matrix.stores import open_store

        spec = json.loads(sys.argv[2])
        run(open_store(spec["backend"]), spec["dest"], float(spec["ttl"]))
        return
    root, dest, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
    run(LocalStore(root), dest, ttl)


if __name__ == "__main__":
    main()
