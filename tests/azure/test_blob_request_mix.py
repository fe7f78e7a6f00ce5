"""Requests per rename on Azure Blob: a job commit skips the source's Get Properties only
when the task manifest says (``amcommit.sourceUserMetadata``) that no file has user
metadata to carry, and a source with user metadata keeps it."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.committer.task import commit_task, setup_task
from amcommit.errors import CommitError
from amcommit.manifest import SOURCE_META_KEY, decode_manifest, encode_json
from amcommit.paths import join
from amcommit.store.azure import BlobStore
from tests.azure.conftest import BlobEnv
from tests.engine.helpers import task_ids

JOB = "202611230001_0015"
FILES = {f"p={i % 2}/part-{i:05d}.bin": f"payload {i} ".encode() * (i + 1) for i in range(6)}


def count_requests(store: BlobStore, monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Counts the store's requests as ``"<op> <METHOD>"`` (not those of ``_SUCCESS``,
    itself published by a rename)."""
    seen: collections.Counter[str] = collections.Counter()
    inner = store.request

    async def counted(op: str, method: str, *a: Any, **kw: Any) -> Any:
        if "_SUCCESS" not in kw["path"]:
            seen[f"{op} {method}"] += 1
        return await inner(op, method, *a, **kw)

    monkeypatch.setattr(store, "request", counted)
    return seen


async def _task(
    env: BlobEnv,
    store: BlobStore,
    dest: str,
    *,
    meta_on: str | None = None,
    extra: dict[str, str] | None = None,
) -> tuple[JobLayout, str]:
    """One committed task writing FILES (``meta_on``: that file uploaded with the SDK,
    carrying user metadata and content settings); returns the layout and manifest path."""
    layout = await setup_job(store, dest, JOB)
    task, ta = task_ids(JOB, 0)
    work = await setup_task(store, layout, ta)
    for rel, data in FILES.items():
        if rel == meta_on:
            from azure.storage.blob import ContentSettings

            env.sdk.upload_blob(
                join(work, rel),
                data,
                metadata={"owner": "spark", "schema": "v2"},
                content_settings=ContentSettings(content_type="application/x-parquet"),
            )
        else:
            await store.put(join(work, rel), data)
    await commit_task(store, layout, task, ta, extra_data=extra)
    return layout, layout.manifest_path(task)


def _dest_files(env: BlobEnv, dest: str) -> dict[str, bytes]:
    out = {}
    for b in env.sdk.list_blobs(name_starts_with=dest + "/"):
        rel = b.name[len(dest) + 1 :]
        if rel != "_SUCCESS" and not rel.startswith("_temporary"):
            out[rel] = env.sdk.download_blob(b.name).readall()
    return out


@pytest.mark.parametrize("batch", [256, 1], ids=["batched", "one-by-one"])
async def test_plain_sources_rename_with_copy_and_delete_only(
    blob_env: BlobEnv, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    store = blob_env.store()
    dest = "out/plain"
    _, mpath = await _task(blob_env, store, dest)
    manifest = decode_manifest(await store.get(mpath))
    assert manifest.extra_data[SOURCE_META_KEY] == "none"
    seen = count_requests(store, monkeypatch)
    await commit_job(store, dest, JOB, config=CommitterConfig(rename_batch_size=batch))
    n = len(FILES)
    assert seen["rename PUT"] == n  # Copy Blob
    if batch > 1:  # the sources' Delete Blob in one Blob Batch (one manifest)
        assert seen["rename DELETE"] == 0 and seen["rename_batch POST"] == 1
    else:
        assert seen["rename DELETE"] == n and seen["rename_batch POST"] == 0
    assert seen["rename HEAD"] == 0  # no Get Properties of the sources
    assert _dest_files(blob_env, dest) == FILES
    props = blob_env.sdk.get_blob_client(join(dest, "p=1/part-00001.bin")).get_blob_properties()
    assert set(props.metadata) == {"amcommitrenameid", "amcommitsrcetag"}


async def test_a_source_with_user_metadata_keeps_it(
    blob_env: BlobEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = blob_env.store()
    dest = "out/meta"
    rel = "p=1/part-00003.bin"
    # a caller's extraData cannot claim it: only the task's own listing says "none"
    _, mpath = await _task(blob_env, store, dest, meta_on=rel, extra={SOURCE_META_KEY: "none", "k": "v"})
    manifest = decode_manifest(await store.get(mpath))
    assert SOURCE_META_KEY not in manifest.extra_data and manifest.extra_data["k"] == "v"
    seen = count_requests(store, monkeypatch)
    await commit_job(store, dest, JOB)
    assert seen["rename HEAD"] == len(FILES)  # the safe path: Get Properties first
    assert _dest_files(blob_env, dest) == FILES
    props = blob_env.sdk.get_blob_client(join(dest, rel)).get_blob_properties()
    assert props.metadata["owner"] == "spark" and props.metadata["schema"] == "v2"
    assert props.content_settings.content_type == "application/x-parquet"


async def test_metadata_added_after_task_commit_is_never_dropped(blob_env: BlobEnv) -> None:
    # the manifest says "none", then someone sets metadata on a source: its etag changes,
    # the conditional copy refuses, the job fails and publishes nothing
    store = blob_env.store()
    dest = "out/late"
    layout, mpath = await _task(blob_env, store, dest)
    assert decode_manifest(await store.get(mpath)).extra_data[SOURCE_META_KEY] == "none"
    _, ta = task_ids(JOB, 0)
    victim = join(layout.task_attempt_dir(ta), "p=0/part-00002.bin")
    blob_env.sdk.get_blob_client(victim).set_blob_metadata({"owner": "late"})
    with pytest.raises(CommitError, match="changed"):
        await commit_job(store, dest, JOB)
    assert _dest_files(blob_env, dest) == {}
    assert blob_env.sdk.get_blob_client(victim).get_blob_properties().metadata == {"owner": "late"}


async def test_old_manifest_without_the_key_takes_the_safe_path(
    blob_env: BlobEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = blob_env.store()
    dest = "out/old"
    _, mpath = await _task(blob_env, store, dest)
    manifest = decode_manifest(await store.get(mpath))
    del manifest.extra_data[SOURCE_META_KEY]  # as written before this key existed
    await store.put(mpath, encode_json(manifest))
    seen = count_requests(store, monkeypatch)
    await commit_job(store, dest, JOB)
    assert seen["rename HEAD"] == len(FILES) and seen["rename PUT"] == len(FILES)
    assert _dest_files(blob_env, dest) == FILES


async def test_rename_src_meta_false_skips_get_properties(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True)
    info = await s.put("src/a", b"aaa")
    assert (await s.stat("src/a")).user_meta is False
    before = blob_env.proxy.forwarded
    await s.rename("src/a", "dst/a", src_etag=info.etag, rename_id="r-a", src_meta=False)
    assert blob_env.proxy.forwarded - before == 2  # Copy Blob + Delete Blob
    blob_env.sdk.upload_blob("src/b", b"bb", metadata={"owner": "x"})
    assert (await s.stat("src/b")).user_meta is True
    assert [i.user_meta async for i in s.list("src")] == [True]
    etag = blob_env.sdk.get_blob_client("src/b").get_blob_properties().etag
    before = blob_env.proxy.forwarded
    await s.rename("src/b", "dst/b", src_etag=etag, rename_id="r-b", src_meta=True)
    assert blob_env.proxy.forwarded - before == 3  # Get Properties + Copy Blob + Delete Blob
    assert blob_env.sdk.get_blob_client("dst/b").get_blob_properties().metadata["owner"] == "x"
