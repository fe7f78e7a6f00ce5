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


@pytest.mark.parametrize("fsync", [False, True])
def test_put_into_an_existing_directory_makes_no_path_lookups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    """A put into a directory that exists is open, write, fstat, close and rename: no
    ``stat``/``mkdir`` of the directory or the target (each blocking call on the event loop
    waits for the GIL behind busy worker threads); the info it returns is the published
    file's (a later ``stat`` agrees). A missing directory is still made, a directory at the
    path or a file in the way of the parent still refused, with nothing left behind."""
    import os

    store = LocalStore(str(tmp_path), fsync=fsync)
    calls: list[str] = []
    for name in ("stat", "lstat", "mkdir"):
        real = getattr(os, name)

        def counted(*a, _real=real, _name=name, **kw):  # type: ignore[no-untyped-def]
            calls.append(_name)
            return _real(*a, **kw)

        monkeypatch.setattr(os, name, counted)

    async def main() -> None:
        async with store:
            await store.put("a/b/first", b"1")  # makes a/b
            assert "mkdir" in calls
            calls.clear()
            info = await store.put("a/b/second", b"22")
            info2 = await store.put("a/b/second", b"333", mode=PutMode.OVERWRITE)
            assert calls == []  # no stat, lstat or mkdir
            monkeypatch.undo()
            assert info.size == 2 and info2.size == 3
            assert (await store.stat("a/b/second")).etag == info2.etag != info.etag
            assert await store.get("a/b/second") == b"333"
            (tmp_path / "dir").mkdir()
            with pytest.raises(StoreError, match="is a directory"):
                await store.put("dir", b"x")
            (tmp_path / "file").write_bytes(b"f")
            with pytest.raises(AlreadyExists):
                await store.put("file/x", b"x")
            with pytest.raises(AlreadyExists):
                await store.put("file/y/z", b"x")

    anyio.run(main)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "a",
        "a/b",
        "a/b/first",
        "a/b/second",
        "dir",
        "file",
    ]
    assert (tmp_path / "file").read_bytes() == b"f"


def test_put_names_its_temporary_file_without_a_random_system_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put's temporary name needs no ``getrandom`` per put (on the event loop, a system
    call that releases the GIL); the names stay unique within a process and differ in a
    forked child (its own random token)."""
    import os

    from amcommit.store import local

    draws: list[int] = []
    real = os.urandom

    def counted(n: int) -> bytes:
        draws.append(n)
        return real(n)

    monkeypatch.setattr(os, "urandom", counted)
    store = LocalStore(str(tmp_path), fsync=False)

    async def main() -> None:
        async with store:
            for i in range(5):
                await store.put(f"d/f{i}", b"x")

    anyio.run(main)
    assert draws == []
    monkeypatch.undo()
    names = {local._tmp_name() for _ in range(1000)}
    assert len(names) == 1000
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first name, then out without running pytest's teardown
        os.write(w, local._tmp_name().encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        child = f.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    assert child.startswith(".amcommit-tmp-") and child not in names
    assert child.rsplit("-", 1)[0] != next(iter(names)).rsplit("-", 1)[0]  # a new token
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [f"f{i}" for i in range(5)]
