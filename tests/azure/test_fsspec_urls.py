"""fsspec-style Azure URLs (``az://container/path``, ``abfs://fs/path``) end to end."""

from __future__ import annotations

import uuid

import pytest

from amcommit.emulators.azurite import Azurite
from amcommit.errors import ConfigError
from amcommit.store.azure import BlobStore, DfsStore
from amcommit.store.schemes import open_location
from tests.servers.adls_server import AdlsTestServer


async def test_az_url_opens_blob_store_on_azurite(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    container = f"az-{uuid.uuid4().hex[:10]}"
    oracle = BlobStore(container, **azurite.store_options())
    await oracle.create_container()
    try:
        # the account comes from the connection string (no @account in the URL)
        store, path = open_location(
            f"az://{container}/dir/f x.txt", connection_string=azurite.connection_string
        )
        assert isinstance(store, BlobStore) and path == "dir/f x.txt"
        assert store.root_uri == f"wasbs://{container}@devstoreaccount1.blob.core.windows.net/"
        async with store:
            await store.put(path, b"via az://")
        assert await oracle.get("dir/f x.txt") == b"via az://"
        with pytest.raises(ConfigError, match="'account' store option"):
            open_location(f"az://{container}/dir", account_key=azurite.account_key)
    finally:
        await oracle.delete_container()
        await oracle.aclose()


async def test_abfs_url_without_account_opens_dfs_store(
    adls_server: AdlsTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs = f"abfs-{uuid.uuid4().hex[:10]}"
    opts = adls_server.store_options()
    oracle = DfsStore(fs, **opts)
    await oracle.create_filesystem()
    try:
        # the account from AZURE_STORAGE_ACCOUNT_NAME, as adlfs reads it
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", opts["account"])
        store, path = open_location(
            f"abfs://{fs}/a/b.txt", endpoint=opts["endpoint"], account_key=opts["account_key"]
        )
        assert isinstance(store, DfsStore) and path == "a/b.txt"
        assert store.root_uri == f"abfs://{fs}@{opts['account']}.dfs.core.windows.net/"
        async with store:
            await store.put(path, b"via abfs://")
        assert await oracle.get("a/b.txt") == b"via abfs://"
    finally:
        await oracle.delete_filesystem()
        await oracle.aclose()
