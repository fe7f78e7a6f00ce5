"""LocalStore runs small gets (and small puts without fsync) inline on the event loop and
larger ones in worker threads: either way the bytes, the errors and the request counts are
the same."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import pytest

from amcommit.errors import AlreadyExists, NotFound, StoreError
from amcommit.store.base import PutMode
from amcommit.store.local import INLINE_GET_BYTES, INLINE_PUT_BYTES, LocalStore

SIZES = [0, 1, INLINE_GET_BYTES, INLINE_GET_BYTES + 1, 3 * INLINE_GET_BYTES]


def _threads_used(store: LocalStore, call: object) -> tuple[object, set[str]]:
    """Run ``call(store)`` and return its result and the names of the threads that ran
    store code (a worker-thread hop shows up as a thread other than the loop's)."""
    names: set[str] = set()
    real = anyio.to_thread.run_sync

    async def spy(fn, *args, **kw):  # type: ignore[no-untyped-def]
        def wrapped(*a):  # type: ignore[no-untyped-def]
            names.add(threading.current_thread().name)
            return fn(*a)

        return await real(wrapped, *args, **kw)

    async def main() -> object:
        async with store:
            return await call(store)  # type: ignore[operator]

    anyio.to_thread.run_sync = spy  # type: ignore[assignment]
    try:
        return anyio.run(main), names
    finally:
        anyio.to_thread.run_sync = real  # type: ignore[assignment]


@pytest.mark.parametrize("size", SIZES)
def test_get_returns_every_byte_and_counts_one_request(tmp_path: Path, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    (tmp_path / "f").write_bytes(data)
    store = LocalStore(str(tmp_path), fsync=False)
    got, threads = _threads_used(store, lambda s: s.get("f"))
    assert got == data
    assert store.iostats.snapshot().counters["op_get"] == 1
    assert bool(threads) == (size > INLINE_GET_BYTES)  # larger files: read in a worker thread


def test_get_errors_are_typed_inline_or_not(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    store = LocalStore(str(tmp_path))

    async def main() -> None:
        async with store:
            with pytest.raises(NotFound):
                await store.get("missing")
            with pytest.raises(StoreError):
                await store.get("d")

    anyio.run(main)
    offloaded = LocalStore(str(tmp_path), offload_metadata=True)
    _, threads = _threads_used(offloaded, lambda s: s.stat("d"))
    assert threads  # offload_metadata: every operation in a worker thread


@pytest.mark.parametrize("size", [10, INLINE_PUT_BYTES + 1])
@pytest.mark.parametrize("fsync", [False, True])
def test_put_create_only_inline_or_not(tmp_path: Path, size: int, fsync: bool) -> None:
    store = LocalStore(str(tmp_path), fsync=fsync)

    async def call(s: LocalStore) -> None:
        await s.put("a/b", b"1" * size, mode=PutMode.CREATE)
        with pytest.raises(AlreadyExists):
            await s.put("a/b", b"2", mode=PutMode.CREATE)

    _, threads = _threads_used(store, call)
    assert (tmp_path / "a" / "b").read_bytes() == b"1" * size
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["b"]  # no temporary file left
    assert bool(threads) == (fsync or size > INLINE_PUT_BYTES)
