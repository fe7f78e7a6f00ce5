"""Child process for test_lock_release and test_lock_marker: one table write (two tasks,
one file per partition each) whose commit SIGKILLs this process at the ``nth`` put (or
delete) of the table's commit lock or of a release marker next to it
(``_commit.lock.released.<token>``), ``before`` it is sent or ``after`` the store executed
it (its answer never read).

argv: ``JSON`` ``{"backend": INFO, "dest", "first", "n", "nth", "when"[, "release"]}`` (a
backend of ``tests.matrix.stores``; ``release``: the ``lock_release`` setting, default
``rewrite``; ``remember``: ``[etag, token]`` of a lock version released by marker that
this process then acts as if it had released itself); prints ``completed`` if it was not
killed."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from amcommit.committer.config import CommitterConfig
from amcommit.committer.lock import LOCK_NAME
from amcommit.store.base import ObjectInfo, Store
from tests.table.killstore import KillStore
from tests.table.writehelpers import rows, write

T = TypeVar("T")


def _lockish(path: str) -> bool:
    """The lock, or a release marker of it."""
    name = path.rpartition("/")[2]
    return name == LOCK_NAME or name.startswith(LOCK_NAME + ".released.")


class KillAtLockPut(KillStore):
    """SIGKILL at the ``nth`` put or delete of the lock or a release marker, ``before`` or
    ``after`` it (the other mutating requests pass)."""

    def __init__(self, inner: Store, nth: int, when: str) -> None:
        super().__init__(inner, "(?!)")
        self.lock_nth, self.when, self.lock_puts = nth, when, 0

    async def _at(self, path: str, call: Callable[[], Awaitable[T]]) -> T:
        if not _lockish(path):
            return await call()
        self.lock_puts += 1
        hit = self.lock_puts == self.lock_nth
        if hit and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        out = await call()
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    async def put(self, path: str, data: bytes, **kw: Any) -> ObjectInfo:
        return await self._at(path, lambda: self.inner.put(path, data, **kw))

    async def delete(self, path: str, **kw: Any) -> bool:
        return await self._at(path, lambda: self.inner.delete(path, **kw))


def main() -> None:
    from tests.matrix.stores import open_store

    spec = json.loads(sys.argv[1])

    async def run() -> None:
        async with open_store(spec["backend"]) as inner:
            if spec.get("remember"):
                from amcommit.committer.lock import lock_path
                from amcommit.coord import lease
                from amcommit.table.format.naming import STAGING_DIR

                path = lock_path(spec["dest"], staging=STAGING_DIR)
                etag, token = spec["remember"]
                lease._RELEASED_HERE[(inner.root_uri, path)] = (etag, token)
            store = KillAtLockPut(inner, int(spec["nth"]), spec["when"])
            release = spec.get("release", "rewrite")
            cfg = CommitterConfig(lock_ttl=60.0, lock_wait=60.0, io_threads=2, lock_release=release)
            await write(store, spec["dest"], rows(int(spec["first"]), int(spec["n"])), config=cfg)  # type: ignore[arg-type]
        print("completed", flush=True)

    anyio.run(run)


if __name__ == "__main__":
    main()
