"""``open_store(url)``: a :class:`~amcommit.store.base.Store` for a URL.

Schemes:

* plain paths, ``file:/...``, ``file:///...`` -> :class:`~amcommit.store.local.LocalStore`
  (rooted at ``/``);
* ``abfs[s]://filesystem@account.dfs.core.windows.net/path`` -> ADLS Gen2 ``DfsStore``;
* ``wasb[s]://container@account.blob.core.windows.net/path`` -> flat Blob ``BlobStore``;
* ``gs://bucket/path`` -> ``GcsStore``.

Backends register a factory ``from_url(parsed: ParsedUri, **options) -> Store`` under
their schemes (:func:`register_scheme`); the built-in cloud backends are imported lazily.
The store is rooted at the container (filesystem, bucket; ``/`` for local files), so one
store (and its limiter) serves every path in it; :func:`open_location` also returns the
path within the store.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, cast

from amcommit.errors import ConfigError, InvalidInput
from amcommit.store.base import Store
from amcommit.uris import ParsedUri, parse_uri

StoreFactory = Callable[..., Store]

_factories: dict[str, StoreFactory] = {}
_lazy: dict[str, str] = {
    "abfs": "amcommit.store.azure:dfs_from_url",
    "abfss": "amcommit.store.azure:dfs_from_url",
    "wasb": "amcommit.store.azure:blob_from_url",
    "wasbs": "amcommit.store.azure:blob_from_url",
    "gs": "amcommit.store.gcs:gcs_from_url",
}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Make ``open_store`` use ``factory(parsed_uri, **options)`` for ``scheme`` URLs."""
    _factories[scheme.lower()] = factory


def _local_from_url(parsed: ParsedUri, **options: Any) -> Store:
    from amcommit.store.local import LocalStore

    return LocalStore("/", **options)


register_scheme("file", _local_from_url)


def parse_location(url: str) -> ParsedUri:
    """Parse a URL or a local path (relative paths are made absolute)."""
    if not url:
        raise InvalidInput("empty URL")
    if "://" not in url and not url.startswith("file:"):
        return parse_uri(os.path.abspath(url))
    return parse_uri(url)


def _factory(scheme: str) -> StoreFactory:
    f = _factories.get(scheme)
    if f is not None:
        return f
    target = _lazy.get(scheme)
    if target is None:
        known = ", ".join(sorted({*_factories, *_lazy}))
        raise ConfigError(f"unsupported URL scheme {scheme!r} (supported: {known})")
    mod, _, name = target.partition(":")
    try:
        f = cast(StoreFactory, getattr(importlib.import_module(mod), name))
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"the {scheme!r} backend is not available: {e}") from None
    _factories[scheme] = f
    return f


def open_location(url: str, **options: Any) -> tuple[Store, str]:
    """Open the store for ``url`` and return it with the path of ``url`` inside it."""
    parsed = parse_location(url)
    return _factory(parsed.scheme)(parsed, **options), parsed.path


def open_store(url: str, **options: Any) -> Store:
    """Open the store (rooted at the container / bucket / ``/``) that holds ``url``."""
    return open_location(url, **options)[0]
