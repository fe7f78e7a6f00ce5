"""The rollback instant of a failed Merge-on-Read write, recorded as Hudi v6 records it.

When a pending ``deltacommit`` ``T`` is rolled back (``abort_job``, ``amcommit rollback``, a
conflict, or a clean rolling back a dead writer), the rollback is an instant ``R`` of its own,
later than every instant on the timeline (:mod:`amcommit.table.format.rollback_meta`):

1. ``<R>.rollback.requested``: the plan, created create-only (claims ``R``): every file the
   write's trusted markers get deleted (its base files and its own log files);
2. ``<R>.rollback.inflight`` (empty, as Java writes it);
3. the deletes (:mod:`amcommit.table.commit.undo`: markers' files, stamped files, markers,
   staging, heartbeat), then ``T``'s inflight and requested files;
4. ``<R>.rollback``: the metadata (the plan's files, each deleted or already gone), last.

Each step is idempotent; a rollback killed anywhere is finished by the next rollback of ``T``
(its pending ``R`` is found by its plan's target and completed with that plan, as Hudi
resumes a pending rollback), whether ``T``'s own instant files are still there or not, and
by the next clean (:func:`~amcommit.table.commit.orphans.finish_pending_rollbacks`).

**What is deleted, and why not a command block.** Hudi v6 keeps a failed deltacommit's log
file and appends a rollback command block in a new log version, because its writers *append*
to log files: the file may hold blocks of other, committed instants. Hudi deletes a log file
instead of blocking it out when the whole file belongs to the failed instant (its
``MarkerBasedRollbackStrategy`` does so for a log file that created its file group). amcommit's
deltacommits never append: each write creates new, whole log files of its own
(:func:`~amcommit.table.format.naming.own_log_file`), so the failed write's log files hold
nothing else and are deleted; the table's data files are afterwards exactly those before the
write, the next write of the group takes the next free log version, and nothing is left for
compaction or clean. Log files of other writers (Hudi's appends) are never deleted; their
failed blocks are skipped by readers because their instant is not completed.

Only deltacommits are recorded so (a Copy-on-Write write's rollback is not recorded, as before).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.errors import ManifestError, NotFound
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.avro_meta import partition_of
from amcommit.table.format.model import Action, Instant, State
from amcommit.table.format.naming import HOODIE_DIR, next_instant
from amcommit.table.format.rollback_meta import (
    RollbackMetadata,
    RollbackPlan,
    decode_rollback_plan,
    encode_rollback_metadata,
    encode_rollback_plan,
)
from amcommit.table.timeline.instants import completed_instant, create_once
from amcommit.table.timeline.reader import Timeline, table_uri
from amcommit.table.write.direct import marked_files

__all__ = ["RollbackRecord", "begin_rollback", "complete_rollback", "pending_rollbacks"]

log = logging.getLogger("amcommit.table.commit.rollback_record")


@dataclass(frozen=True)
class RollbackRecord:
    """A begun (requested and inflight) rollback instant and its plan."""

    instant: str
    plan: RollbackPlan
    started: float
    """``time.monotonic()`` when this process took it up (for ``timeTakenInMillis``)."""


async def pending_rollbacks(store: Store, dest: str, instants: Sequence[Instant]) -> list[RollbackRecord]:
    """The pending (requested or inflight) rollback instants among ``instants`` with a plan
    amcommit can read, newest first (one read each; none when there is none: the common
    case costs nothing). A plan it cannot read (another writer's) is logged and left alone."""
    rollbacks = [i for i in instants if i.action == Action.ROLLBACK.value]
    done = {i.time for i in rollbacks if i.completed}  # a listing names each state's file
    pending = sorted({i.time for i in rollbacks} - done, reverse=True)
    uri = table_uri(store, dest)
    out: list[RollbackRecord] = []
    for t in pending:
        path = join(dest, HOODIE_DIR, Instant(t, Action.ROLLBACK.value, State.REQUESTED).file_name)
        try:
            plan = decode_rollback_plan(await store.get(path), root_uri=uri, where=path)
        except NotFound:
            continue  # an inflight without its plan: not one of ours
        except ManifestError as e:
            log.warning("pending rollback %s of %s left alone: %s", t, dest, e)
            continue
        out.append(RollbackRecord(t, plan, time.monotonic()))
    return out


async def _pending_for(
    store: Store, dest: str, target: str, instants: list[Instant]
) -> RollbackRecord | None:
    """A pending rollback instant whose stored plan targets ``target``; None if there is none."""
    for rec in await pending_rollbacks(store, dest, instants):
        if rec.plan.target == target:
            return rec
    return None


async def begin_rollback(
    store: Store, dest: str, target: str, config: CommitterConfig = DEFAULT_CONFIG
) -> RollbackRecord | None:
    """Steps 1 and 2 of the module doc for the pending deltacommit ``target``, or the pending
    rollback of it found on the timeline (its inflight file written if missing). None if
    ``target`` is completed, or is no deltacommit and no rollback of it is pending: nothing
    is recorded. One listing of ``.hoodie/`` (and the markers' listing for a new plan)."""
    if await completed_instant(store, dest, target) is not None:
        return None
    rs = RetryingStore.of(store, config)
    hoodie = join(dest, HOODIE_DIR)
    instants = await Timeline(store, dest, config=config).files()
    rec = await _pending_for(store, dest, target, instants)
    if rec is None:
        if not any(i.time == target and i.action == Action.DELTA_COMMIT.value for i in instants):
            return None
        files: dict[str, list[str]] = {}
        for rel in sorted(await marked_files(store, dest, target, config) or ()):
            files.setdefault(partition_of(rel), []).append(rel)
        plan = RollbackPlan(target, Action.DELTA_COMMIT.value, files)
        data = encode_rollback_plan(plan, root_uri=table_uri(store, dest))
        after = max(i.time for i in instants)
        while True:
            t = next_instant(datetime.now(UTC), after=after)
            if await create_once(rs, join(hoodie, f"{t}.rollback.requested"), data):
                break
            after = t  # another writer claimed this time: a later one
        rec = RollbackRecord(t, plan, time.monotonic())
    if not any(
        i.time == rec.instant and i.action == Action.ROLLBACK.value and i.state is State.INFLIGHT
        for i in instants
    ):
        await create_once(rs, join(hoodie, f"{rec.instant}.rollback.inflight"), b"")
    return rec


async def complete_rollback(
    store: Store, dest: str, rec: RollbackRecord, config: CommitterConfig = DEFAULT_CONFIG
) -> None:
    """Step 4 of the module doc: ``<R>.rollback``, naming every file of the plan (deleted
    now or already gone). The caller has deleted them and the target's instant files."""
    meta = RollbackMetadata(
        instant=rec.instant,
        target=rec.plan.target,
        action=rec.plan.action,
        time_taken_ms=int((time.monotonic() - rec.started) * 1000),
        deleted=rec.plan.files,
    )
    data = encode_rollback_metadata(meta, root_uri=table_uri(store, dest))
    await create_once(
        RetryingStore.of(store, config), join(dest, HOODIE_DIR, f"{rec.instant}.rollback"), data
    )
