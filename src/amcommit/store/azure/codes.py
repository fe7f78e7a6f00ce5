"""Azure Storage answers -> amcommit's typed errors (shared by the Blob and Data Lake stores).

The service names every failure in the ``x-ms-error-code`` header (also in the body: XML
``<Error><Code>`` for Blob, JSON ``{"error": {"code"}}`` for Data Lake). The code decides
the error class; the status is the fallback. Throttling (503 ``ServerBusy`` and friends,
500 ``OperationTimedOut``) becomes :class:`~amcommit.errors.Throttled`, which slows the
shared limiter and honours ``Retry-After``; other 5xx become
:class:`~amcommit.errors.Transient`.

Messages carry only the first line of the service's message (never request URLs, headers
or signatures), and nothing at all for authentication failures.
"""

from __future__ import annotations

import json
import logging
import re

from amcommit.errors import (
    AlreadyExists,
    BucketNotFound,
    InvalidInput,
    NotFound,
    NotSupported,
    PermissionDenied,
    PreconditionFailed,
    StoreError,
    Throttled,
    Transient,
    Unauthenticated,
)
from amcommit.store.http import HttpResponse, parse_retry_after

log = logging.getLogger("amcommit.store.azure")

NOT_FOUND = frozenset(
    {
        "BlobNotFound",
        "PathNotFound",
        "SourcePathNotFound",
        "ContainerNotFound",
        "FilesystemNotFound",
        "ResourceNotFound",
        "CannotVerifyCopySource",
        "RenameDestinationParentPathNotFound",
        "ParentNotFound",
    }
)
CONTAINER_NOT_FOUND = frozenset({"ContainerNotFound", "FilesystemNotFound"})
"""The container itself is missing: :class:`~amcommit.errors.BucketNotFound`, never retried."""
EXISTS = frozenset(
    {
        "BlobAlreadyExists",
        "PathAlreadyExists",
        "ContainerAlreadyExists",
        "FilesystemAlreadyExists",
        "PathConflict",
        "ResourceAlreadyExists",
        "ContainerBeingDeleted",
        "FilesystemBeingDeleted",
        "DestinationPathIsBeingDeleted",
        "SourcePathIsBeingDeleted",
    }
)
PRECONDITION = frozenset(
    {
        "ConditionNotMet",
        "SourceConditionNotMet",
        "TargetConditionNotMet",
        "DirectoryNotEmpty",
        "LeaseIdMissing",
        "LeaseNotPresentWithBlobOperation",
        "LeaseIdMismatchWithBlobOperation",
        "LeaseIsBreakingAndCannotBeAcquired",
        "LeaseAlreadyPresent",
        "PendingCopyOperation",
        "InvalidFlushPosition",
        "BlobModifiedWhileReading",
    }
)
THROTTLE = frozenset(
    {
        "ServerBusy",
        "OperationTimedOut",
        "IngressOverAccountLimit",
        "EgressOverAccountLimit",
        "TpsOverAccountLimit",
        "OperationsPerSecondOverAccountLimit",
    }
)
AUTHN = frozenset(
    {
        "AuthenticationFailed",
        "NoAuthenticationInformation",
        "InvalidAuthenticationInfo",
        "ExpiredToken",
    }
)
AUTHZ = frozenset(
    {
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationServiceMismatch",
        "AuthorizationSourceIPMismatch",
        "InsufficientAccountPermissions",
        "AccountIsDisabled",
    }
)
UNSUPPORTED = frozenset({"FeatureNotSupported", "UnsupportedHttpVerb", "NotImplemented"})

_XML_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")
_XML_MSG = re.compile(rb"<Message>([^<\r\n]{0,300})")


def error_details(resp: HttpResponse) -> tuple[str | None, str]:
    """``(code, first line of the message)`` of an error answer."""
    code = resp.headers.get("x-ms-error-code")
    message = ""
    body = resp.body
    if body:
        head = body.lstrip()[:1]
        if head == b"{":
            try:
                err = json.loads(body).get("error", {})
                code = code or err.get("code")
                message = str(err.get("message", ""))
            except (ValueError, AttributeError):
                pass
        elif head == b"<":
            m = _XML_CODE.search(body)
            if m and not code:
                code = m.group(1).decode("utf-8", "replace")
            mm = _XML_MSG.search(body)
            if mm:
                message = mm.group(1).decode("utf-8", "replace")
    message = message.splitlines()[0].strip() if message else ""
    return code or None, message[:200]


def classify(resp: HttpResponse, op: str, path: str) -> StoreError | None:
    """The typed error for an Azure Storage answer, or ``None`` for success (2xx, 304)."""
    s = resp.status
    if s < 300 or s == 304:
        return None
    code, message = error_details(resp)
    err = _error(s, code, message, resp, op, path)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("azure %s %r failed: HTTP %s %s", op, path, s, code or "")
    return err


def _error(s: int, code: str | None, message: str, resp: HttpResponse, op: str, path: str) -> StoreError:
    def mk(cls: type[StoreError], default: str) -> StoreError:
        return cls(message or default, path=path, op=op, status=s, code=code)

    if code in THROTTLE or s == 503 or s == 429:
        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
        return Throttled(
            message or "server busy", retry_after=retry_after, path=path, op=op, status=s, code=code
        )
    if code in AUTHN or s == 401 or (s == 403 and code is None):
        # never echo the service's message here: it may quote the signature it computed.
        # (a 403 without a code is a HEAD answer, which has no body: authentication failed)
        return Unauthenticated("authentication failed", path=path, op=op, status=s, code=code)
    if code in AUTHZ:
        return mk(PermissionDenied, "permission denied")
    if code in CONTAINER_NOT_FOUND:
        kind = "file system" if code == "FilesystemNotFound" else "container"
        return BucketNotFound(f"the {kind} does not exist", path=path, op=op, status=s, code=code)
    if code in NOT_FOUND:
        return mk(NotFound, "not found")
    if code in EXISTS:
        return mk(AlreadyExists, "already exists")
    if code in PRECONDITION:
        return mk(PreconditionFailed, "precondition failed")
    if code in UNSUPPORTED or s == 501:
        return mk(NotSupported, "not supported")
    if s == 403:
        return mk(PermissionDenied, "permission denied")
    if s == 404:
        return mk(NotFound, "not found")
    if s == 409:
        return mk(AlreadyExists, "already exists")
    if s == 412:
        return mk(PreconditionFailed, "precondition failed")
    if s == 408 or s >= 500:
        return mk(Transient, "server error")
    if 400 <= s < 500:
        return mk(InvalidInput, "bad request")
    return mk(StoreError, f"unexpected HTTP status {s}")


__all__ = ["classify", "error_details"]
