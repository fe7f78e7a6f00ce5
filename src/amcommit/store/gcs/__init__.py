"""Google Cloud Storage backend (``gs://bucket/path``) over the JSON API.

:class:`GcsStore` is the store; :func:`gcs_from_url` is the factory ``open_store`` uses for
``gs://`` URLs. See :mod:`amcommit.store.gcs.store` for etag (= generation), rename
(``objects.move`` or rewrite + delete), recovery and idempotency semantics.
"""

from __future__ import annotations

from typing import Any

from amcommit.errors import ConfigError
from amcommit.store.gcs.auth import AccessToken, BearerAuth, TokenProvider, google_auth_provider, static_token
from amcommit.store.gcs.client import RENAME_ID_KEY, resolve_endpoint
from amcommit.store.gcs.store import GcsStore
from amcommit.uris import ParsedUri

_OPTIONS = frozenset(
    {
        "endpoint",
        "token_provider",
        "credentials",
        "anonymous",
        "limiter",
        "write_rate",
        "write_limiter",
        "retry",
        "use_move",
        "verify_preconditions",
        "preserve_metadata",
        "multipart_threshold",
        "chunk_size",
        "request_timeout",
        "shield_timeout",
        "page_size",
        "user_project",
    }
)


def gcs_from_url(parsed: ParsedUri, **options: Any) -> GcsStore:
    """A :class:`GcsStore` rooted at the bucket of a parsed ``gs://bucket/...`` URL.

    ``options`` are :class:`GcsStore` keyword arguments (``endpoint``, ``token_provider``,
    ``credentials``, ``anonymous``, ``limiter``, ``write_rate``, ``retry``, ``use_move``,
    ...). Without ``endpoint``, ``STORAGE_EMULATOR_HOST`` selects an emulator.
    """
    if parsed.scheme != "gs":
        raise ConfigError(f"not a gs:// URL: scheme {parsed.scheme!r}")
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ConfigError(f"unknown GCS store option(s) {sorted(unknown)}; known: {sorted(_OPTIONS)}")
    return GcsStore(parsed.authority, **options)


__all__ = [
    "RENAME_ID_KEY",
    "AccessToken",
    "BearerAuth",
    "GcsStore",
    "TokenProvider",
    "gcs_from_url",
    "google_auth_provider",
    "resolve_endpoint",
    "static_token",
]
