"""What the Blob and Data Lake stores share: endpoints, URL building, the HTTP client."""

from __future__ import annotations

import email.utils
import os
import re
from collections.abc import Coroutine, Mapping
from typing import Any

from yarl import URL

from amcommit.errors import AlreadyExists, ConfigError, InvalidInput, NotFound
from amcommit.iostats import IOStatistics
from amcommit.paths import ParsedUri
from amcommit.store.adaptive import AdaptiveLimit
from amcommit.store.azure.auth import (
    ConnectionInfo,
    Credential,
    TokenProvider,
    make_credential,
    parse_connection_string,
)
from amcommit.store.azure.codes import classify
from amcommit.store.http import HttpClient, HttpResponse, quote_plain
from amcommit.store.limits import DEFAULT_ADAPTIVE, Limiter, default_limiter
from amcommit.store.options import BlobOptions, DfsOptions
from amcommit.store.retry import RetryPolicy

API_VERSION = "2025-01-05"
"""``x-ms-version`` sent by default (accepted by Azure and by Azurite 3.37 without flags)."""

META_RENAME_ID = "amcommitrenameid"
"""Blob metadata key holding the rename-operation id (provenance of a copy-based rename)."""
META_PUT_ID = "amcommitputid"
"""Blob metadata key holding the id of a conditional put (proves a retried put happened)."""


def quote_path(path: str) -> str:
    """Percent-encode a store path for a URL (``/`` kept; as the Azure SDKs do)."""
    return quote_plain(path, safe="/~")


def norm_etag(etag: str | None) -> str | None:
    """One form for etags: the quoted header form (``"0x8D..."``); listings omit quotes."""
    if not etag:
        return None
    if etag.startswith('"') or etag.startswith('W/"'):
        return etag
    return f'"{etag}"'


def parse_http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def split_authority(authority: str) -> tuple[str, str]:
    """``"container@host"`` -> ``(container, host)``."""
    container, at, host = authority.partition("@")
    if not at or not container or not host:
        raise ConfigError(f"expected container@account.host in the URL, got {authority!r}")
    return container, host


AZURE_ACCOUNT_REQUESTS = 20_000.0
"""Requests per second a standard storage account takes ("Maximum request rate per storage
account: 20,000 requests per second": Microsoft, "Scalability and performance targets for
standard storage accounts",
https://learn.microsoft.com/azure/storage/common/scalability-targets-standard-account).
A Blob Batch request counts once here although the service counts its sub-requests."""

_SERVICE_HOST = re.compile(r"^([a-z0-9]{3,24})\.(?:blob|dfs)\.(core\.[a-z0-9.-]+)$")


def account_limiter_key(endpoint: URL, account: str) -> str | None:
    """The key of an account's shared limiter (``azure:ACCOUNT.core.windows.net``) when
    ``endpoint`` is one of the service's own hosts; None for any other endpoint."""
    m = _SERVICE_HOST.match((endpoint.host or "").lower())
    if m is None or m.group(1) != account.lower():
        return None
    return f"azure:{m.group(1)}.{m.group(2)}"


class AzureBase:
    """Endpoint, credential, HTTP client and statistics of one container / filesystem.

    ``endpoint`` is the account endpoint: ``https://acct.blob.core.windows.net``,
    ``https://acct.dfs.core.windows.net`` or, path style, ``http://127.0.0.1:PORT/acct``
    (Azurite, the ADLS test server). ``account`` defaults to the endpoint's path or first
    host label. Credentials: one of ``account_key``, ``sas_token``, ``token_provider``,
    ``credential`` (else anonymous).

    ``limiter`` defaults to the adaptive in-flight limit
    (:data:`~amcommit.store.limits.DEFAULT_ADAPTIVE`; ``max_concurrency`` fixes it instead)
    and a rate of ``request_rate`` requests per second (default 20,000: a standard storage
    account's request ceiling, "Scalability and performance targets for standard storage
    accounts", :data:`AZURE_ACCOUNT_REQUESTS`; None: no rate limit until the service
    throttles). On the service's own hosts (``ACCOUNT.blob|dfs.core.windows.net`` and the
    other clouds' ``core.*`` domains) that limiter is shared by every store of the process
    for the account (Blob and ADLS Gen2 alike; :func:`account_limiter_key`); on other endpoints
    (Azurite, the ADLS test server, a proxy) each store has its own.
    """

    _service = ""

    def __init__(
        self,
        container: str,
        *,
        endpoint: str,
        account: str | None = None,
        credential: Credential | None = None,
        account_key: Any = None,
        sas_token: Any = None,
        token_provider: TokenProvider | None = None,
        limiter: Limiter | None = None,
        max_concurrency: int | None = None,
        request_rate: float | None = AZURE_ACCOUNT_REQUESTS,
        retry: RetryPolicy | None = None,
        root_uri: str | None = None,
        api_version: str = API_VERSION,
        request_timeout: float = 60.0,
        keepalive_timeout: float = 4.0,
    ) -> None:
        if not container or "/" in container:
            raise ConfigError(f"invalid container / filesystem name {container!r}")
        ep = URL(endpoint.rstrip("/"))
        if ep.scheme not in ("http", "https") or not ep.host:
            raise ConfigError("endpoint must be an http(s) URL")
        if ep.query_string or ep.fragment:
            raise ConfigError("endpoint must not carry a query (pass sas_token separately)")
        if account is None:
            path_account = ep.path.strip("/")
            account = path_account or ep.host.split(".")[0]
        self.account = account
        self.container = container
        self.endpoint = str(ep)
        self.credential = make_credential(
            account=account,
            account_key=account_key,
            sas_token=sas_token,
            token_provider=token_provider,
            credential=credential,
        )
        self.api_version = api_version
        self._sas = self.credential.query
        self._container_url = f"{self.endpoint}/{quote_path(container)}"
        cu = URL(self._container_url, encoded=True)  # its parts: url() builds, never parses
        self._url_scheme, self._url_authority, self._url_path = cu.scheme, cu.raw_authority, cu.raw_path
        self._root_uri = root_uri or self._default_root_uri()
        if max_concurrency is not None and max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if request_rate is not None and not request_rate > 0:
            raise ConfigError(f"request_rate must be > 0 requests per second or none, got {request_rate}")
        if limiter is None:
            shared = account_limiter_key(ep, account)
            if shared is not None:
                limiter = default_limiter(shared, max_concurrency, request_rate)
            elif max_concurrency is not None:
                limiter = Limiter(max_concurrency=max_concurrency, rate=request_rate)
            else:
                limiter = Limiter(
                    max_concurrency=None, adaptive=AdaptiveLimit(**DEFAULT_ADAPTIVE), rate=request_rate
                )
        self.limiter = limiter
        self.retry = retry or RetryPolicy()
        self.iostats = IOStatistics()
        self._http = HttpClient(
            limiter=self.limiter,
            retry=self.retry,
            stats=self.iostats,
            classify=classify,
            auth=self.credential,
            keepalive_timeout=keepalive_timeout,
            request_timeout=request_timeout,
        )

    def _default_root_uri(self) -> str:
        raise NotImplementedError

    @property
    def root_uri(self) -> str:
        return self._root_uri

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(container={self.container!r}, endpoint={self.endpoint!r}, "
            f"auth={self.credential.kind})"
        )

    # -- URLs ------------------------------------------------------------------------------
    async def _create_root(self, op: str, query: str) -> bool:
        """Create the container / filesystem (``query`` selects which); False if it existed."""
        try:
            await self.request(op, "PUT", self.url("", query), path="")
        except AlreadyExists:
            return False
        return True

    async def _delete_root(self, op: str, query: str) -> bool:
        """Delete the container / filesystem and everything in it; False if it did not exist."""
        try:
            await self.request(op, "DELETE", self.url("", query), path="")
        except NotFound:
            return False
        return True

    def url(self, path: str, query: str = "") -> URL:
        """Encoded URL of ``path`` in the container (``""``: the container itself)."""
        if self._sas:
            query = f"{query}&{self._sas}" if query else self._sas
        return URL.build(
            scheme=self._url_scheme,
            authority=self._url_authority,
            path=f"{self._url_path}/{quote_path(path)}" if path else self._url_path,
            query_string=query,
            encoded=True,
        )

    def url_text(self, path: str) -> str:
        """The URL of ``path`` as text (with the SAS query, if any), e.g. for a copy source."""
        base = f"{self._container_url}/{quote_path(path)}"
        return f"{base}?{self._sas}" if self._sas else base

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Request headers: ``x-ms-version`` plus ``extra`` (auth is added per attempt)."""
        h = {"x-ms-version": self.api_version}
        if extra:
            h.update(extra)
        return h

    def request(
        self,
        op: str,
        method: str,
        url: URL,
        *,
        path: str,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
        idempotent: bool = True,
        retry: RetryPolicy | None = None,
        shielded: bool = False,
    ) -> Coroutine[Any, Any, HttpResponse]:
        """Send one logical request through the shared HTTP client (limiter, retries,
        statistics, typed errors, a fresh bearer token after a 401): ``await`` it.
        (A plain function returning :meth:`HttpClient.send`'s coroutine: no frame of its
        own in the request's await chain.)

        ``idempotent=False`` disables retries (a lost answer then surfaces as
        :class:`~amcommit.errors.Transient`). Mutations (anything but GET/HEAD) run shielded
        from cancellation (``send(shield=True)``): once sent, the caller waits for the
        answer, an error or the request timeout, so nothing lands on the service after the
        caller has moved on. ``shielded=True``: the caller already runs the request in a
        shielded scope (no second scope is opened).
        """
        hdrs = self.headers(headers)
        if data:
            hdrs["Content-Length"] = str(len(data))
        elif method in ("PUT", "POST", "PATCH"):
            hdrs["Content-Length"] = "0"
        return self._http.send(
            op,
            method,
            url,
            path=path,
            headers=hdrs,
            data=data or None,
            idempotent=idempotent,
            retry=retry,
            shield=not shielded and method not in ("GET", "HEAD"),
        )

    async def aclose(self) -> None:
        """Close the HTTP session (idempotent)."""
        await self._http.aclose()

    async def __aenter__(self) -> AzureBase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


FSSPEC_SCHEMES = frozenset({"az", "abfs", "abfss"})
"""Schemes that may name a container without ``@account`` (as adlfs users write them)."""


def fsspec_account(
    account: str | None, info: ConnectionInfo | None, endpoint: str | None, env: Mapping[str, str]
) -> str | None:
    """The account of an fsspec-style URL (pure): the ``account`` option, a connection
    string's, the endpoint's (path style ``http://host:port/acct`` or ``https://acct.host``),
    then ``AZURE_STORAGE_ACCOUNT_NAME``."""
    if account:
        return account
    if info is not None and info.account:
        return info.account
    if endpoint:
        ep = URL(endpoint.rstrip("/"))
        path_account = ep.path.strip("/")
        if path_account:
            return path_account
        if ep.host and not ep.host[0].isdigit() and "." in ep.host:
            return ep.host.split(".")[0]
    return env.get("AZURE_STORAGE_ACCOUNT_NAME") or None


def canonical_fsspec_uri(
    parsed: ParsedUri,
    service: str,
    account: str | None,
    info: ConnectionInfo | None,
    endpoint: str | None,
    env: Mapping[str, str] | None = None,
) -> ParsedUri:
    """``az://c/p`` -> ``wasbs://c@acct.blob.core.windows.net/p``, ``abfs[s]://fs/p`` ->
    ``abfs[s]://fs@acct.dfs.core.windows.net/p``; ConfigError naming the ``account`` option
    when no account can be found."""
    acct = fsspec_account(account, info, endpoint, os.environ if env is None else env)
    if not acct:
        raise ConfigError(
            f"{parsed.scheme}://{parsed.authority} names no storage account: give the 'account' "
            "store option (--store-option account=NAME) or set AZURE_STORAGE_ACCOUNT_NAME"
        )
    scheme = "wasbs" if parsed.scheme == "az" else parsed.scheme
    return ParsedUri(scheme, f"{parsed.authority}@{acct}.{service}.core.windows.net", parsed.path)


def store_options_from_url(parsed: ParsedUri, service: str, options: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments for a store rooted at the container named by ``parsed``.

    ``service`` is ``"dfs"`` or ``"blob"``. Options (checked and converted by
    :class:`~amcommit.store.options.DfsOptions` / :class:`~amcommit.store.options.BlobOptions`):
    ``endpoint`` (e.g. Azurite's ``http://127.0.0.1:10000/devstoreaccount1``),
    ``connection_string``, ``account_key``, ``sas_token``, ``token_provider``,
    ``credential``, ``account``, ``limiter``, ``retry`` and the store's own tuning options.
    """
    from amcommit.store.schemes import convert_store_options

    opts = convert_store_options(DfsOptions if service == "dfs" else BlobOptions, options).given()
    conn = opts.pop("connection_string", None)
    endpoint = opts.pop("endpoint", None)
    info = parse_connection_string(conn) if conn is not None else None
    if "@" not in parsed.authority and parsed.scheme in FSSPEC_SCHEMES:
        parsed = canonical_fsspec_uri(parsed, service, opts.get("account"), info, endpoint)
    container, host = split_authority(parsed.authority)
    if info is not None:
        ep = info.dfs_endpoint if service == "dfs" else info.blob_endpoint
        if service == "dfs" and ep is None:
            ep = info.blob_endpoint  # emulator-style strings: one endpoint serves both
        endpoint = endpoint or ep
        opts.setdefault("account", info.account)
        if all(opts.get(k) is None for k in ("account_key", "sas_token", "token_provider", "credential")):
            if info.account_key is not None:
                opts["account_key"] = info.account_key
            elif info.sas_token is not None:
                opts["sas_token"] = info.sas_token
    if endpoint is None:
        if host.startswith(("127.", "localhost")):
            raise InvalidInput(
                "a loopback authority needs an explicit endpoint option", path=parsed.authority
            )
        endpoint = f"https://{host}"
        opts.setdefault("account", host.split(".")[0])
    opts["endpoint"] = endpoint
    opts.setdefault("root_uri", f"{parsed.scheme}://{parsed.authority}/")
    opts["container"] = container
    return opts


__all__ = [
    "API_VERSION",
    "META_PUT_ID",
    "META_RENAME_ID",
    "AzureBase",
    "canonical_fsspec_uri",
    "fsspec_account",
    "norm_etag",
    "parse_http_date",
    "quote_path",
    "split_authority",
    "store_options_from_url",
]
