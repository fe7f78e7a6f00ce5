"""Table writes that copy nothing (issue 26): base files written in place under Hudi's
direct write markers; the job commit reconciles against the markers, then publishes.

Status: the default of every table write (``table_commit=direct``,
:class:`~amcommit.table.settings.TableSettings`): the Spark task side
(:func:`amcommit.spark.task.run_task`: batch writes, the streaming sink, ``foreachBatch``),
the engine's table tasks (:func:`amcommit.table.write.task.setup_table_task`) and upserts and
deletes (engine and Spark) write through :func:`write_in_place` and commit their tasks with
:func:`commit_direct_task`; the job commit (:class:`~amcommit.table.commit.table_commit.TablePlan`)
and the rollback (:func:`~amcommit.table.commit.undo.rollback_table_write`) recognise a direct write
by its manifests (a write mixing both ways is refused: :func:`check_one_mode`). The staged
path (files staged in the write's job directory and renamed at job commit) stays as
``table_commit=staged``, for readers that list files without the timeline. amcommit's own
job directory of every table write is ``.hoodie/.aux/amcommit/<instant>/``
(:func:`~amcommit.table.write.staging.table_layout`), never the marker folder: Hudi's
``MarkerBasedRollbackStrategy`` reads *every* file under ``.hoodie/.temp/<instant>/`` as a
marker and fails on any other.

Design (as Hudi's own Spark writer does it, ``WriteMarkers`` / ``DirectWriteMarkers``)
------------------------------------------------------------------------------------
Markers are Hudi's *timeline-server-based* markers (issue 35 item 2: markers that cost
O(task attempts), not O(files)), written as Hudi's timeline server writes them, so Hudi's own
rollback (``MarkerBasedRollbackStrategy``, which reads ``MARKERS.type``) finds our files::

    .hoodie/.temp/<instant>/MARKERS.type     TIMELINE_SERVER_BASED (no newline)
    .hoodie/.temp/<instant>/MARKERS<n>       one per task attempt, a line per file:
        <partition>/<fileId>_<writeToken>_<instant>.parquet.marker.CREATE

(:class:`AttemptMarkers`: the attempt rewrites its whole file before each upload, or each
batch of concurrent uploads, so a crash leaves every file it may have written named.)
The previous version's *direct* markers, one empty file per base file
(``.hoodie/.temp/<instant>/<partition>/<file>.marker.CREATE``), are still read by every
step here (a write begun by that version and committed, resumed or rolled back by this
one); Hudi itself reads only the ``MARKERS<n>`` files of a folder with ``MARKERS.type``, so
a Hudi rollback of such a mixed write misses the older attempts' files (amcommit's own
rollback does not; the next ``clean`` removes them as orphans).

(``MERGE`` for a base file that rewrites a file group, i.e. upserts; ``APPEND`` is Hudi's
log-file marker of Merge-on-Read tables: amcommit's deltacommits write each log file whole,
named with a write token holding their instant, and only such a file of the marker's own
instant is ever deleted by a reconcile or rollback; one Hudi appended to never is.)

1. **Task** (:func:`write_in_place`): rewrite the attempt's marker file, then upload
   the file straight to its final name ``<partition>/<fileId>_<writeToken>_<instant>.parquet``
   (the write token names the attempt, so two attempts never share a name), then check the
   instant (:func:`instant_state`): if it is no longer pending (completed, or rolled back)
   the upload finished after the job was decided, so the file is no winner's: the attempt
   deletes it, then drops its marker (a zombie removes its own file). Readers ignore the file meanwhile: it is
   stamped with an instant that is not completed (measured with hudi-rs: uncommitted files
   stamped at or after the first active instant are hidden; before it they would show).
2. **Job commit**: :func:`marked_files` lists ``.hoodie/.temp/<instant>/`` once (never the
   table) and gives every base file an attempt may have created; :func:`reconcile` deletes
   those not in the winning manifests (``markers - winners``, :func:`losers`); then the
   table commit's usual steps (order check, label check, plan, partition metadata, publish);
   then the journal, heartbeat and job directory are removed and the lock released. The
   markers are removed **after the lock is released** (as Hudi deletes its marker folder
   after the commit), by the writer's ``commit_job``
   (:meth:`~amcommit.table.commit.kind.TableKind.guard`, through :func:`sweep_late_markers`):
   one fresh listing of the marker folder and read of its ``MARKERS<n>`` files (a zombie
   may have added markers since the reconcile), the files of markers no winner names
   deleted (uploads landed since the reconcile), then every listed marker file by name
   (:func:`judge_markers`: batch deletes on Azure Blob, one delete per marker file (per
   task attempt, and ``MARKERS.type``) on GCS, local files and ADLS Gen2, then the emptied
   folders by non-recursive deletes on stores with directories), except a loser's marker
   whose file was not found and that is younger than ``grace`` = ``writer_ttl``: its
   upload may still land. The folder is never deleted recursively: a marker created after
   the listing stays for the next sweep. A commit the engine completes for another (an
   abort past the point of no return, a later writer finishing a dead one) removes the
   markers itself right after the publish. Mutating requests on local files
   (``tests/table/test_staging_layout.py``, 2 task attempts): the job commit 23 for 20
   and for 200 files (reconcile's loser deletes, partition metadata, journal, publish,
   cleanup of the job directory, lock), then the marker removal 4 for both (one per
   attempt's marker file, ``MARKERS.type``, the instant's folder; 31 and 211 with the
   previous version's per-file markers). Reads: each of the three passes (check,
   reconcile, removal) lists the folder once and reads one file per attempt.
3. **Rollback** (:func:`rollback_from_markers`): every marked base file, then its marker;
   without markers (the marker folder gone), the caller lists the partitions
   (:func:`~amcommit.table.commit.undo.remove_stamped`).
4. **Late markers** (:func:`sweep_late_markers`; after every table commit, in every
   clean, :func:`amcommit.table.commit.clean.clean`, and every ``amcommit rollback``,
   :func:`amcommit.table.commit.rollback.rollback_instant`, each with ``grace`` = ``writer_ttl``;
   the rollback of a dead writer by a later commit is followed by that commit's sweep):
   the marker folder of an instant that completed, or whose write is gone (no job marker
   ``_job.json``), still holding markers, was written to by a zombie after the decision
   (or its marker removal was cut short): its non-winning files are deleted, then its
   markers. A marker whose file was not (yet) found is kept until it is older than
   ``grace`` seconds: its upload may still land; it is removed after that. A pending
   write's folder is never listed (its instant and job marker are looked at first), nor
   that of another writer's instant still requested or inflight on the timeline
   (:func:`pending_on_timeline`: Hudi's writer, or a write whose staging was lost; only a
   rollback of it deletes its files, :mod:`amcommit.table.commit.orphans`).

**Markers are input** (:func:`marker_problem`), judged as task manifests are: a CREATE or
MERGE marker may name only a base file stamped with its folder's instant, in a partition
folder exactly as deep as the table's partition fields, none hidden or starting with
``_``. The commit refuses a write with any other marker before anything is planned,
deleted or published (:func:`check_markers`, CommitError, one line; the write stays
pending for its abort). Every other step (reconcile, the marker removal, the sweeps, a
rollback) leaves such a marker's file alone, removes the marker itself, and says so in one
WARNING line: no step deletes a file outside the write's own.

What is atomic: nothing here is atomic as a whole; each step is one idempotent request per
path, and every step can be repeated after a crash.

The window that remains (measured on local files by
``tests/table/test_staging_layout.py::test_zombie_after_commit_gone_after_next_commit_clean_or_rollback``):
a zombie attempt (still running after the job was decided) whose upload lands after the
commit's :func:`reconcile` is visible to hudi-rs's snapshot reads (pitfall 3; never to
amcommit's reader, which reads the commit's file list) from the publish until its own
check deletes it (one request after its upload), or, after the lock is released, the
commit's marker removal does. One whose upload lands after that listing *and* that dies
before its own check stays visible until the next commit, clean or ``amcommit rollback``
(of another, pending instant) sweeps its marker (kept by the first because its file was not there yet and
it was younger than ``writer_ttl``): the sweep itself took 8 ms (clean) to 30 ms
(rollback) on local files; the window is the time to the next of these operations. A
zombie that writes its marker only after that sweep is caught by the following one. What
no sweep can catch: a zombie whose marker is older than ``writer_ttl`` when its upload
lands (an upload that takes longer than ``writer_ttl`` after its marker): that file is an
orphan, which the next ``clean`` removes once it is older than ``writer_ttl``
(:mod:`amcommit.table.commit.orphans`).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import anyio

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.errors import AlreadyExists, AmcommitError, CommitError, NotFound, StoreError
from amcommit.manifest import (
    TASK_MANIFEST_TYPE,
    TASK_MANIFEST_VERSION,
    FileEntry,
    TaskManifest,
    encode_json,
)
from amcommit.parallel import run_parallel
from amcommit.paths import basename, is_within, join, parent, path_to_uri, relative_to
from amcommit.store.base import ObjectInfo, PutMode, Store, batch_deleter
from amcommit.store.names import shorten
from amcommit.store.retry import RetryingStore
from amcommit.table.format.model import Instant, decode_commit_metadata
from amcommit.table.format.naming import (
    HOODIE_DIR,
    PROPERTIES_FILE,
    TEMP_DIR,
    foreign_file,
    is_instant,
    own_log_file,
    parse_base_file_name,
    parse_log_file_name,
)
from amcommit.table.format.writestats import STATS_KEY, MutationFields, task_write_stats
from amcommit.table.timeline.instants import completed_instant

__all__ = [
    "COMMIT_KEY",
    "DIRECT",
    "MARKERS_PREFIX",
    "MARKER_INFIX",
    "MARKER_TYPE_FILE",
    "TIMELINE_SERVER_BASED",
    "AttemptMarkers",
    "IOType",
    "Marker",
    "Published",
    "attempt_markers_name",
    "check_markers",
    "commit_direct_task",
    "create_marker",
    "decode_markers",
    "encode_markers",
    "instant_state",
    "is_direct",
    "judge_markers",
    "losers",
    "marked_files",
    "marker_dir",
    "marker_name",
    "marker_problem",
    "markers_file",
    "parse_marker",
    "pending_on_timeline",
    "reconcile",
    "remove_markers",
    "rollback_from_markers",
    "sweep_after",
    "sweep_instant",
    "sweep_late_markers",
    "write_in_place",
]

log = logging.getLogger("amcommit.table.write.direct")

MARKER_INFIX = ".marker."
"""Hudi's ``HoodieTableMetaClient.MARKER_EXTN``: ``<data file name>.marker.<IOType>``."""

MARKERS_PREFIX = "MARKERS"
"""Hudi's ``MarkerUtils.MARKERS_FILENAME_PREFIX``: a file of the marker folder (top level)
whose name starts so, other than :data:`MARKER_TYPE_FILE`, holds markers, one a line."""
MARKER_TYPE_FILE = "MARKERS.type"
"""Hudi's ``MarkerUtils.MARKER_TYPE_FILENAME``: names the folder's marker type."""
TIMELINE_SERVER_BASED = "TIMELINE_SERVER_BASED"
"""The content of :data:`MARKER_TYPE_FILE` (Hudi's ``MarkerType`` name, no newline): Hudi's
rollback then reads the markers from the ``MARKERS<n>`` files only."""

COMMIT_KEY = "amcommit.tableCommit"
"""The manifest ``extra_data`` key naming how the task wrote its files: :data:`DIRECT`
(written in place under markers) or absent (staged in the attempt directory)."""
DIRECT = "direct"


class IOType(StrEnum):
    """Hudi's ``IOType`` of a marker: what the write did to the file it names."""

    CREATE = "CREATE"
    MERGE = "MERGE"
    APPEND = "APPEND"


# ---------------------------------------------------------------- pure: names and planning


def marker_dir(dest: str, instant: str) -> str:
    """The marker folder of ``instant``: ``.hoodie/.temp/<instant>`` (Hudi's
    ``getMarkerFolderPath``; the staged path's job directory is the same folder)."""
    return join(dest, TEMP_DIR, instant)


def marker_name(rel_path: str, io_type: IOType) -> str:
    """The marker of base file ``rel_path`` (relative to the table), relative to the marker
    folder: ``<partition>/<file name>.marker.<IOType>``."""
    return f"{rel_path}{MARKER_INFIX}{io_type.value}"


def parse_marker(rel_marker: str) -> tuple[str, IOType] | None:
    """``(base file path relative to the table, IOType)`` of a marker named relative to its
    marker folder; None for any other file found there (the staged path's ``_job.json``,
    journal, manifests...)."""
    head, sep, kind = rel_marker.rpartition(MARKER_INFIX)
    if not sep or not head or "/" in kind:
        return None
    try:
        io = IOType(kind)
    except ValueError:
        return None
    return head, io


def markers_file(name: str) -> bool:
    """True for a marker folder's file (top level) that Hudi reads as a ``MARKERS<n>`` file
    of timeline-server markers: its name starts with ``MARKERS`` and is not
    ``MARKERS.type`` (``MarkerUtils.readTimelineServerBasedMarkersFromFileSystem``). Pure."""
    return name.startswith(MARKERS_PREFIX) and name != MARKER_TYPE_FILE


def attempt_markers_name(attempt_id: str) -> str:
    """The ``MARKERS<n>`` file name task attempt ``attempt_id`` tries first: ``n`` its
    CRC-32, 31 bits (Hudi parses ``n`` as a Java int; :class:`AttemptMarkers` takes the next
    free one if that name exists already). Pure."""
    return f"{MARKERS_PREFIX}{zlib.crc32(attempt_id.encode()) & 0x7FFFFFFF}"


def encode_markers(lines: Iterable[str]) -> bytes:
    """A ``MARKERS<n>`` file holding ``lines`` (markers named relative to the marker folder,
    :func:`marker_name`): each followed by a newline, sorted, UTF-8 (as Hudi's
    ``MarkerDirState`` writes them). Pure."""
    return "".join(f"{line}\n" for line in sorted(set(lines))).encode()


def decode_markers(data: bytes) -> list[str]:
    """The lines of a ``MARKERS<n>`` file (empty ones skipped, as Hudi's line reader yields
    no trailing one); bytes that are not UTF-8 become U+FFFD (such a line then names no
    marker). Pure."""
    return [line for line in data.decode("utf-8", errors="replace").splitlines() if line]


def marker_problem(rel: str, io: IOType, instant: str, depth: int | None) -> str | None:
    """Why the marker of ``instant`` naming ``rel`` (relative to the table) must not get
    that file deleted; None if it may. Markers are input (anyone who can write the table
    can write one), judged as task manifests are (:func:`~amcommit.table.format.naming.foreign_file`):
    a CREATE or MERGE marker may name only a base file stamped with its own folder's
    ``instant``, in a partition folder exactly ``depth`` deep (the table's partition
    fields; None: unknown, then none may), no folder hidden or starting with ``_`` (so
    nothing in ``.hoodie/``, nothing above the table). An APPEND marker (Merge-on-Read log
    files) deletes nothing, always None, unless it names a log file this write created
    whole (:func:`~amcommit.table.format.naming.own_log_file`): that must then be in a
    partition folder exactly ``depth`` deep. Pure."""
    if io is IOType.APPEND and not own_log_file(basename(rel), instant):
        return None  # Hudi's appended log file: never deleted, so never refused
    if depth is None:
        return "the table's partition fields are unknown (no readable hoodie.properties)"
    bad = foreign_file([rel], (), instant, depth, logs=io is IOType.APPEND)
    return None if bad is None else bad[1]


def deletes(rel: str, io: IOType, instant: str) -> bool:
    """True if the (trusted) marker of ``instant`` naming ``rel`` gets that file deleted when
    it is no winner's or the write is rolled back: a CREATE or MERGE marker's base file,
    and an APPEND marker's log file only if this write created it whole
    (:func:`~amcommit.table.format.naming.own_log_file`: amcommit's deltacommits); a log
    file Hudi appended to is never deleted. Pure."""
    return io is not IOType.APPEND or own_log_file(basename(rel), instant)


Marker = tuple[ObjectInfo, str, IOType]
"""A listed marker: its listing, the base file it names (relative to the table), its IOType."""

Untrusted = tuple[ObjectInfo, str, str]
"""A marker whose file must not be deleted: its listing, what it names, why not."""


def split_markers(
    markers: Sequence[Marker], instant: str, depth: int | None
) -> tuple[list[Marker], list[Untrusted]]:
    """``(trusted, untrusted)`` markers of ``instant`` (:func:`marker_problem`). Pure."""
    good: list[Marker] = []
    bad: list[Untrusted] = []
    for m in markers:
        why = marker_problem(m[1], m[2], instant, depth)
        if why is None:
            good.append(m)
        else:
            bad.append((m[0], m[1], why))
    return good, bad


def untrusted_line(dest: str, instant: str, bad: Sequence[Untrusted]) -> str:
    """One line naming the first untrusted marker of ``instant`` (and how many there are)."""
    info, rel, why = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    where = relative_to(info.path, dest) if is_within(info.path, dest) else info.path
    return f"marker {shorten(where)} names {shorten(rel)}, not a file write {instant} may delete: {why}{more}"


def losers(marked: Iterable[str], winners: Iterable[str]) -> list[str]:
    """The marked base files (relative to the table) that no winning manifest names:
    the files to delete before publishing (sorted)."""
    return sorted(set(marked) - set(winners))


def is_direct(extra_data: Iterable[dict[str, str]]) -> bool:
    """True if any of the manifests (their ``extra_data``) wrote its files in place. A write
    is direct or staged as a whole: one writer chooses for all its tasks."""
    return any(x.get(COMMIT_KEY) == DIRECT for x in extra_data)


def check_one_mode(extra_data: Sequence[dict[str, str]], instant: str) -> None:
    """CommitError (one line) if some of a write's manifests wrote their files in place and
    others staged them: the job commit would rename the staged ones only if it took the
    write as staged, and reconcile the others only if it took it as direct; either way
    files named by the published instant would be missing. Nothing is changed; the write
    stays pending for an abort."""
    modes = {x.get(COMMIT_KEY) == DIRECT for x in extra_data}
    if len(modes) > 1:
        raise CommitError(
            f"write {instant} mixes tasks that wrote their files in place (table_commit=direct) "
            "with tasks that staged them: one writer's tasks must use one table_commit; abort it "
            "(`amcommit abort-job`) and run it again",
            stage="load_manifests",
        )


def direct_manifest(
    root_uri: str,
    layout: JobLayout,
    task_id: str,
    task_attempt_id: str,
    files: Sequence[tuple[str, int, str | None, int]],
    *,
    mutations: Mapping[str, MutationFields] | None = None,
) -> TaskManifest:
    """The manifest of a task attempt that wrote ``files`` in place: (path relative to the
    table, size, etag, rows) each; ``mutations``: a record-level write's own write stat
    fields by the same path (:data:`~amcommit.table.format.writestats.MUTATIONS_KEY`). Pure.

    Each file is listed as today (destination = its base file, size, etag, write stats with
    its row count); its *source* is the name it would have had in the attempt directory,
    which never exists: the engine's manifest check requires sources there, and nothing
    renames a direct write's files (the table commit skips the renames; a rollback never
    undoes renames of a direct write)."""
    work = layout.task_attempt_dir(task_attempt_id)
    entries = [
        FileEntry(
            path_to_uri(root_uri, join(work, rel)), path_to_uri(root_uri, join(layout.dest, rel)), size, etag
        )
        for rel, size, etag, _ in sorted(files)
    ]
    stats = task_write_stats(
        ((rel, size) for rel, size, _, _ in files),
        {rel: n for rel, _, _, n in files},
        dict(mutations) if mutations else None,
    )
    return TaskManifest(
        type=TASK_MANIFEST_TYPE,
        version=TASK_MANIFEST_VERSION,
        job_id=layout.job_id,
        job_attempt_number=layout.job_attempt,
        task_id=task_id,
        task_attempt_id=task_attempt_id,
        task_attempt_dir=path_to_uri(root_uri, work),
        files=entries,
        directories=[],
        extra_data={COMMIT_KEY: DIRECT, STATS_KEY: stats},
    )


# ---------------------------------------------------------------- I/O


async def create_marker(
    store: Store, dest: str, instant: str, rel_path: str, io_type: IOType, config: CommitterConfig
) -> str:
    """Create the marker of ``rel_path`` (an empty object; create-only, and one found there
    already is ours: a repeated call is a no-op). Returns its store path."""
    path = join(marker_dir(dest, instant), marker_name(rel_path, io_type))
    try:
        await RetryingStore.of(store, config).put(path, b"", mode=PutMode.CREATE)
    except AlreadyExists:
        pass
    return path


@dataclass(eq=False)
class AttemptMarkers:
    """The markers of one task attempt of ``instant``: one ``MARKERS<n>`` file in the marker
    folder (Hudi's timeline-server-based format, read by Hudi's rollback through
    ``MARKERS.type``), holding a line for every file the attempt may have written.

    :meth:`mark` adds a file's marker and rewrites the attempt's file (one whole-object
    put) before the caller uploads the file: a crash at any point leaves every file the
    attempt may have written named. Marks of uploads running at the same time share one
    rewrite (the first waiting one writes all of them). The first write of an attempt
    creates ``MARKERS.type`` (create-only; one there already is fine) and then its file
    by a create-only put at ``MARKERS<n>``, ``n`` from the attempt id (CRC-32, 31 bits;
    the next free ``n`` if that one exists: an attempt never writes over another's file);
    later writes overwrite only its own file. Cost: one request per rewrite (per upload,
    or per batch of concurrent uploads) plus two for the first; the job commit reads,
    and deletes, one file per attempt.

    What is atomic: each rewrite is one whole-object put (a reader sees the old or the
    new list, never a part); the lines only grow until :meth:`unmark` (a zombie removing
    its own file again)."""

    store: Store
    dest: str
    instant: str
    attempt_id: str
    config: CommitterConfig = DEFAULT_CONFIG
    _lines: set[str] = field(default_factory=set)
    _written: frozenset[str] = frozenset()
    _path: str | None = None
    _lock: anyio.Lock = field(default_factory=anyio.Lock)
    _arrivals: int = 0
    _covered: int = 0
    _stays: bool = True
    _check_lock: anyio.Lock = field(default_factory=anyio.Lock)
    _typed: bool = False

    async def prepare(self) -> None:
        """Create the folder's ``MARKERS.type`` now (create-only; one there already is fine),
        so that the first :meth:`mark` writes only the attempt's file. A kill after it leaves
        ``MARKERS.type`` alone: the state an attempt killed between its first two puts left
        before, which a rollback or sweep removes with the folder."""
        rs = RetryingStore.of(self.store, self.config)
        try:
            await rs.put(
                join(marker_dir(self.dest, self.instant), MARKER_TYPE_FILE),
                TIMELINE_SERVER_BASED.encode(),
                mode=PutMode.CREATE,
            )
        except AlreadyExists:
            pass
        self._typed = True

    @property
    def path(self) -> str | None:
        """The attempt's ``MARKERS<n>`` file, once written."""
        return self._path

    def lines(self) -> frozenset[str]:
        """The markers the attempt's file holds (as last written)."""
        return self._written

    async def mark(self, rel_path: str, io_type: IOType) -> str:
        """Name base (or log) file ``rel_path`` in the attempt's marker file, written before
        this returns. Returns the file's store path."""
        line = marker_name(rel_path, io_type)
        self._lines.add(line)
        async with self._lock:
            if line not in self._written:
                await self._write(frozenset(self._lines))
        assert self._path is not None
        return self._path

    async def stays(self) -> bool:
        """:func:`upload_stays` for an upload of this attempt that has finished: the answer
        of a check *started after* the caller's upload finished, shared by the uploads that
        finished while one check was under way (the first waiting one checks for all of
        them: one request per batch of concurrent uploads, not one per upload). A check
        that started after an upload finished is all the upload's check needs (the
        write's job marker, looked for after the file is there: :func:`write_in_place`)."""
        self._arrivals += 1
        mine = self._arrivals
        async with self._check_lock:
            if self._covered >= mine:  # a check started after this upload finished: its answer
                return self._stays
            covered = self._arrivals  # every upload finished so far: the check below is after each
            stays = await upload_stays(self.store, self.dest, self.instant)
            self._covered, self._stays = covered, stays
            return stays

    async def unmark(self, rel_path: str, io_type: IOType) -> None:
        """Drop ``rel_path``'s marker again (the write was decided and this attempt deleted
        its file again): the attempt's file rewritten without it, or, when it names nothing
        more, deleted (``MARKERS.type`` stays: other attempts' kept files may need it; a
        sweep removes it with the folder's last marker file)."""
        self._lines.discard(marker_name(rel_path, io_type))
        async with self._lock:
            if self._path is None or self._written == self._lines:
                return
            if self._lines:
                await self._write(frozenset(self._lines))
            else:
                await RetryingStore.of(self.store, self.config).delete(self._path)
                self._written = frozenset()

    async def _write(self, lines: frozenset[str]) -> None:
        rs = RetryingStore.of(self.store, self.config)
        data = encode_markers(lines)
        if self._path is not None:
            await rs.put(self._path, data, mode=PutMode.OVERWRITE)
            self._written = lines
            return
        folder = marker_dir(self.dest, self.instant)
        if not self._typed:  # before any MARKERS<n> file: Hudi reads the folder's files by it
            await self.prepare()
        n = int(attempt_markers_name(self.attempt_id).removeprefix(MARKERS_PREFIX))
        while True:
            path = join(folder, f"{MARKERS_PREFIX}{n}")
            try:
                await rs.put(path, data, mode=PutMode.CREATE)
            except AlreadyExists:  # another attempt's (or our own, its answer lost: a copy that stays)
                n = (n + 1) & 0x7FFFFFFF
                continue
            self._path, self._written = path, lines
            return


async def instant_state(store: Store, dest: str, instant: str) -> str:
    """``"completed"``, ``"pending"`` (the write's job marker is there, in its staging
    folder ``.hoodie/.aux/amcommit/<instant>/`` or an earlier version's, its instant not
    completed) or ``"gone"`` (rolled back, skipped, or never begun). Checked in that order:
    a commit completes its instant before it removes the job marker, a rollback removes the
    job marker before the instant files.

    The first look for the completed instant and the look for the job marker are made at
    the same time (one round trip, not two). Each answer is as sound as before: a completed
    instant found is completed; "gone" still needs a look for the completed instant made
    after the job marker was found missing (below), so a commit that completed and removed
    its job marker meanwhile is seen; "pending" (marker found, no completed instant) was
    only ever true as of the looks, in either order."""
    from amcommit.table.write.staging import find_table_layout

    done: Instant | None = None
    layout: JobLayout | None = None
    failed: list[StoreError] = []

    async def completed() -> None:
        nonlocal done
        done = await completed_instant(store, dest, instant)

    async def staged() -> None:
        nonlocal layout
        try:
            layout = await find_table_layout(store, dest, instant)
        except StoreError as e:  # judged below: unused when the instant is completed
            failed.append(e)

    await run_parallel([completed, staged], lambda step: step(), 2)
    if done is not None:
        return "completed"
    if failed:
        raise failed[0]
    if layout is None:
        # a commit may have completed between the two looks
        return "completed" if await completed_instant(store, dest, instant) is not None else "gone"
    return "pending"


async def upload_stays(store: Store, dest: str, instant: str) -> bool:
    """The check a task attempt makes after each upload (:func:`write_in_place`; the Spark
    task side): True while the write's job marker is there (one request that finds an
    object: the common case; :func:`instant_state` makes two more, of objects that do not
    exist yet, which on GCS cost a listing each). False once the write was decided and its
    job directory removed: the attempt deletes its upload. An upload that lands between the
    publish and the removal of the job marker stays; the writer's commit lists the markers
    after that removal (:func:`sweep_instant` after the lock) and deletes it there, and a
    later commit, clean or rollback does when the write was completed by another (module
    doc: the window that remains)."""
    from amcommit.table.write.staging import find_table_layout

    return await find_table_layout(store, dest, instant) is not None


async def write_in_place(
    store: Store,
    dest: str,
    instant: str,
    rel_path: str,
    data: bytes,
    *,
    io_type: IOType = IOType.CREATE,
    config: CommitterConfig = DEFAULT_CONFIG,
    markers: AttemptMarkers | None = None,
) -> ObjectInfo | None:
    """A task attempt's upload of base file ``rel_path`` (relative to the table; its name
    carries the instant and the attempt's write token): marker first (the attempt's
    ``markers`` file rewritten, :meth:`AttemptMarkers.mark`; None: a marker file of this
    upload alone), then the file at its final name, then the instant is checked. Returns
    the file's listing, or None if the write was decided meanwhile (the file is then
    deleted again, then its marker: a late attempt's upload never stays). Not atomic: a
    crash between the steps leaves a marker (and maybe the file) that the job commit's
    reconcile or a rollback removes."""
    if io_type is IOType.APPEND:  # a Merge-on-Read log file: its name carries the base instant
        if parse_log_file_name(basename(rel_path)) is None:
            raise ValueError(f"{rel_path!r} is not a log file name")
    else:
        parsed = parse_base_file_name(basename(rel_path))
        if parsed is None or parsed.instant != instant:
            raise ValueError(f"{rel_path!r} is not a base file of instant {instant}")
    rs = RetryingStore.of(store, config)
    shared = markers is not None  # the attempt's uploads share their checks (AttemptMarkers.stays)
    if markers is None:
        markers = AttemptMarkers(store, dest, instant, rel_path, config)
    await markers.mark(rel_path, io_type)
    path = join(dest, rel_path)
    if io_type is IOType.APPEND:
        # never over another file: a log file found there is kept unless it is this very
        # upload (a retried put whose answer was lost)
        try:
            info = await rs.put(path, data, mode=PutMode.CREATE)
        except AlreadyExists:
            if await rs.get(path) != data:
                raise CommitError(
                    f"log file {rel_path!r} exists already and is not this write's: nothing was replaced",
                    stage="write_task",
                ) from None
            info = await rs.stat(path)
    else:
        info = await rs.put(path, data, mode=PutMode.OVERWRITE)
    if not await (markers.stays() if shared else upload_stays(store, dest, instant)):
        # the file first: a crash between the two leaves a marker without a file, which a
        # sweep removes once it is older than its grace
        await rs.delete(path)
        await markers.unmark(rel_path, io_type)
        return None
    return info


async def commit_direct_task(
    store: Store,
    layout: JobLayout,
    task_id: str,
    task_attempt_id: str,
    files: Sequence[tuple[str, int, str | None, int]],
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    mutations: Mapping[str, MutationFields] | None = None,
) -> TaskManifest:
    """Commit a task attempt that wrote ``files`` in place (:func:`write_in_place`; (path
    relative to the table, size, etag, rows) each; ``mutations`` as for
    :func:`direct_manifest`, an upsert's or delete's): publish its manifest
    (:func:`direct_manifest`) at ``$taskId-manifest.json`` by one overwriting put (atomic
    on every store: the last attempt to commit wins, as for staged tasks). Refused
    (CommitError) once the write is no longer pending: a late attempt publishes nothing."""
    from amcommit.table.write.staging import TABLE_TASKS

    await TABLE_TASKS.task_started(store, layout, config)
    for rel, _, _, _ in files:
        if mutations and rel in mutations and mutations[rel].log_version is not None:
            if parse_log_file_name(basename(rel)) is not None:
                continue  # a Merge-on-Read log file (marked APPEND)
        parsed = parse_base_file_name(basename(rel))
        if parsed is None or parsed.instant != layout.job_id:
            raise CommitError(f"{rel!r} is not a base file of instant {layout.job_id}", stage="commit_task")
    manifest = direct_manifest(store.root_uri, layout, task_id, task_attempt_id, files, mutations=mutations)
    if await instant_state(store, layout.dest, layout.job_id) != "pending":
        raise CommitError(
            f"table write {layout.job_id} is no longer pending: task attempt {task_attempt_id} "
            "publishes nothing",
            stage="commit_task",
        )
    data = encode_json(manifest)
    path = layout.manifest_path(task_id)
    await RetryingStore.of(store, config).put(path, data, mode=PutMode.OVERWRITE)
    return manifest


@dataclass
class _Listed:
    """What one listing of a marker folder found (:func:`_list_markers`)."""

    markers: list[Marker] = field(default_factory=list)
    bad: list[Untrusted] = field(default_factory=list)
    """Lines of ``MARKERS<n>`` files that name no marker."""
    empty: list[ObjectInfo] = field(default_factory=list)
    """``MARKERS.type`` and ``MARKERS<n>`` files without a line: nothing to judge, removed
    with the markers."""


async def _list_markers(store: Store, dest: str, instant: str, config: CommitterConfig) -> _Listed:
    """The markers of ``instant``: one recursive listing of its marker folder, then every
    ``MARKERS<n>`` file found at its top level read (one request each, ``io_threads`` at a
    time; one gone meanwhile is skipped): each line a marker held by that file. Per-file
    (direct) markers, the previous version's (and Hudi's ``DIRECT`` ones), are read from
    their names as before, so a folder holding both kinds is read whole."""
    folder = marker_dir(dest, instant)
    out = _Listed()
    holders: list[ObjectInfo] = []
    try:
        async for info in store.list(folder, recursive=True):
            if info.is_dir:
                continue
            rel = relative_to(info.path, folder)
            if rel == MARKER_TYPE_FILE:
                out.empty.append(info)
            elif "/" not in rel and markers_file(rel):
                holders.append(info)
            else:
                parsed = parse_marker(rel)
                if parsed is not None:
                    out.markers.append((info, parsed[0], parsed[1]))
    except NotFound:
        pass
    rs = RetryingStore.of(store, config)

    async def read(info: ObjectInfo) -> None:
        try:
            data = await rs.get(info.path)
        except NotFound:
            return
        lines = decode_markers(data)
        if not lines:
            out.empty.append(info)
        for line in lines:
            parsed = parse_marker(line)
            if parsed is None:
                out.bad.append((info, line, "not a marker (<partition>/<file name>.marker.<IOType>)"))
            else:
                out.markers.append((info, parsed[0], parsed[1]))

    await run_parallel(holders, read, config.io_threads)
    return out


async def _table_depth(store: Store, dest: str, config: CommitterConfig) -> int | None:
    """The number of the table's partition fields (one read of ``hoodie.properties``);
    None if it cannot be read (then no marker is trusted)."""
    from amcommit.table.format.properties import decode_properties

    path = join(dest, PROPERTIES_FILE)
    try:
        data = await RetryingStore.of(store, config).get(path)
        return len(decode_properties(data, where=path).partition_fields)
    except (StoreError, ValueError):
        return None


async def _judged_markers(
    store: Store,
    dest: str,
    instant: str,
    config: CommitterConfig,
    *,
    what: str | None,
    depth: int | None = None,
) -> tuple[list[Marker], list[Untrusted], list[ObjectInfo]]:
    """The markers of ``instant`` (:func:`_list_markers`), split into trusted and untrusted
    (:func:`marker_problem`, and lines of ``MARKERS<n>`` files naming no marker;
    ``depth``: the table's partition field count, else one read of ``hoodie.properties``
    if there are markers), and the marker folder's files that hold no marker. Untrusted
    ones are logged (WARNING, one line) as left alone by ``what``, unless it is None."""
    listed = await _list_markers(store, dest, instant, config)
    markers = listed.markers
    if not markers and not listed.bad:
        return [], [], listed.empty
    if depth is None and any(deletes(m[1], m[2], instant) for m in markers):
        depth = await _table_depth(store, dest, config)
    good, bad = split_markers(markers, instant, depth)
    bad = listed.bad + bad
    if bad and what is not None:
        log.warning("%s left its file alone: %s", what, untrusted_line(dest, instant, bad))
    return good, bad, listed.empty


async def check_markers(
    store: Store,
    dest: str,
    instant: str,
    config: CommitterConfig = DEFAULT_CONFIG,
    *,
    depth: int | None = None,
) -> list[Marker]:
    """CommitError (one line naming the first bad marker) if a marker of ``instant`` names
    a file the write may not delete (:func:`marker_problem`): the commit of a direct write
    checks its markers so before anything is planned, reconciled or published (one
    listing of the marker folder). Nothing is changed; the write stays pending, and its
    abort (``amcommit abort-job``) removes the write's own files only. Returns the trusted
    markers listed (for :func:`reconcile` ``checked``)."""
    good, bad, _ = await _judged_markers(store, dest, instant, config, what=None, depth=depth)
    if bad:
        raise CommitError(
            f"table write {instant} refused: {untrusted_line(dest, instant, bad)}; nothing was deleted "
            "or published (abort it with `amcommit abort-job`: that removes the write's own files only)",
            stage="check_markers",
        )
    return good


async def marked_files(
    store: Store, dest: str, instant: str, config: CommitterConfig = DEFAULT_CONFIG
) -> set[str] | None:
    """Every base file (relative to the table) a trusted CREATE or MERGE marker of
    ``instant`` names (:func:`marker_problem`; untrusted ones are logged and left out):
    what any attempt of the write may have created (one recursive listing of the marker
    folder, never of the table). None if the folder holds no marker at all."""
    listed = await _list_markers(store, dest, instant, config)
    if not listed.markers and not listed.bad:
        return None
    good, bad = split_markers(listed.markers, instant, await _table_depth(store, dest, config))
    bad = listed.bad + bad
    if bad:
        log.warning("markers of %s: %s (left alone)", dest, untrusted_line(dest, instant, bad))
    return {rel for _, rel, io in good if deletes(rel, io, instant)}


async def _delete_all(store: Store, paths: Sequence[str], config: CommitterConfig) -> None:
    """Delete ``paths`` (absent ones are fine): the store's batch delete where it has one,
    else one delete each, ``io_threads`` at a time."""
    rs = RetryingStore.of(store, config)
    batcher = batch_deleter(rs)
    rest: list[str] = list(paths)
    if batcher is not None and rest:
        size = store.capabilities.delete_batch_max
        failed: list[str] = []
        for i in range(0, len(rest), size):
            chunk = rest[i : i + size]
            errors = await batcher.delete_batch(chunk)  # the whole call retried by the handle
            failed.extend(chunk[j] for j in errors)
        rest = failed

    async def one(p: str) -> None:
        await rs.delete(p)

    await run_parallel(rest, one, config.io_threads)


async def reconcile(
    store: Store,
    dest: str,
    instant: str,
    winners: Iterable[str],
    config: CommitterConfig = DEFAULT_CONFIG,
    *,
    depth: int | None = None,
    checked: Sequence[Marker] | None = None,
) -> list[str]:
    """Delete the marked base files of ``instant`` that the winning manifests do not name
    (``winners``: paths relative to the table). Returns them (relative). Idempotent; a
    crash midway is repeated by the resumed commit. Untrusted markers
    (:func:`marker_problem`, checked before the plan by :func:`check_markers`; one written
    since) get nothing deleted (logged, one line). ``checked``: the trusted markers
    :func:`check_markers` listed in this same commit run (no second listing); a marker
    written since is then left to the sweep after the publish, as one written after a
    listing made here would be."""
    if checked is not None:
        good = list(checked)
    else:
        good, _, _ = await _judged_markers(
            store, dest, instant, config, what=f"the commit of {instant}", depth=depth
        )
    doomed = losers({rel for _, rel, io in good if deletes(rel, io, instant)}, winners)
    await _delete_all(store, [join(dest, r) for r in doomed], config)
    return doomed


async def remove_markers(
    store: Store,
    dest: str,
    instant: str,
    winners: Iterable[str],
    *,
    grace: float,
    now: float | None = None,
    delete_markers: bool = True,
    config: CommitterConfig = DEFAULT_CONFIG,
) -> tuple[list[str], int]:
    """After ``instant`` was decided (published or rolled back): one listing of its marker
    folder, then :func:`judge_markers` (untrusted markers: removed, their files left alone,
    logged). Returns ``(files deleted, markers kept)``."""
    markers, bad, empty = await _judged_markers(
        store, dest, instant, config, what=f"removing the markers of {instant}"
    )
    return await judge_markers(
        store,
        dest,
        instant,
        markers,
        winners,
        grace=grace,
        now=now,
        delete_markers=delete_markers,
        config=config,
        untrusted=bad,
        empty=empty,
    )


async def judge_markers(
    store: Store,
    dest: str,
    instant: str,
    markers: Sequence[Marker],
    winners: Iterable[str],
    *,
    grace: float,
    now: float | None = None,
    delete_markers: bool = True,
    config: CommitterConfig = DEFAULT_CONFIG,
    untrusted: Sequence[Untrusted] = (),
    empty: Sequence[ObjectInfo] = (),
) -> tuple[list[str], int]:
    """The listed ``markers`` of decided ``instant`` (trusted ones:
    :func:`marker_problem`; the ``untrusted`` ones are only removed, never their files):
    the base file of each marker outside
    ``winners`` is deleted (an upload that landed after the reconcile), then the markers
    (``delete_markers``) and the marker folders they emptied. A loser's marker whose file
    was not found is kept while it is younger than ``grace`` seconds (its upload may still
    land; a later :func:`sweep_late_markers` removes it). A ``MARKERS<n>`` file holding
    such a marker is kept whole (its age is its last rewrite's, never older than any of
    its lines), and ``MARKERS.type`` with it; ``empty``: the folder's files that hold no
    marker, removed with the rest.

    Each listed marker file is deleted by name (batch deletes on Azure Blob, one delete
    per file elsewhere: one per task attempt for ``MARKERS<n>`` files), never the folder
    recursively: a marker file a late attempt creates after the listing stays for the next
    sweep (one it *rewrites* between this listing and the delete is lost with the delete:
    its own check after the upload deletes that upload, module doc). Then the emptied
    folders (stores with directories: local files, ADLS Gen2), deepest first, each by a
    non-recursive delete that fails, and is left, if anything was written into it
    meanwhile. Not atomic; every step is idempotent. Returns ``(files deleted, marker
    files kept)``."""
    rs = RetryingStore.of(store, config)
    win = set(winners)
    now = time.time() if now is None else now
    deleted: list[str] = []
    keep: set[str] = set()

    async def judge(item: Marker) -> None:
        info, rel, io = item
        if rel in win or not deletes(rel, io, instant):
            return
        found = await rs.delete(join(dest, rel))
        if found:
            deleted.append(rel)
        young = info.mtime is not None and now - info.mtime < grace
        if not found and young:
            keep.add(info.path)

    await run_parallel(markers, judge, config.io_threads)
    if delete_markers:
        listed = {m[0].path for m in markers} | {b[0].path for b in untrusted} | {e.path for e in empty}
        remove = listed - keep
        if keep:  # the kept MARKERS<n> files stay readable as Hudi reads them
            remove.discard(join(marker_dir(dest, instant), MARKER_TYPE_FILE))
        await _delete_all(store, sorted(remove), config)
        if store.capabilities.directories and listed:
            await _remove_empty_dirs(store, marker_dir(dest, instant), sorted(listed))
    return sorted(deleted), len(keep)


async def _remove_empty_dirs(store: Store, folder: str, paths: Sequence[str]) -> None:
    """The folders of ``paths`` up to and including ``folder``, deepest first, each removed
    only if empty (a non-recursive delete; one that fails is left)."""
    dirs: set[str] = {folder}
    for p in paths:
        d = parent(p)
        while d != folder and is_within(d, folder):
            dirs.add(d)
            d = parent(d)
    for d in sorted(dirs, key=lambda x: (-x.count("/"), x)):
        try:
            await store.delete(d)
        except StoreError:
            pass


async def rollback_from_markers(
    store: Store, dest: str, instant: str, config: CommitterConfig = DEFAULT_CONFIG
) -> list[str] | None:
    """Delete every marked base file of ``instant`` (the write is being rolled back: none is
    a winner), then the markers. None if there was no marker: the caller then lists the
    partitions (:func:`~amcommit.table.commit.undo.remove_stamped`). The instant must not be
    completed (the caller checks). An untrusted marker (:func:`marker_problem`: naming a file
    this write may not delete) gets nothing deleted but itself (logged, one line): the
    rollback goes on, never outside the write's own files."""
    good, bad, empty = await _judged_markers(store, dest, instant, config, what=f"the rollback of {instant}")
    if not good and not bad:
        if empty:  # MARKERS.type alone (an attempt cut short before its first marker file)
            await judge_markers(store, dest, instant, (), (), grace=0.0, config=config, empty=empty)
        return None
    doomed = sorted({rel for _, rel, io in good if deletes(rel, io, instant)})
    await _delete_all(store, [join(dest, r) for r in doomed], config)
    await judge_markers(store, dest, instant, good, (), grace=0.0, config=config, untrusted=bad, empty=empty)
    return doomed


PENDING_NAMES = (
    "{t}.commit.requested",
    "{t}.inflight",
    "{t}.commit.inflight",
    "{t}.replacecommit.requested",
    "{t}.replacecommit.inflight",
    "{t}.deltacommit.requested",
    "{t}.deltacommit.inflight",
)
"""The files of a write instant that is requested or inflight (Hudi: a commit's inflight
file is ``<t>.inflight``; the others ``<t>.<action>.<state>``)."""


async def pending_on_timeline(store: Store, dest: str, instant: str) -> bool:
    """True if ``instant`` is a requested or inflight write instant on the table's timeline
    (:data:`PENDING_NAMES`, looked up at the same time: one round trip) and not completed.
    An instant found so without a staging folder of ours is another writer's pending
    work."""
    found: list[str] = []

    async def look(name: str) -> None:
        try:
            await store.stat(join(dest, HOODIE_DIR, name.format(t=instant)))
            found.append(name)
        except NotFound:
            pass

    await run_parallel(PENDING_NAMES, look, len(PENDING_NAMES))
    return bool(found) and await completed_instant(store, dest, instant) is None


async def _winners_of(store: Store, dest: str, instant: str) -> set[str] | None:
    """The base files ``instant``'s completed commit names; None if it is not completed."""
    done = await completed_instant(store, dest, instant)
    if done is None:
        return None
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, done.file_name)))
    return {s.path for s in meta.write_stats()}


@dataclass(frozen=True)
class Published:
    """What the writer that published an instant knows of it, handed to its own marker
    sweep after the lock (:func:`sweep_late_markers` ``first_published``): the instant is
    completed, ``winners`` are the files its published commit names (decoded from the very
    bytes published), ``depth`` the table's partition field count (None: not known). The
    sweep then looks none of them up (the instant's state, its commit, the properties)."""

    winners: frozenset[str]
    depth: int | None


async def sweep_instant(
    store: Store,
    dest: str,
    instant: str,
    *,
    grace: float,
    config: CommitterConfig = DEFAULT_CONFIG,
    published: Published | None = None,
) -> list[str]:
    """The markers of one decided instant (completed: its commit's files are the winners;
    gone: none are), :func:`judge_markers`; nothing for a pending write (its instant and
    job marker are looked at first: its marker folder is never listed) or a folder without
    markers. ``published``: the caller published ``instant`` itself and knows its winners
    (:class:`Published`), so nothing is looked up first (a completed instant stays
    completed). Returns the files deleted."""
    state = "completed" if published is not None else await instant_state(store, dest, instant)
    if state == "pending":
        return []
    if state == "gone" and await pending_on_timeline(store, dest, instant):
        # another writer's pending instant (Hudi's own, or a write whose staging was lost):
        # its files are deleted only by a rollback of it (a clean's or a commit's, once its
        # writer is judged dead: amcommit.table.timeline.heartbeat), never by a sweep
        return []
    markers, bad, empty = await _judged_markers(
        store,
        dest,
        instant,
        config,
        what=f"the marker sweep of {instant}",
        depth=None if published is None else published.depth,
    )
    if not markers and not bad:
        if empty:
            await judge_markers(store, dest, instant, (), (), grace=grace, config=config, empty=empty)
        return []
    if published is not None:
        winners: set[str] | None = set(published.winners)
    else:
        winners = await _winners_of(store, dest, instant) if state == "completed" else set()
    deleted, _ = await judge_markers(
        store, dest, instant, markers, winners or (), grace=grace, config=config, untrusted=bad, empty=empty
    )
    return deleted


async def sweep_late_markers(
    store: Store,
    dest: str,
    *,
    grace: float,
    config: CommitterConfig = DEFAULT_CONFIG,
    first: str | None = None,
    first_published: Published | None = None,
) -> dict[str, list[str]]:
    """Remove the markers of decided instants, and the files of those no winner names
    (module doc, step 4): one listing of ``.hoodie/.temp/``, then :func:`sweep_instant` for
    each instant folder there (``first``, if given, is swept first: the caller's own
    write). A pending write's folder is left alone. Returns the files deleted, by instant.

    ``first_published``: ``first`` was published by the caller (:class:`Published`); its
    sweep then runs while ``.hoodie/.temp/`` is listed (it needs nothing of that listing),
    and the other instants after the listing, as before.

    Called after every table commit (outside the lock) for the committed write's own
    markers, by every clean (:func:`amcommit.table.commit.clean.clean`) and every rollback
    (:func:`amcommit.table.commit.rollback.rollback_instant`, and the rollback of dead writers by a
    later commit), each with ``grace`` = ``writer_ttl``."""
    temp = join(dest, TEMP_DIR)
    instants: set[str] = set()
    out: dict[str, list[str]] = {}
    gone = False

    async def listing() -> None:
        nonlocal gone
        try:
            async for info in store.list(temp, recursive=False):
                if info.is_dir and is_instant(basename(info.path)):
                    instants.add(basename(info.path))
        except NotFound:
            gone = True

    async def own() -> None:
        assert first is not None
        deleted = await sweep_instant(
            store, dest, first, grace=grace, config=config, published=first_published
        )
        if deleted:
            out[first] = deleted

    if first is not None and first_published is not None:
        await run_parallel([listing, own], lambda step: step(), 2)
        instants.discard(first)
    else:
        await listing()
    if gone:
        return out
    for instant in sorted(instants, key=lambda t: (t != first, t)):
        deleted = await sweep_instant(store, dest, instant, grace=grace, config=config)
        if deleted:
            out[instant] = deleted
    return out


async def sweep_after(
    store: Store,
    dest: str,
    what: str,
    *,
    grace: float,
    config: CommitterConfig = DEFAULT_CONFIG,
    first: str | None = None,
    first_published: Published | None = None,
) -> dict[str, list[str]]:
    """:func:`sweep_late_markers` after ``what`` (a commit, clean or rollback) succeeded: a
    failure never fails ``what``; it is logged (WARNING, one line) and the next sweep
    completes it. Returns the files deleted, by instant ({} after a failure)."""
    try:
        return await sweep_late_markers(
            store, dest, grace=grace, config=config, first=first, first_published=first_published
        )
    except AmcommitError as e:
        log.warning(
            "removing markers in %s after %s failed (%s stands; the next sweep retries): %s",
            dest,
            what,
            what,
            e,
        )
        return {}
