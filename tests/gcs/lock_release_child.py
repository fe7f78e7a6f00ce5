"""Child process for test_lock_release: one table write (two tasks, one file per partition
each) whose commit SIGKILLs this process at the ``nth`` put of the table's commit lock,
``before`` it is sent or ``after`` the store executed it (its answer never read).

argv: ``JSON`` ``{"backend": INFO, "dest", "first", "n", "nth", "when"}`` (a backend of
``tests.matrix.stores``); prints ``completed`` if it was not killed."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import anyio

from amcommit.committer.config import CommitterConfig
from amcommit.committer.lock import LOCK_NAME
from amcommit.store.base import ObjectInfo, Store
from tests.table.killstore import KillStore
from tests.table.writehelpers import rows, write


class KillAtLockPut(KillStore):
    """SIGKILL at the ``nth`` put of a name ending in the lock's name, ``before`` or
    ``after`` it (the other mutating requests pass)."""

    def __init__(self, inner: Store, nth: int, when: str) -> None:
        super().__init__(inner, "(?!)")
        self.lock_nth, self.when, self.lock_puts = nth, when, 0

    async def put(self, path: str, data: bytes, **kw: Any) -> ObjectInfo:
        if not path.endswith("/" + LOCK_NAME):
            return await self.inner.put(path, data, **kw)
        self.lock_puts += 1
        hit = self.lock_puts == self.lock_nth
        if hit and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        info = await self.inner.put(path, data, **kw)
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
        return info


def main() -> None:
    from tests.matrix.stores import open_store

    spec = json.loads(sys.argv[1])

    async def run() -> None:
        async with open_store(spec["backend"]) as inner:
            store = KillAtLockPut(inner, int(spec["nth"]), spec["when"])
            cfg = CommitterConfig(lock_ttl=60.0, lock_wait=60.0, io_threads=2, lock_release="rewrite")
            await write(store, spec["dest"], rows(int(spec["first"]), int(spec["n"])), config=cfg)  # type: ignore[arg-type]
        print("completed", flush=True)

    anyio.run(run)


if __name__ == "__main__":
    main()
