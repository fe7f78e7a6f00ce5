"""Pytest fixtures for the gcs backends (registered in tests/conftest.py as a plugin).

`CONFORMANCE` and `ENGINE` list the fixture names (each yields a
tests.backends.StoreUnderTest) that the conformance and engine suites run against.
"""

from __future__ import annotations

CONFORMANCE: list[str] = []
ENGINE: list[str] = []
