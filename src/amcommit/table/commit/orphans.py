"""What a clean does besides deleting old file versions (issue 32): it rolls back the
failed writes of other writers, and removes orphans.

**Other writers' pending instants** (:func:`roll_back_failed_writes`). A requested or
inflight write instant with no staging folder of amcommit's (``.hoodie/.aux/amcommit/<t>/``):
Hudi's own writer, or an amcommit write whose staging was lost. It is judged by Hudi's
heartbeat rules, as every amcommit writer judges another
(:func:`~amcommit.table.timeline.heartbeat.judge_writers`, :func:`~amcommit.table.timeline.heartbeat.writer_alive`):
its last sign of life is the store's modification time of ``.hoodie/.heartbeat/<t>``
(Hudi's heartbeat file; a Hudi writer rewrites it every
``hoodie.client.heartbeat.interval_in_ms``, 60 s, and Hudi takes it for expired after
``tolerable.misses``, 2, intervals: ``writer_ttl``'s default, 120 s, is that). Without a
heartbeat file the age of its ``.requested`` file counts instead (Hudi would take the
instant for expired at once: amcommit waits ``writer_ttl`` from the instant's start). A
replacecommit that is only requested is a scheduled plan (Hudi's clustering): never rolled
back here.
A live one is left alone (no file of it is deleted, not even by the marker sweep:
:func:`~amcommit.table.write.direct.sweep_instant`); an expired one is rolled back, as Hudi's
clean rolls back failed writes (``rollbackFailedWrites``, lazy policy), under the clean's
lock, through the table's abort (its marked files, every file stamped with it in the
partitions its markers name, or the whole table without markers, then its instant files).
A commit judges it the same way before it completes (it waits for a live one, rolls back
an expired one).

**Orphans** (:func:`remove_orphans`), as Iceberg's ``remove_orphan_files`` and Delta's
``VACUUM`` remove them: base files stamped with a *decided* instant that the table will
never read: stamped with a completed write instant whose commit does not name them (a task
attempt that uploaded after the commit and died before its own check; one whose marker a
sweep removed before its upload landed), or with an instant no longer on the timeline at
all (rolled back; only between the first and the last instant of the active timeline, so
never an archived commit's file nor a write that begins after the listing) and without a
staging folder. Only files older than ``writer_ttl`` by the store's clock are removed (a
late upload of a live attempt is younger). Files of pending instants are never orphans.

Cost: only the partitions the *recent* write instants touched are listed (one
non-recursive listing each): the write instants at or after the earliest instant the
previous clean retained (all of them before the first clean), i.e. the retained commits
and those written since the previous clean. An orphan whose instant left that window
before it became older than ``writer_ttl`` is not found (an upload stalled across
``retain_commits`` commits and a clean). No file content is read; the store's clock is read
(three requests) only when a candidate is found. The commits themselves are loaded by the
clean anyway.

Not atomic: each delete is one request; a clean cut short leaves orphans for the next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from amcommit.committer.config import CommitterConfig
from amcommit.errors import NotFound
from amcommit.parallel import run_parallel
from amcommit.paths import basename, join, relative_to
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.model import WRITE_ACTIONS, Action, Instant, State
from amcommit.table.format.naming import parse_base_file_name
from amcommit.table.timeline.instants import LoadedCommit

__all__ = [
    "FailedWrites",
    "OrphanScan",
    "foreign_pending",
    "is_orphan",
    "orphan_partitions",
    "remove_orphans",
    "roll_back_failed_writes",
]

log = logging.getLogger("amcommit.table.commit.orphans")


# ---------------------------------------------------------------- other writers' pending work


@dataclass
class FailedWrites:
    """Other writers' pending instants a clean judged (:func:`roll_back_failed_writes`)."""

    rolled_back: list[str] = field(default_factory=list)
    """Expired: rolled back."""
    alive: list[str] = field(default_factory=list)
    """Left alone: a live or recent heartbeat, or a replacecommit only requested (a
    scheduled plan, e.g. Hudi's clustering, which Hudi does not roll back either)."""


def foreign_pending(instants: Sequence[Instant], staged: Iterable[str]) -> list[str]:
    """Times of the requested or inflight write instants (commit, replacecommit) with no
    staging folder of amcommit's (``staged``): other writers' pending work (pure)."""
    done = {i.time for i in instants if i.completed}
    mine = set(staged)
    return sorted({i.time for i in instants if not i.completed and i.action in WRITE_ACTIONS} - done - mine)


async def roll_back_failed_writes(
    store: Store, dest: str, instants: Sequence[Instant], *, ttl: float, config: CommitterConfig
) -> FailedWrites:
    """Roll back the other writers' pending instants whose writers are dead by Hudi's
    heartbeat rules (module doc), leave the live ones alone. The caller holds the table's
    lock (a clean). ``instants``: the timeline the caller listed under that lock."""
    from amcommit.table.timeline.heartbeat import judge_writers, writer_alive

    out = FailedWrites()
    if not any(not i.completed and i.action in WRITE_ACTIONS for i in instants):
        return out  # the common case: no extra request
    pending = foreign_pending(instants, await _staged(store, dest))
    if not pending:
        return out
    scheduled = {
        i.time for i in instants if i.action == Action.REPLACE_COMMIT.value and i.state is State.REQUESTED
    }
    beats, now = await judge_writers(store, dest, pending)
    for t in pending:
        if t in scheduled or writer_alive(t, beats.get(t), now, ttl):
            out.alive.append(t)
            continue
        await roll_back_foreign(store, dest, t, config)
        out.rolled_back.append(t)
        log.info(
            "rolled back instant %s of %s: another writer's pending write, its heartbeat expired", t, dest
        )
    return out


def _target_file(rel: str, target: str) -> bool:
    """True if ``rel`` (a stored plan's path, input) names a file the write ``target`` created
    whole: a base file stamped with it or a log file of its own
    (:func:`~amcommit.table.format.naming.own_log_file`), in no hidden, ``_`` or ``..``
    folder. Pure."""
    from amcommit.table.format.naming import own_log_file

    *folders, name = rel.split("/")
    if any(not f or f.startswith((".", "_")) for f in folders):
        return False
    base = parse_base_file_name(name)
    return (base is not None and base.instant == target) or own_log_file(name, target)


async def finish_pending_rollbacks(
    store: Store, dest: str, instants: Sequence[Instant], *, config: CommitterConfig
) -> list[str]:
    """Complete every pending rollback instant of a Merge-on-Read write (a rollback killed
    part way, :mod:`amcommit.table.commit.rollback_record`) from its stored plan: the plan's
    files, then what :func:`roll_back_foreign` removes of its target, then the completed
    rollback instant. The caller holds the table's lock (a clean): no rollback is running.
    A rollback whose target still has a staging folder of amcommit's is left to the job's
    abort (``amcommit abort-job`` / ``amcommit rollback``, which finish it from the same plan),
    as a pending write of ours is. Returns the targets rolled back; costs nothing when no
    rollback is pending."""
    from amcommit.table.commit.rollback_record import pending_rollbacks

    rs = RetryingStore.of(store, config)
    done: list[str] = []
    recs = await pending_rollbacks(store, dest, instants)
    staged = await _staged(store, dest) if recs else set()
    for rec in recs:
        target = rec.plan.target
        if target in staged:
            continue  # its staging folder is there: `amcommit abort-job` / rollback finishes it
        for rels in rec.plan.files.values():
            for rel in rels:
                if not _target_file(rel, target):
                    log.warning(
                        "rollback %s of %s: %r is no file of %s, left alone", rec.instant, dest, rel, target
                    )
                    continue
                try:
                    await rs.delete(join(dest, rel))
                except NotFound:
                    pass
        await roll_back_foreign(store, dest, target, config)
        log.info("completed rollback %s of %s: instant %s rolled back", rec.instant, dest, target)
        done.append(target)
    return done


async def _staged(store: Store, dest: str) -> set[str]:
    """Instants with a staging folder of amcommit's (either layout): two listings."""
    from amcommit.table.write.staging import staged_instants

    staged, legacy = await staged_instants(store, dest)
    return staged | legacy


async def roll_back_foreign(store: Store, dest: str, instant: str, config: CommitterConfig) -> bool:
    """Roll back another writer's pending ``instant`` (no staging folder of ours), as the
    table's abort does for such a write (:mod:`amcommit.table.commit.undo`): every base file its
    trusted markers name, then its markers; every file stamped with it in the partitions
    they name (in the whole table when it has no marker at all); its heartbeat; its
    inflight, then its requested file. Never a completed instant (False). Each step
    idempotent; a crash leaves a pending instant the next judge rolls back again."""
    from amcommit.paths import parent
    from amcommit.table.commit.rollback_record import begin_rollback
    from amcommit.table.commit.undo import finish_rollback
    from amcommit.table.write.direct import rollback_from_markers

    await begin_rollback(store, dest, instant, config)  # a deltacommit's: recorded first
    marked = await rollback_from_markers(store, dest, instant, config)
    parts = None if marked is None else {parent(r) if "/" in r else "" for r in marked}
    return await finish_rollback(store, dest, instant, partitions=parts, config=config)


# ---------------------------------------------------------------- orphans


@dataclass
class OrphanScan:
    """What the orphan scan of a clean did (:func:`remove_orphans`)."""

    partitions: int = 0
    """Partition folders listed."""
    listed: int = 0
    """Objects those listings returned."""
    requests: int = 0
    """Requests made: listings, the store's clock (when a candidate was found), the staging
    listing (when a candidate's instant is off the timeline), the deletes."""
    orphans: list[str] = field(default_factory=list)
    """Removed (or, in a dry run, found), relative to the table."""
    young: int = 0
    """Candidates kept because they are younger than ``writer_ttl``."""
    seconds: float = 0.0


def orphan_partitions(commits: Sequence[LoadedCommit], previous_earliest: str | None) -> list[str]:
    """The partitions (relative; ``""``: the table's root) touched by the write instants at
    or after ``previous_earliest`` (all of them if None): what the orphan scan lists (pure)."""
    parts: set[str] = set()
    for c in commits:
        if previous_earliest is not None and c.instant.time < previous_earliest:
            continue
        parts.update(f.partition for f in c.added())
        parts.update(p for p, _ in c.replaced())
    return sorted(parts)


def is_orphan(
    rel: str,
    instants: Sequence[Instant],
    named: Mapping[str, set[str]],
    staged: set[str] | None,
) -> bool | None:
    """Whether the base file ``rel`` (relative to the table) is an orphan by its name and
    the timeline (module doc; its age is the caller's): True, False, or None when that
    depends on whether its instant has a staging folder (``staged`` None: not listed yet).
    ``named``: completed write instant -> the files its commit names. Pure."""
    parsed = parse_base_file_name(basename(rel))
    if parsed is None or not instants:
        return False
    t = parsed.instant
    if t in named:
        return rel not in named[t]
    if any(i.time == t for i in instants):
        return False  # pending (any action), or a completed instant that is not a write
    if not instants[0].time < t < instants[-1].time:
        return False  # archived, or later than the listing: a write that may be beginning
    if staged is None:
        return None
    return t not in staged


async def remove_orphans(
    store: Store,
    dest: str,
    instants: Sequence[Instant],
    commits: Sequence[LoadedCommit],
    previous_earliest: str | None,
    *,
    ttl: float,
    config: CommitterConfig,
    dry_run: bool = False,
) -> OrphanScan:
    """Find and (unless ``dry_run``) delete the orphans of the recent partitions (module
    doc). ``instants`` and ``commits``: the timeline and every completed write's metadata,
    as the caller (a clean, under the table's lock) loaded them."""
    from amcommit.table.timeline.heartbeat import store_now

    started = time.monotonic()
    scan = OrphanScan()
    rs = RetryingStore.of(store, config)
    named = {c.instant.time: {f.path for f in c.added()} for c in commits}
    ordered = sorted(instants)
    parts = orphan_partitions(commits, previous_earliest)
    listings: dict[str, list[ObjectInfo]] = {}

    async def list_part(part: str) -> None:
        folder = join(dest, part) if part else dest
        try:
            found = await _list_files(rs, folder)  # a failed listing restarts (the handle)
        except NotFound:
            found = []
        listings[part] = found

    await run_parallel(parts, list_part, config.io_threads)
    scan.partitions = scan.requests = len(parts)
    candidates: list[tuple[str, ObjectInfo]] = []
    undecided: list[tuple[str, ObjectInfo]] = []
    for part in parts:
        for info in listings[part]:
            scan.listed += 1
            rel = relative_to(info.path, dest)
            verdict = is_orphan(rel, ordered, named, None)
            if verdict:
                candidates.append((rel, info))
            elif verdict is None:
                undecided.append((rel, info))
    if undecided:
        staged = await _staged(store, dest)
        scan.requests += 2
        candidates += [(r, i) for r, i in undecided if is_orphan(r, ordered, named, staged)]
    if candidates:
        now = await store_now(store, dest)
        scan.requests += 3
        old: list[str] = []
        for rel, info in candidates:
            if now is None or info.mtime is None or now - info.mtime <= ttl:
                scan.young += 1
            else:
                old.append(rel)
        if not dry_run:

            async def delete(rel: str) -> None:
                await rs.delete(join(dest, rel))

            await run_parallel(old, delete, config.io_threads)
            scan.requests += len(old)
            if old:
                log.info("removed %d orphan file(s) of %s (first: %s)", len(old), dest, sorted(old)[0])
        scan.orphans = sorted(old)
    scan.seconds = time.monotonic() - started
    return scan


async def _list_files(store: Store, folder: str) -> list[ObjectInfo]:
    return [i async for i in store.list(folder, recursive=False) if not i.is_dir]
