"""Clean: delete the base files of replaced file groups and the older versions of rewritten
ones, beyond the latest N commits (Hudi's ``KEEP_LATEST_COMMITS`` cleaning policy).

Retention rule (``retain_commits = N >= 1``): the latest N completed write instants (commits
and replacecommits) stay readable -- a snapshot as of any of them, and incremental reads
starting at or after the oldest of them (``E``, Hudi's *earliest commit to retain*). A clean
deletes

- every version of the file groups replaced by a replacecommit at or before ``E``;
- of every other file group (one an upsert or delete rewrote: several base file versions),
  each version older than ``E`` except the newest version older than ``E`` -- exactly as Hudi's
  ``CleanPlanner.getFilesToCleanKeepingLatestCommits`` does: the newest version of every group
  always stays, every version written at or after ``E`` stays (the snapshots as of the retained
  commits read them), and so does the one a query that began just before ``E`` reads.

On a Merge-on-Read table a "version" is a **file slice**: a base file and the log files
written against its base instant (a log file's name carries it). A slice is kept or deleted
whole: a slice superseded by a newer one (a compaction's base file, or a rewrite) goes with
all its logs, as Hudi's ``getFilesToCleanKeepingLatestCommits`` deletes a slice's base and log
files together; the latest slice of a group never goes, logs and all. The plan and the
clean metadata name every file deleted, log files included.

No read that starts at or after ``E`` needs what it deletes. Reads that reach before ``E`` are
refused by amcommit's readers afterwards (:class:`~amcommit.table.errors.CleanedPast`).

The commits planned from include the archived ones (``.hoodie/archived/``, read through the
timeline handle) whenever a file an archived commit wrote may be due (:func:`needs_archive`):
archival moves commits out of the active timeline whatever cleaning did, so a table archived
before any clean ran (or a version an archived commit wrote, superseded later) would
otherwise keep its superseded files forever.

Planning is pure (:func:`plan_clean`): it leaves out what the previous clean (its ``E``)
already deleted -- groups replaced at or before it, versions superseded before it -- so a clean
never plans a file an earlier one deleted, and a clean with nothing to delete writes no
instant.

Execution (:func:`clean`), under the destination lock (the one table commits take,
``.hoodie/.aux/amcommit/_commit.lock``):

1. ``<t>.clean.requested`` -- the plan (Avro ``HoodieCleanerPlan``), created create-only:
   this claims the instant time ``t``, later than every instant on the timeline;
2. ``<t>.clean.inflight`` -- the same plan;
3. the deletes, concurrently, each through the engine's retry layer (a file already gone
   counts as deleted);
4. ``<t>.clean`` -- the completed instant (Avro ``HoodieCleanMetadata``), written last.

Before it plans, under the same lock, a clean rolls back other writers' pending instants
whose heartbeat expired (Hudi's clean rolls back failed writes so too; live ones are left
alone) and removes orphans: base files of decided instants that no commit names, older
than ``writer_ttl``, in the partitions the recent instants touched (:mod:`amcommit.table.commit.orphans`).

Nothing here is atomic as a whole; each step is idempotent. A clean killed at any point is
completed by the next clean (or the next commit with ``clean_retain_commits``): a pending
``.clean.requested`` / ``.clean.inflight`` is resumed from its stored plan before a new plan is
made. Readers treat a pending clean like a completed one (its files may already be gone).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.lock import run_locked
from amcommit.committer.report import Progress, ProgressCallback
from amcommit.errors import ConfigError
from amcommit.parallel import gather_limited
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.retry import RetryingStore
from amcommit.table.commit.orphans import (
    OrphanScan,
    finish_pending_rollbacks,
    remove_orphans,
    roll_back_failed_writes,
)
from amcommit.table.format import avro_meta
from amcommit.table.format.avro_meta import CleanerPlan, CleanMetadata, CleanPartition
from amcommit.table.format.model import Action, Instant, State
from amcommit.table.format.naming import HOODIE_DIR, STAGING_DIR, next_instant
from amcommit.table.settings import table_settings
from amcommit.table.timeline.instants import LoadedCommit, create_once
from amcommit.table.timeline.reader import Listing, Timeline, table_uri
from amcommit.table.write.direct import sweep_after

__all__ = ["CLEAN_LOCK_OWNER", "CleanReport", "clean", "clean_after_commit", "needs_archive", "plan_clean"]

CLEAN_LOCK_OWNER = "clean"
"""The job id cleans hold the destination lock under: the same for every clean, so a clean
run again after its process died takes the lock back at once and resumes."""


@dataclass
class CleanReport:
    """What a clean did (or, with ``dry_run``, would do)."""

    dest: str
    retain_commits: int
    instant: str | None = None
    """The clean instant written (None: nothing to clean, or a dry run)."""
    earliest_retained: str | None = None
    files: list[str] = field(default_factory=list)
    """Table-relative paths deleted (or planned, in a dry run)."""
    already_gone: int = 0
    resumed: list[str] = field(default_factory=list)
    """Pending clean instants found and completed first."""
    dry_run: bool = False
    late_files: dict[str, list[str]] = field(default_factory=dict)
    """Files of late attempts deleted by the marker sweep, by instant
    (:func:`~amcommit.table.write.direct.sweep_late_markers`; not in a dry run)."""
    rolled_back: list[str] = field(default_factory=list)
    """Other writers' pending instants whose heartbeat expired, rolled back first
    (:func:`~amcommit.table.commit.orphans.roll_back_failed_writes`; not in a dry run)."""
    pending_alive: list[str] = field(default_factory=list)
    """Other writers' pending instants left alone: a live heartbeat, or a replacecommit only
    requested (a scheduled plan)."""
    orphans: list[str] = field(default_factory=list)
    """Orphan base files removed (or, in a dry run, found): table-relative paths
    (:func:`~amcommit.table.commit.orphans.remove_orphans`)."""
    orphan_scan: OrphanScan | None = None
    """What the orphan scan listed and cost."""


def plan_clean(
    commits: Sequence[LoadedCommit], retain_commits: int, previous_earliest: str | None = None
) -> CleanerPlan | None:
    """The files to delete so that the latest ``retain_commits`` write instants stay
    readable; None if there is nothing to delete. ``previous_earliest``: the earliest
    instant the previous clean retained (its deletions are not planned again). Pure."""
    if isinstance(retain_commits, bool) or not isinstance(retain_commits, int) or retain_commits < 1:
        raise ConfigError(f"retain_commits must be an integer >= 1, got {retain_commits!r}")
    ordered = sorted(commits, key=lambda c: c.instant.time)
    if len(ordered) <= retain_commits:
        return None
    keep = ordered[-retain_commits]
    e = keep.instant.time
    prev = previous_earliest or ""
    # per file group, its file slices by base instant: the base file and the log files
    # written against it (Merge-on-Read); a slice is kept or deleted whole
    slices: dict[tuple[str, str], dict[str, list[str]]] = {}
    for c in ordered:
        for f in c.added():
            slices.setdefault((f.partition, f.file_id), {}).setdefault(f.instant, []).append(f.path)
        for log in c.logs():
            slices.setdefault((log.partition, log.file_id), {}).setdefault(log.base_instant, []).append(
                log.path
            )
    versions = {g: sorted(ss.items()) for g, ss in slices.items()}
    replaced_at: dict[tuple[str, str], str] = {}
    for c in ordered:
        for group in c.replaced():
            replaced_at.setdefault(group, c.instant.time)
    doomed: dict[str, set[str]] = {}
    for group, vs in versions.items():
        r = replaced_at.get(group)
        if r is not None and r <= prev:
            continue  # replaced before the previous clean's E: deleted whole then
        for k, (_, paths) in enumerate(vs):
            newer = vs[k + 1][0] if k + 1 < len(vs) else None
            if newer is not None and newer < prev:
                continue  # superseded before the previous clean's E: deleted then
            if (r is not None and r <= e) or (newer is not None and newer < e):
                doomed.setdefault(group[0], set()).update(paths)
    if not doomed:
        return None
    return CleanerPlan(
        earliest_retained=e,
        earliest_action=keep.instant.action,
        files={p: sorted(paths) for p, paths in sorted(doomed.items())},
        last_completed=ordered[-1].instant.time,
    )


def needs_archive(active: Sequence[LoadedCommit], writes: Sequence[str], previous: str | None) -> bool:
    """Whether a clean must plan from the archived write instants too (their metadata is in
    ``.hoodie/archived/``), not only from the ``active`` ones (``writes``: the active
    timeline's completed write times, sorted). Pure.

    Hudi's ``CleanPlanner`` plans from a file-system view, which sees the files archived
    commits wrote; amcommit plans from commit metadata, so it reads the archived ones when a
    file they wrote may be due:

    - no clean ran yet (``previous`` None), or the previous clean's earliest retained instant
      is before the active timeline (Hudi's fallback to a full scan there): any archived
      version may have been superseded since, none was cleaned;
    - an active commit wrote a new version of (or a log file against, or replaced) a file
      group whose previous version an archived commit wrote (``prevCommit`` / a log's base
      instant before the active timeline, a replaced group no active commit wrote): that
      archived version may now be superseded before the clean's earliest retained instant.

    Otherwise every version an archived commit wrote was either deleted by an earlier clean
    or is still its group's newest, and the archive is not read."""
    first = writes[0] if writes else None
    if first is None:
        return True
    if previous is None or previous < first:
        return True
    written: set[tuple[str, str]] = set()
    for c in active:
        for stats in c.metadata.partition_to_write_stats.values():
            for s in stats:
                if s.prev_commit not in ("", "null") and s.prev_commit < first:
                    return True
        if any(log.base_instant < first for log in c.logs()):
            return True
        written.update((f.partition, f.file_id) for f in c.added())
    return any(g not in written for c in active for g in c.replaced())


async def _previous_earliest(tl: Timeline, lst: Listing) -> str | None:
    mark = await tl.cleaned(lst)
    return mark.earliest if mark is not None else None


async def _execute(
    store: Store,
    dest: str,
    instant: str,
    plan: CleanerPlan,
    *,
    last_completed: str,
    config: CommitterConfig,
    report: CleanReport,
    progress: ProgressCallback | None,
) -> None:
    """Steps 2-4 of the module doc for the clean ``instant`` whose requested file exists."""
    rs = RetryingStore.of(store, config)
    started = time.monotonic()
    hoodie = join(dest, HOODIE_DIR)
    data = avro_meta.encode_cleaner_plan(plan, root_uri=table_uri(store, dest))
    await create_once(rs, join(hoodie, f"{instant}.clean.inflight"), data)
    files = [rel for rels in plan.files.values() for rel in rels]
    total = len(files)
    done = 0
    gone: list[bool] = []
    if progress is not None:
        progress(Progress("clean", 0, total, "start"))

    async def delete(rel: str) -> bool:
        nonlocal done
        existed = await rs.delete(join(dest, rel))
        done += 1
        if progress is not None:
            progress(Progress("clean", done, total))
        return bool(existed)

    gone = [not e for e in await gather_limited([partial(delete, rel) for rel in files], config.io_threads)]
    if progress is not None:
        progress(Progress("clean", done, total, "end"))
    meta = CleanMetadata(
        start_clean_time=instant,
        time_taken_ms=int((time.monotonic() - started) * 1000),
        earliest_retained=plan.earliest_retained,
        last_completed=last_completed,
        partitions=[
            CleanPartition(partition=p, deleted=[avro_meta.file_name(r) for r in rels])
            for p, rels in plan.files.items()
        ],
    )
    await create_once(rs, join(hoodie, f"{instant}.clean"), avro_meta.encode_clean_metadata(meta))
    report.files.extend(files)
    report.already_gone += sum(gone)


async def _resume_pending(
    store: Store,
    dest: str,
    tl: Timeline,
    lst: Listing,
    config: CommitterConfig,
    report: CleanReport,
    progress: ProgressCallback | None,
) -> bool:
    """Complete every pending clean instant from its stored plan. True if there was one."""
    pending = [i for i in lst.instants if i.action == Action.CLEAN.value and not i.completed]
    for i in pending:
        name = Instant(i.time, i.action, State.REQUESTED).file_name
        if i.state is State.INFLIGHT:
            name = i.file_name
        path = join(dest, HOODIE_DIR, name)
        raw = await tl.store.get(path)
        plan = avro_meta.decode_cleaner_plan(raw, root_uri=table_uri(store, dest), where=path)
        last = max((w for w in lst.writes if w < i.time), default="")
        await _execute(
            store, dest, i.time, plan, last_completed=last, config=config, report=report, progress=progress
        )
        report.resumed.append(i.time)
    return bool(pending)


async def _clean_unlocked(
    store: Store,
    dest: str,
    retain_commits: int,
    config: CommitterConfig,
    dry_run: bool,
    progress: ProgressCallback | None,
) -> CleanReport:
    report = CleanReport(dest=dest, retain_commits=retain_commits, dry_run=dry_run)
    ttl = table_settings(config).writer_ttl
    tl = await Timeline.open(store, dest, config=config)
    lst = await tl.listing()
    if not dry_run and await _resume_pending(store, dest, tl, lst, config, report, progress):
        lst = await tl.listing()
    if not dry_run:
        # other writers' failed writes first, as Hudi's clean rolls them back (lazy policy)
        resumed = await finish_pending_rollbacks(store, dest, lst.instants, config=config)
        if resumed:
            lst = await tl.listing()
        failed = await roll_back_failed_writes(store, dest, lst.instants, ttl=ttl, config=config)
        report.rolled_back, report.pending_alive = [*resumed, *failed.rolled_back], failed.alive
        if failed.rolled_back:
            lst = await tl.listing()
    commits = await tl.load([i for i in lst.instants if i.time in set(lst.writes)])
    previous = await _previous_earliest(tl, lst)
    scan = await remove_orphans(
        store, dest, lst.instants, commits, previous, ttl=ttl, config=config, dry_run=dry_run
    )
    report.orphan_scan, report.orphans = scan, scan.orphans
    archived = await tl.archived_commits(lst) if needs_archive(commits, lst.writes, previous) else []
    plan = plan_clean([*archived, *commits], retain_commits, previous)
    if plan is None:
        return report
    report.earliest_retained = plan.earliest_retained
    if dry_run:
        report.files = [rel for rels in plan.files.values() for rel in rels]
        return report
    after = lst.instants[-1].time if lst.instants else None
    data = avro_meta.encode_cleaner_plan(plan, root_uri=table_uri(store, dest))
    while True:
        t = next_instant(datetime.now(UTC), after=after)
        if await create_once(tl.store, join(dest, HOODIE_DIR, f"{t}.clean.requested"), data):
            break
        after = t  # the time was taken (by another writer): allocate a later one
    await _execute(
        store,
        dest,
        t,
        plan,
        last_completed=plan.last_completed,
        config=config,
        report=report,
        progress=progress,
    )
    report.instant = t
    return report


async def clean(
    store: Store,
    dest: str,
    *,
    retain_commits: int,
    config: CommitterConfig = DEFAULT_CONFIG,
    dry_run: bool = False,
    progress: ProgressCallback | None = None,
    take_lock: bool = True,
) -> CleanReport:
    """Clean the table at ``dest`` keeping the latest ``retain_commits`` write instants
    readable (see the module doc). Pending cleans are completed first. Then (not in a dry
    run, after the lock is released) the late markers of decided instants are swept
    (:func:`~amcommit.table.write.direct.sweep_late_markers`, grace ``writer_ttl``: files of late
    attempts deleted, ``report.late_files``). Holds the destination lock (as owner :data:`CLEAN_LOCK_OWNER`) unless ``take_lock`` is False (a
    caller that already holds it) or ``dry_run`` (which only reads)."""
    if isinstance(retain_commits, bool) or not isinstance(retain_commits, int) or retain_commits < 1:
        raise ConfigError(f"--retain-commits must be an integer >= 1, got {retain_commits!r}")
    if dry_run or not take_lock:
        report = await _clean_unlocked(store, dest, retain_commits, config, dry_run, progress)
    else:
        report = await run_locked(
            store,
            dest,
            CLEAN_LOCK_OWNER,
            config,
            lambda s: _clean_unlocked(s, dest, retain_commits, config, False, progress),
            staging=STAGING_DIR,
        )
    if not dry_run:
        # markers of decided instants (a late attempt's upload, a commit's marker removal
        # cut short): their files and markers, grace writer_ttl (not under the lock)
        report.late_files = await sweep_after(
            store, dest, "a clean", grace=table_settings(config).writer_ttl, config=config
        )
    return report


async def clean_after_commit(
    store: Store, dest: str, config: CommitterConfig, *, retain_commits: int | None = None
) -> CleanReport | None:
    """Run :func:`clean` with ``retain_commits``, else the ``clean_retain_commits`` given with
    ``config`` (:func:`~amcommit.table.settings.table_settings`), if set (else None).

    Call it after a table commit returned (it takes the destination lock itself). A failed
    clean leaves a pending clean instant that the next clean completes; the commit before
    it stays committed either way."""
    n = retain_commits if retain_commits is not None else table_settings(config).clean_retain_commits
    if n is None:
        return None
    return await clean(store, dest, retain_commits=n, config=config)
