"""Authentication for the GCS JSON API: anonymous (emulators) or OAuth2 bearer tokens.

A :data:`TokenProvider` is an async callable returning an :class:`AccessToken`. Tokens are
cached by :class:`BearerAuth` (the shared :class:`~amcommit.store.token.TokenCache` and its
refresh rule) until shortly before they expire and are only ever placed in
the ``Authorization`` header of a request: never in URLs, errors, reprs or logs.

Providers:

* :func:`static_token` for a token obtained elsewhere (tests, short jobs);
* :func:`google_auth_provider` wraps ``google-auth`` credentials (the optional ``gcs``
  extra: ``pip install amcommit[gcs]``); the blocking refresh runs in a worker thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from yarl import URL

from amcommit.errors import ConfigError, Unauthenticated
from amcommit.store.token import TemporaryToken, TokenCache, bearer_value

CLOUD_PLATFORM_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write",)
"""OAuth2 scopes amcommit asks for (objects read/write; no bucket administration)."""


AccessToken = TemporaryToken
"""A bearer token and its expiry (epoch seconds; None = unknown): the shared
:class:`~amcommit.store.token.TemporaryToken`."""


TokenProvider = Callable[[], Awaitable[AccessToken]]
"""``await provider()`` -> a fresh :class:`AccessToken`."""


def static_token(token: str, *, expires_at: float | None = None) -> TokenProvider:
    """A provider that always returns ``token``."""
    tok = AccessToken(token, expires_at)

    async def provide() -> AccessToken:
        return tok

    return provide


def google_auth_provider(
    credentials: Any = None, *, scopes: tuple[str, ...] = CLOUD_PLATFORM_SCOPES
) -> TokenProvider:
    """A provider over ``google-auth`` credentials (``google.auth.default()`` if None,
    resolved on first use in a worker thread, since it may consult the environment).

    Raises :class:`~amcommit.errors.ConfigError` if ``google-auth`` is not installed.
    """
    try:
        import google.auth
    except ImportError as e:  # pragma: no cover - depends on the optional extra
        raise ConfigError(
            "GCS credentials need the optional 'google-auth' package (pip install amcommit[gcs])"
        ) from e
    holder: list[Any] = [credentials]

    def refresh() -> AccessToken:
        try:
            from google.auth.transport.requests import Request
        except ImportError:  # pragma: no cover - requests is normally present
            from google.auth.transport.urllib3 import Request  # type: ignore[assignment]
        try:
            if holder[0] is None:
                holder[0], _project = google.auth.default(scopes=list(scopes))
            creds = holder[0]
            if not creds.valid:
                creds.refresh(Request())
        except Exception as e:  # DefaultCredentialsError, RefreshError, transport errors
            # Only the type: a refresh error's text is not ours to vet for secrets.
            raise Unauthenticated(f"could not obtain GCS credentials ({type(e).__name__})") from None
        expiry = getattr(creds, "expiry", None)
        exp = expiry.replace(tzinfo=expiry.tzinfo or _utc()).timestamp() if expiry is not None else None
        return AccessToken(str(creds.token), exp)

    async def provide() -> AccessToken:
        return await anyio.to_thread.run_sync(refresh)

    return provide


def _utc() -> Any:
    import datetime

    return datetime.UTC


class BearerAuth:
    """Signs requests with ``Authorization: Bearer`` from the provider's token, cached by
    the shared :class:`~amcommit.store.token.TokenCache` (its refresh rule; concurrent
    requests share one fetch; a token the service rejects is dropped by :meth:`invalidate`).
    """

    def __init__(self, provider: TokenProvider) -> None:
        self._cache = TokenCache(provider)

    def __repr__(self) -> str:
        return "BearerAuth(<redacted>)"

    @property
    def refreshes(self) -> int:
        """How many tokens were fetched."""
        return self._cache.fetches

    async def token(self) -> str:
        return await self._cache.get()

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        """The service answered 401 to a request signed with ``signed``: forget that token,
        so the next request fetches a new one. True: signing again may help."""
        self._cache.invalidate(bearer_value(signed))
        return True

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        headers["Authorization"] = "Bearer " + await self._cache.get()


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``headers`` safe to log (Authorization replaced)."""
    return {
        k: ("<redacted>" if k.lower() in ("authorization", "proxy-authorization") else v)
        for k, v in headers.items()
    }


__all__ = [
    "CLOUD_PLATFORM_SCOPES",
    "AccessToken",
    "BearerAuth",
    "TokenProvider",
    "google_auth_provider",
    "redact_headers",
    "static_token",
]
