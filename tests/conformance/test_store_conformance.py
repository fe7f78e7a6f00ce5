"""Every promise of the Store protocol, checked on every backend in CONFORMANCE_BACKENDS."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amcommit.errors import AlreadyExists, InvalidInput, NotFound, PreconditionFailed, Transient
from amcommit.paths import join
from amcommit.store.base import BatchDeleter, PutMode, RenameRequest, UpdateIf, batch_deleter, batch_renamer
from amcommit.testing.faults import FaultyStore
from tests.backends import StoreUnderTest

NAMES = ["plain.txt", "with space.bin", "unicodé-ü.txt", "pct%41.txt", "plus+sign.txt", "hash#tag.txt"]


async def listing(sut: StoreUnderTest, prefix: str, recursive: bool = True) -> dict[str, int]:
    return {i.path: i.size async for i in sut.store.list(prefix, recursive=recursive) if not i.is_dir}


async def test_read_range(sut: StoreUnderTest) -> None:
    """read_range: a ranged read where the store offers one (GCS, Azure Blob, ADLS Gen2),
    the whole object sliced elsewhere; the same bytes either way, fewer at the end."""
    from amcommit.store.base import read_range

    s, p = sut.store, join(sut.base, "ranged.bin")
    data = bytes(range(256)) * 40
    await s.put(p, data)
    assert await read_range(s, p, 0, 10) == data[:10]
    assert await read_range(s, p, 5000, 777) == data[5000:5777]
    assert await read_range(s, p, len(data) - 8, 8) == data[-8:]
    assert await read_range(s, p, len(data) - 8, 100) == data[-8:]
    assert await read_range(s, p, 3, 0) == b""
    with pytest.raises(NotFound):
        await read_range(s, join(sut.base, "absent.bin"), 0, 4)


@pytest.mark.parametrize("wrapper", ["faulty", "fenced", "kill"])
async def test_read_range_through_a_wrapper(
    sut: StoreUnderTest, wrapper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrapped store (fault injection, the lease's fence, the kill tests' store) still
    reads ranges with one ranged request where the store under it has them: the wrapped
    store's whole-object ``get`` is never called for them; the same bytes either way."""
    from amcommit.coord.lease import FencedStore
    from amcommit.store.base import read_range
    from tests.table.killstore import KillStore

    class _Open:
        def check(self, op: str, path: str) -> None:
            pass

    s, p = sut.store, join(sut.base, "wrapped.bin")
    data = bytes(range(256)) * 40
    await s.put(p, data)
    ranged = getattr(s, "get_range", None) is not None
    if ranged:

        async def no_whole_get(path: str) -> bytes:
            raise AssertionError(f"a whole-object get of {path} for a ranged read")

        monkeypatch.setattr(s, "get", no_whole_get)
    w: Any = {
        "faulty": lambda: FaultyStore(s),
        "fenced": lambda: FencedStore(s, _Open()),
        "kill": lambda: KillStore(s, None, 10**9),
    }[wrapper]()
    assert await read_range(w, p, 5000, 777) == data[5000:5777]
    assert await read_range(w, p, len(data) - 8, 100) == data[-8:]
    with pytest.raises(NotFound):
        await read_range(w, join(sut.base, "absent.bin"), 0, 4)
    if wrapper == "faulty":  # a fault rule on get applies to ranged reads too
        w.fail("get", error=Transient, count=1)
        with pytest.raises(Transient):
            await read_range(w, p, 0, 4)


async def test_put_get_stat_roundtrip(sut: StoreUnderTest) -> None:
    s, p = sut.store, join(sut.base, "a/b/file.bin")
    data = bytes(range(256)) * 17
    info = await s.put(p, data)
    assert info.path == p and info.size == len(data) and info.etag
    assert await s.get(p) == data
    st = await s.stat(p)
    assert st.size == len(data) and not st.is_dir and st.etag == info.etag


async def test_empty_file(sut: StoreUnderTest) -> None:
    p = join(sut.base, "empty")
    await sut.store.put(p, b"")
    assert await sut.store.get(p) == b""
    assert (await sut.store.stat(p)).size == 0


@pytest.mark.parametrize("name", NAMES)
async def test_special_characters_in_names(sut: StoreUnderTest, name: str) -> None:
    s = sut.store
    src = join(sut.base, "dir with space", name)
    dst = join(sut.base, "out", "ü dir", name)
    await s.put(src, name.encode())
    assert (await s.stat(src)).size == len(name.encode())
    assert await listing(sut, join(sut.base, "dir with space")) == {src: len(name.encode())}
    await s.rename(src, dst)
    assert await s.get(dst) == name.encode()
    assert await listing(sut, join(sut.base, "out")) == {dst: len(name.encode())}


async def test_missing_paths_raise_not_found(sut: StoreUnderTest) -> None:
    s, p = sut.store, join(sut.base, "nope")
    with pytest.raises(NotFound):
        await s.stat(p)
    with pytest.raises(NotFound):
        await s.get(p)
    with pytest.raises(NotFound):
        await s.rename(p, join(sut.base, "elsewhere"))
    assert await listing(sut, p) == {}


async def test_paths_below_a_file_do_not_exist(sut: StoreUnderTest) -> None:
    """A path below a file (``f/x`` where ``f`` is a file) does not exist, as on every store:
    ``stat`` and ``get`` raise NotFound, ``delete`` answers False (a job's rollback and its
    old-file deletes look at such paths when a file stands where the job wrote a directory)."""
    s, b = sut.store, sut.base
    await s.put(join(b, "f"), b"a file")
    with pytest.raises(NotFound):
        await s.stat(join(b, "f/x"))
    with pytest.raises(NotFound):
        await s.get(join(b, "f/x/y"))
    assert await s.delete(join(b, "f/x")) is False
    assert await s.delete(join(b, "f/x"), recursive=True) is False
    assert await s.get(join(b, "f")) == b"a file"


async def test_put_modes(sut: StoreUnderTest) -> None:
    s, p = sut.store, join(sut.base, "modes")
    first = await s.put(p, b"one", mode=PutMode.CREATE)
    with pytest.raises(AlreadyExists):
        await s.put(p, b"two", mode=PutMode.CREATE)
    assert await s.get(p) == b"one"
    second = await s.put(p, b"two!", mode=PutMode.OVERWRITE)
    assert second.etag != first.etag
    assert await s.get(p) == b"two!"
    with pytest.raises(PreconditionFailed):
        await s.put(p, b"three", mode=UpdateIf(first.etag or "x"))
    assert await s.get(p) == b"two!"
    third = await s.put(p, b"three", mode=UpdateIf(second.etag or "x"))
    assert await s.get(p) == b"three" and third.etag not in (first.etag, second.etag)


async def test_concurrent_create_only_one_wins(sut: StoreUnderTest) -> None:
    s, p = sut.store, join(sut.base, "race")
    wins: list[int] = []
    losses: list[int] = []

    async def one(i: int) -> None:
        try:
            await s.put(p, f"writer {i}".encode(), mode=PutMode.CREATE)
            wins.append(i)
        except AlreadyExists:
            losses.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, i)
    assert len(wins) == 1 and len(losses) == 7
    assert await s.get(p) == f"writer {wins[0]}".encode()


async def test_list_recursive_and_children(sut: StoreUnderTest) -> None:
    s, b = sut.store, sut.base
    files = {join(b, "top.txt"): 1, join(b, "d1/x.txt"): 2, join(b, "d1/d2/y.txt"): 3, join(b, "d3/z"): 4}
    for p, n in files.items():
        await s.put(p, b"x" * n)
    assert await listing(sut, b) == files
    assert await listing(sut, join(b, "d1")) == {join(b, "d1/x.txt"): 2, join(b, "d1/d2/y.txt"): 3}
    children = {i.path: i.is_dir async for i in s.list(b, recursive=False)}
    assert children == {join(b, "top.txt"): False, join(b, "d1"): True, join(b, "d3"): True}
    # a prefix is a directory, not a string prefix
    assert await listing(sut, join(b, "d")) == {}


async def test_rename_moves_and_never_overwrites(sut: StoreUnderTest) -> None:
    s, b = sut.store, sut.base
    src, dst = join(b, "src/part-0"), join(b, "dst/deep/part-0")
    info = await s.put(src, b"payload")
    res = await s.rename(src, dst, src_etag=info.etag)
    assert res.dst == dst and not res.recovered
    assert await s.get(dst) == b"payload"
    with pytest.raises(NotFound):
        await s.stat(src)
    if s.capabilities.etag_kept_on_rename:
        assert (await s.stat(dst)).etag == info.etag
    # never overwrite
    await s.put(src, b"second")
    with pytest.raises(AlreadyExists):
        await s.rename(src, dst)
    assert await s.get(dst) == b"payload"
    assert await s.get(src) == b"second"


async def test_rename_source_etag_precondition(sut: StoreUnderTest) -> None:
    s, b = sut.store, sut.base
    src, dst = join(b, "s"), join(b, "d")
    old = await s.put(src, b"v1")
    await s.put(src, b"v2 changed")
    with pytest.raises(PreconditionFailed):
        await s.rename(src, dst, src_etag=old.etag)
    assert await s.get(src) == b"v2 changed"
    with pytest.raises(NotFound):
        await s.stat(dst)


async def test_rename_provenance_mark(sut: StoreUnderTest) -> None:
    s, b = sut.store, sut.base
    if not s.capabilities.rename_provenance:
        pytest.skip("store keeps the etag on rename; no provenance mark needed")
    await s.put(join(b, "s"), b"data")
    await s.rename(join(b, "s"), join(b, "d"), rename_id="op-123")
    assert (await s.stat(join(b, "d"))).rename_id == "op-123"


async def test_concurrent_renames_of_one_source(sut: StoreUnderTest) -> None:
    s, b = sut.store, sut.base
    if not s.capabilities.atomic_rename:
        pytest.skip("copy-based rename: concurrent renames of one source are not exclusive")
    src = join(b, "one")
    await s.put(src, b"x")
    ok: list[str] = []

    async def one(i: int) -> None:
        try:
            await s.rename(src, join(b, f"to-{i}"))
            ok.append(str(i))
        except NotFound:
            pass

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(one, i)
    assert len(ok) == 1
    assert set(await listing(sut, b)) == {join(b, f"to-{ok[0]}")}


async def test_delete(sut: StoreUnderTest) -> None:
    s, b = sut.store, sut.base
    await s.put(join(b, "f"), b"1")
    assert await s.delete(join(b, "f")) is True
    assert await s.delete(join(b, "f")) is False
    for i in range(5):
        await s.put(join(b, f"tree/sub{i % 2}/f{i}"), b"x")
    if s.capabilities.directories:
        with pytest.raises(PreconditionFailed):
            await s.delete(join(b, "tree"))
    assert await s.delete(join(b, "tree"), recursive=True) is True
    assert await listing(sut, join(b, "tree")) == {}
    assert await s.delete(join(b, "tree"), recursive=True) is False


async def test_mkdirs(sut: StoreUnderTest) -> None:
    s, b = sut.store, sut.base
    await s.mkdirs(join(b, "x/y/z"))
    await s.mkdirs(join(b, "x/y/z"))  # idempotent
    if s.capabilities.directories:
        st = await s.stat(join(b, "x/y"))
        assert st.is_dir
        await s.put(join(b, "file"), b"f")
        with pytest.raises(AlreadyExists):
            await s.mkdirs(join(b, "file/sub"))


async def test_large_file(sut: StoreUnderTest) -> None:
    s, p = sut.store, join(sut.base, "big.bin")
    data = bytes(range(251)) * (9 * 1024 * 1024 // 251)  # ~9 MiB: exercises chunked uploads
    await s.put(p, data)
    assert (await s.stat(p)).size == len(data)
    assert await s.get(p) == data


@pytest.mark.parametrize("bad", ["/abs", "trail/", "a//b", "a/../b", "./a"])
async def test_bad_paths_rejected(sut: StoreUnderTest, bad: str) -> None:
    with pytest.raises(InvalidInput):
        await sut.store.put(bad, b"x")


async def test_root_uri_round_trip(sut: StoreUnderTest) -> None:
    from amcommit.paths import path_to_uri, uri_to_path

    p = join(sut.base, "d ir/f%#+é")
    uri = path_to_uri(sut.store.root_uri, p)
    assert uri_to_path(sut.store.root_uri, uri) == p


# -- delete_batch (stores with Capabilities.delete_batch_max: Blob, and wrappers of it) ---------


def _batcher(sut: StoreUnderTest) -> BatchDeleter:
    b = batch_deleter(sut.store)
    if b is None:
        assert sut.store.capabilities.delete_batch_max == 0
        pytest.skip(f"{sut.name} has no delete_batch")
    return b


async def test_delete_batch_deletes_each_path_and_nothing_else(sut: StoreUnderTest) -> None:
    batcher, s, b = _batcher(sut), sut.store, sut.base
    doomed = [join(b, "d", n) for n in NAMES] + [join(b, "d/deep/er/x.bin"), join(b, "odd/a b%20+#é中😀")]
    kept = [join(b, "d/kept.bin"), join(b, "d2/x.bin"), join(b, "d/deep/er/x.bin2")]
    for p in doomed + kept:
        await s.put(p, p.encode())
    missing = join(b, "d/never-there")
    failed = await batcher.delete_batch([*doomed[:3], missing, *doomed[3:]])
    assert failed == {}  # a path that names nothing is not a failure
    assert await listing(sut, b) == {p: len(p.encode()) for p in kept}
    for p in kept:
        assert await s.get(p) == p.encode()
    sdk_list = sut.extras.get("sdk_list")
    if callable(sdk_list):  # the official SDK sees the same
        assert set(await anyio.to_thread.run_sync(sdk_list, b)) == set(kept)
    # repeated (a retry after a lost answer): nothing to do, no failure
    assert await batcher.delete_batch(doomed) == {}
    assert await batcher.delete_batch([]) == {}


async def test_delete_batch_takes_delete_batch_max_paths(sut: StoreUnderTest) -> None:
    batcher, s, b = _batcher(sut), sut.store, sut.base
    n = s.capabilities.delete_batch_max
    paths = [join(b, f"m/{i:04d}") for i in range(n)]
    async with anyio.create_task_group() as tg:
        for p in paths:
            tg.start_soon(s.put, p, b"x")
    await s.put(join(b, "m/zz-kept"), b"k")
    assert await batcher.delete_batch(paths) == {}
    assert await listing(sut, join(b, "m")) == {join(b, "m/zz-kept"): 1}


async def test_delete_batch_refuses_bad_input_before_deleting(sut: StoreUnderTest) -> None:
    batcher, s, b = _batcher(sut), sut.store, sut.base
    await s.put(join(b, "a"), b"a")
    with pytest.raises(InvalidInput):
        await batcher.delete_batch([join(b, "a"), "a//b"])
    too_many = [join(b, "a")] + [join(b, f"n{i}") for i in range(s.capabilities.delete_batch_max)]
    with pytest.raises(InvalidInput):
        await batcher.delete_batch(too_many)
    assert await s.get(join(b, "a")) == b"a"


async def test_delete_batch_reports_faults_per_path(sut: StoreUnderTest) -> None:
    batcher = _batcher(sut)
    if not sut.faulty:
        pytest.skip("fault rules need the FaultyStore wrapper")
    s, b = sut.store, sut.base
    assert isinstance(s, FaultyStore)
    paths = [join(b, f"f/{i}") for i in range(6)]
    for p in paths:
        await s.put(p, b"x")
    s.fail("delete", path=paths[1])
    s.lose_response("delete", path=paths[4])
    failed = await batcher.delete_batch(paths)
    assert sorted(failed) == [1, 4]
    assert all(isinstance(e, Transient) and e.retryable for e in failed.values())
    # the failed one is still there; the lost answer's delete happened
    assert await listing(sut, join(b, "f")) == {paths[1]: 1}
    s.clear()
    # a fault on the call as a whole: raised (nothing deleted), or the call done and its
    # answer lost
    s.fail("delete_batch", count=1)
    with pytest.raises(Transient):
        await batcher.delete_batch([paths[1]])
    assert await listing(sut, join(b, "f")) == {paths[1]: 1}
    s.lose_response("delete_batch", count=1)
    with pytest.raises(Transient):
        await batcher.delete_batch([paths[1]])
    assert await listing(sut, join(b, "f")) == {}


# -- rename_batch (stores with Capabilities.batch_rename: local files, Blob, wrappers) ----------


async def test_rename_batch_decides_each_request_as_rename_does(sut: StoreUnderTest) -> None:
    batcher = batch_renamer(sut.store)
    if batcher is None:
        pytest.skip(f"{sut.name} has no rename_batch")
    s, b = sut.store, sut.base
    infos = {}
    for n in ("a", "b", "c", "taken", "meta", "odd é#%+ x"):
        infos[n] = await s.put(join(b, "src", n), n.encode())
    await s.put(join(b, "dst/taken"), b"someone else's")
    await s.put(join(b, "dst/kept"), b"kept")
    requests = [
        RenameRequest(join(b, "src/a"), join(b, "dst/a"), infos["a"].etag, "rid-a", False),  # ok
        RenameRequest(join(b, "src/missing"), join(b, "dst/missing"), '"0x1"', "rid-m", False),  # gone
        RenameRequest(join(b, "src/taken"), join(b, "dst/taken"), infos["taken"].etag, "rid-t", False),
        RenameRequest(join(b, "src/c"), join(b, "dst/c"), '"not-its-etag"', "rid-c", False),  # changed
        RenameRequest(join(b, "src/b"), join(b, "new/deep/dir/b"), infos["b"].etag, "rid-b", False),
        RenameRequest(
            join(b, "src/meta"), join(b, "dst/meta"), infos["meta"].etag, "rid-x", None
        ),  # reads it
        RenameRequest(
            join(b, "src/odd é#%+ x"), join(b, "dst/ü odd"), infos["odd é#%+ x"].etag, "rid-o", False
        ),
    ]
    failed = await batcher.rename_batch(requests)
    assert sorted(failed) == [1, 2, 3], failed
    assert isinstance(failed[1], NotFound)
    assert isinstance(failed[2], AlreadyExists)
    assert isinstance(failed[3], PreconditionFailed)
    assert await listing(sut, b) == {
        join(b, "dst/a"): 1,
        join(b, "dst/taken"): len(b"someone else's"),
        join(b, "dst/kept"): 4,
        join(b, "new/deep/dir/b"): 1,
        join(b, "dst/meta"): 4,
        join(b, "dst/ü odd"): len("odd é#%+ x".encode()),
        join(b, "src/taken"): 5,
        join(b, "src/c"): 1,
    }
    assert await s.get(join(b, "dst/ü odd")) == "odd é#%+ x".encode()
    if s.capabilities.rename_provenance:  # the copies carry their rename ids
        assert (await s.stat(join(b, "dst/a"))).rename_id == "rid-a"
    # repeated (a retry after a lost answer): each done request is proven by its rename id
    # or its etag and reported done or "source gone", never a second copy
    again = await batcher.rename_batch(requests[:1])
    assert again == {} or isinstance(again.get(0), NotFound)
    assert await s.get(join(b, "dst/a")) == b"a"
    assert await batcher.rename_batch([]) == {}
