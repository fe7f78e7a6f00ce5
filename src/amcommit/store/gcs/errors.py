"""Mapping of GCS JSON API answers onto amcommit's typed errors.

GCS answers errors as ``{"error": {"code": 412, "message": "...", "errors": [{"reason":
"conditionNotMet", ...}]}}``. The ``reason`` becomes :attr:`StoreError.code`; the message is
kept (shortened) because GCS messages never carry credentials. URLs are never put into an
error (they could carry a resumable-upload session id, which is a bearer credential).

Status mapping (see the GCS retry strategy):

* 404 -> :class:`NotFound`, or :class:`BucketNotFound` when only a missing bucket explains
  it (a listing or an upload: neither needs an existing object) or GCS says so; 409 -> :class:`AlreadyExists`; 412 -> :class:`PreconditionFailed`;
* 401 -> :class:`Unauthenticated`; 403 -> :class:`PermissionDenied`, except the legacy
  ``rateLimitExceeded`` / ``userRateLimitExceeded`` reasons, which are :class:`Throttled`;
* 429 and 503 -> :class:`Throttled` (with the ``Retry-After`` hint; they slow the limiter),
  except a 429 for the per-object mutation limit ("The object B/N exceeded the rate limit for
  object mutation operations ...": about one write per second to one object name, see
  Cloud Storage's quotas): :class:`ObjectRateLimited`, retried after the object's window
  (:data:`OBJECT_WRITE_WINDOW`, GCS sends no Retry-After) and never slowing the limiter;
* 408, 500, 502, 504 and other 5xx -> :class:`Transient`;
* 400 and 411/413/416 -> :class:`InvalidInput`; 405/501 -> :class:`NotSupported`;
* 308 (resumable upload incomplete) is not an error.
"""

from __future__ import annotations

import msgspec

from amcommit.errors import (
    AlreadyExists,
    BucketNotFound,
    InvalidInput,
    NotFound,
    NotSupported,
    ObjectRateLimited,
    PermissionDenied,
    PreconditionFailed,
    StoreError,
    Throttled,
    Transient,
    Unauthenticated,
)
from amcommit.store.http import HttpResponse, parse_retry_after

_THROTTLE_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded", "slowDown"})
OBJECT_WRITE_WINDOW = 1.0
"""Seconds between two changes of one object name that GCS always accepts (its documented
"one write per second to the same object name")."""
_OBJECT_LIMIT_PHRASES = (
    "rate limit for object mutation",  # "The object B/N exceeded the rate limit for object mutation operations"
    "change requests to the object",  # older wording: "The rate of change requests to the object ..."
    "changes to the object",  # "The total number of changes to the object B/N exceeds the rate limit"
)
_BUCKET_OPS = frozenset({"gcs_list", "gcs_insert", "gcs_upload_start"})
"""Operations whose 404 can only mean that the bucket does not exist."""


class _ErrorItem(msgspec.Struct):
    reason: str | None = None
    message: str | None = None


class _ErrorBody(msgspec.Struct):
    code: int | None = None
    message: str | None = None
    errors: list[_ErrorItem] | None = None


class _ErrorEnvelope(msgspec.Struct):
    error: _ErrorBody | None = None


_decoder = msgspec.json.Decoder(_ErrorEnvelope)


def parse_error(body: bytes) -> tuple[str | None, str | None]:
    """``(reason, message)`` of a GCS JSON error body; ``(None, None)`` if it is not one.
    The message is cut to 300 characters."""
    reason, msg = _parse_error(body)
    if msg is not None and len(msg) > 300:
        msg = msg[:300] + "..."
    return reason, msg


def _parse_error(body: bytes) -> tuple[str | None, str | None]:
    if not body or body[:1] != b"{":
        return None, None
    try:
        env = _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, None
    if env.error is None:
        return None, None
    reason = None
    if env.error.errors:
        reason = env.error.errors[0].reason
    return reason, env.error.message


def per_object_limit(message: str | None) -> bool:
    """Whether a 429's message is GCS's per-object mutation limit (one object name changed
    too often), as opposed to a limit of the bucket or project (pure)."""
    if not message:
        return False
    low = message.lower()
    return any(p in low for p in _OBJECT_LIMIT_PHRASES)


def classify(resp: HttpResponse, op: str, path: str) -> StoreError | None:
    """The typed error for a GCS response, or None if it is a success (2xx, 304, 308)."""
    s = resp.status
    if s < 300 or s in (304, 308):
        return None
    reason, full = _parse_error(resp.body)
    message = full if full is None or len(full) <= 300 else full[:300] + "..."
    msg = message or f"HTTP {s}"
    if s in (429, 503) or (s == 403 and reason in _THROTTLE_REASONS):
        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        if s == 429 and per_object_limit(full):
            return ObjectRateLimited(
                msg,
                retry_after=OBJECT_WRITE_WINDOW if retry_after is None else retry_after,
                path=path,
                op=op,
                status=s,
                code=reason,
            )
        return Throttled(msg, retry_after=retry_after, path=path, op=op, status=s, code=reason)
    cls: type[StoreError]
    if s == 404 and (op in _BUCKET_OPS or "bucket does not exist" in (message or "")):
        # never retried; the store names the bucket (a classifier does not know it)
        return BucketNotFound("the bucket does not exist", path=path, op=op, status=s, code=reason)
    if s == 404:
        cls = NotFound
    elif s == 409:
        cls = AlreadyExists
    elif s == 412:
        cls = PreconditionFailed
    elif s == 401:
        cls = Unauthenticated
    elif s == 403:
        cls = PermissionDenied
    elif s == 408 or (s >= 500 and s != 501):
        cls = Transient
    elif s in (405, 501):
        cls = NotSupported
    elif s in (400, 411, 413, 416):
        cls = InvalidInput
    else:
        cls = StoreError
    return cls(msg, path=path, op=op, status=s, code=reason)


__all__ = ["OBJECT_WRITE_WINDOW", "classify", "parse_error", "per_object_limit"]
