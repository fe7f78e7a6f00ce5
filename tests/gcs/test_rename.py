"""GcsStore renames: objects.move vs rewrite + delete, detection, the rewriteToken loop,
generation preconditions (server-enforced on the double; client-side checks on
fake-gcs-server, whose server-side gaps are xfail(strict))."""

from __future__ import annotations

import anyio
import pytest

from amcommit.errors import AlreadyExists, NotFound, PreconditionFailed, Transient
from amcommit.store.base import PutMode, UpdateIf
from amcommit.testing.gcs_double import GcsDouble
from tests.gcs.conftest import GcsEnv
from tests.plugins.gcs_backends import make_store, new_bucket_name


async def test_move_detected_on_the_double(double_env: GcsEnv) -> None:
    d = double_env.double
    store = double_env.store()  # use_move=None: detect
    assert store.uses_move is None and not store.capabilities.atomic_rename
    await store.put("a", b"1")
    calls0 = d.calls.copy()
    res = await store.rename("a", "b", rename_id="r1")
    assert store.uses_move is True and store.capabilities.atomic_rename
    assert not store.capabilities.etag_kept_on_rename and store.capabilities.rename_provenance
    assert d.calls["move"] - calls0["move"] == 2  # the probe and the move
    assert d.calls["rewrite"] == calls0["rewrite"] and d.calls["delete"] == calls0["delete"]
    st = await store.stat("b")
    assert st.rename_id == "r1" and st.etag == res.etag


async def test_move_not_detected_on_fake_gcs_server(fake_env: GcsEnv) -> None:
    store = fake_env.store()
    await store.put("a", b"1")
    await store.rename("a", "b")
    assert store.uses_move is False and not store.capabilities.atomic_rename
    assert store.iostats.counters["gcs_move_unsupported"] == 1
    assert store.iostats.count("gcs_rewrite") == 1


async def test_forced_move_falls_back_when_refused(fake_env: GcsEnv) -> None:
    store = fake_env.store(use_move=True)
    assert store.capabilities.atomic_rename
    await store.put("a", b"data")
    res = await store.rename("a", "b", rename_id="rid")
    assert store.uses_move is False and not store.capabilities.atomic_rename
    assert await store.get("b") == b"data" and res.etag == (await store.stat("b")).etag
    with pytest.raises(NotFound):
        await store.stat("a")


async def test_server_without_move_route() -> None:
    async with GcsDouble(supports_move=False) as d:
        bucket = new_bucket_name()
        d.create_bucket(bucket)
        store = make_store(d.url, bucket, verify_preconditions=False)
        async with store:
            await store.put("x", b"1")
            await store.rename("x", "y")
            assert store.uses_move is False and d.calls["rewrite"] == 1
            # the same answer to a real move of an existing object also falls back
            forced = make_store(d.url, bucket, verify_preconditions=False, use_move=True)
            await forced.rename("y", "z", rename_id="q")
            assert forced.uses_move is False and (await forced.stat("z")).rename_id == "q"
            await forced.aclose()


async def test_rewrite_loops_on_rewrite_token(double_env: GcsEnv) -> None:
    store = double_env.store(use_move=False)
    data = bytes(range(256)) * (3 * 4096 + 100)  # ~3.1 MiB; the session double rewrites 1 MiB per call
    info = await store.put("big", data)
    res = await store.rename("big", "moved/big", src_etag=info.etag, rename_id="loop")
    assert store.iostats.counters["gcs_rewrite_continued"] == 3
    assert store.iostats.count("gcs_rewrite") == 4
    assert await store.get("moved/big") == data and not res.recovered
    with pytest.raises(NotFound):
        await store.stat("big")


@pytest.mark.parametrize("use_move", [True, False], ids=["move", "rewrite"])
async def test_server_enforced_preconditions(double_env: GcsEnv, use_move: bool) -> None:
    store = double_env.store(use_move=use_move)
    d = double_env.double
    old = await store.put("s", b"v1")
    await store.put("s", b"v2")
    await store.put("taken", b"other")
    gets = d.calls["get"]
    with pytest.raises(AlreadyExists):
        await store.rename("s", "taken")
    with pytest.raises(PreconditionFailed):
        await store.rename("s", "free", src_etag=old.etag)
    if use_move:
        # nothing was checked on the client before the move: the refusals came from the
        # service; one read of the destination after the 412 tells "exists" from "changed"
        assert d.calls["get"] - gets == 1
    assert await store.get("taken") == b"other" and await store.get("s") == b"v2"
    with pytest.raises(NotFound):
        await store.stat("free")


@pytest.mark.parametrize("use_move", [True, False], ids=["move", "rewrite"])
async def test_concurrent_renames_of_one_source(double_env: GcsEnv, use_move: bool) -> None:
    store = double_env.store(use_move=use_move)
    await store.put("one", b"x")
    won: list[int] = []
    lost: list[int] = []

    async def one(i: int) -> None:
        try:
            await store.rename("one", f"to-{i}", rename_id=f"r{i}")
            won.append(i)
        except (NotFound, PreconditionFailed):
            lost.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(one, i)
    names = {i.path async for i in store.list("")}
    if use_move:
        # atomic: exactly one destination, and it carries the winner's id
        assert len(won) == 1 and names == {f"to-{won[0]}"}
        assert (await store.stat(f"to-{won[0]}")).rename_id == f"r{won[0]}"
    else:
        assert won and "one" not in names
        for i in won:
            assert (await store.stat(f"to-{i}")).rename_id == f"r{i}"


async def test_retried_rename_after_copy_without_delete_recovers(double_env: GcsEnv) -> None:
    """A crash between copy and delete: the next rename with the same id proves the copy."""
    d = double_env.double
    store = double_env.store(use_move=False)
    await store.put("src", b"payload")
    d.inject("delete", status=500, count=None)
    with pytest.raises(Transient):
        await store.rename("src", "dst", rename_id="job-1")
    d.clear_faults()
    assert await store.get("src") == b"payload" and (await store.stat("dst")).rename_id == "job-1"
    res = await store.rename("src", "dst", rename_id="job-1")
    assert res.recovered
    with pytest.raises(NotFound):
        await store.stat("src")
    # a different rename id is a real conflict
    await store.put("src2", b"payload")
    with pytest.raises(AlreadyExists):
        await store.rename("src2", "dst", rename_id="job-2")


async def test_repeated_rename_is_recovered_by_id(env: GcsEnv) -> None:
    store = env.store()
    await store.put("a", b"abc")
    first = await store.rename("a", "b", rename_id="same")
    again = await store.rename("a", "b", rename_id="same")
    assert again.recovered and not first.recovered and again.etag == first.etag
    with pytest.raises(NotFound):
        await store.rename("a", "b", rename_id="other")
    with pytest.raises(NotFound):
        await store.rename("a", "b")  # no id: nothing can be proven


async def test_generated_rename_id_and_etag_semantics(env: GcsEnv) -> None:
    store = env.store()
    info = await store.put("a", b"abc")
    assert info.etag is not None and info.etag.isdigit()  # etag = generation
    res = await store.rename("a", "b")
    st = await store.stat("b")
    assert st.rename_id is not None and st.rename_id.startswith("amc-")
    assert res.etag == st.etag != info.etag  # a rename creates a new generation
    with pytest.raises(PreconditionFailed):
        await store.put("b", b"x", mode=UpdateIf("not-a-generation"))
    with pytest.raises(PreconditionFailed):
        await store.rename("b", "c", src_etag="W/abc")
    with pytest.raises(AlreadyExists):
        await store.rename("b", "b")


# -- the emulator's gaps, with the client-side checks turned off ---------------------------

FAKE_GAP = "fake-gcs-server 1.54 ignores preconditions on rewrite and resumable uploads"


@pytest.mark.xfail(strict=True, reason=FAKE_GAP)
async def test_fake_server_alone_refuses_overwriting_rename(fake_env: GcsEnv) -> None:
    store = fake_env.store(verify_preconditions=False)
    await store.put("s", b"src")
    await store.put("d", b"dst")
    try:
        with pytest.raises(AlreadyExists):
            await store.rename("s", "d")
    finally:
        assert await store.get("d") == b"dst"


@pytest.mark.xfail(strict=True, reason=FAKE_GAP)
async def test_fake_server_alone_enforces_source_generation(fake_env: GcsEnv) -> None:
    store = fake_env.store(verify_preconditions=False, preserve_metadata=False)
    old = await store.put("s", b"v1")
    await store.put("s", b"v2")
    with pytest.raises(PreconditionFailed):
        await store.rename("s", "d", src_etag=old.etag)


@pytest.mark.xfail(strict=True, reason=FAKE_GAP)
async def test_fake_server_alone_enforces_create_on_resumable_upload(fake_env: GcsEnv) -> None:
    store = fake_env.store(verify_preconditions=False, multipart_threshold=1024, chunk_size=256 * 1024)
    await store.put("big", b"old")
    with pytest.raises(AlreadyExists):
        await store.put("big", b"n" * 4096, mode=PutMode.CREATE)


async def test_resumable_create_never_overwrites(env: GcsEnv) -> None:
    store = env.store(multipart_threshold=1024, chunk_size=256 * 1024)  # fake: client-side check
    await store.put("big", b"old")
    with pytest.raises(AlreadyExists):
        await store.put("big", b"n" * 300_000, mode=PutMode.CREATE)
    assert await store.get("big") == b"old"
    info = await store.put("big2", b"n" * 300_000, mode=PutMode.CREATE)
    upd = await store.put("big2", b"m" * 300_000, mode=UpdateIf(info.etag or ""))
    with pytest.raises(PreconditionFailed):
        await store.put("big2", b"o" * 300_000, mode=UpdateIf(info.etag or ""))
    assert upd.etag != info.etag and await store.get("big2") == b"m" * 300_000
