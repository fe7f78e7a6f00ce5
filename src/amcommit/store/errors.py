"""The closed set of storage errors (re-exported from :mod:`amcommit.errors`)."""

from amcommit.errors import (
    AlreadyExists,
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

__all__ = [
    "AlreadyExists",
    "InvalidInput",
    "NotFound",
    "NotSupported",
    "PermissionDenied",
    "PreconditionFailed",
    "StoreError",
    "Throttled",
    "Transient",
    "Unauthenticated",
]
