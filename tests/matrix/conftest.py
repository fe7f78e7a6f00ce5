"""Fixtures of the fault matrix (one fresh container / bucket / directory per cell, on the
session's emulators) and the hook that records every cell's result for the table."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.matrix.stores import BackendInfo

HERE = Path(__file__).parent
RESULTS = HERE / "last_run.json"
TABLE = HERE / "last_run.md"


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


# -- results for the table -------------------------------------------------------------------------
_results: dict[str, dict[str, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/matrix/test_matrix.py::test_matrix[" not in report.nodeid:
        return
    cell = report.nodeid.split("[", 1)[1].rstrip("]")
    scenario, _, backend = cell.rpartition(".")
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfail"  # passed: a non-strict xfail
            reason = str(report.wasxfail)
        elif report.skipped:
            outcome = "skip"
            longrepr: Any = report.longrepr
            reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
            reason = reason.removeprefix("Skipped: ")
        elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
            outcome = "xpass"
            reason = str(report.longrepr).removeprefix("[XPASS(strict)]").strip()
        else:
            outcome = report.outcome
            reason = ""
            if report.failed:
                reason = str(
                    getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                )  # type: ignore[union-attr]
        _results[f"{scenario}|{backend}"] = {
            "scenario": scenario,
            "backend": backend,
            "outcome": outcome,
            "reason": reason.splitlines()[0][:300] if reason else "",
            "seconds": f"{report.duration:.2f}",
        }


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _results:
        return
    from tests.matrix.table import render

    RESULTS.write_text(json.dumps(list(_results.values()), indent=1, ensure_ascii=False))
    TABLE.write_text(render(list(_results.values())))
