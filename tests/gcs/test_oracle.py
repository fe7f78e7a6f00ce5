"""google-cloud-storage as the oracle: what GcsStore writes, the official client reads back
byte for byte (and the other way round), on fake-gcs-server and on the double."""

from __future__ import annotations

import base64
import hashlib
import json

import anyio

from amcommit.api import commit_job, setup_job
from amcommit.paths import join
from amcommit.store.gcs import RENAME_ID_KEY
from amcommit.store.gcs.store import SOURCE_GEN_KEY
from amcommit.testing.gcs_double import b64_crc32c
from tests.engine.helpers import run_task
from tests.gcs.conftest import GcsEnv

PAYLOADS = {
    "empty": b"",
    "small.bin": bytes(range(256)),
    "dir with space/ü-é.txt": "grüße\n".encode(),
    "pct%41 #+.txt": b"special",
    "chunked/large.bin": bytes(range(251)) * 5000,  # 1.2 MiB: resumable in 256 KiB chunks
}


async def test_store_writes_sdk_reads(env: GcsEnv) -> None:
    store = env.store(multipart_threshold=256 * 1024, chunk_size=256 * 1024)
    infos = {}
    for name, data in PAYLOADS.items():
        infos[name] = await store.put(join("w", name), data)

    def oracle() -> dict[str, tuple[bytes, object, object, object, object]]:
        out = {}
        for name in PAYLOADS:
            blob = env.sdk_bucket.get_blob(join("w", name))
            out[name] = (blob.download_as_bytes(), blob.size, blob.generation, blob.md5_hash, blob.crc32c)
        return out

    seen = await anyio.to_thread.run_sync(oracle)
    for name, data in PAYLOADS.items():
        body, size, generation, md5, crc = seen[name]
        assert body == data, name
        assert size == len(data)
        assert str(generation) == infos[name].etag  # etag = generation
        assert md5 == base64.b64encode(hashlib.md5(data).digest()).decode()
        assert crc == b64_crc32c(data)


async def test_sdk_writes_store_reads(env: GcsEnv) -> None:
    def write() -> dict[str, int]:
        gens = {}
        for name, data in PAYLOADS.items():
            blob = env.sdk_bucket.blob(join("r", name))
            blob.upload_from_string(data, content_type="application/x-test")
            gens[name] = blob.generation
        return gens

    gens = await anyio.to_thread.run_sync(write)
    store = env.store()
    for name, data in PAYLOADS.items():
        assert await store.get(join("r", name)) == data
        st = await store.stat(join("r", name))
        assert st.size == len(data) and st.etag == str(gens[name]) and st.rename_id is None
    listed = {i.path: i.size async for i in store.list("r")}
    assert listed == {join("r", n): len(d) for n, d in PAYLOADS.items()}


async def test_rename_keeps_content_type_and_metadata(env: GcsEnv) -> None:
    def write() -> None:
        blob = env.sdk_bucket.blob("src/data.csv")
        blob.metadata = {"owner": "etl", "n": "1"}
        blob.cache_control = "no-cache"
        blob.upload_from_string(b"a,b\n1,2\n", content_type="text/csv")

    await anyio.to_thread.run_sync(write)
    store = env.store()
    src_generation = (await store.stat("src/data.csv")).etag
    res = await store.rename("src/data.csv", "dst/data.csv", rename_id="rid-42")

    def read() -> tuple[object, ...]:
        blob = env.sdk_bucket.get_blob("dst/data.csv")
        gone = env.sdk_bucket.get_blob("src/data.csv") is None
        return (
            blob.download_as_bytes(),
            blob.content_type,
            blob.metadata,
            blob.cache_control,
            gone,
            blob.generation,
        )

    body, ctype, meta, cache, gone, generation = await anyio.to_thread.run_sync(read)
    assert body == b"a,b\n1,2\n" and gone
    assert ctype == "text/csv" and cache == "no-cache"
    copied = {} if store.uses_move else {SOURCE_GEN_KEY: src_generation}  # the version a copy copied
    assert meta == {"owner": "etl", "n": "1", RENAME_ID_KEY: "rid-42", **copied}
    assert res.etag == str(generation)


async def test_committed_job_read_back_byte_for_byte(env: GcsEnv) -> None:
    store = env.store()
    dest = "tables/t1"
    job = "202611220001_0042"
    layout = await setup_job(store, dest, job)
    expected: dict[str, bytes] = {}
    for n in range(3):
        files = {
            f"part={n % 2}/part-{n:05d}.parquet": hashlib.sha256(bytes([n])).digest() * 300,
            f"x-{n}.txt": b"",
        }
        expected.update(files)
        await run_task(store, layout, n, files)
    report = await commit_job(store, dest, job)
    assert report.success

    def oracle() -> tuple[dict[str, bytes], bytes]:
        blobs = list(env.sdk.list_blobs(env.bucket, prefix=dest + "/"))
        files = {
            b.name[len(dest) + 1 :]: b.download_as_bytes()
            for b in blobs
            if not b.name.endswith("/_SUCCESS") and "/_temporary/" not in b.name
        }
        success = env.sdk_bucket.blob(f"{dest}/_SUCCESS").download_as_bytes()
        return files, success

    files, success = await anyio.to_thread.run_sync(oracle)
    assert files == expected
    doc = json.loads(success)
    assert doc["success"] is True and doc["jobId"] == job
    assert sorted(doc["filenames"]) == sorted(f"gs://{env.bucket}/{dest}/{p}" for p in expected)
