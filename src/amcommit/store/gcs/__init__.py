"""Google Cloud Storage backend (``gs://bucket/path``) over the JSON API.

:class:`GcsStore` is the store; :func:`gcs_from_url` is the factory ``open_store`` uses for
``gs://`` URLs. See :mod:`amcommit.store.gcs.store` for etag (= generation), rename
(``objects.move`` or rewrite + delete), recovery and idempotency semantics.
"""

from __future__ import annotations

from typing import Any

from amcommit.errors import ConfigError
from amcommit.paths import ParsedUri
from amcommit.store.gcs.auth import AccessToken, BearerAuth, TokenProvider, google_auth_provider, static_token
from amcommit.store.gcs.client import RENAME_ID_KEY, resolve_endpoint
from amcommit.store.gcs.store import GcsStore
from amcommit.store.options import GcsOptions
from amcommit.store.schemes import convert_store_options


def gcs_from_url(parsed: ParsedUri, **options: Any) -> GcsStore:
    """A :class:`GcsStore` rooted at the bucket of a parsed ``gs://bucket/...`` URL.

    ``options`` are checked and converted by :class:`~amcommit.store.options.GcsOptions`:
    :class:`GcsStore` keyword arguments (``endpoint``, ``token_provider``, ``credentials``,
    ``anonymous``, ``limiter``, ``write_rate``, ``retry``, ``use_move``, ...) and ``token``
    (a static bearer token). Without ``endpoint``, ``STORAGE_EMULATOR_HOST`` selects an
    emulator.
    """
    if parsed.scheme != "gs":
        raise ConfigError(f"not a gs:// URL: scheme {parsed.scheme!r}")
    opts = convert_store_options(GcsOptions, options).given()
    token = opts.pop("token", None)
    if token is not None:
        if any(opts.get(k) is not None for k in ("token_provider", "credentials")) or opts.get("anonymous"):
            raise ConfigError("give only one of token, token_provider, credentials, anonymous")
        opts["token_provider"] = static_token(token)
    return GcsStore(parsed.authority, **opts)


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
