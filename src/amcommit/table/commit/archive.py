"""Archival: the active timeline stays short however old the table is (Hudi's archiver).

Hudi (``HoodieTimelineArchiver``, table version 6) moves completed instants out of
``.hoodie/`` into the archived timeline (``.hoodie/archived/``, log files of
``HoodieArchivedMetaEntry`` records: :mod:`amcommit.table.format.archive`) so that listing and
loading the active timeline costs the same at 10 commits and at 10,000. The rules (as
Hudi's, for the actions amcommit writes), :func:`plan_archive`:

- nothing is archived while the active timeline holds ``keep_max`` (``hoodie.keep.max.commits``,
  30) completed writes (commits, replacecommits) or fewer; then the oldest are archived
  until ``keep_min`` (``hoodie.keep.min.commits``, 20) remain;
- never an instant at or after the earliest instant that is not completed (a pending
  write, clean or rollback of any writer): everything before it is decided;
- never a write at or after the earliest instant the latest clean still needs
  (its ``earliestCommitToRetain``);
- completed cleans and rollbacks older than the first write kept go with them, except the
  latest clean (readers judge cleaned-past queries by it);
- each instant goes whole: its requested, inflight and completed files.

Execution (:func:`archive`), under the destination lock the table's commits and cleans take
(``.hoodie/.aux/amcommit/_commit.lock``, owner :data:`ARCHIVE_LOCK_OWNER`), two kinds of request:

1. one create-only put of a new archive file ``.commits_.archive.<n+1>_1-0-1`` holding
   every instant file to archive (with its metadata): atomic, the whole file or nothing;
2. deletions of those instant files from ``.hoodie/`` (up to ``io_threads`` instants at
   once); of each instant its requested and inflight files first, its completed file
   last (an instant cut short there is still completed, never a pending write that a
   rollback would undo: no committed file is ever lost).

A run killed anywhere is finished by the next one (after a commit, or ``amcommit archive``):
first, every instant the newest archive file holds that is still in ``.hoodie/`` is deleted
(step 2 again) before anything is planned; an instant both archived and still active
meanwhile is read once (the active one wins: :meth:`~amcommit.table.timeline.reader.Timeline.archived_commits`).
Readers with a listing taken just before a deletion may find an instant file gone (a
retried query succeeds), as with Hudi's archiver.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import fastavro

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.lock import run_locked
from amcommit.errors import AlreadyExists, AmcommitError, ConfigError, ManifestError
from amcommit.parallel import gather_limited, run_parallel
from amcommit.paths import join
from amcommit.store.base import PutMode, Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.archive import (
    ARCHIVE_DIR,
    ArchivedEntry,
    archive_file_name,
    decode_archive,
    encode_archive_block,
    newest_archived,
)
from amcommit.table.format.model import WRITE_ACTIONS, Action, Instant, State, parse_instant_file
from amcommit.table.format.naming import HOODIE_DIR, STAGING_DIR
from amcommit.table.settings import TableSettings, table_settings
from amcommit.table.timeline.archived import archive_files
from amcommit.table.timeline.reader import Listing, Timeline

__all__ = ["ARCHIVE_LOCK_OWNER", "ArchiveReport", "archive", "archive_after_commit", "plan_archive"]

log = logging.getLogger(__name__)

ARCHIVE_LOCK_OWNER = "archive"
"""The job id archivals hold the destination lock under (the same for every archival: one
run again after its process died takes the lock back at once and finishes)."""
READ_CONCURRENCY = 16
_STATE_ORDER = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}


@dataclass
class ArchiveReport:
    """What an archival did."""

    dest: str
    archived: list[str] = field(default_factory=list)
    """Instant times moved into the archive by this run, oldest first."""
    finished: list[str] = field(default_factory=list)
    """Instant times an earlier run archived and this run removed from ``.hoodie/``."""
    file: str | None = None
    """The archive file this run wrote (relative to the table), if any."""
    deleted: int = 0
    """Instant files deleted from ``.hoodie/``."""
    active_writes: int = 0
    """Completed writes left in the active timeline."""


def plan_archive(
    files: Sequence[Instant], keep_max: int, keep_min: int, clean_earliest: str | None
) -> list[str]:
    """The instant times to archive, oldest first (module doc). ``files``: every instant
    file of ``.hoodie/`` (all states); ``clean_earliest``: the latest clean's earliest
    instant to retain (None: no clean). Pure."""
    best: dict[str, Instant] = {}
    for i in files:
        cur = best.get(i.time)
        if cur is None or _STATE_ORDER[i.state] > _STATE_ORDER[cur.state]:
            best[i.time] = i
    instants = sorted(best.values())
    pending = [i.time for i in instants if not i.completed]
    limit = min([*pending, *([clean_earliest] if clean_earliest else [])], default=None)
    writes = [i.time for i in instants if i.completed and i.action in WRITE_ACTIONS]
    if len(writes) <= keep_max:
        return []
    chosen = [t for t in writes[: len(writes) - keep_min] if limit is None or t < limit]
    if not chosen:
        return []
    kept_first = next((t for t in writes if t not in set(chosen)), None)
    cleans = [i.time for i in instants if i.action == Action.CLEAN.value]
    latest_clean = cleans[-1] if cleans else None
    others = [
        i.time
        for i in instants
        if i.completed
        and i.action in (Action.CLEAN.value, Action.ROLLBACK.value)
        and i.time != latest_clean
        and (kept_first is None or i.time < kept_first)
        and (limit is None or i.time < limit)
    ]
    return sorted({*chosen, *others})


def named(lst: Listing) -> list[tuple[Instant, str]]:
    """Every instant file of a listing with its actual name (a commit's inflight file may
    be Hudi's legacy ``<time>.inflight``), sorted. Pure."""
    out = [(i, name) for name in lst.objects for i in [parse_instant_file(name)] if i is not None]
    out.sort()
    return out


def _delete_order(files: Sequence[tuple[Instant, str]], times: Sequence[str]) -> list[tuple[Instant, str]]:
    """The instant files of ``times``: instant by instant, oldest first; requested,
    inflight, completed last."""
    wanted = set(times)
    return sorted(
        (f for f in files if f[0].time in wanted), key=lambda f: (f[0].time, _STATE_ORDER[f[0].state])
    )


async def _delete(
    rs: RetryingStore, dest: str, doomed: Sequence[tuple[Instant, str]], report: ArchiveReport, threads: int
) -> None:
    """Delete ``doomed`` (in :func:`_delete_order`): the files of one instant one at a time,
    in order (its completed file last: the order is what makes a cut short safe); up to
    ``threads`` instants at once (each instant is archived whole, in any order: a reader
    merges the archive and the active timeline, an instant in both counts once)."""
    by_time: dict[str, list[str]] = {}
    for i, name in doomed:
        by_time.setdefault(i.time, []).append(name)

    async def one(names: list[str]) -> None:
        for name in names:
            if await rs.delete(join(dest, HOODIE_DIR, name)):
                report.deleted += 1

    await run_parallel(list(by_time.values()), one, max(1, threads))


async def _entries(tl: Timeline, files: Sequence[Instant]) -> list[ArchivedEntry]:
    """The archive entries of ``files`` (a completed write with its commit metadata, a
    completed clean with its clean metadata), read concurrently."""

    async def one(i: Instant) -> ArchivedEntry:
        if i.completed and i.action in WRITE_ACTIONS:
            return ArchivedEntry(i, commit=await tl.commit_metadata(i))
        if i.completed and i.action == Action.CLEAN.value:
            path = join(tl.dest, HOODIE_DIR, i.file_name)
            data = await tl.store.get(path)
            try:
                rec = next(iter(fastavro.reader(io.BytesIO(data))))
            except Exception as e:  # fastavro raises several types for corrupt input
                raise ManifestError(f"{path}: not an Avro clean instant ({type(e).__name__})") from None
            return ArchivedEntry(i, clean=rec if isinstance(rec, dict) else None)
        return ArchivedEntry(i)

    return await gather_limited([partial(one, i) for i in files], READ_CONCURRENCY)


async def _archive_unlocked(
    store: Store, dest: str, keep_max: int, keep_min: int, config: CommitterConfig
) -> ArchiveReport:
    report = ArchiveReport(dest=dest)
    rs = RetryingStore.of(store, config)
    tl = Timeline(rs, dest, config=config)
    lst, found = await tl.current(), await archive_files(rs, dest, config=config)
    if found:  # finish a run cut short: what the newest archive file holds leaves .hoodie/
        path = join(dest, ARCHIVE_DIR, found[-1][1])
        data = await rs.get(path)
        newest = newest_archived(data, where=path)  # one record decoded: most runs stop here
        left: list[tuple[Instant, str]] = []
        if newest is not None and any(i.time <= newest for i in lst.instants):
            held = {e.instant for e in decode_archive(data, where=path)}
            left = [f for f in named(lst) if f[0] in held]
        if left:
            report.finished = sorted({i.time for i, _ in left})
            await _delete(rs, dest, _delete_order(left, report.finished), report, config.io_threads)
            lst = await tl.refresh()
    mark = await tl.cleaned(lst)
    times = plan_archive(lst.files, keep_max, keep_min, None if mark is None else mark.earliest)
    if times:
        doomed = _delete_order(named(lst), times)
        data = encode_archive_block(await _entries(tl, [i for i, _ in doomed]))
        version = found[-1][0] + 1 if found else 1
        name = archive_file_name(version)
        try:
            await rs.put(join(dest, ARCHIVE_DIR, name), data, mode=PutMode.CREATE)
        except AlreadyExists:
            # our own put whose answer was lost (retried by the handle), or a file of a run
            # this lock holder cannot see: only ours may be followed by deletions
            if await rs.get(join(dest, ARCHIVE_DIR, name)) != data:
                raise ManifestError(f"{dest}: archive file {name} exists with other content") from None
        report.file = join(ARCHIVE_DIR, name)
        report.archived = times
        await _delete(rs, dest, doomed, report, config.io_threads)
    gone = set(times)
    report.active_writes = len([t for t in lst.writes if t not in gone])
    return report


async def archive(
    store: Store,
    dest: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    keep_max: int | None = None,
    keep_min: int | None = None,
    take_lock: bool = True,
) -> ArchiveReport:
    """Archive the timeline of the table at ``dest`` (module doc): ``keep_max`` /
    ``keep_min`` (None: the ``keep_max_commits`` / ``keep_min_commits`` given with ``config``).
    NotATable if ``dest`` holds no table; ConfigError (one line) for bad bounds. Holds the
    destination lock unless ``take_lock`` is False (a caller that already holds it)."""
    settings = table_settings(config)
    hi = settings.keep_max_commits if keep_max is None else keep_max
    lo = settings.keep_min_commits if keep_min is None else keep_min
    for name, v in (("keep_min", lo), ("keep_max", hi)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {v!r}")
    if hi <= lo:
        raise ConfigError(f"keep_max ({hi}) must be greater than keep_min ({lo})")
    if not take_lock:
        return await _archive_unlocked(store, dest, hi, lo, config)
    return await run_locked(
        store,
        dest,
        ARCHIVE_LOCK_OWNER,
        config,
        lambda s: _archive_unlocked(s, dest, hi, lo, config),
        staging=STAGING_DIR,
    )


async def archive_after_commit(
    store: Store,
    dest: str,
    config: CommitterConfig,
    active_writes: int | None,
    settings: TableSettings | None = None,
) -> ArchiveReport | None:
    """After a table commit, outside its lock: archive if the ``archive`` setting is on and
    the commit's own listing (``active_writes`` completed writes, this one included; None:
    unknown) says the active timeline holds more than ``keep_max_commits`` (else nothing
    is listed: most commits cost nothing here). A failed archival never fails the commit
    before it: it is logged, and the next archival finishes what it left. ``settings``: the
    table's (None: those given with ``config``)."""
    settings = table_settings(config) if settings is None else settings
    if not settings.archive:
        return None
    if active_writes is not None and active_writes <= settings.keep_max_commits:
        return None
    try:
        return await archive(
            store, dest, config=config, keep_max=settings.keep_max_commits, keep_min=settings.keep_min_commits
        )
    except AmcommitError as e:
        log.warning("archival after commit into %s failed (the commit stands): %s", dest, e)
        return None
