"""Shared HTTP machinery for the cloud backends (aiohttp).

:class:`HttpClient` owns one ``aiohttp.ClientSession`` per store and sends every request
through the store's :class:`~amcommit.store.limits.Limiter`, with retries
(:mod:`amcommit.store.retry`), per-operation IO statistics and a backend-supplied error
classifier. Requests are signed per attempt (``auth``), because signatures include the
date.

One send path (:meth:`HttpClient.send`) with a per-request policy (``write``,
``idempotent``, ``missing_ok``, ``shield``) and an auth ``invalidate`` hook (a bearer
token rejected with 401 is dropped and the request sent once more with a fresh one; see
:mod:`amcommit.store.token` for the one token cache).

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
import math
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol, TypeVar, overload
from urllib.parse import quote

import aiohttp
import anyio
from multidict import CIMultiDictProxy
from yarl import URL

from amcommit.errors import (
    AlreadyExists,
    InvalidInput,
    NotFound,
    ObjectRateLimited,
    PermissionDenied,
    PreconditionFailed,
    StoreError,
    Throttled,
    Transient,
    Unauthenticated,
    Unreachable,
)
from amcommit.iostats import IOStatistics
from amcommit.redact import redact_url
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy, call_with_retries

T = TypeVar("T")

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


class Auth(Protocol):
    """How a client authenticates its requests (the Azure credentials, GCS bearer tokens)."""

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        """Add auth headers to ``headers`` in place (called for every attempt, because
        signatures include the date)."""
        ...


class SyncAuth(Auth, Protocol):
    """An :class:`Auth` that never waits to sign (Shared Key, SAS, anonymous): the client
    calls :meth:`sign_sync` instead of awaiting :meth:`sign` (one coroutine less per
    request)."""

    def sign_sync(self, method: str, url: URL, headers: dict[str, str]) -> None:
        """What :meth:`sign` does, synchronously."""
        ...


class Invalidating(Auth, Protocol):
    """An :class:`Auth` whose credential can be fetched anew (bearer tokens)."""

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        """The service answered 401 to the request signed with ``signed``: drop the
        credential it carried (if still cached). True if signing again may help: the
        request is then sent once more, with a fresh credential (a 401 means the service
        did nothing, so this holds for every request, idempotent or not)."""
        ...


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
    """One aiohttp session plus limiter, retries, statistics, error classification,
    authentication and cancellation shields: the one send path of the HTTP stores
    (:meth:`send`), in the shape of Rust ``object_store``'s ``client/retry.rs``.

    Client-wide settings (per store): ``auth`` (signs every attempt; a credential with an
    ``invalidate`` hook is refreshed once after a 401), ``write_gate`` (a second limiter
    that only requests sent with ``write=True`` pass, e.g. GCS's object-write budget),
    ``retry_unexecuted`` (errors after which the service provably did nothing, e.g. GCS's
    429: a request that is not idempotent is retried after those, and only those) and
    ``shield_timeout`` (how long a shielded mutation may run; None = no deadline of its own,
    the request timeout still applies).
    """

    def __init__(
        self,
        *,
        limiter: Limiter,
        retry: RetryPolicy | None = None,
        stats: IOStatistics | None = None,
        classify: Classifier = default_classify,
        auth: Auth | None = None,
        write_gate: Limiter | None = None,
        retry_unexecuted: Callable[[StoreError], bool] | None = None,
        shield_timeout: float | None = None,
        keepalive_timeout: float = 4.0,
        request_timeout: float = 60.0,
        connector_limit: int | None = None,
    ) -> None:
        self.limiter = limiter
        self.retry = retry or RetryPolicy()
        self.stats = stats or IOStatistics()
        self.classify = classify
        self.auth = auth
        # a credential without the hook (a caller's own Azure credential) is never refreshed
        self._invalidate: Callable[[Mapping[str, str]], bool] | None = getattr(auth, "invalidate", None)
        # credentials that never wait sign without a coroutine (see SyncAuth)
        self._sign_sync: Callable[[str, URL, dict[str, str]], None] | None = getattr(auth, "sign_sync", None)
        self.write_gate = write_gate
        self._unexecuted = retry_unexecuted or _never
        self.shield_timeout = shield_timeout
        self._keepalive = keepalive_timeout
        self._timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=10.0)
        self._connector_limit = connector_limit or max(limiter.concurrency_ceiling or 100, 8)
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

    # -- cancellation shield ---------------------------------------------------------------
    async def shielded(self, op: str, path: str, fn: Callable[[anyio.CancelScope], Awaitable[T]]) -> T:
        """Run a mutation ``fn(scope)`` shielded from cancellation (for at most
        ``shield_timeout``, if set; ``fn`` may :meth:`extend` ``scope`` for a further step).

        A cancelled HTTP request may still be executed by the service, later; a caller that
        cancels a rename and then rolls back would miss it. Shielding lets every started
        mutation finish, so that when the call returns or raises its effect is settled.
        Past the deadline the mutation is abandoned with :class:`~amcommit.errors.Transient`.
        """
        timeout = self.shield_timeout
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        with anyio.CancelScope(shield=True, deadline=deadline) as scope:
            return await fn(scope)
        raise Transient(f"did not finish within {timeout or 0:g}s", op=op, path=path)

    def extend(self, scope: anyio.CancelScope) -> None:
        """Give the shielded ``scope`` a full ``shield_timeout`` from now (a further step)."""
        if self.shield_timeout is not None:
            scope.deadline = max(scope.deadline, anyio.current_time() + self.shield_timeout)

    # -- one attempt -----------------------------------------------------------------------
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
        """One request, signed already. With ``missing_ok``, a 404 answer is recorded as a
        failed ``op`` and returned as None instead of raised (no exception on the "is it
        there?" path)."""
        stats = self.stats
        t0 = time.perf_counter()
        async with self.limiter.slot():
            try:
                async with self.session().request(
                    method, url, headers=headers, data=data, allow_redirects=False
                ) as r:
                    body = await r.read()
                    resp = HttpResponse(r.status, r.headers, body, attempt)
            except aiohttp.ClientConnectorError as e:  # no connection at all: name the endpoint
                stats.record(op, time.perf_counter() - t0, failed=True)
                origin = str(url.origin())
                raise Unreachable(
                    f"cannot connect to {origin} ({type(e).__name__})", endpoint=origin, path=path, op=op
                ) from None
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
            if resp.status < 500 and (not isinstance(err, Throttled) or isinstance(err, ObjectRateLimited)):
                # 404, 409, 412, one object changed too often ...: the service answered;
                # only refusals of our load slow the limiter
                self.limiter.succeeded()
            raise err
        stats.record(op, time.perf_counter() - t0)
        self.limiter.succeeded()
        return resp

    async def _sign(self, method: str, url: URL, headers: Mapping[str, str]) -> dict[str, str]:
        """A signed copy of ``headers`` (signed per attempt: never the caller's dict)."""
        hdrs = dict(headers)
        if self._sign_sync is not None:
            self._sign_sync(method, url, hdrs)
        elif self.auth is not None:
            await self.auth.sign(method, url, hdrs)
        return hdrs

    async def _signed(
        self,
        op: str,
        method: str,
        url: URL,
        headers: Mapping[str, str],
        data: bytes | None,
        path: str,
        missing_ok: bool,
        attempt: int,
    ) -> HttpResponse | None:
        """One attempt, signed; after a 401, once more with a fresh credential if the auth
        can fetch one (the same attempt: the service did nothing)."""
        if self.auth is None:
            return await self._once(op, method, url, headers, data, path, attempt, missing_ok)
        if self._sign_sync is not None:  # the common case, without the _sign coroutine
            hdrs = dict(headers)
            self._sign_sync(method, url, hdrs)
        else:
            hdrs = await self._sign(method, url, headers)
        try:
            return await self._once(op, method, url, hdrs, data, path, attempt, missing_ok)
        except Unauthenticated as e:
            if e.status != 401 or self._invalidate is None or not self._invalidate(hdrs):
                raise
        hdrs = await self._sign(method, url, headers)
        return await self._once(op, method, url, hdrs, data, path, attempt, missing_ok)

    async def _gated(
        self,
        gate: Limiter,
        op: str,
        method: str,
        url: URL,
        headers: Mapping[str, str],
        data: bytes | None,
        path: str,
        missing_ok: bool,
        attempt: int,
    ) -> HttpResponse | None:
        """An attempt through the write gate (a token bucket: the slot is not held)."""
        async with gate.slot():
            pass
        try:
            resp = await self._signed(op, method, url, headers, data, path, missing_ok, attempt)
        except ObjectRateLimited:
            gate.succeeded()  # one object changed too often: not the bucket's write budget
            raise
        except Throttled as e:
            gate.throttled(e.retry_after)
            raise
        except StoreError as e:
            # 404, 409, 412 ...: an answer, not a refusal (as for the request limiter)
            if e.status is not None and e.status < 500:
                gate.succeeded()
            raise
        gate.succeeded()
        return resp

    # -- the one send path -----------------------------------------------------------------
    @overload
    def send(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str = ...,
        headers: Mapping[str, str] | None = ...,
        data: bytes | None = ...,
        write: bool = ...,
        idempotent: bool = ...,
        missing_ok: Literal[False] = ...,
        shield: bool = ...,
        retry: RetryPolicy | None = ...,
    ) -> Coroutine[Any, Any, HttpResponse]: ...

    @overload
    def send(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str = ...,
        headers: Mapping[str, str] | None = ...,
        data: bytes | None = ...,
        write: bool = ...,
        idempotent: bool = ...,
        missing_ok: bool,
        shield: bool = ...,
        retry: RetryPolicy | None = ...,
    ) -> Coroutine[Any, Any, HttpResponse | None]: ...

    def send(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str = "",
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        write: bool = False,
        idempotent: bool = True,
        missing_ok: bool = False,
        shield: bool = False,
        retry: RetryPolicy | None = None,
    ) -> Coroutine[Any, Any, HttpResponse | None]:
        """Send one logical request: ``await`` it for the response or a typed error.

        The per-request policy:

        * ``write``: pass the client's write gate too (no-op without one);
        * ``idempotent``: retry retryable errors (timeouts, resets, 5xx, throttling) with
          ``retry`` (default: the client's policy). A request that is not idempotent is
          sent once, except after an error ``retry_unexecuted`` recognises; its other
          retryable errors are *declined* (not marked ``retries_spent``), so a caller that
          can repeat the operation safely may (see :mod:`amcommit.store.retry`);
        * ``missing_ok``: answer None for a 404 instead of raising
          :class:`~amcommit.errors.NotFound` (still counted as a failed ``op``);
        * ``shield``: the request (with its retries) settles -- answer, error or
          ``shield_timeout`` -- before a cancellation of the caller takes effect, so nothing
          lands on the service after the caller has moved on. Callers that already run in
          :meth:`shielded` leave it off.

        A 401 answer to a request whose credential can be refreshed is sent once more with
        a fresh one. ``url`` must be built with ``encoded=True`` (it is signed and sent as
        is). The attempt count is on :attr:`HttpResponse.attempts` and on raised errors as
        ``attempts``.

        (A plain function returning the coroutine that does the work: one frame less that
        every suspension and resumption of every request passes through.)
        """
        gate = self.write_gate if write else None
        hdrs = headers or _NO_HEADERS
        attempt: Callable[[int], Awaitable[HttpResponse | None]] = (
            partial(self._signed, op, method, url, hdrs, data, path, missing_ok)
            if gate is None
            else partial(self._gated, gate, op, method, url, hdrs, data, path, missing_ok)
        )
        call = call_with_retries(
            attempt,
            policy=retry or self.retry,
            limiter=self.limiter,
            stats=self.stats,
            retry_if=None if idempotent else self._unexecuted,
        )
        if not shield:
            return call
        return self.shielded(op, path, lambda _scope: call)


_NO_HEADERS: Mapping[str, str] = {}


def _never(_e: StoreError) -> bool:
    return False


__all__ = [
    "Auth",
    "HttpClient",
    "HttpResponse",
    "Invalidating",
    "SyncAuth",
    "Throttled",
    "default_classify",
    "parse_retry_after",
    "quote_plain",
    "redact_url",
]
