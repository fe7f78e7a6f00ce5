"""The one cache of short-lived credentials (OAuth bearer tokens) of the HTTP stores.

The shape of Rust ``object_store``'s ``client/token.rs``: a :class:`TemporaryToken` (a
secret and its expiry) kept by a :class:`TokenCache`, which fetches a new one through an
async ``fetch`` callable when the cached one is missing or about to expire. Both the Azure
(:class:`~amcommit.store.azure.auth.BearerToken`) and the GCS
(:class:`~amcommit.store.gcs.auth.BearerAuth`) bearer credentials use it, so both refresh
on the same rule:

* a token is used until ``min(min_ttl, lifetime / 2)`` before it expires (``lifetime``
  measured from the fetch): five minutes early for ordinary tokens, half-way for
  short-lived ones, so a provider handing out one-minute tokens is not asked on every
  request;
* a token without an expiry is kept for ``default_ttl`` seconds;
* concurrent callers share one fetch (a lock, checked again inside);
* :meth:`TokenCache.invalidate` drops the token a service rejected (HTTP 401) -- only if it
  is still the cached one, so a hundred requests rejected with the same old token cause
  one fetch, not a hundred.

Tokens are held as :class:`~amcommit.redact.Secret`: never in a repr, error or log.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import anyio

from amcommit.redact import Secret

MIN_TTL = 300.0
"""Refresh this many seconds before expiry (or half-way through a shorter life)."""
DEFAULT_TTL = 600.0
"""How long a token without an expiry is kept."""


@dataclass(frozen=True, slots=True)
class TemporaryToken:
    """A token and its expiry (epoch seconds; None = unknown)."""

    token: str = field(repr=False)
    expires_at: float | None = None

    def __repr__(self) -> str:
        return f"TemporaryToken(<redacted>, expires_at={self.expires_at!r})"


def refresh_at(fetched_at: float, expires_at: float | None, *, min_ttl: float, default_ttl: float) -> float:
    """When a token fetched at ``fetched_at`` must be fetched anew (pure; see the module doc)."""
    if expires_at is None:
        return fetched_at + default_ttl
    life = max(0.0, expires_at - fetched_at)
    return expires_at - min(min_ttl, life / 2)


class TokenCache:
    """Caches the token of ``fetch`` (see the module docstring for the rules)."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[TemporaryToken]],
        *,
        min_ttl: float = MIN_TTL,
        default_ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self.min_ttl = min_ttl
        self.default_ttl = default_ttl
        self._clock = clock
        self._token: Secret | None = None
        self._refresh_at = 0.0
        self._lock: anyio.Lock | None = None
        self._seen: list[Secret] = []
        self.fetches = 0

    def __repr__(self) -> str:
        return f"TokenCache(fetches={self.fetches})"

    async def get(self) -> str:
        """The cached token, fetched first when missing or due (one fetch at a time)."""
        tok = self._token
        if tok is not None and self._clock() < self._refresh_at:
            return tok.reveal()
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            tok = self._token
            if tok is not None and self._clock() < self._refresh_at:
                return tok.reveal()
            now = self._clock()
            new = await self._fetch()
            self.fetches += 1
            secret = Secret(new.token)
            self._token = secret
            self._refresh_at = refresh_at(
                now, new.expires_at, min_ttl=self.min_ttl, default_ttl=self.default_ttl
            )
            self._seen.append(secret)
            del self._seen[:-4]
            return new.token

    def invalidate(self, rejected: str | None = None) -> None:
        """Forget the cached token after the service rejected ``rejected`` (None: whatever
        is cached). A token fetched since then is kept: it was not the one refused."""
        tok = self._token
        if tok is not None and (rejected is None or tok.reveal() == rejected):
            self._token = None

    def seen(self) -> list[str]:
        """The last few tokens handed out (to scrub them from texts in tests)."""
        return [s.reveal() for s in self._seen]


def bearer_value(headers: Mapping[str, str] | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header in ``headers``, if any."""
    if not headers:
        return None
    v = headers.get("Authorization")
    return v[7:] if v is not None and v.startswith("Bearer ") else None


__all__ = ["DEFAULT_TTL", "MIN_TTL", "TemporaryToken", "TokenCache", "bearer_value", "refresh_at"]
