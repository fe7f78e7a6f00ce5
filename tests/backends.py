"""Registry of store backends that the conformance and engine suites run against.

Each entry names a pytest fixture (defined in a conftest) that yields a
:class:`StoreUnderTest`: a store plus a fresh, empty base path inside it. Backends add
their fixture names here; fixtures that need an emulator start it once per session.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amcommit.store.base import Store
from tests.plugins import azure_backends, gcs_backends


@dataclass
class StoreUnderTest:
    store: Store
    base: str
    """A fresh empty directory in the store reserved for this test."""
    name: str = ""
    faulty: bool = False
    """The store is a FaultyStore (tests may add rules to it)."""
    extras: dict[str, object] = field(default_factory=dict)
    """Backend-specific handles (e.g. an SDK client used as an oracle)."""


# Fixture names, in the order tests are parametrised. Each backend plugin (tests/plugins/)
# lists its own fixtures.
CONFORMANCE_BACKENDS: list[str] = [
    "backend_local",
    "backend_faulty_local",
    *azure_backends.CONFORMANCE,
    *gcs_backends.CONFORMANCE,
]
ENGINE_BACKENDS: list[str] = [
    "backend_local",
    "backend_faulty_local",
    *azure_backends.ENGINE,
    *gcs_backends.ENGINE,
]
