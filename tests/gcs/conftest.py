"""Fixtures for the GCS backend tests: one server (fake-gcs-server or the double) with a
fresh bucket, a google-cloud-storage oracle on it, and a factory for GcsStores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from amcommit.emulators.fakegcs import FakeGcsServer
from amcommit.store.gcs import GcsStore
from amcommit.testing.gcs_double import GcsDouble
from tests.plugins.gcs_backends import make_store, new_bucket_name


@dataclass
class GcsEnv:
    """A server with a fresh bucket."""

    kind: str
    """``"fake"`` (fake-gcs-server) or ``"double"`` (the project's test double)."""
    url: str
    server: FakeGcsServer | GcsDouble
    sdk: Any
    bucket: str
    stores: list[GcsStore] = field(default_factory=list)

    @property
    def double(self) -> GcsDouble:
        assert isinstance(self.server, GcsDouble)
        return self.server

    @property
    def sdk_bucket(self) -> Any:
        return self.sdk.bucket(self.bucket)

    def store(self, **options: Any) -> GcsStore:
        """A GcsStore on this bucket; the double gets server-side preconditions only."""
        if self.kind == "double":
            options.setdefault("verify_preconditions", False)
        s = make_store(self.url, self.bucket, **options)
        self.stores.append(s)
        return s


async def _env(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[GcsEnv]:
    server = request.getfixturevalue("fake_gcs" if kind == "fake" else "gcs_double")
    sdk = request.getfixturevalue("fake_gcs_sdk" if kind == "fake" else "gcs_double_sdk")
    bucket = new_bucket_name()
    server.create_bucket(bucket)
    if isinstance(server, GcsDouble):
        server.clear_faults()
    env = GcsEnv(kind, server.url, server, sdk, bucket)
    yield env
    for s in env.stores:
        await s.aclose()
    if isinstance(server, GcsDouble):
        server.clear_faults()


@pytest.fixture(params=["fake", "double"])
async def env(request: pytest.FixtureRequest) -> AsyncIterator[GcsEnv]:
    """Each test runs on fake-gcs-server and on the double."""
    async for e in _env(request.param, request):
        yield e


@pytest.fixture
async def fake_env(request: pytest.FixtureRequest) -> AsyncIterator[GcsEnv]:
    async for e in _env("fake", request):
        yield e


@pytest.fixture
async def double_env(request: pytest.FixtureRequest) -> AsyncIterator[GcsEnv]:
    async for e in _env("double", request):
        yield e
