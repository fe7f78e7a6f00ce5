"""Shared HTTP machinery for the cloud backends (aiohttp).

:class:`HttpClient` owns one ``aiohttp.ClientSession`` per store and sends every request
through the store's :class:`~amcommit.store.limits.Limiter`, with retries
(:mod:`amcommit.store.retry`), per-operation IO statistics and a backend-supplied error
classifier. Requests are signed per attempt (``sign`` callback), because signatures
include the date.

Retries: by default only requests marked ``idempotent`` are retried on retryable errors
(timeouts, connection resets, 5xx, throttling). This is the *only* retry layer for the
requests of the HTTP stores (``Capabilities.retries``): an error this loop gave up on
carries ``retries_spent`` and the engine does not retry it again (see
:mod:`amcommit.store.retry`). A backend that can recognise the effect of
an earlier attempt (e.g. a rename that already happened) may pass ``idempotent=True`` and
handle the "already done" answer itself; the attempt count is on
:attr:`HttpResponse.attempts` and on raised errors as ``attempts``.

Credentials: never put keys, SAS tokens or bearer tokens into messages; use
:func:`redact_url` on URLs before they enter an error.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from amcommit.errors import (
    AlreadyExists,
    InvalidInput,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    StoreError,
    Throttled,
    Transient,
    Unauthenticated,
)
from amcommit.iostats import IOStatistics
from amcommit.redact import redact_url
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy, call_with_retries

# Names made only of these characters (the common case for object names: letters, digits,
# "/", "=" of Hive partitions, ...) are percent-encoded with a few str.replace calls;
# urllib's quote() costs about 15 us for a 100-character name (a Python call per byte).
_PLAIN = re.compile(r"[A-Za-z0-9_.~/=:+,@-]*").fullmatch
_PLAIN_ESCAPES = (("=", "%3D"), (":", "%3A"), ("+", "%2B"), (",", "%2C"), ("@", "%40"))


def quote_plain(value: str, safe: str = "") -> str:
    """``urllib.parse.quote(value, safe=safe)`` for ``safe`` of ``""`` or ``"/"``, faster."""
    if _PLAIN(value) is None:
        return quote(value, safe=safe)
    for ch, esc in _PLAIN_ESCAPES:
        if ch in value:
            value = value.replace(ch, esc)
    if not safe and "/" in value:
        value = value.replace("/", "%2F")
    return value


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, dt.timestamp() - time.time())


@dataclass(slots=True)
class HttpResponse:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    attempts: int = 1


Signer = Callable[[str, URL, dict[str, str]], Awaitable[None]]
"""``sign(method, url, headers)``: add auth headers in place (per attempt)."""

Classifier = Callable[[HttpResponse, str, str], StoreError | None]
"""``classify(response, op, path)``: the error for a response, or None on success."""


def default_classify(resp: HttpResponse, op: str, path: str) -> StoreError | None:
    """Status-only mapping; backends refine it with their error codes."""
    s = resp.status
    if s < 300 or s == 304:
        return None
    cls: type[StoreError]
    if s == 404:
        cls, msg = NotFound, "not found"
    elif s == 409:
        cls, msg = AlreadyExists, "conflict"
    elif s == 412:
        cls, msg = PreconditionFailed, "precondition failed"
    elif s == 401:
        cls, msg = Unauthenticated, "unauthenticated"
    elif s == 403:
        cls, msg = PermissionDenied, "permission denied"
    elif s in (429, 503):
        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        return Throttled("throttled", retry_after=retry_after, path=path, op=op, status=s)
    elif s == 408 or s >= 500:
        cls, msg = Transient, "server error"
    elif s == 400:
        cls, msg = InvalidInput, "bad request"
    else:
        cls, msg = StoreError, f"unexpected HTTP status {s}"
    return cls(msg, path=path, op=op, status=s)


class HttpClient:
    """One aiohttp session plus limiter, retries, statistics and error classification."""

    def __init__(
        self,
        *,
        limiter: Limiter,
        retry: RetryPolicy | None = None,
        stats: IOStatistics | None = None,
        classify: Classifier = default_classify,
        sign: Signer | None = None,
        keepalive_timeout: float = 4.0,
        request_timeout: float = 60.0,
        connector_limit: int | None = None,
    ) -> None:
        self.limiter = limiter
        self.retry = retry or RetryPolicy()
        self.stats = stats or IOStatistics()
        self.classify = classify
        self.sign = sign
        self._keepalive = keepalive_timeout
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=10.0)
        self._connector_limit = connector_limit or max(limiter.max_concurrency or 100, 8)
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._connector_limit,
                keepalive_timeout=self._keepalive,
                enable_cleanup_closed=True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                auto_decompress=False,
                skip_auto_headers=("Content-Type", "User-Agent", "Accept-Encoding"),
                headers={"User-Agent": "amcommit/0.1"},
            )
            # aiohttp silently resends PUT/DELETE (and GET/HEAD) once when a reused keep-alive
            # connection drops mid-request. That hides a possibly executed first attempt from
            # ``idempotent=False`` callers and from recovery logic that counts attempts; all
            # retrying happens here, visibly (``attempts``), instead.
            if hasattr(self._session, "_retry_connection"):
                self._session._retry_connection = False
        return self._session

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def _once(
        self,
        op: str,
        method: str,
        url: URL,
        headers: Mapping[str, str],
        data: bytes | None,
        path: str,
        attempt: int,
        missing_ok: bool = False,
    ) -> HttpResponse | None:
        """One attempt. With ``missing_ok``, a 404 answer is recorded as a failed ``op`` and
        returned as None instead of raised (no exception on the "is it there?" path)."""
        if self.sign is not None:
            hdrs = dict(headers)  # signed per attempt, in place: never the caller's dict
            await self.sign(method, url, hdrs)
        else:
            hdrs = headers  # type: ignore[assignment]  # aiohttp copies them
        stats = self.stats
        t0 = time.perf_counter()
        async with self.limiter.slot():
            try:
                async with self.session().request(
                    method, url, headers=hdrs, data=data, allow_redirects=False
                ) as r:
                    body = await r.read()
                    resp = HttpResponse(r.status, r.headers, body, attempt)
            except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
                stats.record(op, time.perf_counter() - t0, failed=True)
                raise Transient(f"connection failed: {type(e).__name__}", path=path, op=op) from None
        if missing_ok and resp.status == 404:
            stats.record(op, time.perf_counter() - t0, failed=True)
            self.limiter.succeeded()  # an answer, not a refusal: counts in the limiter's share
            return None
        err = self.classify(resp, op, path)
        if err is not None:
            err.attempts = attempt
            stats.record(op, time.perf_counter() - t0, failed=True)
            if resp.status < 500 and not isinstance(err, Throttled):
                # 404, 409, 412 ...: the service answered; only refusals slow the limiter
                self.limiter.succeeded()
            raise err
        stats.record(op, time.perf_counter() - t0)
        self.limiter.succeeded()
        return resp

    async def request(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str = "",
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        idempotent: bool = True,
        retry: RetryPolicy | None = None,
    ) -> HttpResponse:
        """Send one logical request (with retries if ``idempotent``); raise a typed error.

        ``url`` must be built with ``encoded=True`` (it is signed and sent as is).
        """
        policy = retry or self.retry
        hdrs = headers or {}

        async def attempt(n: int) -> HttpResponse:
            return await self._once(op, method, url, hdrs, data, path, n)  # type: ignore[return-value]

        # a non-idempotent request is sent once; its retryable error is *declined* (not
        # marked ``retries_spent``), so a caller that can repeat the operation safely may
        return await call_with_retries(
            attempt,
            policy=policy,
            limiter=self.limiter,
            stats=self.stats,
            retry_if=None if idempotent else _never,
        )


def _never(_e: StoreError) -> bool:
    return False


__all__ = [
    "HttpClient",
    "HttpResponse",
    "Throttled",
    "default_classify",
    "parse_retry_after",
    "quote_plain",
    "redact_url",
]
