"""Azure backends: ADLS Gen2 (:class:`DfsStore`, ``abfs[s]://``) and flat Blob accounts
(:class:`BlobStore`, ``wasb[s]://``; also Azurite), implemented directly over aiohttp.

``open_store("abfs://fs@account.dfs.core.windows.net/")`` and
``open_store("wasb://container@account.blob.core.windows.net/")`` resolve to
:func:`dfs_from_url` / :func:`blob_from_url`. Options: ``endpoint`` (e.g. Azurite's
``http://127.0.0.1:PORT/devstoreaccount1``), one of ``account_key``, ``sas_token``,
``token_provider``, ``credential`` or ``connection_string``, plus ``limiter``, ``retry``.
See :mod:`amcommit.store.azure.dfs` and :mod:`amcommit.store.azure.blob` for what each
operation guarantees.
"""

from amcommit.store.azure.auth import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    BearerToken,
    SasToken,
    Secret,
    SharedKey,
    parse_connection_string,
)
from amcommit.store.azure.blob import BlobStore, blob_from_url
from amcommit.store.azure.dfs import DfsStore, dfs_from_url

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "BearerToken",
    "BlobStore",
    "DfsStore",
    "SasToken",
    "Secret",
    "SharedKey",
    "blob_from_url",
    "dfs_from_url",
    "parse_connection_string",
]
