"""Reading a table's archived timeline (``.hoodie/archived/``): what archival moved out of
the active timeline (:mod:`amcommit.table.commit.archive` writes it; the format is
:mod:`amcommit.table.format.archive`). Reads only: one listing of the archive folder and one
read per archive file, in version order."""

from __future__ import annotations

from functools import partial

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.parallel import gather_limited
from amcommit.paths import basename, join
from amcommit.store.base import Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.archive import ARCHIVE_DIR, ArchivedEntry, archive_file_version, decode_archive

__all__ = ["archive_files", "read_archive"]

READ_CONCURRENCY = 8


async def archive_files(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> list[tuple[int, str]]:
    """``(version, name)`` of every archive log file of ``dest``, by version (one listing
    of ``.hoodie/archived/``; empty when there is none)."""
    rs = RetryingStore.of(store, config)
    found: list[tuple[int, str]] = []
    async for o in rs.list(join(dest, ARCHIVE_DIR), recursive=False):
        name = basename(o.path)
        v = archive_file_version(name)
        if v is not None and not o.is_dir:
            found.append((v, name))
    found.sort()
    return found


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
    ``files``: the archive files as :func:`archive_files` listed them (listed here if None)."""
    rs = RetryingStore.of(store, config)
    if files is None:
        files = await archive_files(rs, dest, config=config)
    paths = [join(dest, ARCHIVE_DIR, name) for _, name in files]

    async def one(path: str) -> list[ArchivedEntry]:
        return decode_archive(await rs.get(path), where=path)

    parts = await gather_limited([partial(one, p) for p in paths], READ_CONCURRENCY)
    return [e for part in parts for e in part]
