"""Fixtures for the Azure backend tests: a fresh container on Azurite (directly or behind a
fault proxy) or a fresh filesystem on the ADLS Gen2 test server, with SDK oracles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from amcommit.emulators.azurite import Azurite
from amcommit.store.azure import BlobStore, DfsStore
from tests.azure.fault_proxy import FaultProxy
from tests.plugins.azure_backends import blob_container_client, datalake_fs_client, unique_name
from tests.servers.adls_server import AdlsTestServer


@pytest.fixture(scope="session")
def azurite_proxy(azurite: Azurite) -> Iterator[FaultProxy]:
    with FaultProxy(f"http://127.0.0.1:{azurite.port}") as px:
        yield px


@dataclass
class BlobEnv:
    az: Azurite
    proxy: FaultProxy
    container: str
    sdk: Any
    stores: list[BlobStore] = field(default_factory=list)

    def store(self, *, via_proxy: bool = False, **options: Any) -> BlobStore:
        opts = self.az.store_options()
        if via_proxy:
            opts["endpoint"] = f"http://127.0.0.1:{self.proxy.port}/{self.az.account}"
        opts.update(options)
        s = BlobStore(self.container, **opts)
        self.stores.append(s)
        return s


@dataclass
class DfsEnv:
    server: AdlsTestServer
    filesystem: str
    sdk: Any
    stores: list[DfsStore] = field(default_factory=list)

    def store(self, **options: Any) -> DfsStore:
        opts = self.server.store_options()
        opts.update(options)
        s = DfsStore(self.filesystem, **opts)
        self.stores.append(s)
        return s


@pytest.fixture
async def blob_env(azurite: Azurite, azurite_proxy: FaultProxy) -> AsyncIterator[BlobEnv]:
    container = unique_name("b")
    env = BlobEnv(azurite, azurite_proxy, container, blob_container_client(azurite, container))
    admin = env.store()
    await admin.create_container()
    azurite_proxy.clear()
    try:
        yield env
    finally:
        azurite_proxy.clear()
        await admin.delete_container()
        for s in env.stores:
            await s.aclose()
        env.sdk.close()


@pytest.fixture
async def dfs_env(adls_server: AdlsTestServer) -> AsyncIterator[DfsEnv]:
    fs = unique_name("d")
    env = DfsEnv(adls_server, fs, datalake_fs_client(adls_server, fs))
    admin = env.store()
    await admin.create_filesystem()
    adls_server.clear_faults()
    try:
        yield env
    finally:
        adls_server.clear_faults()
        await admin.delete_filesystem()
        for s in env.stores:
            await s.aclose()
        env.sdk.close()
