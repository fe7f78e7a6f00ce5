"""Pytest fixtures for the gcs backends (registered in tests/conftest.py as a plugin).

`CONFORMANCE` and `ENGINE` list the fixture names (each yields a
tests.backends.StoreUnderTest) that the conformance and engine suites run against.

Servers start once per session: fake-gcs-server (the bundled binary, filesystem backend on
/dev/shm) and the project's GCS double (in a background thread, so that the blocking
google-cloud-storage oracle can talk to it from a test). Every test gets a fresh bucket.

Backends:
* ``backend_gcs_fake``: GcsStore on fake-gcs-server (rewrite path; client-side
  precondition checks because the emulator ignores them);
* ``backend_gcs_double``: GcsStore on the double, ``objects.move``, server-enforced
  preconditions only;
* ``backend_gcs_double_rewrite``: the double without move (rewrite + delete path),
  server-enforced preconditions only (conformance only);
* ``backend_faulty_gcs_*``: FaultyStore around the above.

``extras``: ``bucket`` (name), ``server`` (FakeGcsServer / GcsDouble), ``sdk_bucket`` (a
google-cloud-storage Bucket on the same server: the oracle).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from amcommit.emulators.fakegcs import FakeGcsServer
from amcommit.store.gcs import GcsStore
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy
from amcommit.testing.faults import FaultyStore
from amcommit.testing.gcs_double import GcsDouble

if TYPE_CHECKING:  # tests.backends imports this module: import it lazily at run time
    from tests.backends import StoreUnderTest

CONFORMANCE: list[str] = [
    "backend_gcs_fake",
    "backend_faulty_gcs_fake",
    "backend_gcs_double",
    "backend_faulty_gcs_double",
    "backend_gcs_double_rewrite",
]
ENGINE: list[str] = [
    "backend_gcs_fake",
    "backend_faulty_gcs_fake",
    "backend_gcs_double",
    "backend_faulty_gcs_double",
]

FAST_RETRY = RetryPolicy(max_attempts=6, base_delay=0.005, max_delay=0.1)


def sdk_client(endpoint: str) -> Any:
    """An anonymous google-cloud-storage client for ``endpoint`` (the oracle)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="amcommit-test", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
    )


def new_bucket_name() -> str:
    return f"amc-{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[FakeGcsServer]:
    """One fake-gcs-server for the session."""
    srv = FakeGcsServer()
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def gcs_double() -> Iterator[GcsDouble]:
    """One GCS test double (background thread) for the session; faults are cleared per test."""
    d = GcsDouble(rewrite_chunk_bytes=1024 * 1024)
    d.start_in_thread()
    yield d
    d.stop_thread()


@pytest.fixture(scope="session")
def fake_gcs_sdk(fake_gcs: FakeGcsServer) -> Any:
    return sdk_client(fake_gcs.url)


@pytest.fixture(scope="session")
def gcs_double_sdk(gcs_double: GcsDouble) -> Any:
    return sdk_client(gcs_double.url)


def _sut(*args: Any) -> StoreUnderTest:
    from tests.backends import StoreUnderTest

    return StoreUnderTest(*args)


def make_store(endpoint: str, bucket: str, **options: Any) -> GcsStore:
    opts: dict[str, Any] = {
        "endpoint": endpoint,
        "limiter": Limiter(max_concurrency=32),
        "write_rate": None,
        "retry": FAST_RETRY,
        "request_timeout": 20.0,  # a hung emulator request is retried in seconds, not after 60 s
    }
    opts.update(options)
    return GcsStore(bucket, **opts)


async def _fake_sut(fake_gcs: FakeGcsServer, sdk: Any, *, faulty: bool) -> AsyncIterator[StoreUnderTest]:
    bucket = new_bucket_name()
    fake_gcs.create_bucket(bucket)
    store = make_store(fake_gcs.url, bucket)
    extras: dict[str, object] = {"bucket": bucket, "server": fake_gcs, "sdk_bucket": sdk.bucket(bucket)}
    base = f"t-{uuid.uuid4().hex[:8]}"
    if faulty:
        yield _sut(FaultyStore(store, seed=1), base, "faulty(gcs-fake)", True, extras)
    else:
        yield _sut(store, base, "gcs-fake", False, extras)
    await store.aclose()


async def _double_sut(
    d: GcsDouble, sdk: Any, *, faulty: bool, use_move: bool = True, name: str = "gcs-double"
) -> AsyncIterator[StoreUnderTest]:
    bucket = new_bucket_name()
    d.create_bucket(bucket)
    d.clear_faults()
    store = make_store(d.url, bucket, use_move=use_move, verify_preconditions=False)
    extras: dict[str, object] = {"bucket": bucket, "server": d, "sdk_bucket": sdk.bucket(bucket)}
    base = f"t-{uuid.uuid4().hex[:8]}"
    if faulty:
        yield _sut(FaultyStore(store, seed=1), base, f"faulty({name})", True, extras)
    else:
        yield _sut(store, base, name, False, extras)
    await store.aclose()
    d.clear_faults()


@pytest.fixture
async def backend_gcs_fake(fake_gcs: FakeGcsServer, fake_gcs_sdk: Any) -> AsyncIterator[StoreUnderTest]:
    async for sut in _fake_sut(fake_gcs, fake_gcs_sdk, faulty=False):
        yield sut


@pytest.fixture
async def backend_faulty_gcs_fake(
    fake_gcs: FakeGcsServer, fake_gcs_sdk: Any
) -> AsyncIterator[StoreUnderTest]:
    async for sut in _fake_sut(fake_gcs, fake_gcs_sdk, faulty=True):
        yield sut


@pytest.fixture
async def backend_gcs_double(gcs_double: GcsDouble, gcs_double_sdk: Any) -> AsyncIterator[StoreUnderTest]:
    async for sut in _double_sut(gcs_double, gcs_double_sdk, faulty=False):
        yield sut


@pytest.fixture
async def backend_faulty_gcs_double(
    gcs_double: GcsDouble, gcs_double_sdk: Any
) -> AsyncIterator[StoreUnderTest]:
    async for sut in _double_sut(gcs_double, gcs_double_sdk, faulty=True):
        yield sut


@pytest.fixture
async def backend_gcs_double_rewrite(
    gcs_double: GcsDouble, gcs_double_sdk: Any
) -> AsyncIterator[StoreUnderTest]:
    async for sut in _double_sut(
        gcs_double, gcs_double_sdk, faulty=False, use_move=False, name="gcs-double-rewrite"
    ):
        yield sut
