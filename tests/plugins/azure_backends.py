"""Pytest fixtures for the azure backends (registered in tests/conftest.py as a plugin).

`CONFORMANCE` and `ENGINE` list the fixture names (each yields a
tests.backends.StoreUnderTest) that the conformance and engine suites run against.

* ``backend_blob_azurite`` / ``backend_faulty_blob_azurite``: BlobStore on Azurite (one
  Azurite process per session, a fresh container per test: Azurite's Delete Blob slows
  down with every blob it holds).
* ``backend_dfs_server`` / ``backend_faulty_dfs_server``: DfsStore on amcommit's in-memory
  ADLS Gen2 test server (one per session, a fresh filesystem per test; injected server
  faults are cleared after each test).

``extras`` of every azure StoreUnderTest:
  ``"emulator"``: the Azurite / AdlsTestServer object (``inject`` faults on the server);
  ``"container"``: container / filesystem name; ``"inner"``: the unwrapped store;
  ``"sdk_read"(path) -> bytes`` and ``"sdk_list"(prefix) -> {path: size}``: read back
  through the official SDK (azure-storage-blob / azure-storage-file-datalake) as an oracle.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from amcommit.emulators.azurite import Azurite
    from tests.backends import StoreUnderTest
    from tests.servers.adls_server import AdlsTestServer

CONFORMANCE: list[str] = [
    "backend_blob_azurite",
    "backend_faulty_blob_azurite",
    "backend_dfs_server",
    "backend_faulty_dfs_server",
]
ENGINE: list[str] = list(CONFORMANCE)

REQUEST_TIMEOUT = 20.0
"""Seconds one request of a test's store may take on loopback before it is retried: a hung
emulator request fails (or retries) in seconds instead of stalling a worker for minutes."""

SDK_BLOB_API_VERSION = "2026-06-06"
"""Newest x-ms-version Azurite 3.37 accepts (the SDK's default is newer)."""


def unique_name(prefix: str = "t") -> str:
    """A fresh container / filesystem name (3-63 lowercase letters and digits)."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """One Azurite (blob) process for the whole session, on a free loopback port."""
    from amcommit.emulators.azurite import Azurite, find_azurite

    if find_azurite() is None:
        pytest.skip("Azurite is not installed (run ./run test, or set AMCOMMIT_AZURITE)")
    with Azurite() as az:
        yield az


@pytest.fixture(scope="session")
def adls_server() -> Iterator[AdlsTestServer]:
    """One in-memory ADLS Gen2 test server for the whole session."""
    from tests.servers.adls_server import AdlsTestServer

    with AdlsTestServer() as srv:
        yield srv


def blob_container_client(az: Azurite, container: str) -> Any:
    """azure-storage-blob ContainerClient on Azurite (the oracle)."""
    from azure.storage.blob import ContainerClient

    return ContainerClient(
        az.endpoint,
        container,
        credential={"account_name": az.account, "account_key": az.account_key},
        api_version=SDK_BLOB_API_VERSION,
    )


def datalake_fs_client(srv: AdlsTestServer, filesystem: str) -> Any:
    """azure-storage-file-datalake FileSystemClient on the ADLS test server (the oracle)."""
    from azure.storage.filedatalake import FileSystemClient

    return FileSystemClient(
        srv.endpoint,
        filesystem,
        credential={"account_name": srv.account, "account_key": srv.accounts[srv.account]},
    )


def _blob_oracle(az: Azurite, container: str) -> dict[str, object]:
    cc = blob_container_client(az, container)

    def sdk_read(path: str) -> bytes:
        return bytes(cc.download_blob(path).readall())

    def sdk_list(prefix: str) -> dict[str, int]:
        pre = f"{prefix}/" if prefix else None
        return {b.name: b.size for b in cc.list_blobs(name_starts_with=pre)}

    return {"sdk_read": sdk_read, "sdk_list": sdk_list, "sdk_client": cc}


def _dfs_oracle(srv: AdlsTestServer, filesystem: str) -> dict[str, object]:
    fc = datalake_fs_client(srv, filesystem)

    def sdk_read(path: str) -> bytes:
        return bytes(fc.get_file_client(path).download_file().readall())

    def sdk_list(prefix: str) -> dict[str, int]:
        try:
            return {
                p.name: p.content_length
                for p in fc.get_paths(path=prefix or None, recursive=True)
                if not p.is_directory
            }
        except Exception as e:  # ResourceNotFoundError: nothing below prefix
            if getattr(e, "status_code", None) == 404:
                return {}
            raise

    return {"sdk_read": sdk_read, "sdk_list": sdk_list, "sdk_client": fc}


async def _blob_backend(az: Azurite, faulty: bool) -> AsyncIterator[StoreUnderTest]:
    from amcommit.store.azure import BlobStore
    from amcommit.testing.faults import FaultyStore
    from tests.backends import StoreUnderTest

    container = unique_name()
    store = BlobStore(container, **az.store_options(), request_timeout=REQUEST_TIMEOUT)
    await store.create_container()
    extras: dict[str, object] = {"emulator": az, "container": container, "inner": store}
    extras.update(_blob_oracle(az, container))
    outer = FaultyStore(store, seed=1) if faulty else store
    name = "faulty(blob-azurite)" if faulty else "blob-azurite"
    try:
        yield StoreUnderTest(outer, f"t-{uuid.uuid4().hex[:8]}", name=name, faulty=faulty, extras=extras)
    finally:
        await store.delete_container()
        await store.aclose()
        close: Callable[[], None] | None = getattr(extras["sdk_client"], "close", None)
        if close is not None:
            close()


async def _dfs_backend(srv: AdlsTestServer, faulty: bool) -> AsyncIterator[StoreUnderTest]:
    from amcommit.store.azure import DfsStore
    from amcommit.testing.faults import FaultyStore
    from tests.backends import StoreUnderTest

    fs = unique_name()
    store = DfsStore(fs, **srv.store_options(), request_timeout=REQUEST_TIMEOUT)
    await store.create_filesystem()
    extras: dict[str, object] = {"emulator": srv, "container": fs, "inner": store}
    extras.update(_dfs_oracle(srv, fs))
    outer = FaultyStore(store, seed=1) if faulty else store
    name = "faulty(dfs-server)" if faulty else "dfs-server"
    try:
        yield StoreUnderTest(outer, f"t-{uuid.uuid4().hex[:8]}", name=name, faulty=faulty, extras=extras)
    finally:
        srv.clear_faults()
        await store.delete_filesystem()
        await store.aclose()
        close: Callable[[], None] | None = getattr(extras["sdk_client"], "close", None)
        if close is not None:
            close()


@pytest.fixture
async def backend_blob_azurite(azurite: Azurite) -> AsyncIterator[StoreUnderTest]:
    async for sut in _blob_backend(azurite, faulty=False):
        yield sut


@pytest.fixture
async def backend_faulty_blob_azurite(azurite: Azurite) -> AsyncIterator[StoreUnderTest]:
    async for sut in _blob_backend(azurite, faulty=True):
        yield sut


@pytest.fixture
async def backend_dfs_server(adls_server: AdlsTestServer) -> AsyncIterator[StoreUnderTest]:
    async for sut in _dfs_backend(adls_server, faulty=False):
        yield sut


@pytest.fixture
async def backend_faulty_dfs_server(adls_server: AdlsTestServer) -> AsyncIterator[StoreUnderTest]:
    async for sut in _dfs_backend(adls_server, faulty=True):
        yield sut
