"""What ``amcommit jobs`` shows of a Hudi table (the table kind's
:meth:`~amcommit.table.commit.kind.TableKind.list_jobs`).

A table (``.hoodie/hoodie.properties``) is read as one: every instant that is not completed
(requested or inflight, or only claimed by a staging folder in ``.hoodie/.aux/amcommit``, or
an earlier version's in ``.hoodie/.temp``), with its
write's staging (marker, journal, manifests: :func:`amcommit.committer.jobs.job_info`), its
writer's heartbeat (``.hoodie/.heartbeat/<instant>``: alive, stopped, expired or none) and the
table's lock (``.hoodie/.aux/amcommit/_commit.lock``); the last commit is the latest completed
instant. Every read is separate (a best-effort snapshot, not an atomic one); nothing is
written. The interpretation of a heartbeat is pure (:func:`beat_state`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from amcommit.committer.config import CommitterConfig
from amcommit.committer.jobs import DestinationJobs, JobInfo, check_exists, job_info, lock_info, read_optional
from amcommit.committer.lock import LockBody, decode_lock, lock_path
from amcommit.coord.lease import marker_path
from amcommit.paths import join, path_to_uri
from amcommit.store.base import Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.model import State
from amcommit.table.format.naming import PROPERTIES_FILE, STAGING_DIR, heartbeat_path
from amcommit.table.timeline.heartbeat import STOPPED, last_beats
from amcommit.table.timeline.reader import timeline_files
from amcommit.table.write.staging import legacy_table_layout, staged_instants, table_layout

BeatState = Literal["alive", "stopped", "expired", "none"]
"""A table writer's heartbeat: ``alive`` (younger than ``writer_ttl``), ``stopped`` (its
commit failed or was cancelled: ``amcommit rollback`` takes it at once), ``expired``
(older: the next writer rolls it back), ``none`` (no heartbeat: judged by its first trace)."""


@dataclass(frozen=True, slots=True)
class TableWriteInfo:
    """An instant of a table that is not completed, or a completed one whose staging is
    still there (a writer that died in its cleanup)."""

    instant: str
    action: str
    """``commit``, ``replacecommit``, ``clean``...; "" for a claimed time without instant files."""
    state: str
    """``requested``, ``inflight``, ``completed`` (cleanup pending) or ``staged`` (only a
    staging folder: the write is being begun, or its begin was cut short)."""
    heartbeat: BeatState
    heartbeat_age: float | None = None
    """Seconds since the last beat (store modification time against this host's clock)."""
    staging: JobInfo | None = None
    """The write's staging folder (``.hoodie/.aux/amcommit/<instant>``, or an earlier
    version's ``.hoodie/.temp/<instant>``), if any."""
    holds_lock: bool = False


@dataclass(frozen=True, slots=True)
class LastInstant:
    """The latest completed instant of a table."""

    instant: str
    action: str


@dataclass(frozen=True, slots=True)
class TableJobs(DestinationJobs):
    """What :func:`list_table_jobs` found: the table's pending writes and its last instant
    (``jobs`` and ``last_commit`` stay empty: a table has no plain jobs)."""

    table_writes: list[TableWriteInfo] = field(default_factory=list)
    last_instant: LastInstant | None = None


def beat_state(
    last_beat: float | None, stopped: bool, now: float, ttl: float
) -> tuple[BeatState, float | None]:
    """``(state, age)`` of a table writer's heartbeat (pure)."""
    if stopped:
        return "stopped", None if last_beat is None else max(0.0, now - last_beat)
    if last_beat is None:
        return "none", None
    age = max(0.0, now - last_beat)
    return ("alive" if age <= ttl else "expired"), age


async def _table_writes(
    rs: RetryingStore, dest: str, lock: LockBody | None, writer_ttl: float
) -> tuple[list[TableWriteInfo], LastInstant | None]:
    """The table's instants that are not completed (and completed ones still staged), and
    its latest completed instant. Reads only (the heartbeats are judged by this host's
    clock against the store's modification times: no probe object is written). The reads
    the committer's helpers make are retried by them, with the handle's policy; the
    heartbeat listing is not retried (as before)."""
    store, policy = rs.inner, rs.policy
    instants = await timeline_files(rs, dest)
    rank = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}
    best: dict[str, tuple[str, State]] = {}
    for i in instants:
        cur = best.get(i.time)
        if cur is None or rank[i.state] > rank[cur[1]]:
            best[i.time] = (i.action, i.state)
    staged, legacy = await staged_instants(rs, dest)
    staged = staged | legacy
    beats = await last_beats(store, dest)
    now = time.time()
    out: list[TableWriteInfo] = []
    for t in sorted({t for t, (_, st) in best.items() if st is not State.COMPLETED} | staged):
        action, st = best.get(t, ("", None))
        stopped = False
        if t in beats:
            body = await read_optional(store, join(dest, heartbeat_path(t)), policy)
            stopped = body is not None and body.strip() == STOPPED
        state, age = beat_state(
            beats.get(t) if beats.get(t) != float("-inf") else None, stopped, now, writer_ttl
        )
        staging = None
        if t in staged:
            layout = legacy_table_layout(dest, t) if t in legacy else table_layout(dest, t)
            staging = await job_info(store, layout, lock, policy)
        out.append(
            TableWriteInfo(
                instant=t,
                action=action,
                state=st.value if st is not None else "staged",
                heartbeat=state,
                heartbeat_age=age,
                staging=staging,
                holds_lock=lock is not None and lock.owner == t,
            )
        )
    done = [(t, a) for t, (a, st) in best.items() if st is State.COMPLETED]
    last = LastInstant(*max(done)) if done else None
    return out, last


async def list_table_jobs(
    store: Store, dest: str, config: CommitterConfig, writer_ttl: float
) -> DestinationJobs | None:
    """The table at ``dest`` as ``amcommit jobs`` shows it (module doc), or None if ``dest``
    holds no table (no ``hoodie.properties``). ``writer_ttl`` judges the heartbeats. Reads
    only, through the retry layer; NotFound if nothing exists at ``dest``."""
    rs = RetryingStore.of(store, config)
    policy = rs.policy  # the committer's read helpers retry themselves
    await check_exists(store, dest, policy)
    if await read_optional(store, join(dest, PROPERTIES_FILE), policy) is None:
        return None
    path = lock_path(dest, staging=STAGING_DIR)
    lock_data = await read_optional(store, path, policy)
    table_lock = decode_lock(lock_data) if lock_data is not None else None
    if table_lock is not None and table_lock.token and not table_lock.released:
        table_lock.released = (
            await read_optional(store, marker_path(path, table_lock.token), policy) is not None
        )
    if table_lock is not None and table_lock.released:
        table_lock = None  # released by rewrite or by marker: nobody holds it
    writes, last_instant = await _table_writes(rs, dest, table_lock, writer_ttl)
    return TableJobs(
        dest_uri=path_to_uri(store.root_uri, dest),
        lock=lock_info(table_lock) if table_lock is not None else None,
        lock_unreadable=lock_data is not None and decode_lock(lock_data) is None,
        table_writes=writes,
        last_instant=last_instant,
    )


__all__ = ["BeatState", "LastInstant", "TableJobs", "TableWriteInfo", "beat_state", "list_table_jobs"]
