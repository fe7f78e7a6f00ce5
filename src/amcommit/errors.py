"""amcommit's error hierarchy: a closed set of storage errors plus engine errors.

Every backend maps its failures onto exactly these classes, so the engine can decide what
to do (retry, recover, fail) without knowing which store it talks to.

* Retryable: :class:`Throttled` and :class:`Transient` (``retryable`` is ``True``).
* Everything else is final for the operation that raised it.

Messages name the path and operation but never credentials: ``str`` and ``repr`` of every
error pass through :func:`amcommit.redact.redact` (URL passwords, SAS signatures, account
keys, bearer tokens and every registered secret are masked), and backends should still pass
only redacted URLs and headers (:func:`amcommit.redact.redact_url`).
"""

from __future__ import annotations

from amcommit.redact import redact


class AmcommitError(Exception):
    """Base class of every error amcommit raises on purpose. ``str``/``repr`` are redacted."""

    def __str__(self) -> str:
        return redact(super().__str__())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class StoreError(AmcommitError):
    """A storage operation failed.

    Attributes:
        path: the store path the operation was about (may be empty).
        op: the operation name (``"rename"``, ``"put"``, ...).
        status: the HTTP status for HTTP backends, else ``None``.
        code: the service error code (``x-ms-error-code``, GCS ``reason``), else ``None``.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        path: str = "",
        op: str = "",
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.op = op
        self.status = status
        self.code = code
        self.attempts = 1
        """How many attempts were made before this error was raised (set by retries)."""
        self.retries_spent = False
        """A retry loop (:func:`amcommit.store.retry.call_with_retries`) already gave up on
        this error: no other layer retries it again (one retry layer per request)."""
        self.throttle_reported = False
        """This throttling answer was already reported to a limiter (never charged twice)."""

    def __str__(self) -> str:
        parts = []
        if self.op:
            parts.append(self.op)
        if self.path:
            parts.append(repr(self.path))
        prefix = " ".join(parts)
        extra = []
        if self.status is not None:
            extra.append(f"HTTP {self.status}")
        if self.code:
            extra.append(self.code)
        suffix = f" ({', '.join(extra)})" if extra else ""
        return redact(f"{prefix}: {self.message}{suffix}" if prefix else f"{self.message}{suffix}")


class NotFound(StoreError):
    """The path (or the source of a rename) does not exist."""


class BucketNotFound(NotFound):
    """The bucket (GCS), container or file system (Azure) itself does not exist: no
    operation under it can succeed, so it is never retried. The message names it."""


class AlreadyExists(StoreError):
    """The destination exists and the operation must not overwrite it."""


class PreconditionFailed(StoreError):
    """An etag / generation precondition did not hold (the object changed)."""


class Throttled(StoreError):
    """The service asked us to slow down (HTTP 429/503). Retryable.

    ``retry_after`` is the server's hint in seconds, when it gave one.
    """

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        path: str = "",
        op: str = "",
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, path=path, op=op, status=status, code=code)
        self.retry_after = retry_after


class ObjectRateLimited(Throttled):
    """The service refused a change of *one object* because that object changes too often
    (GCS: about one write per second to one object name, answered ``429
    rateLimitExceeded`` "exceeded the rate limit for object mutation operations"). Nothing
    was done. Retryable once the object's window has passed (``retry_after``: the service's
    hint, else the documented window).

    It says nothing about the load of the store as a whole, so it never slows a limiter:
    only the request that met it waits (see :mod:`amcommit.store.retry`)."""


class Transient(StoreError):
    """A failure that may succeed when retried (timeouts, resets, 5xx). Retryable.

    Note: a transient failure of a non-idempotent operation may hide an operation that did
    happen ("lost response"); callers that retry such an operation must be ready to find
    its effect already done.
    """

    retryable = True


class Unreachable(Transient):
    """The service's endpoint could not be connected to (refused, no route, name or TLS
    failure). Retryable. ``endpoint`` is the origin connected to (``scheme://host:port``,
    never credentials); the message names it, so a wrong ``--endpoint`` reads as such and
    not as a failure on whichever internal path was asked first."""

    def __init__(self, message: str, *, endpoint: str = "", path: str = "", op: str = "") -> None:
        super().__init__(message, path=path, op=op)
        self.endpoint = endpoint


class PermissionDenied(StoreError):
    """Authenticated, but not allowed (HTTP 403 that is not an auth failure)."""


class Unauthenticated(StoreError):
    """Credentials missing, expired or wrong (HTTP 401, signature mismatch)."""


class NotSupported(StoreError):
    """The store cannot do this operation (e.g. a feature absent on an emulator)."""


class InvalidInput(StoreError):
    """The request was malformed: bad path, bad argument, or a 400 from the service."""


class ConfigError(AmcommitError, ValueError):
    """Invalid configuration (unknown key, bad value, malformed URL)."""


class ManifestError(AmcommitError, ValueError):
    """A manifest is corrupt, foreign or violates the protocol. Names the manifest."""

    def __init__(self, message: str, *, manifest: str = "") -> None:
        super().__init__(f"{manifest}: {message}" if manifest else message)
        self.manifest = manifest


class CommitError(AmcommitError):
    """A job or task commit failed. ``stage`` names the stage that failed."""

    def __init__(self, message: str, *, stage: str = "") -> None:
        super().__init__(f"{stage}: {message}" if stage else message)
        self.stage = stage


class ConflictError(CommitError):
    """The destination holds data this commit must not overwrite (conflict mode)."""


class IncompleteJob(CommitError):
    """A job found on the store is not known to be complete (fewer task manifests than
    expected, or a Spark job whose driver never began the commit): committing it would
    publish partial output. ``allow_partial`` overrides."""


class RollbackError(CommitError):
    """A rollback could not complete; the job directory and journal are kept for retry."""


class RenameWorkerFailed(CommitError):
    """A worker process of a sharded job commit (:mod:`amcommit.committer.shard`) died or
    failed in a way that names no error of its own. The commit stopped with its journal
    kept: ``commit_job`` again resumes it, ``abort_job`` rolls it back."""


class LockLost(CommitError):
    """This process lost the destination lock (it stopped renewing it in time, or another
    writer took it over). The commit was stopped; run it again to resume."""


__all__ = [
    "AlreadyExists",
    "AmcommitError",
    "BucketNotFound",
    "CommitError",
    "ConfigError",
    "ConflictError",
    "IncompleteJob",
    "InvalidInput",
    "LockLost",
    "ManifestError",
    "NotFound",
    "NotSupported",
    "ObjectRateLimited",
    "PermissionDenied",
    "PreconditionFailed",
    "RenameWorkerFailed",
    "RollbackError",
    "StoreError",
    "Throttled",
    "Transient",
    "Unauthenticated",
    "Unreachable",
]
