"""Errors as the user should read them: paths as the user wrote them, missing buckets and
containers named.

Inside amcommit every path is a *store path*, relative to the store's root (for local files
``tmp/data/x`` means ``/tmp/data/x``; for ``gs://bucket/warehouse`` it is ``warehouse``). At
the edges (the command line, the Spark data source) :func:`for_user` rewrites an error's
message so that store paths below the destination read as the destination URL the user
gave (``/tmp/data/x``, ``gs://bucket/warehouse/...``), and a
:class:`~amcommit.errors.BucketNotFound` names the bucket or container. Pure; the error's
type and attributes are kept (a copy is returned, without traceback or cause).
"""

from __future__ import annotations

import copy
import re

from amcommit.errors import AmcommitError, BucketNotFound, StoreError, Unreachable
from amcommit.paths import ParsedUri

_AZURE = frozenset({"abfs", "abfss", "wasb", "wasbs", "az"})


def _parse(url: str) -> ParsedUri | None:
    from amcommit.store.schemes import parse_location

    try:
        return parse_location(url)
    except Exception:
        return None


def bucket_name(url: str) -> tuple[str, str] | None:
    """``("bucket", name)`` / ``("container", name)`` of a cloud URL; None for local paths."""
    parsed = _parse(url)
    if parsed is None or parsed.scheme == "file" or not parsed.authority:
        return None
    if parsed.scheme in _AZURE:
        return "container", parsed.authority.split("@", 1)[0]
    return "bucket", parsed.authority


def shown_paths(url: str) -> tuple[str, str] | None:
    """``(store path of the destination, how to show it)`` for ``url``; None if the
    destination is a store's root (then store paths are shown as they are)."""
    parsed = _parse(url)
    if parsed is None or not parsed.path.strip("/"):
        return None
    dest = parsed.path.strip("/")
    if parsed.scheme == "file":
        return dest, "/" + dest
    head = url.split("://", 1)[0] + "://" + parsed.authority
    return dest, f"{head}/{dest}"


def rewrite(text: str, dest: str, shown: str) -> str:
    """Replace store paths at or below ``dest`` in ``text`` by their ``shown`` form (only
    whole paths: not inside a longer path or a URI)."""
    pattern = re.compile(r"(?<![\w/.:%-])" + re.escape(dest) + r"(?=[/'\"\s,:;)\]]|$)")
    return pattern.sub(lambda _m: shown, text)


def for_user(e: AmcommitError, url: str | None) -> AmcommitError:
    """A copy of ``e`` whose message shows paths as in ``url`` (the destination the user
    gave) and names a missing bucket or container. Returns ``e`` itself if nothing changes.
    An endpoint that cannot be connected to is named alone (not the path that was asked)."""
    if isinstance(e, Unreachable):
        return Unreachable(
            f"{e.message}: check the endpoint (--endpoint, option endpoint) and that the service is running",
            endpoint=e.endpoint,
        )
    if not url:
        return e
    if isinstance(e, BucketNotFound):
        named = bucket_name(url)
        if named is not None:
            kind, name = named
            if kind == "container" and "file system" in e.message:
                kind = "file system"
            return BucketNotFound(f"{kind} {name!r} does not exist", status=e.status, code=e.code)
    paths = shown_paths(url)
    if paths is None:
        return e
    dest, shown = paths
    out = copy.copy(e)
    if isinstance(out, StoreError):
        out.path = rewrite(out.path, dest, shown)
        out.message = rewrite(out.message, dest, shown)
    elif len(out.args) == 1 and isinstance(out.args[0], str):
        out.args = (rewrite(out.args[0], dest, shown),)
    out.__traceback__ = None
    out.__cause__ = None
    out.__context__ = None
    return out


__all__ = ["bucket_name", "for_user", "rewrite", "shown_paths"]
