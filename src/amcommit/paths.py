"""Paths in one place: store paths and the URIs that name them. Pure functions, no I/O.

**Store paths** are keys relative to a store's root (a bucket, an ADLS filesystem, or
``/`` for local files): ``"a/b/c.parquet"``, no leading or trailing ``/``, no empty, ``.``
or ``..`` segments; ``""`` is the root itself (:func:`check_path`). :func:`join`,
:func:`parent`, :func:`basename`, :func:`ancestors`, :func:`is_within` and
:func:`relative_to` are their algebra.

**URIs** are written as Hadoop prints them. Hadoop's ``Path.toUri().toString()``
percent-encodes, in the path, every ASCII character that ``java.net.URI`` does not allow
there (space, ``%``, ``#``, ``?``, ``"``, ``<``, ``>``, ``[``, ``]``, ``\\``, ``^``, `````,
``{``, ``|``, ``}`` and controls) and leaves the rest, including ``+`` and non-ASCII
letters, as they are. :func:`encode_path` does the same, so manifests we write read the
same as Hadoop's; :func:`decode_path` undoes any percent-encoding (UTF-8). Paths are
compared only in decoded form. :func:`path_to_uri` / :func:`uri_to_path` convert between
the two under a store's root URI (:func:`path_mapper`, :func:`fast_prefixes` and
:func:`is_plain_path` are the fast path for hot loops).

Opening a store for a URL is :mod:`amcommit.store.schemes`.
"""

from __future__ import annotations

import functools
import re
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


_ALL_SAFE = re.compile("[" + re.escape("".join(sorted(_SAFE))) + "]*")
"""Matches a whole string of :data:`_SAFE` characters (one scan in C)."""


def encode_path(path: str) -> str:
    """Percent-encode ``path`` the way Hadoop's ``Path.toUri().toString()`` does."""
    if _ALL_SAFE.fullmatch(path) is not None:
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
def fast_prefixes(root_uri: str) -> tuple[str, ...]:
    """Literal prefixes under which a URI maps to a store path by slicing alone."""
    if root_uri.startswith("file:"):
        path = "/" + _parse_root(root_uri).path
        enc = encode_path(path.rstrip("/") + "/")
        return ("file://" + enc, "file:" + enc, "file://localhost" + enc)
    return (root_uri if root_uri.endswith("/") else root_uri + "/",)


def is_plain_path(p: str) -> bool:
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
    prefixes = fast_prefixes(root_uri)

    def to_path(uri: str) -> str:
        for prefix in prefixes:
            if uri.startswith(prefix):
                rest = uri[len(prefix) :]
                if is_plain_path(rest):
                    return rest
                break
        return uri_to_path(root_uri, uri)

    return to_path


def uri_to_path(root_uri: str, uri: str) -> str:
    """Store path of ``uri``; InvalidInput if it lies outside the store's root."""
    for prefix in fast_prefixes(root_uri):
        if uri.startswith(prefix):
            rest = uri[len(prefix) :]
            if is_plain_path(rest):
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


# ---------------------------------------------------------------------------------------
# store paths


def check_path(path: str, *, allow_root: bool = True) -> str:
    """Validate a store path and return it; raise InvalidInput naming the bad path."""
    if path == "":
        if allow_root:
            return path
        raise InvalidInput("empty path", path=path)
    if path.startswith("/") or path.endswith("/"):
        raise InvalidInput("path must not start or end with '/'", path=path)
    # it runs for every request: the segments are split only if a substring test says one
    # of them may be empty, "." or "..", or hold a NUL
    if "//" in path or "\x00" in path or path.startswith(".") or "/." in path:
        for seg in path.split("/"):
            if seg in ("", ".", ".."):
                raise InvalidInput("path has an empty, '.' or '..' segment", path=path)
            if "\x00" in seg:
                raise InvalidInput("path contains a NUL character", path=path)
    return path


def join(*parts: str) -> str:
    """Join path segments, skipping empty ones: ``join("a", "", "b/c") == "a/b/c"``."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def parent(path: str) -> str:
    """Parent directory of ``path`` (``""`` for top-level names)."""
    i = path.rfind("/")
    return path[:i] if i >= 0 else ""


def basename(path: str) -> str:
    return path[path.rfind("/") + 1 :]


def ancestors(path: str) -> list[str]:
    """Proper ancestors of ``path`` from the top, excluding the root: ``a/b/c`` ->
    ``["a", "a/b"]``."""
    segs = path.split("/")
    return ["/".join(segs[:i]) for i in range(1, len(segs))]


def is_within(path: str, directory: str) -> bool:
    """True if ``path`` is ``directory`` or below it."""
    if directory == "":
        return True
    return path == directory or path.startswith(directory + "/")


def relative_to(path: str, directory: str) -> str:
    """``path`` relative to ``directory`` (which must contain it)."""
    if directory == "":
        return path
    if path == directory:
        return ""
    if not path.startswith(directory + "/"):
        raise InvalidInput(f"not below {directory!r}", path=path)
    return path[len(directory) + 1 :]
