"""Reading a table's archived timeline (``.hoodie/archived/``): what archival moved out of
the active timeline (:mod:`amcommit.table.commit.archive` writes it; the format is
:mod:`amcommit.table.format.archive`). Reads only: one listing of the archive folder and one
read per archive file, in version order.

Archive files are written create-only and never changed (:mod:`amcommit.table.commit.archive`),
so what one decodes to is kept in a per-process cache, keyed by the file's store, path, size
and etag / modification time as the listing reports them: a later read of the archive (the
next upsert, read or clean in the same process) lists ``.hoodie/archived/`` (one request,
always: the listing decides what the archive holds) and reads only the files it has not
decoded yet. A file of the same name with another size or etag (a table removed and made
again) is read again. The cache holds at most :data:`CACHE_ENTRIES` archived entries, the
least recently used files leave first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import partial

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.parallel import gather_limited
from amcommit.paths import basename, join
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.archive import ARCHIVE_DIR, ArchivedEntry, archive_file_version, decode_archive

__all__ = ["CACHE_ENTRIES", "archive_files", "clear_archive_cache", "read_archive"]

READ_CONCURRENCY = 8
CACHE_ENTRIES = 200_000
"""Archived entries (instant files) the per-process cache holds at most (~10,000 commits)."""

_Key = tuple[str, str]
_Version = tuple[int, str | None, float | None]
_cache: OrderedDict[_Key, tuple[_Version, list[ArchivedEntry]]] = OrderedDict()
_cached_entries = 0
_cache_lock = threading.Lock()


def clear_archive_cache() -> None:
    """Forget every decoded archive file (the next read of each archive reads its files)."""
    global _cached_entries
    with _cache_lock:
        _cache.clear()
        _cached_entries = 0


def _version(o: ObjectInfo) -> _Version:
    return (o.size, o.etag, o.mtime)


def _cached(key: _Key, version: _Version) -> list[ArchivedEntry] | None:
    with _cache_lock:
        hit = _cache.get(key)
        if hit is None or hit[0] != version:
            return None
        _cache.move_to_end(key)
        return hit[1]


def _remember(key: _Key, version: _Version, entries: list[ArchivedEntry]) -> None:
    global _cached_entries
    with _cache_lock:
        old = _cache.pop(key, None)
        if old is not None:
            _cached_entries -= len(old[1])
        _cache[key] = (version, entries)
        _cached_entries += len(entries)
        while _cached_entries > CACHE_ENTRIES and len(_cache) > 1:
            _, (_, gone) = _cache.popitem(last=False)
            _cached_entries -= len(gone)


async def _listed(rs: RetryingStore, dest: str) -> list[tuple[int, str, ObjectInfo]]:
    found: list[tuple[int, str, ObjectInfo]] = []
    async for o in rs.list(join(dest, ARCHIVE_DIR), recursive=False):
        name = basename(o.path)
        v = archive_file_version(name)
        if v is not None and not o.is_dir:
            found.append((v, name, o))
    found.sort(key=lambda f: (f[0], f[1]))
    return found


async def archive_files(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> list[tuple[int, str]]:
    """``(version, name)`` of every archive log file of ``dest``, by version (one listing
    of ``.hoodie/archived/``; empty when there is none)."""
    return [(v, name) for v, name, _ in await _listed(RetryingStore.of(store, config), dest)]


async def read_archive(
    store: Store,
    dest: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    files: list[tuple[int, str]] | None = None,
) -> list[ArchivedEntry]:
    """Every archived entry of ``dest``, in archive order (file version, then file order).
    An instant archived twice (an archival cut short between its archive file and its
    deletions, then run again) appears twice: callers keep one per instant file.
    ``files``: the archive files as :func:`archive_files` listed them (listed here if None;
    only a listing made here uses the per-process cache of the module doc). Reads only."""
    rs = RetryingStore.of(store, config)
    listed: list[tuple[int, str, ObjectInfo | None]]
    if files is not None:
        listed = [(v, name, None) for v, name in files]
    else:
        listed = [(v, name, o) for v, name, o in await _listed(rs, dest)]
    root = store.root_uri

    async def one(name: str, info: ObjectInfo | None) -> list[ArchivedEntry]:
        path = join(dest, ARCHIVE_DIR, name)
        if info is not None:
            hit = _cached((root, path), _version(info))
            if hit is not None:
                return hit
        entries = decode_archive(await rs.get(path), where=path)
        if info is not None:
            _remember((root, path), _version(info), entries)
        return entries

    parts = await gather_limited([partial(one, name, o) for _, name, o in listed], READ_CONCURRENCY)
    return [e for part in parts for e in part]
