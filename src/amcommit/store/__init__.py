"""The async storage layer: one protocol (:class:`Store`), one module per backend."""

from amcommit.store.base import Capabilities, ObjectInfo, PutMode, RenameResult, Store, UpdateIf, WriteMode
from amcommit.store.limits import Limiter, shared_limiter
from amcommit.store.local import LocalStore
from amcommit.store.retry import RetryPolicy
from amcommit.store.schemes import open_location, open_store, register_scheme

__all__ = [
    "Capabilities",
    "Limiter",
    "LocalStore",
    "ObjectInfo",
    "PutMode",
    "RenameResult",
    "RetryPolicy",
    "Store",
    "UpdateIf",
    "WriteMode",
    "open_location",
    "open_store",
    "register_scheme",
    "shared_limiter",
]
