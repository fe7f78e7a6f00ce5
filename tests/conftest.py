"""Shared fixtures: backends for the conformance/engine suites, temp dirs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from amcommit import loop as amcommit_loop
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.backends import CONFORMANCE_BACKENDS, ENGINE_BACKENDS, StoreUnderTest

pytest_plugins = ["tests.plugins.azure_backends", "tests.plugins.gcs_backends", "tests.plugins.matrix_report"]


def _local_base(tmp_path: Path) -> tuple[LocalStore, str]:
    root = tmp_path / "store root"
    root.mkdir()
    store = LocalStore(str(root), fsync=False)
    return store, f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def backend_local(tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    store, base = _local_base(tmp_path)
    yield StoreUnderTest(store, base, name="local")
    await store.aclose()


@pytest.fixture
async def backend_faulty_local(tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    store, base = _local_base(tmp_path)
    yield StoreUnderTest(FaultyStore(store, seed=1), base, name="faulty(local)", faulty=True)
    await store.aclose()


@pytest.fixture(params=CONFORMANCE_BACKENDS)
def sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    """The store under test, for the conformance suite."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


@pytest.fixture(params=ENGINE_BACKENDS)
def engine_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    """The store under test, for the engine (job commit) suite."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


# The longest tests (each a chain of Spark driver processes, 1-2 minutes) first: under
# pytest-xdist (`./run test` runs `-n auto`) the other worker meanwhile works through the
# rest, instead of both idling at the end on one long test each.
_FIRST = ("tests/spark/test_stream.py::",)


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Async tests run on the loop amcommit itself would start (:mod:`amcommit.loop`):
    uvloop where installed, asyncio's with ``AMCOMMIT_UVLOOP=0``. So the whole suite
    exercises the engine on the loop users get."""
    return {amcommit_loop.choice(): amcommit_loop.loop_factory()}


# ``./run test --fast``: the developer's inner loop (lint, types, then this selection): unit
# tests and every test on local files, nothing that needs an emulator, Spark, Daft or the
# benchmarks. The whole suite (``./run test``, CI) runs everything.
_FAST_FIXTURES = frozenset(
    {"azurite", "adls_server", "fake_gcs", "gcs_double", "fake_gcs_sdk", "gcs_double_sdk", "spark"}
)
_FAST_FOLDERS = ("tests/spark/", "tests/azure/", "tests/gcs/", "tests/interop/", "tests/crash/")
_FAST_FILES = (
    "test_benchmarks_smoke.py",
    "test_table_bench_smoke.py",
    "test_daft_reader.py",
    "test_emulator_cli.py",
)
_REMOTE_IDS = ("azurite", "blob", "dfs", "gcs", "double", "cloud", "another host")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        default=False,
        help="the developer's inner loop: unit tests and local files only (no emulators, Spark, benchmarks)",
    )


def _fast_keeps(item: pytest.Item) -> bool:
    nodeid = item.nodeid
    if nodeid.startswith(_FAST_FOLDERS) or nodeid.split("::", 1)[0].endswith(_FAST_FILES):
        return False
    if _FAST_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return False
    if item.get_closest_marker("spark") is not None:  # e.g. the docs' Spark examples
        return False
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        ident = callspec.id.lower()
        if any(word in ident for word in _REMOTE_IDS):
            return False
    return True


def pytest_collection_finish(session: pytest.Session) -> None:
    """Warm the kill tests' fork server (:mod:`tests.forkrun`) in this pytest process if any
    collected test module uses it."""
    import sys

    forkrun = sys.modules.get("tests.forkrun")
    if forkrun is not None and session.items:
        forkrun.warm()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--fast"):
        kept = [item for item in items if _fast_keeps(item)]
        dropped = [item for item in items if not _fast_keeps(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    items.sort(key=lambda item: 0 if item.nodeid.startswith(_FIRST) else 1)
