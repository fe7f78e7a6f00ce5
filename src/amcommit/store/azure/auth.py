"""Azure Storage authentication: Shared Key, SAS tokens, bearer tokens, connection strings.

Every credential object hides its secret: ``repr``/``str`` never show keys, SAS signatures
or tokens, and the stores never put them into errors or log records.

* :class:`SharedKey` signs each request (Blob and Data Lake "Shared Key" scheme, service
  version 2009-09-19 and later). It signs the URL exactly as sent (already percent-encoded),
  with ``x-ms-date`` set and the ``Date`` line empty, and sorts ``x-ms-*`` headers with the
  collation the service uses (:func:`header_sort_key`).
* :class:`SasToken` adds its query string to every URL (nothing is signed per request).
* :class:`BearerToken` sends ``Authorization: Bearer`` from any token provider: an async or
  sync callable returning a token string or ``(token, expires_on)``, or an object with a
  ``get_token(*scopes)`` method (azure-identity credentials, sync or ``.aio``). Tokens are
  cached by the shared :class:`~amcommit.store.token.TokenCache` (refreshed five minutes
  before they expire); a token the service rejects with 401 is dropped and fetched anew.
* :func:`parse_connection_string` reads ``AccountName=...;AccountKey=...;BlobEndpoint=...``
  strings, including ``UseDevelopmentStorage=true`` (Azurite's well-known account).
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import functools
import hashlib
import hmac
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

import anyio
from yarl import URL

from amcommit.errors import ConfigError, Unauthenticated
from amcommit.redact import Secret
from amcommit.store.token import DEFAULT_TTL, TemporaryToken, TokenCache, bearer_value

STORAGE_SCOPE = "https://storage.azure.com/.default"

AZURITE_ACCOUNT = "devstoreaccount1"
"""Azurite's (and the Azure storage emulator's) well-known account name."""
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's published well-known account key (not a secret)."""


class Credential(Protocol):
    """How a store authenticates its requests."""

    @property
    def kind(self) -> str:
        """``"shared_key"``, ``"sas"``, ``"bearer"`` or ``"anonymous"`` (for reprs, reports)."""
        ...

    @property
    def query(self) -> str:
        """Query string (without ``?``) to append to every URL, or ``""``."""
        ...

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        """Add authentication headers in place (called for every attempt). A credential
        that never waits may also offer ``sign_sync(method, url, headers)``, doing the
        same synchronously; the HTTP client then calls that instead
        (:class:`~amcommit.store.http.SyncAuth`)."""
        ...

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        """The service answered 401 to the request signed with ``signed``: drop the
        credential it carried if it can be fetched anew; True if signing again may help
        (the request is then sent once more). Fixed credentials answer False."""
        ...

    def secrets(self) -> list[str]:
        """The secret strings (for scrubbing text in tests and error paths)."""
        ...


# ---------------------------------------------------------------------------------------
# dates

_date_cache: tuple[int, str] = (0, "")


def http_date(now: float | None = None) -> str:
    """RFC 1123 date for ``x-ms-date`` (cached per second: it is on every request)."""
    global _date_cache
    t = int(time.time() if now is None else now)
    if _date_cache[0] != t:
        _date_cache = (t, email.utils.formatdate(t, usegmt=True))
    return _date_cache[1]


# ---------------------------------------------------------------------------------------
# Shared Key

# Collation of the storage service for x-ms-* header names: at the first level these
# characters weigh nothing (they are skipped); the rest sort in this order, letters
# case-insensitively. At the second level only apostrophe and hyphen count.
_LEVEL0_IGNORED = frozenset("\"'(),-/:;<=>?@[\\]{}")
_LEVEL0_ORDER = "!#$%&*.^_`|~+0123456789abcdefghijklmnopqrstuvwxyz"
_LEVEL0_WEIGHT = {c: i + 1 for i, c in enumerate(_LEVEL0_ORDER)}
_LEVEL1_WEIGHT = {"'": 1, "-": 2}


@functools.lru_cache(maxsize=4096)
def header_sort_key(name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Sort key reproducing the service's ordering of canonicalized ``x-ms-*`` headers."""
    lvl0 = []
    for c in name.lower():
        if c in _LEVEL0_IGNORED:
            continue
        w = _LEVEL0_WEIGHT.get(c)
        lvl0.append(w if w is not None else 1000 + ord(c))
    lvl1 = tuple(_LEVEL1_WEIGHT[c] for c in name if c in _LEVEL1_WEIGHT)
    return tuple(lvl0), lvl1


_SIGNED_HEADERS = (
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
)


def canonical_query(raw_query: str) -> list[tuple[str, str]]:
    """Decoded ``(lowercased name, value)`` pairs of a raw (encoded) query string."""
    out = []
    for part in raw_query.split("&"):
        if not part:
            continue
        k, _, v = part.partition("=")
        out.append((unquote(k).lower(), unquote(v)))
    return out


_SIGNED_INDEX = {h: i for i, h in enumerate(_SIGNED_HEADERS)}


@functools.lru_cache(maxsize=1024)
def _xms_order(names: tuple[str, ...]) -> tuple[str, ...]:
    """Lower-case ``x-ms-*`` header names in the service's collation order. Cached: a store
    sends a handful of distinct sets of header names (one per kind of request), so the
    sort runs once per set instead of once per request."""
    return tuple(sorted(names, key=header_sort_key))


def string_to_sign(
    method: str,
    account: str,
    raw_path: str,
    query: Iterable[tuple[str, str]],
    headers: Mapping[str, str],
) -> str:
    """The Shared Key string-to-sign for a Blob / Data Lake request.

    ``raw_path`` is the URL path exactly as sent (percent-encoded); ``query`` holds decoded
    ``(name, value)`` pairs; ``headers`` the request headers (any case; of two names
    differing only in case the later one counts). One pass over the headers (it runs for
    every request).
    """
    std = [""] * len(_SIGNED_HEADERS)
    xms: dict[str, str] = {}
    index = _SIGNED_INDEX
    for k, v in headers.items():
        lk = k.lower()
        if lk.startswith("x-ms-"):
            xms[lk] = v
        else:
            i = index.get(lk)
            if i is not None:
                std[i] = v
    if std[2] == "0":  # content-length
        std[2] = ""
    canon_headers = "".join([f"{k}:{xms[k].strip()}\n" for k in _xms_order(tuple(xms))])
    resource = f"/{account}{raw_path or '/'}"
    grouped: dict[str, list[str]] = {}
    for k, v in query:
        grouped.setdefault(k.lower(), []).append(v)
    if grouped:
        resource += "".join(f"\n{k}:{','.join(sorted(vs))}" for k, vs in sorted(grouped.items()))
    return f"{method.upper()}\n" + "\n".join(std) + "\n" + canon_headers + resource


def hmac_sha256_b64(key: bytes, text: str) -> str:
    return base64.b64encode(hmac.digest(key, text.encode("utf-8"), "sha256")).decode()


class SharedKey:
    """Shared Key credential: ``account`` name and base64 ``key``. Signs each request.

    What is constant is computed once: the HMAC-SHA256 state keyed with the account key
    (each signature continues a copy of it: the key's inner and outer pads are not hashed
    again per request), and the sort order of each set of ``x-ms-*`` header names."""

    kind = "shared_key"
    query = ""

    def __init__(self, account: str, key: str | Secret) -> None:
        raw = key.reveal() if isinstance(key, Secret) else key
        try:
            self._key = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError("the account key is not valid base64") from None
        if not self._key:
            raise ConfigError("the account key is empty")
        self._key_text = Secret(raw)
        self._hmac = hmac.new(self._key, digestmod=hashlib.sha256)
        self.account = account
        self._auth_prefix = f"SharedKey {account}:"

    def __repr__(self) -> str:
        return f"SharedKey(account={self.account!r}, key=***)"

    def signature(self, text: str) -> str:
        """Base64 HMAC-SHA256 of ``text`` with the account key."""
        h = self._hmac.copy()
        h.update(text.encode("utf-8"))
        return binascii.b2a_base64(h.digest(), newline=False).decode("ascii")

    def sign_sync(self, method: str, url: URL, headers: dict[str, str]) -> None:
        """:meth:`sign` without the coroutine (nothing here waits)."""
        headers.setdefault("x-ms-date", http_date())
        raw_query = url.raw_query_string
        sts = string_to_sign(
            method, self.account, url.raw_path, canonical_query(raw_query) if raw_query else (), headers
        )
        headers["Authorization"] = self._auth_prefix + self.signature(sts)

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        self.sign_sync(method, url, headers)

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        return False  # a fixed credential: signing again cannot help

    def secrets(self) -> list[str]:
        return [self._key_text.reveal()]


class SasToken:
    """A shared access signature; its query string is appended to every URL."""

    kind = "sas"

    def __init__(self, token: str | Secret) -> None:
        raw = (token.reveal() if isinstance(token, Secret) else token).strip().lstrip("?")
        if not raw or "sig=" not in raw:
            raise ConfigError("a SAS token needs a 'sig=' parameter")
        self._token = Secret(raw)

    def __repr__(self) -> str:
        return "SasToken(***)"

    @property
    def query(self) -> str:
        return self._token.reveal()

    def sign_sync(self, method: str, url: URL, headers: dict[str, str]) -> None:
        """:meth:`sign` without the coroutine (nothing here waits)."""
        headers.setdefault("x-ms-date", http_date())

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        self.sign_sync(method, url, headers)

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        return False  # a fixed credential: signing again cannot help

    def secrets(self) -> list[str]:
        raw = self._token.reveal()
        sigs = [p[4:] for p in raw.split("&") if p.startswith("sig=")]
        return [raw, *sigs, *(unquote(s) for s in sigs)]


TokenProvider = Any
"""An async/sync callable returning ``str`` or ``(str, expires_on)``, or an object with a
(sync or async) ``get_token(*scopes)`` returning something with ``.token``/``.expires_on``."""


class BearerToken:
    """OAuth bearer tokens from a token provider (see :data:`TokenProvider`).

    Tokens are fetched lazily and cached by the shared
    :class:`~amcommit.store.token.TokenCache` (refreshed five minutes before
    ``expires_on``, or halfway through a shorter life; tokens without an expiry are kept
    for ``default_ttl`` seconds; concurrent requests share one fetch). A token the service
    rejects (401) is dropped by :meth:`invalidate` and the request is sent once more with a
    fresh one.
    """

    kind = "bearer"
    query = ""

    def __init__(
        self, provider: TokenProvider, *, scope: str = STORAGE_SCOPE, default_ttl: float = DEFAULT_TTL
    ):
        if provider is None:
            raise ConfigError("token_provider is None")
        self._provider = provider
        self._scope = scope
        self._cache = TokenCache(self._fetch, default_ttl=default_ttl)

    def __repr__(self) -> str:
        return f"BearerToken(provider={type(self._provider).__name__})"

    async def _fetch(self) -> TemporaryToken:
        p = self._provider
        get_token: Callable[..., Any] | None = getattr(p, "get_token", None)
        try:
            if get_token is not None:
                if inspect.iscoroutinefunction(get_token):
                    res = await get_token(self._scope)
                else:
                    res = await anyio.to_thread.run_sync(get_token, self._scope)
            else:
                res = p()
            if isinstance(res, Awaitable):
                res = await res
        except Exception as e:  # the provider's own errors may carry secrets: drop the text
            raise Unauthenticated(f"token provider failed ({type(e).__name__})", op="auth") from None
        if isinstance(res, str):
            return TemporaryToken(res)
        if isinstance(res, tuple):
            return TemporaryToken(str(res[0]), float(res[1]) if res[1] is not None else None)
        token = getattr(res, "token", None)
        if not isinstance(token, str):
            raise Unauthenticated("token provider returned no token", op="auth")
        exp = getattr(res, "expires_on", None)
        return TemporaryToken(token, float(exp) if exp is not None else None)

    async def token(self) -> str:
        return await self._cache.get()

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        """The service answered 401 to a request signed with ``signed``: forget that token
        (if still cached). True: signing again (with a fresh token) may help."""
        self._cache.invalidate(bearer_value(signed))
        return True

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        headers.setdefault("x-ms-date", http_date())
        headers["Authorization"] = f"Bearer {await self._cache.get()}"

    def secrets(self) -> list[str]:
        return self._cache.seen()


class Anonymous:
    """No authentication (public containers, test servers without auth)."""

    kind = "anonymous"
    query = ""

    def __repr__(self) -> str:
        return "Anonymous()"

    def sign_sync(self, method: str, url: URL, headers: dict[str, str]) -> None:
        """:meth:`sign` without the coroutine (nothing here waits)."""
        headers.setdefault("x-ms-date", http_date())

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        self.sign_sync(method, url, headers)

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        return False  # a fixed credential: signing again cannot help

    def secrets(self) -> list[str]:
        return []


# ---------------------------------------------------------------------------------------
# connection strings


@dataclass(frozen=True)
class ConnectionInfo:
    """What a connection string says. ``account_key``/``sas_token`` are :class:`Secret`."""

    account: str
    blob_endpoint: str | None
    dfs_endpoint: str | None
    account_key: Secret | None = None
    sas_token: Secret | None = None

    def __repr__(self) -> str:
        return (
            f"ConnectionInfo(account={self.account!r}, blob_endpoint={self.blob_endpoint!r}, "
            f"dfs_endpoint={self.dfs_endpoint!r}, key={'***' if self.account_key else None}, "
            f"sas={'***' if self.sas_token else None})"
        )


def parse_connection_string(conn: str | Secret) -> ConnectionInfo:
    """Parse an Azure Storage connection string (secrets stay wrapped in :class:`Secret`).

    Understands ``AccountName``, ``AccountKey``, ``SharedAccessSignature``,
    ``DefaultEndpointsProtocol``, ``EndpointSuffix``, ``BlobEndpoint``, ``DfsEndpoint`` and
    ``UseDevelopmentStorage=true`` (``DevelopmentStorageProxyUri`` sets the host).
    """
    raw = conn.reveal() if isinstance(conn, Secret) else conn
    fields: dict[str, str] = {}
    for part in raw.split(";"):
        part = part.strip()
        if not part:
            continue
        k, sep, v = part.partition("=")
        if not sep:
            raise ConfigError("malformed connection string (expected Key=Value pairs separated by ';')")
        fields[k.strip().lower()] = v.strip()
    if fields.get("usedevelopmentstorage", "").lower() == "true":
        proxy = fields.get("developmentstorageproxyuri", "http://127.0.0.1").rstrip("/")
        return ConnectionInfo(
            AZURITE_ACCOUNT,
            f"{proxy}:10000/{AZURITE_ACCOUNT}",
            None,
            account_key=Secret(AZURITE_KEY),
        )
    account = fields.get("accountname", "")
    blob = fields.get("blobendpoint")
    dfs = fields.get("dfsendpoint")
    proto = fields.get("defaultendpointsprotocol", "https")
    suffix = fields.get("endpointsuffix", "core.windows.net")
    if not account and blob:
        host = URL(blob).host or ""
        account = host.split(".")[0] if "." in host and not host[0].isdigit() else URL(blob).path.strip("/")
    if not account:
        raise ConfigError("connection string has no AccountName")
    if blob is None:
        blob = f"{proto}://{account}.blob.{suffix}"
    if dfs is None and ".blob." in blob:
        dfs = blob.replace(".blob.", ".dfs.", 1)
    key = fields.get("accountkey")
    sas = fields.get("sharedaccesssignature")
    return ConnectionInfo(
        account,
        blob.rstrip("/"),
        dfs.rstrip("/") if dfs else None,
        account_key=Secret(key) if key else None,
        sas_token=Secret(sas) if sas else None,
    )


def make_credential(
    *,
    account: str,
    account_key: str | Secret | None = None,
    sas_token: str | Secret | None = None,
    token_provider: TokenProvider | None = None,
    credential: Credential | None = None,
) -> Credential:
    """Pick the credential from the options (exactly one of them, or anonymous)."""
    given = [x is not None for x in (account_key, sas_token, token_provider, credential)]
    if sum(given) > 1:
        raise ConfigError("give only one of account_key, sas_token, token_provider, credential")
    if credential is not None:
        return credential
    if account_key is not None:
        return SharedKey(account, account_key)
    if sas_token is not None:
        return SasToken(sas_token)
    if token_provider is not None:
        return BearerToken(token_provider)
    return Anonymous()


__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "STORAGE_SCOPE",
    "Anonymous",
    "BearerToken",
    "ConnectionInfo",
    "Credential",
    "SasToken",
    "Secret",
    "SharedKey",
    "canonical_query",
    "header_sort_key",
    "http_date",
    "make_credential",
    "parse_connection_string",
    "string_to_sign",
]
