"""Writer heartbeats of a Hudi table: ``.hoodie/.heartbeat/<instant>`` (Hudi's own place).

A writer proves it is alive by rewriting its heartbeat file (a whole-object put: atomic; the
body is its wall-clock time, the store's modification time is what is judged). The commit of
a later instant judges an earlier inflight instant by it (:func:`writer_alive`, pure): its
writer is alive while the heartbeat is younger than ``writer_ttl``; an instant that never
heartbeated is alive while its allocation time is younger than ``writer_ttl``.

Who beats: :func:`~amcommit.table.write.begin_write` (first beat), every task setup and task
commit, a running job commit (:func:`heartbeat`, for its whole duration, including a wait for
an earlier instant). An engine user whose tasks run longer than ``writer_ttl`` between task
setups and commits keeps the write alive with ``async with heartbeat(store, dest, instant)``.

Clocks: the store's modification times are compared with the judging process's wall clock;
the two must agree within a small fraction of ``writer_ttl`` (default 120 s).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from amcommit.errors import NotFound, StoreError
from amcommit.store.base import PutMode, Store, basename, join
from amcommit.table.naming import HEARTBEAT_DIR, check_instant, heartbeat_path, is_instant, parse_instant

__all__ = ["beat", "delete_beat", "heartbeat", "last_beats", "writer_alive"]


async def beat(store: Store, dest: str, instant: str) -> None:
    """Refresh the heartbeat of ``instant``'s writer (one put; atomic)."""
    await store.put(join(dest, heartbeat_path(instant)), repr(time.time()).encode(), mode=PutMode.OVERWRITE)


async def try_beat(store: Store, dest: str, instant: str) -> None:
    """:func:`beat`, ignoring store errors (a missed beat is retried at the next one)."""
    try:
        await beat(store, dest, instant)
    except StoreError:
        pass


async def delete_beat(store: Store, dest: str, instant: str) -> None:
    """Remove the heartbeat of ``instant`` (idempotent)."""
    try:
        await store.delete(join(dest, heartbeat_path(instant)))
    except NotFound:
        pass


async def last_beats(store: Store, dest: str) -> dict[str, float]:
    """Instant -> time of its writer's last heartbeat (store modification time, else the
    body), from one listing of ``.hoodie/.heartbeat/``."""
    out: dict[str, float] = {}
    try:
        async for info in store.list(join(dest, HEARTBEAT_DIR), recursive=False):
            name = basename(info.path)
            if info.is_dir or not is_instant(name):
                continue
            if info.mtime is not None:
                out[name] = info.mtime
                continue
            try:
                out[name] = float((await store.get(info.path)).decode())
            except (NotFound, ValueError, UnicodeDecodeError):
                continue
    except NotFound:
        pass
    return out


def writer_alive(instant: str, last_beat: float | None, now: float, ttl: float) -> bool:
    """Whether the writer of ``instant`` counts as alive at wall-clock ``now`` (pure)."""
    seen = last_beat if last_beat is not None else parse_instant(instant).timestamp()
    return now - seen <= ttl


@asynccontextmanager
async def heartbeat(store: Store, dest: str, instant: str, *, ttl: float = 120.0) -> AsyncIterator[None]:
    """Keep ``instant``'s writer alive while the block runs: beat now, then every ``ttl/4``.
    The heartbeat file is left in place on exit (the commit or rollback removes it)."""
    check_instant(instant)
    await beat(store, dest, instant)

    async def loop() -> None:
        while True:
            await anyio.sleep(ttl / 4)
            await try_beat(store, dest, instant)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as eg:  # the block's own error, not a group of one
        if len(eg.exceptions) == 1:
            raise eg.exceptions[0] from None
        raise
