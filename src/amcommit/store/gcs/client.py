"""Low-level GCS JSON API plumbing: endpoints, URL encoding, resource models, and the HTTP
client with a separate write-rate gate.

Retry rules (GCS "retry strategy"): 408, 429 and 5xx are retried with decorrelated-jitter
backoff (:class:`~amcommit.store.retry.RetryPolicy`) only for requests that are idempotent,
i.e. reads, and writes made idempotent by a generation precondition. Other writes are
retried only after HTTP 429, which GCS answers before doing anything. Throttling answers
(429, 503) feed both the store's limiter and the write gate.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Literal, overload
from urllib.parse import quote

import msgspec
from yarl import URL

from amcommit.errors import ConfigError, StoreError, Throttled, Unauthenticated
from amcommit.iostats import IOStatistics
from amcommit.store.gcs.errors import classify
from amcommit.store.http import HttpClient, HttpResponse, Signer, quote_plain
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy, call_with_retries

GOOGLE_ENDPOINT = "https://storage.googleapis.com"
RENAME_ID_KEY = "amcommitRenameId"
"""Custom metadata key holding the rename-operation id on a rename's destination."""

_GOOGLE_HOSTS = ("storage.googleapis.com", "www.googleapis.com", "storage.mtls.googleapis.com")


def resolve_endpoint(endpoint: str | None = None) -> tuple[str, bool]:
    """``(base URL, is_emulator)``: ``endpoint`` if given, else ``STORAGE_EMULATOR_HOST``
    (``host:port`` or a URL), else the public Google endpoint."""
    raw = endpoint or os.environ.get("STORAGE_EMULATOR_HOST") or ""
    if not raw:
        return GOOGLE_ENDPOINT, False
    if "://" not in raw:
        raw = "http://" + raw
    u = URL(raw)
    if u.scheme not in ("http", "https") or not u.host:
        raise ConfigError(f"bad GCS endpoint {raw!r} (expected http[s]://host[:port])")
    base = str(u.with_path("").with_query(None).with_fragment(None)).rstrip("/")
    return base, u.host not in _GOOGLE_HOSTS


def qname(name: str) -> str:
    """An object or bucket name as one percent-encoded URL path segment."""
    return quote_plain(name)


@lru_cache(maxsize=256)
def _quote_const(value: str) -> str:
    return quote(value, safe="")


def query(params: dict[str, str | int | None]) -> str:
    """An encoded query string from ``params`` (None values left out)."""
    out = []
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, int) or v.isdigit():
            out.append(f"{k}={v}")
        elif k in ("fields", "uploadType", "alt", "delimiter"):
            out.append(f"{k}={_quote_const(v)}")  # a few constant values: cached
        else:
            out.append(f"{k}={quote(v, safe='')}")
    return "&".join(out)


class GcsObject(msgspec.Struct, rename="camel"):
    """The parts of a GCS object resource amcommit uses (unknown fields ignored)."""

    name: str
    size: str = "0"
    generation: str = "0"
    metageneration: str = "1"
    updated: str | None = None
    content_type: str | None = None
    content_encoding: str | None = None
    content_disposition: str | None = None
    content_language: str | None = None
    cache_control: str | None = None
    custom_time: str | None = None
    crc32c: str | None = None
    md5_hash: str | None = None
    metadata: dict[str, str] | None = None

    @property
    def rename_id(self) -> str | None:
        """The ``amcommitRenameId`` custom metadata value, if any."""
        return self.metadata.get(RENAME_ID_KEY) if self.metadata else None

    def mtime(self) -> float | None:
        """``updated`` as epoch seconds."""
        if not self.updated:
            return None
        try:
            return datetime.fromisoformat(self.updated.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None

    def copy_fields(self) -> dict[str, object]:
        """The user-settable fields to carry to a copy (empty / zero values dropped)."""
        out: dict[str, object] = {}
        for key, val in (
            ("contentType", self.content_type),
            ("contentEncoding", self.content_encoding),
            ("contentDisposition", self.content_disposition),
            ("contentLanguage", self.content_language),
            ("cacheControl", self.cache_control),
        ):
            if val:
                out[key] = val
        if self.custom_time and not self.custom_time.startswith("0001-"):
            out["customTime"] = self.custom_time
        return out


class ObjectList(msgspec.Struct, rename="camel"):
    """One page of ``objects.list``."""

    items: list[GcsObject] | None = None
    prefixes: list[str] | None = None
    next_page_token: str | None = None


class RewriteResponse(msgspec.Struct, rename="camel"):
    """An ``objects.rewrite`` answer (``resource`` only when ``done``)."""

    done: bool = False
    rewrite_token: str | None = None
    resource: GcsObject | None = None


OBJECT_DECODER = msgspec.json.Decoder(GcsObject)
LIST_DECODER = msgspec.json.Decoder(ObjectList)
REWRITE_DECODER = msgspec.json.Decoder(RewriteResponse)
ENCODER = msgspec.json.Encoder()


class GcsHttpClient(HttpClient):
    """:class:`HttpClient` plus an optional write gate (token bucket for object writes).

    GCS starts every bucket at about 1,000 object writes per second and raises that limit
    gradually; reads have a separate, higher budget. The gate only rate-limits requests
    marked ``write``; all requests still pass the store's main limiter.
    """

    def __init__(
        self,
        *,
        limiter: Limiter,
        write_gate: Limiter | None = None,
        retry: RetryPolicy | None = None,
        stats: IOStatistics | None = None,
        sign: Signer | None = None,
        on_unauthenticated: Callable[[], None] | None = None,
        request_timeout: float = 60.0,
        keepalive_timeout: float = 4.0,
    ) -> None:
        super().__init__(
            limiter=limiter,
            retry=retry,
            stats=stats,
            classify=classify,
            sign=sign,
            request_timeout=request_timeout,
            keepalive_timeout=keepalive_timeout,
        )
        self.write_gate = write_gate
        self.on_unauthenticated = on_unauthenticated

    @overload
    async def send(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str = ...,
        headers: dict[str, str] | None = ...,
        data: bytes | None = ...,
        write: bool = ...,
        idempotent: bool = ...,
        missing_ok: Literal[False] = ...,
    ) -> HttpResponse: ...

    @overload
    async def send(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str = ...,
        headers: dict[str, str] | None = ...,
        data: bytes | None = ...,
        write: bool = ...,
        idempotent: bool = ...,
        missing_ok: bool,
    ) -> HttpResponse | None: ...

    async def send(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str = "",
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
        write: bool = False,
        idempotent: bool = True,
        missing_ok: bool = False,
    ) -> HttpResponse | None:
        """One logical request with the retry rules of the module docstring.

        ``missing_ok``: answer None for a 404 instead of raising
        :class:`~amcommit.errors.NotFound` (still counted as a failed ``op``)."""
        gate = self.write_gate if write else None
        hdrs = headers or _NO_HEADERS

        async def attempt(n: int) -> HttpResponse | None:
            if gate is not None:
                async with gate.slot():
                    pass
            try:
                try:
                    resp = await self._once(op, method, url, hdrs, data, path, n, missing_ok)
                except Unauthenticated:
                    if self.on_unauthenticated is None:
                        raise
                    # an expired token: GCS did nothing; fetch a new token and try once more
                    self.on_unauthenticated()
                    resp = await self._once(op, method, url, hdrs, data, path, n, missing_ok)
            except Throttled as e:
                if gate is not None:
                    gate.throttled(e.retry_after)
                raise
            except StoreError as e:
                # 404, 409, 412 ...: an answer, not a refusal (as for the request limiter)
                if gate is not None and e.status is not None and e.status < 500:
                    gate.succeeded()
                raise
            if gate is not None:
                gate.succeeded()
            return resp

        return await call_with_retries(
            attempt,
            policy=self.retry,
            limiter=self.limiter,
            stats=self.stats,
            retry_if=None if idempotent else _only_429,
        )


def _only_429(e: StoreError) -> bool:
    return isinstance(e, Throttled) and e.status == 429


_NO_HEADERS: dict[str, str] = {}


__all__ = [
    "ENCODER",
    "GOOGLE_ENDPOINT",
    "LIST_DECODER",
    "OBJECT_DECODER",
    "RENAME_ID_KEY",
    "REWRITE_DECODER",
    "GcsHttpClient",
    "GcsObject",
    "ObjectList",
    "RewriteResponse",
    "qname",
    "query",
    "resolve_endpoint",
]
