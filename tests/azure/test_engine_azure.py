"""The job committer on the Azure stores with *service-side* faults, checked through the
official SDKs: lost rename answers are recovered and counted; a source rewritten after its
task committed fails the job with nothing of it published."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.emulators.azurite import Azurite
from amcommit.errors import CommitError
from amcommit.paths import join
from amcommit.store.azure import BlobStore
from tests.azure.fault_proxy import FaultProxy
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task, task_ids
from tests.plugins.azure_backends import _blob_oracle, unique_name

JOB = "202611220001_0042"


def sdk_files(sut: StoreUnderTest, dest: str) -> dict[str, bytes]:
    """Everything under ``dest`` except _temporary and _SUCCESS, read with the SDK."""
    read, listing = sut.extras["sdk_read"], sut.extras["sdk_list"]
    out = {}
    for path in listing(dest):  # type: ignore[operator]
        rel = path[len(dest) + 1 :]
        if rel != "_SUCCESS" and not rel.startswith("_temporary"):
            out[rel] = read(path)  # type: ignore[operator]
    return out


async def _job(sut: StoreUnderTest, files: int) -> tuple[str, dict[str, bytes]]:
    dest = join(sut.base, "dest")
    layout = await setup_job(sut.store, dest, JOB)
    expected = {f"p={i % 3}/part-{i:05d}.bin": f"payload {i} ".encode() * (i + 1) for i in range(files)}
    await run_task(sut.store, layout, 0, expected)
    return dest, expected


async def test_dfs_lost_rename_answers_recovered_and_counted(backend_dfs_server: StoreUnderTest) -> None:
    sut = backend_dfs_server
    server = sut.extras["emulator"]
    dest, expected = await _job(sut, 9)
    rule = server.inject("lose", "rename", path="*/_temporary/*/tasks/*", count=4)  # type: ignore[attr-defined]
    report = await commit_job(sut.store, dest, JOB, config=CommitterConfig(retry_base_delay=0.001))
    assert rule.fired == 4 and report.recovered_renames == 4
    assert sdk_files(sut, dest) == expected
    success = json.loads(sut.extras["sdk_read"](join(dest, "_SUCCESS")))  # type: ignore[operator]
    assert success["success"] and success["metrics"]["recovered_renames"] == 4


@pytest.mark.parametrize("batch", [256, 1], ids=["batched", "one-by-one"])
async def test_blob_lost_copy_answers_recovered_and_counted(
    azurite: Azurite, azurite_proxy: FaultProxy, batch: int
) -> None:
    # BlobStore through the fault proxy (Azurite itself cannot lose answers)
    container = unique_name()
    opts = azurite.store_options()
    opts["endpoint"] = f"http://127.0.0.1:{azurite_proxy.port}/{azurite.account}"
    store = BlobStore(container, **opts)
    await store.create_container()
    extras = _blob_oracle(azurite, container)
    sdk: Any = extras["sdk_client"]
    sut = StoreUnderTest(store, "t-eng", name="blob-proxy", extras=extras)
    try:
        dest, expected = await _job(sut, 7)
        copy_lost = azurite_proxy.add("lose", method="PUT", header="x-ms-copy-source", path=f"{dest}/p=1/*")
        if batch > 1:
            # the sources' deletes go in one Blob Batch (one manifest): its answer lost, the
            # batch is sent again and every one of its 7 deletes is proven by "not found"
            del_lost = azurite_proxy.add("lose", method="POST", count=1)
            want = len(expected)
        else:
            del_lost = azurite_proxy.add("lose", method="DELETE", path=f"{dest}/_temporary/*/part-00002.bin")
            want = 2
        cfg = CommitterConfig(retry_base_delay=0.001, rename_batch_size=batch)
        report = await commit_job(store, dest, JOB, config=cfg)
        assert [copy_lost.fired, del_lost.fired] == [1, 1] and report.recovered_renames == want
        assert sdk_files(sut, dest) == expected
        props = sdk.get_blob_client(join(dest, "p=1/part-00001.bin")).get_blob_properties()
        assert props.metadata["amcommitrenameid"]
    finally:
        azurite_proxy.clear()
        await store.delete_container()
        await store.aclose()
        sdk.close()


@pytest.fixture(params=["backend_dfs_server", "backend_blob_azurite"])
def azure_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def test_source_rewritten_after_task_commit_publishes_nothing(azure_sut: StoreUnderTest) -> None:
    sut = azure_sut
    dest, _ = await _job(sut, 6)
    _, attempt = task_ids(JOB, 0)
    victims = [
        i.path async for i in sut.store.list(join(dest, "_temporary")) if i.path.endswith("part-00003.bin")
    ]
    victim = victims[0]
    assert attempt in victim
    await sut.store.put(victim, b"rewritten after the manifest was saved")
    with pytest.raises(CommitError, match="etag"):
        await commit_job(sut.store, dest, JOB, config=CommitterConfig(io_threads=1))
    assert sdk_files(sut, dest) == {}  # the failed commit rolled back what it had renamed
    await abort_job(sut.store, dest, JOB)
    assert sdk_files(sut, dest) == {}
    assert sut.extras["sdk_list"](dest) == {}  # type: ignore[operator]
