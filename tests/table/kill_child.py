"""Child process for test_write_kills: commit (or abort) a table write and SIGKILL itself
just before its N-th mutating store request (put, rename, delete, mkdirs).

Prints ``completed`` if the operation finished before request N.

Two ways in: ``python -m tests.table.kill_child ROOT DEST INSTANT commit|abort N [TTL]`` (a
local store), or :func:`run_spec` with JSON ``{"backend": INFO, "dest": D, "instant": I,
"what": "commit"|"abort", "n": N, "config": {...}}`` (any backend of tests.matrix.stores;
the target of a process forked from a fork server, as tests/table/test_write_kills.py runs
it on the emulators)."""

from __future__ import annotations

import sys

import anyio

from amcommit.api import abort_job, commit_job
from amcommit.committer import CommitterConfig
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.settings import TableConfig
from tests.table.killstore import KillStore


def KillAt(inner: Store, n: int) -> KillStore:
    """A store that SIGKILLs the process before its ``n``-th mutating request."""
    return KillStore(inner, None, n)


def run_spec(text: str) -> None:
    """Run one JSON spec (module doc) in this process, then exit it."""
    import json

    from tests.matrix.stores import open_store

    spec = json.loads(text)
    cfg = CommitterConfig(**spec.get("config", {}))

    async def run() -> None:
        store = KillAt(open_store(spec["backend"]), int(spec["n"]))
        async with store.inner:
            op = commit_job if spec["what"] == "commit" else abort_job
            await op(store, spec["dest"], spec["instant"], config=cfg)  # type: ignore[arg-type]

    anyio.run(run)
    print("completed")
    sys.exit(0)


def main() -> None:
    root, dest, instant, what, n = sys.argv[1:6]
    ttl = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0

    async def run() -> None:
        # no fsync: a SIGKILL loses no written page (fsync is about power loss), and fsyncs
        # on a busy shared disk cost seconds per child
        store = KillAt(LocalStore(root, fsync=False), int(n))
        cfg = TableConfig(io_threads=1, writer_ttl=ttl or 600.0, lock_ttl=ttl or 60.0)
        if what == "commit":
            await commit_job(store, dest, instant, config=cfg)  # type: ignore[arg-type]
        else:
            await abort_job(store, dest, instant, config=cfg)  # type: ignore[arg-type]

    anyio.run(run)
    print("completed")


if __name__ == "__main__":
    main()
