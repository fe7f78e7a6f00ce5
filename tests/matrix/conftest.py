"""Fixtures of the fault matrix (one fresh container / bucket / directory per cell, on the
session's emulators). The hooks that record every cell's result for the table are in
:mod:`tests.plugins.matrix_report` (loaded by the top conftest, so that under pytest-xdist
the controller, which never loads this conftest, writes the table)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.matrix.stores import BackendInfo

HERE = Path(__file__).parent


# Sync fixtures: the matrix test runs its own event loop (anyio.run), so that a cell's
# stores, threads and child processes never depend on pytest-asyncio's loop scope.
def _container(cls: Any, options: dict[str, Any], create: str, delete: str) -> Iterator[BackendInfo]:
    name = f"m{uuid.uuid4().hex[:20]}"

    async def call(method: str) -> None:
        store = cls(name, **options)
        async with store:
            await getattr(store, method)()

    anyio.run(call, create)
    yield {**options, "container": name}
    anyio.run(call, delete)


@pytest.fixture
def matrix_local(tmp_path: Path) -> BackendInfo:
    root = tmp_path / "store root"
    root.mkdir()
    return {"kind": "local", "root": str(root)}


@pytest.fixture
def matrix_blob(azurite: Any) -> Iterator[BackendInfo]:
    from amcommit.store.azure import BlobStore

    for info in _container(BlobStore, azurite.store_options(), "create_container", "delete_container"):
        yield {"kind": "blob", **info}


@pytest.fixture
def matrix_dfs(adls_server: Any) -> Iterator[BackendInfo]:
    from amcommit.store.azure import DfsStore

    for info in _container(DfsStore, adls_server.store_options(), "create_filesystem", "delete_filesystem"):
        yield {"kind": "dfs", **info}
    adls_server.clear_faults()


@pytest.fixture
def matrix_gcs_double(gcs_double: Any) -> BackendInfo:
    bucket = f"amc-m{uuid.uuid4().hex[:14]}"
    gcs_double.create_bucket(bucket)
    return {
        "kind": "gcs",
        "endpoint": gcs_double.url,
        "bucket": bucket,
        "use_move": True,
        "verify_preconditions": False,
    }


@pytest.fixture
def matrix_gcs_fake(fake_gcs: Any) -> BackendInfo:
    bucket = f"amc-m{uuid.uuid4().hex[:14]}"
    fake_gcs.create_bucket(bucket)
    return {"kind": "gcs", "endpoint": fake_gcs.url, "bucket": bucket}


@pytest.fixture
def matrix_sdk_list(
    request: pytest.FixtureRequest,
) -> Callable[[str, BackendInfo], Callable[[str], dict[str, int]]]:
    """``(backend, info) -> list(prefix) -> {store path: size}`` through the official SDK
    (os.walk for local files): an oracle independent of amcommit's own listing."""

    def make(backend: str, info: BackendInfo) -> Callable[[str], dict[str, int]]:
        if backend == "local":
            root = Path(info["root"])

            def walk(prefix: str) -> dict[str, int]:
                out = {}
                for d, _dirs, files in os.walk(root / prefix):
                    for f in files:
                        p = Path(d) / f
                        out[p.relative_to(root).as_posix()] = p.stat().st_size
                return out

            return walk
        if backend == "blob":
            from tests.plugins.azure_backends import _blob_oracle

            return _blob_oracle(request.getfixturevalue("azurite"), info["container"])["sdk_list"]  # type: ignore[return-value]
        if backend == "dfs":
            from tests.plugins.azure_backends import _dfs_oracle

            return _dfs_oracle(request.getfixturevalue("adls_server"), info["container"])["sdk_list"]  # type: ignore[return-value]
        sdk = request.getfixturevalue("gcs_double_sdk" if backend == "gcs-double" else "fake_gcs_sdk")
        bucket = sdk.bucket(info["bucket"])
        return lambda d: {b.name: b.size for b in bucket.list_blobs(prefix=d + "/")}

    return make
