"""Snapshot, time travel and incremental planning over a table's timeline.

The planning functions are pure: they take completed write instants with their metadata
(:class:`LoadedCommit`) and answer which base files a reader sees. :func:`load_timeline` is the
only I/O here: it lists ``.hoodie/`` (not recursive) and reads completed write instants.

Semantics (Copy-on-Write, as Hudi's readers plan it):

- a completed ``commit`` / ``replacecommit`` at time T adds the base files of its write stats;
  a file whose file group (file id) already has a base file is that group's new version (an
  upsert or delete rewrote it: it holds the group's records as of T, the unchanged ones still
  stamped with the ``_hoodie_commit_time`` of their last change);
- a ``replacecommit`` at T also replaces the file groups listed in
  ``partitionToReplaceFileIds``: from T on, readers skip every version of those groups;
- the snapshot as of T holds, per file group, its newest version from commits at or before T,
  unless the group was replaced by a replace commit at or before T;
- the changes in ``(since, until]`` are, per file group the commits in that range wrote, its
  newest version in the range (older versions written in the range are superseded), and the
  groups replaced in the range, in timeline order. An incremental read reads those versions
  (less the replaced groups: :meth:`Changes.visible`) and keeps the rows whose
  ``_hoodie_commit_time`` lies in ``(since, until]`` -- exactly the records whose latest change
  lies in the range, as Hudi's ``IncrementalRelation`` and hudi-rs read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from amcommit.errors import AlreadyExists, NotFound
from amcommit.parallel import run_parallel
from amcommit.paths import basename, join
from amcommit.store.base import PutMode, Store
from amcommit.table.file_group.model import FileGroup, FileVersion, LogFile, group_files
from amcommit.table.format.model import (
    WRITE_ACTIONS,
    Action,
    CommitMetadata,
    Instant,
    State,
    decode_commit_metadata,
    parse_instant_file,
)
from amcommit.table.format.naming import HOODIE_DIR, check_instant, parse_log_file_name

__all__ = [
    "Changes",
    "FileVersion",
    "LoadedCommit",
    "changes",
    "completed_instant",
    "create_once",
    "file_groups",
    "load_timeline",
    "snapshot",
]


@dataclass(frozen=True, slots=True)
class LoadedCommit:
    """A completed write instant and its commit metadata."""

    instant: Instant
    metadata: CommitMetadata

    def added(self) -> list[FileVersion]:
        """The base files this commit wrote (log files are :meth:`logs`)."""
        return [
            FileVersion(
                partition=s.partition_path if s.partition_path else partition,
                file_id=s.file_id,
                path=s.path,
                instant=self.instant.time,
                size=s.file_size_in_bytes or s.total_write_bytes,
                rows=s.num_writes,
            )
            for partition, stats in self.metadata.partition_to_write_stats.items()
            for s in stats
            if parse_log_file_name(basename(s.path)) is None
        ]

    def logs(self) -> list[LogFile]:
        """The log files this commit wrote (a Merge-on-Read deltacommit's updates and deletes)."""
        out: list[LogFile] = []
        for partition, stats in self.metadata.partition_to_write_stats.items():
            for s in stats:
                name = parse_log_file_name(basename(s.path))
                if name is not None:
                    out.append(
                        LogFile(
                            partition=s.partition_path if s.partition_path else partition,
                            file_id=s.file_id,
                            path=s.path,
                            base_instant=name.base_instant,
                            version=name.version,
                            instant=self.instant.time,
                            size=s.file_size_in_bytes or s.total_write_bytes,
                        )
                    )
        return out

    def replaced(self) -> list[tuple[str, str]]:
        """``(partition, file id)`` of every group this commit replaces."""
        r = self.metadata.partition_to_replace_file_ids or {}
        return [(p, fid) for p, fids in r.items() for fid in fids]


@dataclass(slots=True)
class Changes:
    """What the commits in ``(since, until]`` did, in timeline order."""

    since: str | None
    until: str | None
    instants: list[Instant] = field(default_factory=list)
    added: list[FileVersion] = field(default_factory=list)
    """Per file group the range wrote, its newest version in the range."""
    replaced: list[tuple[str, str]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    """Instant time -> label text (``extraMetadata["amcommit.label"]``) of the labelled
    instants in the range (:mod:`amcommit.table.commit.labels`)."""

    superseded: list[FileVersion] = field(default_factory=list)
    """Older versions written in the range of groups rewritten later in the range: no
    incremental read of the range reads them."""
    logs: list[LogFile] = field(default_factory=list)
    """The log files the deltacommits in the range wrote (Merge-on-Read: their updates and
    deletes), in timeline order; a log file appended by several deltacommits once per
    deltacommit."""

    def visible(self) -> list[FileVersion]:
        """The files an incremental read of the range reads (as Hudi's incremental relation
        and hudi-rs plan it): :attr:`added` (the newest version in the range of each file
        group), minus the groups a commit in the range replaced. Of their rows, only those
        whose ``_hoodie_commit_time`` lies in ``(since, until]`` are changes of the range (a
        rewritten version also holds the group's unchanged records, stamped earlier)."""
        gone = set(self.replaced)
        return [f for f in self.added if (f.partition, f.file_id) not in gone]


def _in_range(t: str, since: str | None, until: str | None) -> bool:
    return (since is None or t > since) and (until is None or t <= until)


def _sorted(commits: Iterable[LoadedCommit]) -> list[LoadedCommit]:
    return sorted(commits, key=lambda c: c.instant.time)


def snapshot(commits: Iterable[LoadedCommit], as_of: str | None = None) -> list[FileVersion]:
    """The base files a snapshot read sees as of ``as_of`` (inclusive; None = latest).

    Sorted by partition, then path.
    """
    if as_of is not None:
        check_instant(as_of)
    latest: dict[tuple[str, str], FileVersion] = {}
    replaced: set[tuple[str, str]] = set()
    for c in _sorted(commits):
        if not _in_range(c.instant.time, None, as_of):
            continue
        for f in c.added():
            key = (f.partition, f.file_id)
            old = latest.get(key)
            if old is None or old.instant <= f.instant:
                latest[key] = f
        replaced.update(c.replaced())
    out = [f for key, f in latest.items() if key not in replaced]
    out.sort(key=lambda f: (f.partition, f.path))
    return out


def file_groups(commits: Iterable[LoadedCommit], as_of: str | None = None) -> list[FileGroup]:
    """Every file group of the table as of ``as_of`` (inclusive; None = latest), with its
    slices: base files and the log files written against them, from the commits at or before
    ``as_of``, less the groups a replace commit at or before ``as_of`` replaced. Pure.

    On a Copy-on-Write table each slice is one base file; the latest slices' base files are
    exactly :func:`snapshot`. Sorted by partition, then file id.
    """
    if as_of is not None:
        check_instant(as_of)
    bases: list[FileVersion] = []
    logs: list[LogFile] = []
    replaced: set[tuple[str, str]] = set()
    for c in _sorted(commits):
        if not _in_range(c.instant.time, None, as_of):
            continue
        bases.extend(c.added())
        logs.extend(c.logs())
        replaced.update(c.replaced())
    return [g for g in group_files(bases, logs) if (g.partition, g.file_id) not in replaced]


def changes(commits: Iterable[LoadedCommit], since: str | None, until: str | None = None) -> Changes:
    """The newest version in ``(since, until]`` of each file group the commits in that range
    wrote, and the file groups they replaced (see the module doc). Pure."""
    for t in (since, until):
        if t is not None:
            check_instant(t)
    out = Changes(since=since, until=until)
    written: list[FileVersion] = []
    for c in _sorted(commits):
        if _in_range(c.instant.time, since, until):
            out.instants.append(c.instant)
            label = c.metadata.extra_metadata.get("amcommit.label")  # labels.EXTRA_LABEL
            if label is not None:
                out.labels[c.instant.time] = label
            written.extend(c.added())
            out.logs.extend(c.logs())
            out.replaced.extend(c.replaced())
    newest: dict[tuple[str, str], FileVersion] = {}
    for f in written:  # timeline order: a later version of a group wins
        newest[(f.partition, f.file_id)] = f
    for f in written:
        (out.added if newest[(f.partition, f.file_id)] is f else out.superseded).append(f)
    return out


def instants_of(names: Sequence[str]) -> list[Instant]:
    """The instants among file names of ``.hoodie/`` (other names ignored), sorted."""
    found = [i for i in (parse_instant_file(n) for n in names) if i is not None]
    found.sort()
    return found


async def list_instants(store: Store, dest: str) -> list[Instant]:
    """Every instant in ``dest``'s timeline (all actions and states), sorted by time."""
    names = [basename(o.path) async for o in store.list(join(dest, HOODIE_DIR), recursive=False)]
    return instants_of(names)


async def load_timeline(store: Store, dest: str) -> tuple[list[Instant], list[LoadedCommit]]:
    """All instants, and the completed write instants with their metadata.

    Reads every completed commit; fine for hundreds of instants. A reader of a long timeline
    should read only the instants of the range it needs (:func:`list_instants` first).
    """
    instants = await list_instants(store, dest)
    commits: list[LoadedCommit] = []
    for i in instants:
        if i.completed and i.action in WRITE_ACTIONS:
            path = join(dest, HOODIE_DIR, i.file_name)
            meta = decode_commit_metadata(await store.get(path), where=path)
            commits.append(LoadedCommit(i, meta))
    return instants, commits


async def completed_instant(store: Store, dest: str, instant: str) -> Instant | None:
    """The completed write instant at time ``instant``, if there is one (the three possible
    names, commit, replacecommit and deltacommit, are looked up at the same time: one round trip)."""
    found: list[Instant] = []

    async def look(action: Action) -> None:
        i = Instant(instant, action.value, State.COMPLETED)
        try:
            await store.stat(join(dest, HOODIE_DIR, i.file_name))
            found.append(i)
        except NotFound:
            pass

    await run_parallel((Action.COMMIT, Action.REPLACE_COMMIT, Action.DELTA_COMMIT), look, 3)
    return min(found) if found else None


async def create_once(store: Store, path: str, data: bytes) -> bool:
    """Create the instant file ``path`` (create-only); False if it exists already (an earlier
    run's, or our own whose answer was lost and was retried). The content of an existing file
    is not compared: callers whose file may be another writer's check it themselves."""
    try:
        await store.put(path, data, mode=PutMode.CREATE)
    except AlreadyExists:
        return False
    return True
