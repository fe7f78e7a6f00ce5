"""Child process of test_compaction's kill test: a compaction of a Merge-on-Read table
SIGKILLed just before its N-th mutating store request (lock, plan, inflight, base files,
commit, lock release).

    python -m tests.table.compact_kill_child ROOT DEST N

Prints ``completed <instant>`` if it was not killed."""

from __future__ import annotations

import sys

import anyio

from amcommit.store.local import LocalStore
from amcommit.table.commit.compaction import compact_store
from amcommit.table.settings import TableConfig
from tests.table.kill_child import KillAt


def main() -> None:
    root, dest, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = TableConfig(io_threads=1, writer_ttl=600.0, lock_ttl=60.0, table_commit="direct", compact_every=0)

    async def run() -> str | None:
        store = KillAt(LocalStore(root, fsync=False), n)
        rep = await compact_store(store, dest, config=cfg)  # type: ignore[arg-type]
        return rep.instant

    print(f"completed {anyio.run(run)}", flush=True)


if __name__ == "__main__":
    main()
