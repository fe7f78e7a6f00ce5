"""Reading a table's timeline: instants, incremental changes, snapshots (time travel).

:class:`Timeline` is the async API, opened on a store and a table path
(``await Timeline.open(store, dest)``); :func:`open_timeline` is the blocking facade, opened on
any store URL (``file://``, ``abfs[s]://``, ``wasb[s]://``, ``gs://``, plain paths).

Cost of each query (the store is asked nothing else):

- one non-recursive listing of ``.hoodie/`` (the instant files; unavoidable, and the only
  request whose cost grows with the length of the timeline);
- :meth:`Timeline.changes`: one read per completed write instant *in the range* (plus one
  read of the latest clean instant, if there is one): O(instants in range);
- :meth:`Timeline.snapshot`: one read per completed write instant up to ``as_of``;
- :meth:`Timeline.instants`: one read per completed instant.

- the archived timeline (``.hoodie/archived/``, :mod:`amcommit.table.commit.archive`): one
  listing of that folder and one read per archive file, once per :class:`Timeline`, for
  :meth:`Timeline.snapshot` and :meth:`Timeline.commits` (the file groups archived commits
  wrote), and for time travel or incremental queries that reach before the active timeline.

Completed instants never change, so their metadata is cached by the :class:`Timeline`
object; the listing is taken again by every query (the first query after :meth:`open`
uses the listing ``open`` took).

Writers hold one :class:`Timeline` per operation as their handle on the timeline: it lists
``.hoodie/`` once (:meth:`Timeline.current`, on first use) and again only when asked
(:meth:`Timeline.refresh`); every stage of the operation reads the instants it needs from
that listing (:meth:`Timeline.files`, :meth:`Timeline.commits_held`). Listing instant files
happens only in this folder (:func:`timeline_files` for one-off readers).

Queries are read-only and never atomic with respect to writers: a commit completing during a
query is either in its listing or not (it appears whole or not at all, because the
completed instant file is published last).

Refusals (typed, one line each): :class:`~amcommit.table.errors.NotATable`,
:class:`~amcommit.table.errors.UnknownInstant`, :class:`~amcommit.table.errors.RangeReversed`,
and :class:`~amcommit.table.errors.CleanedPast` for a time travel or incremental query that
reaches before the earliest instant a clean kept whole (hudi-rs ignores clean instants and,
measured, silently returns fewer rows there: the files the clean deleted are missing).
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.errors import AmcommitError, NotFound
from amcommit.parallel import gather_limited
from amcommit.paths import basename, join
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.retry import RetryingStore
from amcommit.table.errors import CleanedPast, NotATable, RangeReversed, UnknownInstant
from amcommit.table.file_group.model import FileGroup, FileVersion
from amcommit.table.format import avro_meta
from amcommit.table.format.archive import ArchivedEntry
from amcommit.table.format.model import (
    WRITE_ACTIONS,
    Action,
    CommitMetadata,
    Instant,
    State,
    decode_commit_metadata,
    parse_instant_file,
)
from amcommit.table.format.naming import HOODIE_DIR, check_instant, parse_instant
from amcommit.table.timeline.archived import read_archive
from amcommit.table.timeline.instants import Changes, LoadedCommit, changes, file_groups, snapshot

FROM_START = frozenset({"0", "00", "000"})
"""Values of ``since`` meaning "from the start of the timeline" (Hudi's ``000``)."""

__all__ = [
    "COUNT_COLUMNS",
    "FROM_START",
    "LABEL_KEYS",
    "BlockingTimeline",
    "CleanMark",
    "InstantInfo",
    "Listing",
    "SliceView",
    "Timeline",
    "open_timeline",
    "record_counts",
    "table_uri",
    "timeline_files",
]

T = TypeVar("T")

LABEL_KEYS = ("amcommit.label", "label")
"""``extraMetadata`` keys whose value is shown as an instant's label (first one present)."""
READ_CONCURRENCY = 16
"""Instant files read at once."""


@dataclass(frozen=True, slots=True)
class InstantInfo:
    """One instant of the timeline, in its most advanced state.

    ``files``/``bytes``/``rows`` are what a completed write added (a completed clean:
    ``files`` deleted); None when unknown (requested/inflight instants, other actions).
    ``inserted``/``updated``/``deleted`` are the records a completed write inserted, updated
    and deleted, from its write stats (``numInserts``, ``numUpdateWrites``, ``numDeletes``:
    :func:`record_counts`); ``rows`` also counts the unchanged records a rewritten file
    group's new version carries over.
    ``duration`` is seconds from the instant's time to its completed file's modification
    time, when the store reports one.
    """

    time: str
    action: str
    state: str
    operation: str | None = None
    files: int | None = None
    bytes: int | None = None
    rows: int | None = None
    replaced: int | None = None
    duration: float | None = None
    label: str | None = None
    inserted: int | None = None
    updated: int | None = None
    deleted: int | None = None
    compacted: bool = False
    """A completed compaction (a ``commit`` whose metadata says ``"compacted": true``); a
    pending one is action ``compaction``, state ``requested`` or ``inflight``, with ``files``
    the file slices its plan compacts."""
    archived: bool = False
    """An instant of the archived timeline (``.hoodie/archived/``; listed only when asked:
    :meth:`Timeline.instants` with ``archived=True``)."""

    @property
    def counts(self) -> tuple[int | None, int | None, int | None]:
        """``(inserted, updated, deleted)``, in the order of :data:`COUNT_COLUMNS`."""
        return (self.inserted, self.updated, self.deleted)


COUNT_COLUMNS = ("INSERTED", "UPDATED", "DELETED")
"""Column titles of :attr:`InstantInfo.counts` (``amcommit timeline``)."""


def record_counts(meta: CommitMetadata) -> tuple[int, int, int]:
    """``(inserted, updated, deleted)`` records of a write: the sums of its write stats'
    ``numInserts``, ``numUpdateWrites`` and ``numDeletes`` (as Hudi's writers count them). Pure."""
    stats = meta.write_stats()
    return (
        sum(s.num_inserts for s in stats),
        sum(s.num_update_writes for s in stats),
        sum(s.num_deletes for s in stats),
    )


@dataclass(frozen=True, slots=True)
class CleanMark:
    """What the latest clean removed: everything a reader needs before ``earliest`` may
    be gone. ``clean`` is that clean's instant time."""

    earliest: str
    clean: str


@dataclass(frozen=True)
class Listing:
    """One listing of ``.hoodie/``: every instant (most advanced state per time), sorted."""

    instants: list[Instant]
    objects: dict[str, ObjectInfo]
    """File name in ``.hoodie/`` -> what the listing said about it."""
    writes: list[str]
    """Times of the completed write instants (commit, replacecommit, deltacommit), sorted."""
    files: list[Instant] = field(default_factory=list)
    """Every instant file of the listing (all states: requested, inflight, completed), sorted
    (what :func:`~amcommit.table.timeline.instants.list_instants` answers)."""

    def completed_times(self) -> set[str]:
        return {i.time for i in self.instants if i.completed}


@dataclass(frozen=True)
class SliceView:
    """The file groups a reader reads as of ``as_of``, and what decides which log blocks
    count (as Hudi's Java log reader and hudi-rs decide it): a block written by an instant in
    ``completed`` (completed write instants: commit, replacecommit, deltacommit), or by an
    instant older than ``start`` (the active timeline's first instant: archived, hence
    completed), and not after ``as_of``."""

    groups: list[FileGroup]
    completed: frozenset[str]
    start: str | None
    as_of: str | None

    def trusts(self, instant: str) -> bool:
        """Whether a log block written by ``instant`` is read."""
        if self.as_of is not None and instant > self.as_of:
            return False
        return instant in self.completed or (self.start is not None and instant < self.start)


def table_uri(store: Store, dest: str) -> str:
    """The table's URI as Hadoop prints it (``file:/tmp/t``, ``gs://bucket/t``)."""
    return join(store.root_uri, dest)


_STATE_RANK = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}


async def list_timeline(store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG) -> Listing:
    """List ``.hoodie/`` once (not recursive; a failed listing is restarted, per ``config``:
    :class:`~amcommit.store.retry.RetryingStore`). NotATable without ``hoodie.properties``."""
    rs = RetryingStore.of(store, config)
    hoodie = join(dest, HOODIE_DIR)
    objects = {basename(o.path): o async for o in rs.list(hoodie, recursive=False) if not o.is_dir}
    if "hoodie.properties" not in objects:
        if not objects:  # nothing under .hoodie/: does the destination exist at all?

            async def anything() -> bool:
                async for _ in rs.list(dest, recursive=False):
                    return True
                return False

            if not await anything():
                raise NotATable(f"{dest!r} does not exist (nothing is stored there)", dest=dest)
        raise NotATable.make(dest)
    best: dict[str, Instant] = {}
    files: list[Instant] = []
    for name in objects:
        i = parse_instant_file(name)
        if i is None:
            continue
        files.append(i)
        cur = best.get(i.time)
        if cur is None or _STATE_RANK[i.state] > _STATE_RANK[cur.state]:
            best[i.time] = i
    instants = sorted(best.values())
    writes = [i.time for i in instants if i.completed and i.action in WRITE_ACTIONS]
    files.sort()
    return Listing(instants, objects, writes, files)


async def timeline_files(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> list[Instant]:
    """Every instant file of ``dest``'s timeline (all states), sorted: one listing of
    ``.hoodie/`` through :class:`Timeline` (retried); empty when ``dest`` holds no table."""
    try:
        return await Timeline(store, dest, config=config).files()
    except NotATable:
        return []


class Timeline:
    """A table's timeline (async). Open with :meth:`open`; see the module doc for costs."""

    def __init__(self, store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG) -> None:
        self.store = RetryingStore.of(store, config)
        """The store, behind the retrying handle of ``config``: reads retried."""
        self.config = config
        self.dest = dest
        self._meta: dict[str, CommitMetadata] = {}
        self._cleans: dict[str, CleanMark | None] = {}
        self._listing: Listing | None = None
        self._current: Listing | None = None
        self._archived: list[ArchivedEntry] | None = None

    @classmethod
    async def open(cls, store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG) -> Timeline:
        """List the timeline; NotATable if ``dest`` holds no table."""
        t = cls(store, dest, config=config)
        t._listing = t._current = await list_timeline(t.store, dest, config=config)
        return t

    async def listing(self) -> Listing:
        """A fresh listing (the one :meth:`open` took, the first time)."""
        if self._listing is not None:
            lst, self._listing = self._listing, None
            return lst
        return await self.refresh()

    async def refresh(self) -> Listing:
        """List ``.hoodie/`` again, on purpose (one listing), and keep it as :meth:`current`."""
        self._listing = None
        self._current = await list_timeline(self.store, self.dest, config=self.config)
        return self._current

    async def current(self) -> Listing:
        """The listing this handle holds (listed once, on first use; :meth:`refresh` takes
        a new one). A writer holds one handle per operation: its stages read the instants
        they need from this one listing instead of listing ``.hoodie/`` each."""
        if self._current is None:
            return await self.refresh()
        return self._current

    async def files(self) -> list[Instant]:
        """Every instant file of :meth:`current` (all states), sorted."""
        return (await self.current()).files

    async def archived(self) -> list[ArchivedEntry]:
        """The archived timeline's entries (``.hoodie/archived/``: one listing and one read
        per archive file, the first time; cached by this handle)."""
        if self._archived is None:
            self._archived = await read_archive(self.store, self.dest, config=self.config)
        return self._archived

    async def archived_commits(self, lst: Listing) -> list[LoadedCommit]:
        """The completed write instants of the archive that ``lst`` (an active listing) does
        not hold, with their metadata, in timeline order (an instant archived twice, or still
        active after an archival cut short, counts once: the active one wins)."""
        active = {i.time for i in lst.instants}
        seen: dict[str, LoadedCommit] = {}
        for e in await self.archived():
            i = e.instant
            if e.commit is not None and i.completed and i.action in WRITE_ACTIONS and i.time not in active:
                seen.setdefault(i.time, LoadedCommit(i, e.commit))
        return [seen[t] for t in sorted(seen)]

    async def _get(self, name: str) -> bytes:
        path = join(self.dest, HOODIE_DIR, name)
        return await self.store.get(path)

    async def commit_metadata(self, instant: Instant) -> CommitMetadata:
        """The metadata of a completed write instant (cached)."""
        name = instant.file_name
        meta = self._meta.get(name)
        if meta is None:
            where = join(self.dest, HOODIE_DIR, name)
            try:
                data = await self._get(name)
            except NotFound:
                # archived since this handle listed it (an archival by another writer moves
                # completed instants into .hoodie/archived/): read the archive again
                self._archived = None
                for e in await self.archived():
                    if e.instant.time == instant.time and e.instant.completed and e.commit is not None:
                        self._meta[name] = e.commit
                        return e.commit
                raise
            meta = decode_commit_metadata(data, where=where)
            self._meta[name] = meta
        return meta

    async def load(self, instants: Sequence[Instant]) -> list[LoadedCommit]:
        """Completed write instants with their metadata, read concurrently."""
        metas = await gather_limited([partial(self.commit_metadata, i) for i in instants], READ_CONCURRENCY)
        return [LoadedCommit(i, m) for i, m in zip(instants, metas, strict=True)]

    async def cleaned(self, lst: Listing) -> CleanMark | None:
        """What the latest clean (completed or under way) removed, from one read of its file."""
        cleans = [i for i in lst.instants if i.action == Action.CLEAN.value]
        if not cleans:
            return None
        last = cleans[-1]
        key = last.file_name
        if key in self._cleans:
            return self._cleans[key]
        where = join(self.dest, HOODIE_DIR, key)
        data = await self._get(key)
        if last.completed:
            earliest = avro_meta.decode_clean_metadata(data, where=where).earliest_retained
        else:
            root = table_uri(self.store, self.dest)
            earliest = avro_meta.decode_cleaner_plan(data, root_uri=root, where=where).earliest_retained
        mark = CleanMark(earliest, last.time) if earliest else None
        if last.completed:
            self._cleans[key] = mark
        return mark

    async def _check_known(self, lst: Listing, t: str | None) -> None:
        if t is None:
            return
        check_instant(t)
        for i in lst.instants:
            if i.time == t:
                if not i.completed:
                    raise UnknownInstant.make(
                        t, self.dest, f"the {i.action} is {i.state.value}, not completed"
                    )
                return
        if not lst.instants or t < lst.instants[0].time:  # before the active timeline: archived?
            if any(e.instant.time == t and e.instant.completed for e in await self.archived()):
                return
            if lst.instants:
                raise UnknownInstant.make(
                    t,
                    self.dest,
                    f"it is before the active timeline, which starts at {lst.instants[0].time}, "
                    "and not a completed instant of the archived timeline",
                )
        raise UnknownInstant.make(t, self.dest)

    async def _before_active(self, lst: Listing, since: str | None) -> list[LoadedCommit]:
        """The archived write instants a query from ``since`` (None: the start) reaches,
        when it reaches before the active timeline's first write; else none (no read)."""
        first = lst.writes[0] if lst.writes else None
        if since is not None and first is not None and since >= first:
            return []
        return await self.archived_commits(lst)

    def _write_instants(self, lst: Listing, since: str | None, until: str | None) -> list[Instant]:
        lo = 0 if since is None else bisect.bisect_right(lst.writes, since)
        hi = len(lst.writes) if until is None else bisect.bisect_right(lst.writes, until)
        wanted = set(lst.writes[lo:hi])
        return [i for i in lst.instants if i.time in wanted]

    async def changes(self, since: str | None, until: str | None = None) -> Changes:
        """Files added and file groups replaced by the write instants in ``(since, until]``
        (``since`` None: from the start; ``until`` None: up to the latest): per file group, its
        newest version in the range (:func:`amcommit.table.timeline.instants.changes`; an incremental
        read reads ``.visible()`` and keeps the rows whose ``_hoodie_commit_time`` is in range).

        Both bounds must be completed instants of the table (UnknownInstant); ``since`` may
        also be ``"000"`` (or ``"0"``, ``"00"``): from the start, as None and as the CLI's
        ``--since 000`` and the Spark reader's begin instant take it (Hudi's idiom).
        CleanedPast if a write instant in the range is older than the earliest instant the
        latest clean kept whole (some of its files may be gone)."""
        if isinstance(since, str) and since.strip() in FROM_START:
            since = None
        for t in (since, until):
            if t is not None:
                check_instant(t)
        if since is not None and until is not None and since > until:
            raise RangeReversed.make(since, until)
        lst = await self.listing()
        await self._check_known(lst, since)
        await self._check_known(lst, until)
        picked = self._write_instants(lst, since, until)
        archived = [
            c
            for c in await self._before_active(lst, since)
            if (since is None or c.instant.time > since) and (until is None or c.instant.time <= until)
        ]
        first = archived[0].instant.time if archived else picked[0].time if picked else None
        if first is not None:
            mark = await self.cleaned(lst)
            if mark is not None and first < mark.earliest:
                raise CleanedPast.make(
                    f"changes since {since or 'the start'} (first commit {first})",
                    mark.earliest,
                    mark.clean,
                )
        return changes([*archived, *await self.load(picked)], since, until)

    async def snapshot(self, as_of: str | None = None) -> list[FileVersion]:
        """The base files a snapshot read sees as of ``as_of`` (inclusive; None: latest),
        sorted by partition and path. CleanedPast if ``as_of`` is older than the earliest
        instant the latest clean kept whole."""
        lst = await self.listing()
        await self._check_known(lst, as_of)
        if as_of is not None:
            mark = await self.cleaned(lst)
            if mark is not None and as_of < mark.earliest:
                raise CleanedPast.make(f"time travel to {as_of}", mark.earliest, mark.clean)
        archived = await self.archived_commits(lst)
        active = await self.load(self._write_instants(lst, None, as_of))
        return snapshot([*archived, *active], as_of)

    async def commits_held(self) -> list[LoadedCommit]:
        """Every completed write instant of :meth:`current` with its metadata, in timeline
        order (no new listing: a writer's view as of the listing its operation took)."""
        lst = await self.current()
        return [*await self.archived_commits(lst), *await self.load(self._write_instants(lst, None, None))]

    async def file_groups(self, as_of: str | None = None, *, since: str | None = None) -> SliceView:
        """Every file group as of ``as_of`` (inclusive; None: latest) with its slices, base
        files and log files (:func:`amcommit.table.timeline.instants.file_groups`), and the
        instants a reader of log blocks trusts (:class:`SliceView`). ``since`` (a completed
        instant, or ``"000"``/None: the start) only checks the lower bound of an incremental
        read: known, not after ``as_of``, not cleaned past. Refusals as :meth:`snapshot` and
        :meth:`changes`. One listing, one read per completed write instant up to ``as_of``,
        and the archived timeline's (:meth:`archived`: the groups archived commits wrote)."""
        if isinstance(since, str) and since.strip() in FROM_START:
            since = None
        for t in (since, as_of):
            if t is not None:
                check_instant(t)
        if since is not None and as_of is not None and since > as_of:
            raise RangeReversed.make(since, as_of)
        lst = await self.listing()
        await self._check_known(lst, as_of)
        await self._check_known(lst, since)
        lowest = since if since is not None else as_of
        picked = self._write_instants(lst, None, as_of)
        if picked:
            mark = await self.cleaned(lst)
            if mark is not None:
                if lowest is not None and lowest < mark.earliest:
                    what = f"changes since {since}" if since is not None else f"time travel to {as_of}"
                    raise CleanedPast.make(what, mark.earliest, mark.clean)
        # the groups archived commits wrote count too (an archived instant is completed)
        archived = [c for c in await self.archived_commits(lst) if as_of is None or c.instant.time <= as_of]
        groups = file_groups([*archived, *await self.load(picked)], as_of)
        done = frozenset(lst.writes)
        start = lst.instants[0].time if lst.instants else None
        return SliceView(groups, done, start, as_of)

    async def commits(self) -> list[LoadedCommit]:
        """Every completed write instant with its metadata, in timeline order (the archived
        ones first: :meth:`archived_commits`)."""
        lst = await self.listing()
        return [*await self.archived_commits(lst), *await self.load(self._write_instants(lst, None, None))]

    async def instants(self, *, archived: bool = False) -> list[InstantInfo]:
        """Every instant (most advanced state per time), oldest first, with what it did.
        ``archived``: the archived timeline's instants too (marked :attr:`InstantInfo.archived`;
        one listing of ``.hoodie/archived/`` and a read of each archive file not decoded yet);
        an instant both archived and still active (an archival cut short) is shown once, active."""
        lst = await self.listing()
        old = await self._archived_infos(lst) if archived else []
        return [*old, *await self._active_infos(lst)]

    async def _archived_infos(self, lst: Listing) -> list[InstantInfo]:
        active = {i.time for i in lst.instants}
        best: dict[str, ArchivedEntry] = {}
        for e in await self.archived():
            i = e.instant
            cur = best.get(i.time)
            if i.time not in active and (
                cur is None or _STATE_RANK[i.state] > _STATE_RANK[cur.instant.state]
            ):
                best[i.time] = e
        out: list[InstantInfo] = []
        for t in sorted(best):
            e = best[t]
            i = e.instant
            if e.commit is not None and i.completed and i.action in WRITE_ACTIONS:
                out.append(_write_info(i, e.commit, None, archived=True))
            elif e.clean is not None and i.completed:
                deleted = e.clean.get("totalFilesDeleted")
                files = deleted if isinstance(deleted, int) else None
                out.append(
                    InstantInfo(
                        time=t,
                        action=i.action,
                        state=i.state.value,
                        operation="CLEAN",
                        files=files,
                        archived=True,
                    )
                )
            else:
                out.append(InstantInfo(time=t, action=i.action, state=i.state.value, archived=True))
        return out

    async def _active_infos(self, lst: Listing) -> list[InstantInfo]:
        writes = self._write_instants(lst, None, None)
        loaded = {c.instant.time: c for c in await self.load(writes)}
        done_cleans = [i for i in lst.instants if i.action == Action.CLEAN.value and i.completed]
        clean_meta = await gather_limited(
            [partial(self._get, i.file_name) for i in done_cleans], READ_CONCURRENCY
        )
        cleans = {
            i.time: avro_meta.decode_clean_metadata(d, where=join(self.dest, HOODIE_DIR, i.file_name))
            for i, d in zip(done_cleans, clean_meta, strict=True)
        }
        out: list[InstantInfo] = []
        for i in lst.instants:
            info = lst.objects.get(i.file_name)
            duration = None
            if i.completed and info is not None and info.mtime is not None:
                d = info.mtime - parse_instant(i.time).timestamp()
                duration = round(d, 3) if d >= 0 else None
            c = loaded.get(i.time)
            if c is not None:
                out.append(_write_info(i, c.metadata, duration))
            elif i.time in cleans:
                out.append(
                    InstantInfo(
                        time=i.time,
                        action=i.action,
                        state=i.state.value,
                        operation="CLEAN",
                        files=cleans[i.time].total_deleted,
                        duration=duration,
                    )
                )
            elif i.action == Action.COMPACTION.value and not i.completed:
                planned = await self._planned_slices(lst, i.time)
                out.append(
                    InstantInfo(
                        time=i.time, action=i.action, state=i.state.value, files=planned, duration=duration
                    )
                )
            else:
                out.append(InstantInfo(time=i.time, action=i.action, state=i.state.value, duration=duration))
        return out

    async def _planned_slices(self, lst: Listing, time: str) -> int | None:
        """The number of file slices the plan of the pending compaction ``time`` compacts
        (one read of ``<time>.compaction.requested``; None if it is gone or unreadable)."""
        from amcommit.table.format.compaction import decode_compaction_plan

        name = f"{time}.{Action.COMPACTION.value}.requested"
        if name not in lst.objects:
            return None
        try:
            data = await self._get(name)
            plan = decode_compaction_plan(data, where=join(self.dest, HOODIE_DIR, name))
        except AmcommitError:  # NotFound (completed meanwhile) or a corrupt plan: not counted
            return None
        return len(plan.operations)


def _write_info(
    i: Instant, meta: CommitMetadata, duration: float | None, *, archived: bool = False
) -> InstantInfo:
    """What a completed write instant did, from its metadata. Pure."""
    stats = meta.write_stats()
    extra = meta.extra_metadata
    inserted, updated, deleted = record_counts(meta)
    replaced = meta.partition_to_replace_file_ids
    return InstantInfo(
        time=i.time,
        action=i.action,
        state=i.state.value,
        operation=meta.operation_type,
        files=len(stats),
        bytes=sum(s.file_size_in_bytes or s.total_write_bytes for s in stats),
        rows=sum(s.num_writes for s in stats),
        replaced=sum(len(v) for v in replaced.values()) if replaced is not None else None,
        duration=duration,
        label=next((extra[k] for k in LABEL_KEYS if k in extra), None),
        inserted=inserted,
        updated=updated,
        deleted=deleted,
        compacted=meta.compacted,
        archived=archived,
    )


class BlockingTimeline:
    """The blocking facade of :class:`Timeline`: each call opens the store for the URL,
    runs the query in a private event loop (see :func:`amcommit.loop.run_blocking`)
    and closes the store."""

    def __init__(
        self,
        url: str,
        *,
        config: CommitterConfig = DEFAULT_CONFIG,
        store_options: dict[str, Any] | None = None,
        store_factory: Callable[[], tuple[Store, str]] | None = None,
    ) -> None:
        self.url = url
        self.config = config
        self.store_options = dict(store_options or {})
        self._factory = store_factory

    def _run(self, fn: Callable[[Timeline], Awaitable[T]]) -> T:
        from amcommit.loop import run_blocking
        from amcommit.store.schemes import open_location

        async def main() -> T:
            if self._factory is not None:
                store, dest = self._factory()
            else:
                store, dest = open_location(self.url, **self.store_options)
            async with store:
                return await fn(await Timeline.open(store, dest, config=self.config))

        return run_blocking(main)

    def instants(self, *, archived: bool = False) -> list[InstantInfo]:
        return self._run(lambda t: t.instants(archived=archived))

    def changes(self, since: str | None, until: str | None = None) -> Changes:
        return self._run(lambda t: t.changes(since, until))

    def snapshot(self, as_of: str | None = None) -> list[FileVersion]:
        return self._run(lambda t: t.snapshot(as_of))


def open_timeline(
    url: str, *, config: CommitterConfig = DEFAULT_CONFIG, **store_options: Any
) -> BlockingTimeline:
    """The blocking timeline of the table at ``url``; ``store_options`` go to
    :func:`amcommit.store.schemes.open_location` (endpoint, credentials)."""
    return BlockingTimeline(url, config=config, store_options=store_options)
