"""Faults: throttling storms, lost responses, changed sources; on the ADLS Gen2 test
server (server-side switches) and on Azurite (through a fault-injecting proxy)."""

from __future__ import annotations

import time
from functools import partial

import anyio
import pytest

from amcommit.errors import NotFound, PreconditionFailed, Throttled, Transient
from amcommit.store.base import PutMode, UpdateIf
from amcommit.store.retry import RetryPolicy
from tests.azure.conftest import BlobEnv, DfsEnv

FAST = RetryPolicy(max_attempts=6, base_delay=0.001, max_delay=0.01)
ONCE = RetryPolicy(max_attempts=1)


def tmp_leftovers(env: DfsEnv) -> list[str]:
    return [p for p in env.server.paths(env.filesystem) if ".amcommit-tmp-" in p]


# -- ADLS Gen2 (dfs) ---------------------------------------------------------------------


async def test_dfs_lost_rename_answer_is_recovered_by_etag(dfs_env: DfsEnv) -> None:
    s = dfs_env.store(retry=FAST)
    info = await s.put("src/f", b"data")
    await s.mkdirs("dst")
    rule = dfs_env.server.inject("lose", "rename", path="dst/f")
    res = await s.rename("src/f", "dst/f", src_etag=info.etag)
    assert rule.fired == 1 and res.recovered and res.etag == info.etag
    assert dfs_env.server.files(dfs_env.filesystem)["dst/f"] == b"data"
    # without src_etag the store learns it first, so it can still prove the rename
    info2 = await s.put("src/g", b"more")
    dfs_env.server.inject("lose", "rename", path="dst/g")
    res2 = await s.rename("src/g", "dst/g")
    assert res2.recovered and res2.etag == info2.etag


async def test_dfs_caller_retry_after_lost_answer_is_recovered(dfs_env: DfsEnv) -> None:
    s = dfs_env.store(retry=ONCE)
    info = await s.put("src/f", b"data")
    await s.mkdirs("dst")
    dfs_env.server.inject("lose", "rename", path="dst/f")
    with pytest.raises(Transient):
        await s.rename("src/f", "dst/f", src_etag=info.etag)
    res = await s.rename("src/f", "dst/f", src_etag=info.etag)  # e.g. the engine's retry
    assert res.recovered
    # a different file at the destination proves nothing
    other = await s.put("src/h", b"h")
    await s.put("dst/h", b"not ours")
    await s.delete("src/h")
    with pytest.raises(NotFound):
        await s.rename("src/h", "dst/h", src_etag=other.etag)


@pytest.mark.parametrize("op", ["create", "append", "flush", "rename"])
@pytest.mark.parametrize("kind", ["lose", "reset"])
async def test_dfs_put_survives_lost_and_reset_requests(dfs_env: DfsEnv, op: str, kind: str) -> None:
    s = dfs_env.store(retry=FAST)
    await s.put("p/existing", b"old")
    rule = dfs_env.server.inject(kind, op)  # type: ignore[arg-type]
    info = await s.put("p/f", b"x" * 100, mode=PutMode.CREATE)
    assert rule.fired == 1
    assert dfs_env.server.files(dfs_env.filesystem)["p/f"] == b"x" * 100
    assert (await s.stat("p/f")).etag == info.etag
    dfs_env.server.inject(kind, op)  # type: ignore[arg-type]
    await s.put("p/existing", b"new", mode=UpdateIf((await s.stat("p/existing")).etag or ""))
    assert await s.get("p/existing") == b"new"
    assert tmp_leftovers(dfs_env) == []


async def test_dfs_throttling_storm(dfs_env: DfsEnv) -> None:
    s = dfs_env.store(retry=RetryPolicy(max_attempts=10, base_delay=0.001, max_delay=0.02))
    etags = [(await s.put(f"in/f{i}", b"x")).etag for i in range(10)]
    dfs_env.server.inject("throttle", None, count=25, retry_after=0.01)
    dfs_env.server.inject(
        "error", "rename", count=3, status=500, code="OperationTimedOut", message="timed out"
    )
    dfs_env.server.inject("error", "list", count=2, status=500, code="InternalError", message="oops")
    t0 = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(partial(s.rename, f"in/f{i}", f"out/f{i}", src_etag=etags[i]))
    assert sorted([i.path async for i in s.list("out")]) == sorted(f"out/f{i}" for i in range(10))
    assert time.monotonic() - t0 >= 0.01  # Retry-After honoured
    assert s.limiter.throttle_events >= 25 + 3
    assert s.iostats.counters["store_io_throttled"] >= 28
    assert dfs_env.server.injected["throttle:rename"] > 0


async def test_dfs_persistent_throttling_gives_up_with_attempt_count(dfs_env: DfsEnv) -> None:
    s = dfs_env.store(retry=RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002))
    dfs_env.server.inject("throttle", "props", count=None)
    with pytest.raises(Throttled) as ei:
        await s.stat("x")
    assert ei.value.attempts == 3 and ei.value.code == "ServerBusy" and ei.value.status == 503


async def test_dfs_etag_mismatch_publishes_nothing(dfs_env: DfsEnv) -> None:
    s = dfs_env.store()
    old = await s.put("task/f", b"v1")
    await s.put("task/f", b"v2 (rewritten after the manifest was saved)")
    with pytest.raises(PreconditionFailed):
        await s.rename("task/f", "out/f", src_etag=old.etag)
    assert "out/f" not in dfs_env.server.paths(dfs_env.filesystem)
    assert await s.get("task/f") == b"v2 (rewritten after the manifest was saved)"


async def test_dfs_large_directories_use_continuations(dfs_env: DfsEnv) -> None:
    s = dfs_env.store(list_page_size=3)
    for i in range(11):
        await s.put(f"big/d{i % 3}/f{i}", b"x")
    before = dfs_env.server.requests["list"]
    assert len([i async for i in s.list("big")]) == 11
    assert dfs_env.server.requests["list"] - before >= 5
    old = dfs_env.server.delete_page_size
    dfs_env.server.delete_page_size = 4
    try:
        before = dfs_env.server.requests["delete"]
        assert await s.delete("big", recursive=True)
        assert dfs_env.server.requests["delete"] - before >= 3
    finally:
        dfs_env.server.delete_page_size = old
    assert not [p for p in dfs_env.server.paths(dfs_env.filesystem) if p.startswith("big")]


# -- Blob (Azurite through the fault proxy) ------------------------------------------------


async def test_blob_lost_copy_and_delete_answers_are_recovered(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=FAST)
    await s.put("src/a", b"aaa")
    await s.put("src/b", b"bbb")
    blob_env.proxy.add("lose", method="PUT", path="dst/a", header="x-ms-copy-source")
    blob_env.proxy.add("lose", method="DELETE", path="src/b")
    ra = await s.rename("src/a", "dst/a")
    rb = await s.rename("src/b", "dst/b")
    assert ra.recovered and rb.recovered
    assert [r.fired for r in blob_env.proxy.rules] == [1, 1]
    assert {b.name for b in blob_env.sdk.list_blobs()} == {"dst/a", "dst/b"}
    assert blob_env.sdk.download_blob("dst/a").readall() == b"aaa"


async def test_blob_caller_retry_with_rename_id(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=ONCE)
    await s.put("src/a", b"aaa")
    await s.put("src/b", b"bbb")
    # the copy happened, its answer was lost: the source is still there
    blob_env.proxy.add("lose", method="PUT", path="dst/a", header="x-ms-copy-source")
    with pytest.raises(Transient):
        await s.rename("src/a", "dst/a", rename_id="job-a")
    res = await s.rename("src/a", "dst/a", rename_id="job-a")
    assert res.recovered and not blob_env.sdk.get_blob_client("src/a").exists()
    # copy and delete both happened, the delete's answer was lost: the source is gone
    blob_env.proxy.add("lose", method="DELETE", path="src/b")
    with pytest.raises(Transient):
        await s.rename("src/b", "dst/b", rename_id="job-b")
    res = await s.rename("src/b", "dst/b", rename_id="job-b")
    assert res.recovered and blob_env.sdk.download_blob("dst/b").readall() == b"bbb"
    # another rename id proves nothing
    await s.put("src/c", b"c")
    await s.rename("src/c", "dst/c", rename_id="job-c")
    with pytest.raises(NotFound):
        await s.rename("src/c", "dst/c", rename_id="someone-else")


async def test_blob_lost_create_answer_is_recovered(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=FAST)
    blob_env.proxy.add("lose", method="PUT", path="m/manifest.json")
    info = await s.put("m/manifest.json", b"{}", mode=PutMode.CREATE)
    assert blob_env.proxy.rules[0].fired == 1 and (await s.stat("m/manifest.json")).etag == info.etag


async def test_blob_source_changed_before_copy(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True)
    info = await s.put("task/f", b"v1")

    def rewrite() -> None:
        blob_env.sdk.upload_blob("task/f", b"v2", overwrite=True)

    blob_env.proxy.add("before", method="PUT", path="out/f", header="x-ms-copy-source", hook=rewrite)
    with pytest.raises(PreconditionFailed):
        await s.rename("task/f", "out/f", src_etag=info.etag)
    assert not blob_env.sdk.get_blob_client("out/f").exists()
    assert blob_env.sdk.download_blob("task/f").readall() == b"v2"


async def test_blob_source_changed_between_copy_and_delete(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True)
    info = await s.put("task/f", b"v1")

    def rewrite() -> None:
        blob_env.sdk.upload_blob("task/f", b"v2", overwrite=True)

    blob_env.proxy.add("before", method="DELETE", path="task/f", hook=rewrite)
    with pytest.raises(PreconditionFailed):
        await s.rename("task/f", "out/f", src_etag=info.etag)
    assert not blob_env.sdk.get_blob_client("out/f").exists()  # the copy was taken back
    assert blob_env.sdk.download_blob("task/f").readall() == b"v2"


async def test_blob_throttling_storm(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=RetryPolicy(max_attempts=10, base_delay=0.001, max_delay=0.02))
    for i in range(8):
        await s.put(f"in/f{i}", b"x")
    blob_env.proxy.add("throttle", count=20, retry_after=0.01)
    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(partial(s.rename, f"in/f{i}", f"out/f{i}", rename_id=f"r{i}"))
    assert blob_env.proxy.rules[0].fired == 20
    assert s.limiter.throttle_events >= 20
    assert sorted(b.name for b in blob_env.sdk.list_blobs()) == sorted(f"out/f{i}" for i in range(8))


async def test_blob_pending_copy_is_polled(blob_env: BlobEnv) -> None:
    # Azurite copies synchronously; the service may answer "pending" and finish later
    s = blob_env.store(via_proxy=True, copy_poll_interval=0.01)
    await s.put("src/a", b"aaa")
    rule = blob_env.proxy.add(
        "rewrite", method="PUT", header="x-ms-copy-source", set_headers={"x-ms-copy-status": "pending"}
    )
    polls = blob_env.proxy.add("before", method="HEAD", path="dst/a", count=None, hook=lambda: None)
    res = await s.rename("src/a", "dst/a")
    assert rule.fired == 1 and polls.fired >= 1 and not res.recovered
    assert res.etag == (await s.stat("dst/a")).etag
    assert not blob_env.sdk.get_blob_client("src/a").exists()
