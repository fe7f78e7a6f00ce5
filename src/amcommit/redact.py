"""Secrets out of every text amcommit shows: one place that scrubs them.

:func:`redact` removes credentials from any text before it becomes an error message, a
report's diagnostic, a log line or CLI output:

* passwords in URLs (``scheme://user:password@host``; any userinfo of ``http(s)`` URLs),
* secret query parameters (a SAS token's ``sig=`` and the other SAS fields, ``token=``, ...),
* connection-string secrets (``AccountKey=``, ``SharedAccessSignature=``, ``Password=``),
* ``Authorization`` values (``Bearer ...``, ``SharedKey account:signature``, ``Basic ...``),
* every value registered with :func:`register_secret` (the typed option conversion
  registers each secret option it sees: account keys, SAS tokens, connection strings,
  bearer tokens), wherever it appears.

:class:`~amcommit.errors.AmcommitError` applies :func:`redact` to its ``str`` and ``repr``,
so an error raised anywhere with a secret in its text still shows none. Redaction is
best-effort for unregistered secrets in free text; registered ones are always removed.
"""

from __future__ import annotations

import hmac
import re
import threading
from typing import Any
from urllib.parse import quote, unquote

from yarl import URL

MASK = "***"
"""What a secret is replaced with."""

SECRET_QUERY_KEYS = frozenset(
    {
        "sig",
        "signature",
        "se",
        "sv",
        "sp",
        "st",
        "spr",
        "srt",
        "ss",
        "skoid",
        "sktid",
        "skt",
        "ske",
        "sks",
        "skv",
        "code",
        "access_token",
        "token",
        "key",
        "password",
    }
)
"""Query parameters that are (parts of) credentials: SAS fields, OAuth tokens, API keys."""

_MIN_REGISTERED = 6  # shorter values would scrub ordinary words; the patterns still apply
_MAX_REGISTERED = 256

_registered: dict[str, None] = {}  # insertion-ordered set (oldest dropped first)
_lock = threading.Lock()


class Secret:
    """A string that never shows itself in ``repr``/``str``/f-strings, and is not picklable."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value
        register_secret(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(("Secret", len(self._value)))

    def __reduce__(self) -> Any:
        raise TypeError("Secret values are not picklable")


def register_secret(value: str | None) -> None:
    """Remember ``value`` (and its SAS ``sig``, encoded or not) so :func:`redact` removes it
    from any text of this process. Values shorter than 6 characters are not registered."""
    if not value:
        return
    found = [value, value.strip().lstrip("?")]
    for part in re.split(r"[&;]", value):
        k, sep, v = part.partition("=")
        if sep and k.strip().lower() in ("sig", "accountkey", "sharedaccesssignature", "password"):
            found.append(v)
    variants: list[str] = []
    for v in found:
        variants.extend((v, unquote(v), quote(v, safe="")))
    with _lock:
        for v in variants:
            if len(v) >= _MIN_REGISTERED and v not in _registered:
                _registered[v] = None
        while len(_registered) > _MAX_REGISTERED:
            del _registered[next(iter(_registered))]


_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@\s'\"?#]+)@")
_QUERY = re.compile(
    r"(?P<head>[?&](?:" + "|".join(sorted(SECRET_QUERY_KEYS)) + r")=)[^&\s'\"#;]*",
    re.IGNORECASE,
)
_CONN = re.compile(
    r"(?P<head>\b(?:AccountKey|SharedAccessSignature|SharedAccessKey|Password|Pwd)\s*=\s*)[^;\s'\"]+",
    re.IGNORECASE,
)
_AUTH = re.compile(r"(?P<head>\b(?:Bearer|SharedKey|Basic)\s+)[^\s'\",;]+")


def _userinfo(m: re.Match[str]) -> str:
    scheme, user = m.group("scheme"), m.group("user")
    # wasb://container@account... and abfs://filesystem@account... name a container there:
    # only a password (or any userinfo of an http(s) URL) is a credential.
    if ":" in user or scheme.lower() in ("http://", "https://"):
        return f"{scheme}{MASK}@"
    return m.group(0)


def redact(text: str) -> str:
    """``text`` with every credential it contains replaced by ``***`` (see module doc)."""
    if not text:
        return text
    with _lock:
        registered = [s for s in _registered if s in text]
    for s in sorted(registered, key=len, reverse=True):
        text = text.replace(s, MASK)
    if "@" in text:
        text = _USERINFO.sub(_userinfo, text)
    if "=" in text:
        text = _QUERY.sub(lambda m: m.group("head") + MASK, text)
        text = _CONN.sub(lambda m: m.group("head") + MASK, text)
    return _AUTH.sub(lambda m: m.group("head") + MASK, text)


def redact_url(url: str | URL) -> str:
    """The URL without credentials: no userinfo password, secret query values masked."""
    u = url if isinstance(url, URL) else URL(str(url), encoded=True)
    if u.password is not None or (u.user is not None and u.scheme in ("http", "https")):
        u = u.with_user(None)
    if u.query_string:
        q = [(k, MASK if k.lower() in SECRET_QUERY_KEYS else v) for k, v in u.query.items()]
        u = u.with_query(q)
    return redact(str(u))


def has_credentials(url: str) -> bool:
    """True if ``url`` carries a password or http(s) userinfo (``scheme://user:pw@host``)."""
    m = _USERINFO.search(url)
    return m is not None and _userinfo(m) != m.group(0)


__all__ = [
    "MASK",
    "SECRET_QUERY_KEYS",
    "Secret",
    "has_credentials",
    "redact",
    "redact_url",
    "register_secret",
]
