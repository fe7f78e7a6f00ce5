"""URIs as Hadoop prints them, and conversion between URIs and store paths.

Hadoop's ``Path.toUri().toString()`` percent-encodes, in the path, every ASCII character
that ``java.net.URI`` does not allow there (space, ``%``, ``#``, ``?``, ``"``, ``<``, ``>``,
``[``, ``]``, ``\\``, ``^``, `````, ``{``, ``|``, ``}`` and controls) and leaves the rest,
including ``+`` and non-ASCII letters, as they are. :func:`encode_path` does the same, so
manifests we write read the same as Hadoop's; :func:`decode_path` undoes any
percent-encoding (UTF-8). Paths are compared only in decoded form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

from amcommit.errors import InvalidInput

# characters java.net.URI leaves unquoted in a path component (besides non-ASCII "other")
_SAFE = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    "-_.!~*'()"  # unreserved marks
    ",;:$&+="  # punct
    "/@"
)


def encode_path(path: str) -> str:
    """Percent-encode ``path`` the way Hadoop's ``Path.toUri().toString()`` does."""
    if all(c in _SAFE for c in path):
        return path
    out = []
    for c in path:
        if c in _SAFE:
            out.append(c)
        elif ord(c) > 127 and c.isprintable() and not c.isspace():
            out.append(c)
        else:
            out.extend(f"%{b:02X}" for b in c.encode("utf-8"))
    return "".join(out)


def decode_path(path: str) -> str:
    """Undo percent-encoding (UTF-8); raise InvalidInput on malformed escapes."""
    if "%" not in path:
        return path
    try:
        return unquote(path, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInput("malformed percent-encoding", path=path) from None


@dataclass(frozen=True, slots=True)
class ParsedUri:
    """``scheme://authority/path`` split into parts; ``path`` is decoded, without leading
    ``/``. For ``file:`` URIs ``authority`` is empty and ``path`` is absolute-minus-slash."""

    scheme: str
    authority: str
    path: str


_SCHEME_FAMILY = {"abfss": "abfs", "wasbs": "wasb", "https": "http", "file": "file", "gcs": "gs"}


def parse_uri(uri: str) -> ParsedUri:
    """Parse a URI or a plain absolute local path (which becomes ``file``)."""
    if uri.startswith("/"):
        return ParsedUri("file", "", uri.lstrip("/"))
    scheme, sep, rest = uri.partition(":")
    if not sep or not scheme or not scheme.replace("+", "").replace("-", "").isalnum():
        raise InvalidInput("not a URI (no scheme) and not an absolute path", path=uri)
    scheme = scheme.lower()
    if "#" in rest or "?" in rest:  # e.g. a SAS token: never echoed
        raise InvalidInput(
            "URI has a query or fragment (not shown; a SAS token goes in the sas_token option, "
            "not in the URL)",
            path=uri.partition("?")[0].partition("#")[0],
        )
    if scheme == "file":
        if rest.startswith("//"):
            rest = rest[2:]
            host, _, p = rest.partition("/")
            if host not in ("", "localhost"):
                raise InvalidInput("file URI with a remote host", path=uri)
            rest = "/" + p
        if not rest.startswith("/"):
            raise InvalidInput("file URI must be absolute", path=uri)
        return ParsedUri("file", "", decode_path(rest).lstrip("/"))
    if not rest.startswith("//"):
        raise InvalidInput("URI has no authority (expected scheme://...)", path=uri)
    authority, _, p = rest[2:].partition("/")
    if not authority:
        raise InvalidInput("URI has an empty authority", path=uri)
    return ParsedUri(scheme, authority, decode_path(p).strip("/"))


def same_root(a: ParsedUri, b: ParsedUri) -> bool:
    """True if two parsed URIs name the same container (scheme family + authority)."""
    fa = _SCHEME_FAMILY.get(a.scheme, a.scheme)
    fb = _SCHEME_FAMILY.get(b.scheme, b.scheme)
    return fa == fb and a.authority.lower() == b.authority.lower()


def path_to_uri(root_uri: str, path: str) -> str:
    """URI of store path ``path`` under a store whose root URI is ``root_uri``."""
    return root_uri + encode_path(path)


@functools.lru_cache(maxsize=64)
def _parse_root(root_uri: str) -> ParsedUri:
    return parse_uri(root_uri)


@functools.lru_cache(maxsize=64)
def _fast_prefixes(root_uri: str) -> tuple[str, ...]:
    """Literal prefixes under which a URI maps to a store path by slicing alone."""
    if root_uri.startswith("file:"):
        path = "/" + _parse_root(root_uri).path
        enc = encode_path(path.rstrip("/") + "/")
        return ("file://" + enc, "file:" + enc, "file://localhost" + enc)
    return (root_uri if root_uri.endswith("/") else root_uri + "/",)


def _plain_path(p: str) -> bool:
    """A path that surely needs no decoding or normalisation (a few substring scans;
    a false "no" only sends the URI down the exact, slower path)."""
    return (
        bool(p)
        and "%" not in p
        and "//" not in p
        and "/." not in p
        and "?" not in p
        and "#" not in p
        and p[0] not in "/."
        and p[-1] != "/"
    )


def path_mapper(root_uri: str) -> Callable[[str], str]:
    """``uri_to_path`` bound to one root (prefixes computed once; for hot loops)."""
    prefixes = _fast_prefixes(root_uri)

    def to_path(uri: str) -> str:
        for prefix in prefixes:
            if uri.startswith(prefix):
                rest = uri[len(prefix) :]
                if _plain_path(rest):
                    return rest
                break
        return uri_to_path(root_uri, uri)

    return to_path


def uri_to_path(root_uri: str, uri: str) -> str:
    """Store path of ``uri``; InvalidInput if it lies outside the store's root."""
    for prefix in _fast_prefixes(root_uri):
        if uri.startswith(prefix):
            rest = uri[len(prefix) :]
            if _plain_path(rest):
                return rest
            break
    root = _parse_root(root_uri)
    target = parse_uri(uri)
    if not same_root(root, target):
        raise InvalidInput(f"URI is not in this store ({root_uri})", path=uri)
    rp = root.path.strip("/")
    tp = target.path.strip("/")
    if rp:
        if tp != rp and not tp.startswith(rp + "/"):
            raise InvalidInput(f"URI is outside the store root {root_uri}", path=uri)
        tp = tp[len(rp) :].lstrip("/")
    for seg in tp.split("/") if tp else []:
        if seg in ("", ".", ".."):
            raise InvalidInput("URI path has an empty, '.' or '..' segment", path=uri)
    return tp
