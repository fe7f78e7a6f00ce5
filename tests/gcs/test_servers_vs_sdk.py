"""The servers as google-cloud-storage sees them.

The double must answer what the real service answers where amcommit depends on it
(preconditions, copies get new generations and etags, move, patch, listing, uploads).
The same checks run on fake-gcs-server; those that need a precondition to be enforced are
``xfail(strict=True)`` there, so an emulator release that starts enforcing them is noticed.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from google.api_core import exceptions as gexc

from tests.gcs.conftest import GcsEnv

FAKE_IGNORES = "fake-gcs-server 1.54 ignores this precondition"
FAKE_NO_MOVE = "fake-gcs-server 1.54 has no objects.move (routed to update: 400)"


def on(*kinds_xfail: tuple[str, str]) -> Any:
    """Parametrise over both servers, xfail(strict) on the named ones with a reason."""
    reasons = dict(kinds_xfail)
    return pytest.mark.parametrize(
        "kind",
        [
            pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=reasons[k])) if k in reasons else k
            for k in ("fake", "double")
        ],
    )


@pytest.fixture
def server(kind: str, request: pytest.FixtureRequest) -> GcsEnv:
    return request.getfixturevalue(f"{kind}_env")  # type: ignore[no-any-return]


async def run(fn: Callable[[], Any]) -> Any:
    return await anyio.to_thread.run_sync(fn)


def upload(env: GcsEnv, name: str, data: bytes, **kw: Any) -> Any:
    blob = env.sdk_bucket.blob(name)
    blob.upload_from_string(data, **kw)
    return blob


# -- preconditions -------------------------------------------------------------------------


@on()
async def test_multipart_insert_if_generation_match(server: GcsEnv) -> None:
    def check() -> None:
        b = upload(server, "a", b"1", if_generation_match=0)
        with pytest.raises(gexc.PreconditionFailed):
            upload(server, "a", b"2", if_generation_match=0)
        with pytest.raises(gexc.PreconditionFailed):
            upload(server, "a", b"2", if_generation_match=b.generation + 1)
        upload(server, "a", b"3", if_generation_match=b.generation)
        assert server.sdk_bucket.blob("a").download_as_bytes() == b"3"

    await run(check)


@on(("fake", FAKE_IGNORES))
async def test_resumable_insert_if_generation_match(server: GcsEnv) -> None:
    def check() -> None:
        upload(server, "big", b"x" * 10)
        blob = server.sdk_bucket.blob("big", chunk_size=256 * 1024)
        with pytest.raises(gexc.PreconditionFailed):  # unknown size: a resumable upload
            blob.upload_from_file(io.BytesIO(b"y" * (600 * 1024)), if_generation_match=0)
        assert server.sdk_bucket.blob("big").download_as_bytes() == b"x" * 10

    await run(check)


@on(("fake", FAKE_IGNORES))
async def test_copy_never_overwrites_with_if_generation_match_0(server: GcsEnv) -> None:
    def check() -> None:
        src = upload(server, "s", b"src")
        upload(server, "d", b"dst")
        with pytest.raises(gexc.PreconditionFailed):
            server.sdk_bucket.copy_blob(src, server.sdk_bucket, "d", if_generation_match=0)
        assert server.sdk_bucket.blob("d").download_as_bytes() == b"dst"

    await run(check)


@on(("fake", FAKE_IGNORES))
async def test_rewrite_if_source_generation_match(server: GcsEnv) -> None:
    def check() -> None:
        src = upload(server, "s", b"v1")
        old = src.generation
        upload(server, "s", b"v2")
        dst = server.sdk_bucket.blob("d")
        current = server.sdk_bucket.blob("s")  # no generation: the SDK would select it
        with pytest.raises(gexc.PreconditionFailed):
            dst.rewrite(current, if_source_generation_match=old)
        assert server.sdk_bucket.get_blob("d") is None

    await run(check)


@on(("fake", FAKE_IGNORES))
async def test_delete_if_generation_match(server: GcsEnv) -> None:
    def check() -> None:
        b = upload(server, "x", b"1")
        with pytest.raises(gexc.PreconditionFailed):
            server.sdk_bucket.blob("x").delete(if_generation_match=b.generation + 1)
        assert server.sdk_bucket.get_blob("x") is not None

    await run(check)


# -- copies, moves, patches ----------------------------------------------------------------


@on()
async def test_copy_carries_content_and_checksums(server: GcsEnv) -> None:
    def check() -> None:
        src = upload(server, "s", b"payload", content_type="text/plain")
        src.reload()
        dst = server.sdk_bucket.copy_blob(src, server.sdk_bucket, "d")
        assert dst.generation != src.generation
        assert (dst.size, dst.md5_hash, dst.crc32c, dst.content_type) == (
            src.size,
            src.md5_hash,
            src.crc32c,
            "text/plain",
        )
        assert server.sdk_bucket.blob("d").download_as_bytes() == b"payload"

    await run(check)


@on(("fake", "fake-gcs-server uses the MD5 as etag, so a copy keeps it; real GCS gives a new one"))
async def test_copy_gets_a_new_etag(server: GcsEnv) -> None:
    def check() -> None:
        src = upload(server, "s", b"payload")
        dst = server.sdk_bucket.copy_blob(src, server.sdk_bucket, "d")
        assert dst.etag != src.etag

    await run(check)


@on(("fake", FAKE_NO_MOVE))
async def test_move_is_atomic_and_conditional(server: GcsEnv) -> None:
    def check() -> None:
        b = server.sdk_bucket
        src = upload(server, "m/src", b"moving", content_type="text/x")
        src.metadata = {"k": "v"}
        src.patch()
        upload(server, "m/taken", b"other")
        with pytest.raises(gexc.PreconditionFailed):
            b.move_blob(src, "m/taken", if_generation_match=0)
        with pytest.raises(gexc.PreconditionFailed):
            b.move_blob(src, "m/dst", if_source_generation_match=src.generation + 1)
        moved = b.move_blob(src, "m/dst", if_generation_match=0, if_source_generation_match=src.generation)
        assert b.get_blob("m/src") is None
        assert moved.generation != src.generation and moved.metageneration == 1
        assert moved.metadata == {"k": "v"} and moved.content_type == "text/x"
        assert b.blob("m/dst").download_as_bytes() == b"moving"
        with pytest.raises(gexc.NotFound):
            b.move_blob(src, "m/again")

    await run(check)


@on(("fake", "fake-gcs-server gives a patched object a new generation and keeps metageneration 1"))
async def test_patch_bumps_metageneration_only(server: GcsEnv) -> None:
    def check() -> None:
        b = upload(server, "p", b"1")
        gen, meta = b.generation, b.metageneration
        b.metadata = {"a": "1"}
        b.patch()
        assert (b.generation, b.metageneration) == (gen, meta + 1)
        b.metadata = {"b": "2"}
        b.patch()
        assert server.sdk_bucket.get_blob("p").metadata == {"a": "1", "b": "2"}

    await run(check)


# -- listing and uploads -------------------------------------------------------------------


@on()
async def test_listing_with_delimiter_and_pages(server: GcsEnv) -> None:
    names = [f"l/d{i}/f" for i in range(4)] + [f"l/f{i}" for i in range(5)] + ["l0", "l/d1/g"]

    def check() -> None:
        for n in names:
            upload(server, n, b"z")
        it = server.sdk.list_blobs(server.bucket, prefix="l/", delimiter="/", page_size=3)
        files = [x.name for x in it]
        assert files == [f"l/f{i}" for i in range(5)]
        assert sorted(it.prefixes) == [f"l/d{i}/" for i in range(4)]
        flat = [x.name for x in server.sdk.list_blobs(server.bucket, prefix="l/", page_size=2)]
        assert flat == sorted(n for n in names if n.startswith("l/"))

    await run(check)


@on()
async def test_resumable_upload_in_chunks(server: GcsEnv) -> None:
    data = bytes(range(256)) * 4000  # ~1 MiB

    def check() -> None:
        blob = server.sdk_bucket.blob("chunks", chunk_size=256 * 1024)
        blob.upload_from_file(io.BytesIO(data))  # unknown size: resumable, in chunks
        assert server.sdk_bucket.blob("chunks").download_as_bytes() == data

    await run(check)


async def test_double_partial_responses(double_env: GcsEnv) -> None:
    import json
    import urllib.request

    await run(lambda: upload(double_env, "f/x", b"1"))
    url = f"{double_env.url}/storage/v1/b/{double_env.bucket}/o?prefix=f%2F&fields=items(name,size)"

    def get() -> Any:
        with urllib.request.urlopen(url) as r:  # loopback only
            return json.loads(r.read())

    assert await run(get) == {"items": [{"name": "f/x", "size": "1"}]}
