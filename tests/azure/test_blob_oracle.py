"""BlobStore on Azurite, read back and cross-checked with azure-storage-blob."""

from __future__ import annotations

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError

from amcommit.errors import AlreadyExists, PreconditionFailed
from amcommit.store.base import PutMode
from tests.azure.conftest import BlobEnv

NAMES = ["plain.txt", "with space.bin", "unicodé-ü.txt", "pct%41.txt", "plus+sign.txt", "hash#tag.txt"]


async def test_store_writes_sdk_reads_byte_for_byte(blob_env: BlobEnv) -> None:
    s = blob_env.store(single_put_max=1024 * 1024, block_size=1024 * 1024)
    payloads = {f"out/dir ü/{n}": n.encode() * 5 for n in NAMES}
    payloads["out/blocks.bin"] = bytes(range(256)) * (10 * 1024 + 3)  # 2.5 MiB: 3 blocks
    payloads["out/empty"] = b""
    for p, data in payloads.items():
        info = await s.put(p, data)
        props = blob_env.sdk.get_blob_client(p).get_blob_properties()
        assert props.size == len(data) and props.etag == info.etag
    for p, data in payloads.items():
        assert blob_env.sdk.download_blob(p).readall() == data
    committed, _ = blob_env.sdk.get_blob_client("out/blocks.bin").get_block_list("committed")
    assert len(committed) == 3
    assert {b.name: b.size for b in blob_env.sdk.list_blobs(name_starts_with="out/")} == {
        p: len(d) for p, d in payloads.items()
    }


async def test_rename_keeps_metadata_and_marks_provenance(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    blob_env.sdk.upload_blob("src/part-0", b"payload", metadata={"owner": "spark", "k2": "v2"})
    src_props = blob_env.sdk.get_blob_client("src/part-0").get_blob_properties()
    res = await s.rename("src/part-0", "dst/part-0", src_etag=src_props.etag, rename_id="job1-part0")
    props = blob_env.sdk.get_blob_client("dst/part-0").get_blob_properties()
    copied = src_props.etag.strip('"')  # the version the copy copied
    assert props.metadata == {
        "owner": "spark",
        "k2": "v2",
        "amcommitrenameid": "job1-part0",
        "amcommitsrcetag": copied,
    }
    assert props.etag == res.etag != src_props.etag  # a copy gets a new etag
    assert props.copy.status == "success" and props.copy.source.endswith("/src/part-0")
    assert not blob_env.sdk.get_blob_client("src/part-0").exists()
    assert blob_env.sdk.download_blob("dst/part-0").readall() == b"payload"
    assert (await s.stat("dst/part-0")).rename_id == "job1-part0"
    assert [i.rename_id async for i in s.list("dst")] == ["job1-part0"]


async def test_folder_markers_written_by_other_tools(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    blob_env.sdk.upload_blob("tree/sub", b"", metadata={"hdi_isfolder": "true"})
    blob_env.sdk.upload_blob("tree/sub/f", b"1")
    blob_env.sdk.upload_blob("tree/g", b"22")
    assert (await s.stat("tree/sub")).is_dir
    assert (await s.stat("tree")).is_dir  # a prefix with blobs below it
    assert {i.path: i.is_dir async for i in s.list("tree", recursive=False)} == {
        "tree/sub": True,
        "tree/g": False,
    }
    assert {i.path async for i in s.list("tree")} == {"tree/sub/f", "tree/g"}
    await s.mkdirs("tree/new/dir")  # a no-op: no marker blobs
    with pytest.raises(PreconditionFailed):
        await s.delete("tree")
    assert await s.delete("tree", recursive=True)
    assert list(blob_env.sdk.list_blobs(name_starts_with="tree")) == []


async def test_conditional_answers_of_azurite(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    await s.put("c/a", b"1", mode=PutMode.CREATE)
    with pytest.raises(AlreadyExists) as ei:
        await s.put("c/a", b"2", mode=PutMode.CREATE)
    assert ei.value.code == "BlobAlreadyExists"
    # Azurite answers a failed x-ms-source-if-match with ConditionNotMet (the service:
    # SourceConditionNotMet); BlobStore tells the two cases apart by looking at the target
    src = blob_env.sdk.get_blob_client("c/a")
    with pytest.raises(HttpResponseError) as sdk_err:
        blob_env.sdk.get_blob_client("c/b").start_copy_from_url(
            src.url, source_etag='"0x1"', source_match_condition=MatchConditions.IfNotModified
        )
    assert sdk_err.value.status_code == 412 and sdk_err.value.error_code == "ConditionNotMet"
    old = await s.stat("c/a")
    await s.put("c/a", b"changed")
    with pytest.raises(PreconditionFailed):
        await s.rename("c/a", "c/b", src_etag=old.etag)
    assert not blob_env.sdk.get_blob_client("c/b").exists()


async def test_two_request_rename_without_metadata(blob_env: BlobEnv) -> None:
    s = blob_env.store(preserve_metadata=False, via_proxy=True)
    blob_env.sdk.upload_blob("src/a", b"aaa", metadata={"owner": "spark"})
    etag = blob_env.sdk.get_blob_client("src/a").get_blob_properties().etag
    before = blob_env.proxy.forwarded
    res = await s.rename("src/a", "dst/a", src_etag=etag, rename_id="r-a")
    assert blob_env.proxy.forwarded - before == 2  # Copy Blob + Delete Blob
    assert blob_env.sdk.get_blob_client("dst/a").get_blob_properties().metadata == {
        "amcommitrenameid": "r-a",
        "amcommitsrcetag": etag.strip('"'),
    }
    assert (await s.rename("src/a", "dst/a", src_etag=etag, rename_id="r-a")).recovered
    assert res.etag == (await s.stat("dst/a")).etag
    info = await s.put("src/b", b"v1")
    await s.put("src/b", b"v2")
    with pytest.raises(PreconditionFailed):
        await s.rename("src/b", "dst/b", src_etag=info.etag, rename_id="r-b")
    assert not blob_env.sdk.get_blob_client("dst/b").exists()
