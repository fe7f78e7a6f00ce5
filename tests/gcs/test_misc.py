"""Launcher, URLs and endpoints, listing and virtual directories."""

from __future__ import annotations

import os
import time

import anyio
import pytest

from amcommit.emulators.fakegcs import FakeGcsServer
from amcommit.errors import AlreadyExists, ConfigError, PreconditionFailed
from amcommit.store.gcs import GcsStore, resolve_endpoint
from amcommit.store.schemes import open_location, open_store
from tests.gcs.conftest import GcsEnv


def test_fake_gcs_launcher_lifecycle() -> None:
    with FakeGcsServer() as srv:
        assert srv.running and srv.url.startswith("http://127.0.0.1:")
        assert srv.workdir is not None and srv.log_path.exists()
        if os.access("/dev/shm", os.W_OK):
            assert str(srv.workdir).startswith("/dev/shm/")
        srv.create_bucket("launcher-bucket")
        srv.create_bucket("launcher-bucket")  # idempotent
        assert (srv.workdir / "data" / "launcher-bucket").is_dir()
        workdir = srv.workdir
    assert not srv.running and not workdir.exists()
    srv.stop()  # idempotent


async def test_many_requests_do_not_block_the_emulator(fake_env: GcsEnv) -> None:
    """The wheel's own helper pipes the server's output and hangs after some hundreds of
    requests; the launcher's log file does not."""
    store = fake_env.store()
    t0 = time.monotonic()

    async def put(i: int) -> None:
        await store.put(f"many/{i:05d}", b"x")

    async with anyio.create_task_group() as tg:
        for i in range(1500):
            tg.start_soon(put, i)
    names = [i.path async for i in store.list("many")]
    assert len(names) == 1500
    assert time.monotonic() - t0 < 30


def test_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert resolve_endpoint() == ("https://storage.googleapis.com", False)
    assert resolve_endpoint("https://storage.googleapis.com/") == ("https://storage.googleapis.com", False)
    assert resolve_endpoint("127.0.0.1:4443") == ("http://127.0.0.1:4443", True)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9023/")
    assert resolve_endpoint() == ("http://127.0.0.1:9023", True)
    with pytest.raises(ConfigError):
        resolve_endpoint("ftp://x")


async def test_open_store_gs_urls(monkeypatch: pytest.MonkeyPatch, fake_env: GcsEnv) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_env.url)
    store, path = open_location(f"gs://{fake_env.bucket}/dir/file%20x.txt", write_rate=None)
    assert isinstance(store, GcsStore) and path == "dir/file x.txt"
    assert store.root_uri == f"gs://{fake_env.bucket}/" and store.endpoint == fake_env.url
    assert store.verify_preconditions and "bearer" not in repr(store)
    async with store:
        await store.put(path, b"via url")
        assert await fake_env.store().get("dir/file x.txt") == b"via url"
    with pytest.raises(ConfigError, match="unknown GCS store option"):
        open_store(f"gs://{fake_env.bucket}/", endpoint=fake_env.url, colour="blue")
    with pytest.raises(ConfigError, match="bucket name"):
        open_store("gs://Bad_Bucket!/x", endpoint=fake_env.url)


async def test_directories_are_virtual(env: GcsEnv) -> None:
    store = env.store(page_size=2)
    for p in ["d/a", "d/b", "d/sub/c", "d/sub/deeper/e", "d2/x", "top"]:
        await store.put(p, b"1")
    # a directory marker written by another tool is not a file
    await anyio.to_thread.run_sync(lambda: env.sdk_bucket.blob("d/sub/").upload_from_string(b""))
    assert sorted([i.path async for i in store.list("d")]) == ["d/a", "d/b", "d/sub/c", "d/sub/deeper/e"]
    children = {i.path: i.is_dir async for i in store.list("d", recursive=False)}
    assert children == {"d/a": False, "d/b": False, "d/sub": True}
    root = {i.path: i.is_dir async for i in store.list("", recursive=False)}
    assert root == {"d": True, "d2": True, "top": False}
    st = await store.stat("d/sub")
    assert st.is_dir and st.size == 0 and (await store.stat("")).is_dir
    await store.mkdirs("d/new/dir")  # no-op
    with pytest.raises(AlreadyExists):
        await store.mkdirs("top/below")
    with pytest.raises(PreconditionFailed):
        await store.delete("d")
    assert await store.delete("d", recursive=True)
    assert [i.path async for i in store.list("")] == ["d2/x", "top"]
    assert not await store.delete("d", recursive=True)


async def test_open_store_gcs_scheme_is_gs(fake_env: GcsEnv) -> None:
    store, path = open_location(f"gcs://{fake_env.bucket}/d/x.txt", endpoint=fake_env.url, write_rate=None)
    assert isinstance(store, GcsStore) and path == "d/x.txt"
    assert store.root_uri == f"gs://{fake_env.bucket}/"
    async with store:
        await store.put(path, b"via gcs://")
        assert await fake_env.store().get("d/x.txt") == b"via gcs://"
