"""The options of each store backend, typed once (see :mod:`amcommit.options`).

One struct per backend lists exactly the keyword arguments its ``open_store`` factory
accepts (its constructor's, plus what the factory itself resolves: an Azure
``connection_string``, a GCS bearer ``token``). Every field defaults to ``UNSET``: the
constructors keep the defaults, and :meth:`~amcommit.options.Options.given` returns only
what the user set. Options that take Python objects (``limiter``, ``retry``,
``token_provider``, ``credential(s)``) come only from the Python API.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

from amcommit.errors import ConfigError
from amcommit.options import Options
from amcommit.redact import has_credentials
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy


class StoreOptions(Options, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What every backend accepts: a request ``limiter`` (a
    :class:`~amcommit.store.limits.Limiter`, e.g. a shared one)."""

    kind = "store"

    limiter: Limiter | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        endpoint = getattr(self, "endpoint", None)
        if isinstance(endpoint, str) and has_credentials(endpoint):
            raise ConfigError(
                "the endpoint URL must not carry credentials (user:password@host): "
                "pass them as store options (account_key, sas_token, token, ...)"
            )


class LocalOptions(StoreOptions, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``file://`` (:class:`~amcommit.store.local.LocalStore`)."""

    kind = "local store"

    fsync: bool | UnsetType = UNSET
    """fsync written files, and the directories renames changed before the next put or
    delete (default True)."""
    offload_metadata: bool | UnsetType = UNSET
    """Run metadata calls (stat, rename, mkdir) in worker threads (default False)."""


class AzureOptions(StoreOptions, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ADLS Gen2 (``abfs[s]://``) and Blob (``wasb[s]://``) stores share. Credentials:
    at most one of ``account_key``, ``sas_token``, ``token_provider``, ``credential``; or a
    ``connection_string`` (its endpoint, account and key or SAS)."""

    secret_fields = frozenset({"account_key", "sas_token", "connection_string"})
    kind = "Azure store"

    endpoint: str | UnsetType | None = UNSET
    """Account endpoint, e.g. Azurite's ``http://127.0.0.1:10000/devstoreaccount1``."""
    account: str | UnsetType | None = UNSET
    account_key: str | UnsetType | None = UNSET
    sas_token: str | UnsetType | None = UNSET
    connection_string: str | UnsetType | None = UNSET
    token_provider: Any = UNSET
    credential: Any = UNSET
    retry: RetryPolicy | UnsetType | None = UNSET
    max_concurrency: int | UnsetType | None = UNSET
    """Fix the in-flight limit to this many requests (adaptation off); default: adaptive,
    32 to 1,024."""
    request_rate: float | UnsetType | None = UNSET
    """Requests per second for the account (default 20,000, a standard account's ceiling;
    none: no rate limit until the service throttles)."""
    root_uri: str | UnsetType | None = UNSET
    api_version: str | UnsetType = UNSET
    request_timeout: float | UnsetType = UNSET
    keepalive_timeout: float | UnsetType = UNSET


class BlobOptions(AzureOptions, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``wasb[s]://`` (:class:`~amcommit.store.azure.BlobStore`)."""

    kind = "Azure Blob store"

    single_put_max: int | UnsetType = UNSET
    block_size: int | UnsetType = UNSET
    copy_poll_interval: float | UnsetType = UNSET
    copy_timeout: float | UnsetType = UNSET
    delete_concurrency: int | UnsetType = UNSET
    preserve_metadata: bool | UnsetType = UNSET


class DfsOptions(AzureOptions, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``abfs[s]://`` (:class:`~amcommit.store.azure.DfsStore`)."""

    kind = "ADLS Gen2 store"

    append_size: int | UnsetType = UNSET
    list_page_size: int | UnsetType = UNSET


class GcsOptions(StoreOptions, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``gs://`` (:class:`~amcommit.store.gcs.GcsStore`). ``token`` is a static bearer
    token (the factory turns it into a ``token_provider``)."""

    secret_fields = frozenset({"token"})
    kind = "GCS store"

    endpoint: str | UnsetType | None = UNSET
    token: str | UnsetType | None = UNSET
    token_provider: Any = UNSET
    credentials: Any = UNSET
    anonymous: bool | UnsetType | None = UNSET
    max_concurrency: int | UnsetType | None = UNSET
    """Fix the in-flight limit to this many requests (adaptation off); default: adaptive,
    32 to 1,024."""
    write_rate: float | UnsetType | None = UNSET
    """Object writes per second for the bucket (default 1,000, ramping like a cold bucket;
    none: no write gate)."""
    write_limiter: Limiter | UnsetType | None = UNSET
    bucket_warm: bool | UnsetType = UNSET
    """The bucket takes more than a cold bucket's 1,000 writes/s: no write gate."""
    retry: RetryPolicy | UnsetType | None = UNSET
    use_move: bool | UnsetType | None = UNSET
    verify_preconditions: bool | UnsetType | None = UNSET
    preserve_metadata: bool | UnsetType = UNSET
    multipart_threshold: int | UnsetType = UNSET
    chunk_size: int | UnsetType = UNSET
    request_timeout: float | UnsetType = UNSET
    shield_timeout: float | UnsetType = UNSET
    page_size: int | UnsetType = UNSET
    user_project: str | UnsetType | None = UNSET


ALL_STORE_OPTIONS: tuple[type[StoreOptions], ...] = (LocalOptions, BlobOptions, DfsOptions, GcsOptions)
"""Every backend's options type (for "is this a store option at all?")."""

__all__ = [
    "ALL_STORE_OPTIONS",
    "AzureOptions",
    "BlobOptions",
    "DfsOptions",
    "GcsOptions",
    "LocalOptions",
    "StoreOptions",
]
