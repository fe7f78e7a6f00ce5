"""The ADLS Gen2 test server, checked with the official SDK (azure-storage-file-datalake)
for every operation amcommit uses, and DfsStore's output read back through the SDK.

The SDK's expectations encode the real service's answers (its error mapping, its
continuation handling, etag formats); known service behaviours are asserted explicitly
(e.g. an append to a path that was never created is 404 PathNotFound, as reported against
the real service in azure-sdk-for-python#16166)."""

from __future__ import annotations

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)

from amcommit.store.base import PutMode
from tests.azure.conftest import DfsEnv

NAMES = ["plain.txt", "with space.bin", "unicodé-ü.txt", "pct%41.txt", "plus+sign.txt", "hash#tag.txt"]


async def test_store_writes_sdk_reads_byte_for_byte(dfs_env: DfsEnv) -> None:
    s = dfs_env.store(append_size=1024 * 1024)
    payloads = {f"out/dir ü/{n}": n.encode() * 3 for n in NAMES}
    payloads["out/big.bin"] = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB: several appends
    payloads["out/empty"] = b""
    for p, data in payloads.items():
        info = await s.put(p, data)
        props = dfs_env.sdk.get_file_client(p).get_file_properties()
        assert props.size == len(data) and props.etag == info.etag
    for p, data in payloads.items():
        assert dfs_env.sdk.get_file_client(p).download_file().readall() == data
    listed = {p.name: p.content_length for p in dfs_env.sdk.get_paths("out") if not p.is_directory}
    assert listed == {p: len(d) for p, d in payloads.items()}
    assert not [p.name for p in dfs_env.sdk.get_paths() if ".amcommit-tmp-" in p.name]


async def test_sdk_writes_store_reads(dfs_env: DfsEnv) -> None:
    s = dfs_env.store(list_page_size=2)
    files = {f"in/{n}": n.encode() for n in NAMES}
    for p, data in files.items():
        dfs_env.sdk.get_file_client(p).upload_data(data, overwrite=True)
    dfs_env.sdk.get_directory_client("in/sub/deeper").create_directory()
    assert {i.path: i.size async for i in s.list("in")} == {p: len(d) for p, d in files.items()}
    children = {i.path: i.is_dir async for i in s.list("in", recursive=False)}
    assert children == {**dict.fromkeys(files, False), "in/sub": True}
    for p, data in files.items():
        assert await s.get(p) == data
        st = await s.stat(p)
        assert st.etag == dfs_env.sdk.get_file_client(p).get_file_properties().etag
    assert (await s.stat("in/sub")).is_dir


def test_sdk_basic_semantics_match_the_service(dfs_env: DfsEnv) -> None:
    fc = dfs_env.sdk
    assert fc.exists()
    f = fc.get_file_client("a/b/f.txt")
    f.upload_data(b"hello", overwrite=True)  # Create (+ parents) / Append / Flush
    assert fc.get_directory_client("a/b").get_directory_properties().etag
    with pytest.raises(ResourceExistsError):  # If-None-Match: * on Create -> 409 PathAlreadyExists
        f.create_file(match_condition=MatchConditions.IfMissing)
    with pytest.raises(ResourceModifiedError):  # flush with If-None-Match: * onto an existing file
        f.upload_data(b"again")
    with pytest.raises(ResourceNotFoundError) as ei:  # append without create: PathNotFound
        fc.get_file_client("a/never-created").upload_data(b"x")
    assert ei.value.error_code == "PathNotFound"
    with pytest.raises(ResourceNotFoundError):
        fc.get_file_client("nope").get_file_properties()
    e = fc.get_file_client("empty")
    e.create_file()
    assert e.download_file().readall() == b""  # 416 on the ranged read, then a plain read
    with pytest.raises(HttpResponseError) as conflict:  # a file in the way of a directory
        fc.get_directory_client("a/b/f.txt/sub").create_directory()
    assert conflict.value.status_code == 409


def test_sdk_rename_keeps_etag_and_honours_conditions(dfs_env: DfsEnv) -> None:
    fc = dfs_env.sdk
    src = fc.get_file_client("src/part-0")
    src.upload_data(b"payload", overwrite=True)
    etag = src.get_file_properties().etag
    fc.get_directory_client("dst").create_directory()
    moved = src.rename_file(
        f"{dfs_env.filesystem}/dst/part-0",
        source_etag=etag,
        source_match_condition=MatchConditions.IfNotModified,
    )
    assert moved.get_file_properties().etag == etag  # HNS rename keeps the etag
    assert not fc.get_file_client("src/part-0").exists()
    other = fc.get_file_client("src/part-1")
    other.upload_data(b"x", overwrite=True)
    with pytest.raises(HttpResponseError) as stale:  # x-ms-source-if-match mismatch
        other.rename_file(
            f"{dfs_env.filesystem}/dst/part-1",
            source_etag=etag,
            source_match_condition=MatchConditions.IfNotModified,
        )
    assert stale.value.status_code == 412 and stale.value.error_code == "SourceConditionNotMet"
    with pytest.raises(ResourceModifiedError):  # If-None-Match: * onto an existing destination
        other.rename_file(f"{dfs_env.filesystem}/dst/part-0", match_condition=MatchConditions.IfMissing)
    with pytest.raises(ResourceNotFoundError) as ei:
        fc.get_file_client("src/gone").rename_file(f"{dfs_env.filesystem}/dst/x")
    assert ei.value.error_code == "SourcePathNotFound"
    with pytest.raises(ResourceNotFoundError) as ei2:
        other.rename_file(f"{dfs_env.filesystem}/no/parent/here")
    assert ei2.value.error_code == "RenameDestinationParentPathNotFound"
    # a directory rename moves the whole subtree atomically
    fc.get_directory_client("dst").rename_directory(f"{dfs_env.filesystem}/final")
    assert sorted(p.name for p in fc.get_paths("final")) == ["final/part-0"]


def test_sdk_list_and_delete_follow_continuations(dfs_env: DfsEnv) -> None:
    fc = dfs_env.sdk
    for i in range(7):
        fc.get_file_client(f"t/d{i % 2}/f{i}").upload_data(b"x", overwrite=True)
    names = [p.name for p in fc.get_paths("t", max_results=2)]
    assert len(names) == 9 and names == sorted(names)  # 2 directories + 7 files, in order
    old = dfs_env.server.delete_page_size
    dfs_env.server.delete_page_size = 2
    try:
        before = dfs_env.server.requests["delete"]
        fc.get_directory_client("t").delete_directory()
        assert dfs_env.server.requests["delete"] - before > 1
    finally:
        dfs_env.server.delete_page_size = old
    with pytest.raises(ResourceNotFoundError):
        fc.get_directory_client("t").get_directory_properties()


async def test_store_operations_seen_by_sdk(dfs_env: DfsEnv) -> None:
    s, fc = dfs_env.store(), dfs_env.sdk
    info = await s.put("job/_temporary/task/f", b"data", mode=PutMode.CREATE)
    res = await s.rename("job/_temporary/task/f", "job/out/p=1/f", src_etag=info.etag)
    props = fc.get_file_client("job/out/p=1/f").get_file_properties()
    assert props.etag == info.etag == res.etag and props.size == 4
    assert fc.get_directory_client("job/out/p=1").exists()
    await s.mkdirs("job/empty/dir")
    assert fc.get_directory_client("job/empty/dir").get_directory_properties().etag
    await s.delete("job/_temporary", recursive=True)
    assert not fc.get_directory_client("job/_temporary").exists()
    assert sorted(p.name for p in fc.get_paths("job")) == [
        "job/empty",
        "job/empty/dir",
        "job/out",
        "job/out/p=1",
        "job/out/p=1/f",
    ]
