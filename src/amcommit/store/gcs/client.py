"""Low-level GCS JSON API plumbing: endpoints, URL encoding, resource models, and the rules
of the shared HTTP client for GCS (:func:`gcs_http_client`: write gate, 429-only retries).

Retry rules (GCS "retry strategy"): 408, 429 and 5xx are retried with decorrelated-jitter
backoff (:class:`~amcommit.store.retry.RetryPolicy`) only for requests that are idempotent,
i.e. reads, and writes made idempotent by a generation precondition. Other writes are
retried only after HTTP 429, which GCS answers before doing anything. Throttling answers
(429, 503) feed both the store's limiter and the write gate.
"""

from __future__ import annotations

import os
from datetime import datetime
from functools import lru_cache
from urllib.parse import quote

import msgspec
from yarl import URL

from amcommit.errors import ConfigError, StoreError, Throttled
from amcommit.iostats import IOStatistics
from amcommit.store.gcs.errors import classify
from amcommit.store.http import Auth, HttpClient, quote_plain
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy

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


def only_429(e: StoreError) -> bool:
    """GCS answers 429 before doing anything: the one error after which a request that is
    not idempotent is retried (``HttpClient(retry_unexecuted=...)``)."""
    return isinstance(e, Throttled) and e.status == 429


def gcs_http_client(
    *,
    limiter: Limiter,
    write_gate: Limiter | None = None,
    retry: RetryPolicy | None = None,
    stats: IOStatistics | None = None,
    auth: Auth | None = None,
    request_timeout: float = 60.0,
    keepalive_timeout: float = 4.0,
    shield_timeout: float | None = 120.0,
) -> HttpClient:
    """The shared :class:`~amcommit.store.http.HttpClient` with GCS's rules: its error
    classifier, an optional write gate (token bucket for object writes: GCS starts every
    bucket at about 1,000 object writes per second; reads have a separate, higher budget),
    429-only retries of requests that are not idempotent, and bearer-token refresh on 401."""
    return HttpClient(
        limiter=limiter,
        retry=retry,
        stats=stats,
        classify=classify,
        auth=auth,
        write_gate=write_gate,
        retry_unexecuted=only_429,
        shield_timeout=shield_timeout,
        request_timeout=request_timeout,
        keepalive_timeout=keepalive_timeout,
    )


__all__ = [
    "ENCODER",
    "GOOGLE_ENDPOINT",
    "LIST_DECODER",
    "OBJECT_DECODER",
    "RENAME_ID_KEY",
    "REWRITE_DECODER",
    "GcsObject",
    "ObjectList",
    "RewriteResponse",
    "gcs_http_client",
    "only_429",
    "qname",
    "query",
    "resolve_endpoint",
]
