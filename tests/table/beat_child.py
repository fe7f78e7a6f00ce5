"""Child process for test_heartbeats: begin a table write, write its tasks while keeping it
alive (``heartbeat``), print the instant, then run "tasks" forever until SIGKILLed.

argv: root dest ttl"""

from __future__ import annotations

import sys

import anyio

from amcommit.committer import CommitterConfig
from amcommit.store.local import LocalStore
from amcommit.table.heartbeat import heartbeat
from tests.table.writehelpers import begin, rows, write_tasks


def main() -> None:
    root, dest, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])

    async def run() -> None:
        store = LocalStore(root)
        cfg = CommitterConfig(writer_ttl=ttl)
        w = await begin(store, dest, config=cfg)
        async with heartbeat(store, dest, w.instant, ttl=ttl):
            await write_tasks(store, w, rows(100, 4, tag="k"))
            print(w.instant, flush=True)
            await anyio.sleep(3600)  # a long task, until killed

    anyio.run(run)


if __name__ == "__main__":
    main()
