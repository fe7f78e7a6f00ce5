"""Compaction of a Merge-on-Read table: file slices with log files become new base files.

::

    report = await compact_store(store, dest)              # an opened store
    report = await compact_async("gs://bucket/table")       # a store URL
    report = compact("/data/table", store_options=None)    # blocking

A compaction ``Tc`` is recorded as Hudi (table version 6) records it:

1. ``Tc.compaction.requested``: the plan (Avro ``HoodieCompactionPlan``,
   :mod:`amcommit.table.format.compaction`; which slices: :mod:`.compaction_plan`), created
   create-only, which claims the time ``Tc`` (later than every instant on the timeline);
2. ``Tc.compaction.inflight``: the same plan;
3. per operation one new base file ``<fileId>_<op>-0-0_<Tc>.parquet`` in the slice's
   partition: the slice's base file merged with its log blocks by the table's payload
   (:func:`amcommit.table.query.merge.merge_slice`: the blocks of completed instants, rollback
   command blocks applied, deletes), every record keeping its ``_hoodie_commit_time`` and
   ``_hoodie_commit_seqno`` (``_hoodie_file_name`` names the new file), with the bloom
   footer every base file carries. The names depend on the plan only, so a rerun writes
   the same files again;
4. ``Tc.commit`` (JSON commit metadata, ``"compacted": true``, ``operationType``
   ``COMPACT``, a write stat per new base file whose ``prevCommit`` is the compacted
   slice's base instant): created last, create-only. **This is the compaction's atomic
   step**: readers (amcommit's ``read``, hudi-rs) see the new slices from it on, and
   before it they read the old slices (a pending compaction's files are stamped with an
   instant that is not completed). Records are the same either way; only the
   read-optimized view changes (it then equals the snapshot for the compacted groups).

**One step under the table's commit lock.** Steps 1-4 run holding the destination lock
every table commit takes (``.hoodie/.aux/amcommit/_commit.lock``), after checking, under
that lock, that no write is pending. That is what guarantees that no write adds a log
file to a file group while its compaction is pending (hudi-rs 0.5 drops log files named
after a *pending* compaction, and a log file named after the old slice, committed after
the compaction, would be read by nobody):

- a write pending when the compaction looks (its ``.requested`` on the timeline) makes the
  compaction wait, not holding the lock, for it to end (``wait``; inline compactions do
  not wait: they are deferred to a later write) -- Hudi's rule that no inflight write is
  earlier than a compaction; a pending write whose writer is dead (heartbeat) is rolled
  back first;
- a write that begins after the compaction claimed ``Tc`` lists ``Tc.compaction.requested``
  when it reads the table; before it reads the file slices it completes or waits for any
  pending compaction (:func:`finish_pending_compactions`, which takes the same lock), so
  its log files are named after the new slices;
- a write that began in between (its ``.requested`` written after the compaction's first
  listing, before ``Tc``'s plan) is found by a second listing after the plan is written:
  the plan is then withdrawn (``Tc.compaction.requested`` deleted; nothing else was
  written) and the compaction waits for that write as above.

Pending compactions are strictly ordered: the earliest completes first, and a new plan is
made only when none is pending (so a plan never names a file group another pending plan
names).

**Recovery.** A compaction killed after its plan was written (``.requested`` or
``.inflight`` left) is *completed*, never rolled back, with the same plan, by whichever
comes next: the next compaction (it completes pending ones first) or the next write of a
Merge-on-Read table (before it reads the file slices). Completing is always possible (the
plan names files no clean removes while it is pending: they are the table's latest slices)
and keeps the plan's promise that those slices get compacted, whereas rolling back would
need deleting base files first and then the plan. A rerun rewrites every base file of the
plan (same names) before it publishes ``Tc.commit``. A killed compaction's lock is taken
over at once on the same host (its process is provably dead), else after ``lock_ttl``.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.lock import run_locked
from amcommit.errors import AlreadyExists, ConflictError, NotFound
from amcommit.parallel import gather_limited, run_parallel
from amcommit.paths import join
from amcommit.store.base import PutMode, Store
from amcommit.store.retry import RetryingStore
from amcommit.table.commit.compaction_plan import deltacommits_since_compaction, plan_compaction
from amcommit.table.errors import NotATable
from amcommit.table.file_group.merge import parquet_with_index, set_file_name
from amcommit.table.format.bloom import DEFAULT_SETTINGS as BLOOM
from amcommit.table.format.compaction import CompactionPlan, decode_compaction_plan, encode_compaction_plan
from amcommit.table.format.model import (
    WRITE_ACTIONS,
    Action,
    CommitMetadata,
    Instant,
    State,
    WriteStat,
    decode_commit_metadata,
    encode_commit_metadata,
)
from amcommit.table.format.naming import (
    HOODIE_DIR,
    META_COLUMNS,
    STAGING_DIR,
    base_file_name,
    next_instant,
    write_token,
)
from amcommit.table.format.properties import TableProperties, decode_properties
from amcommit.table.query.merge import LogBytes, SliceRecipe, live_blocks, merge_slice, payload_of
from amcommit.table.settings import table_settings
from amcommit.table.timeline.instants import create_once, file_groups
from amcommit.table.timeline.reader import Timeline
from amcommit.table.write.task import write_claimed

__all__ = [
    "CompactionReport",
    "compact",
    "compact_async",
    "compact_if_due",
    "compact_store",
    "finish_pending_compactions",
    "pending_compactions",
]

log = logging.getLogger(__name__)

PAYLOAD_CLASS = "hoodie.compaction.payload.class"
PRECOMBINE_FIELD = "hoodie.table.precombine.field"
OPERATION_TYPE = "COMPACT"
COMPACTION_CONCURRENCY = 8
"""File slices merged at once (each holds its rows in memory while it is merged)."""
_COMMIT_TIME = META_COLUMNS[0]


@dataclass
class CompactionReport:
    """What a compaction did."""

    dest: str
    instant: str | None = None
    """The compaction instant completed by this call (None: nothing to compact, or deferred)."""
    file_groups: int = 0
    """File slices compacted (operations of the plan)."""
    files: list[str] = field(default_factory=list)
    """New base files, table-relative."""
    bytes_written: int = 0
    rows: int = 0
    log_files: int = 0
    """Log files merged."""
    resumed: list[str] = field(default_factory=list)
    """Pending compactions (killed earlier) completed first, with their stored plans."""
    rolled_back: list[str] = field(default_factory=list)
    """Pending writes whose writers were dead, rolled back before planning."""
    deferred: list[str] = field(default_factory=list)
    """Pending writes that kept this compaction from running (``wait=False``): it was not
    planned; a later one will be."""
    withdrawn: list[str] = field(default_factory=list)
    """Plans written and withdrawn at once because a write began meanwhile (module doc)."""


@dataclass(frozen=True)
class _Busy:
    pending: tuple[str, ...]


def pending_compactions(instants: list[Instant]) -> list[str]:
    """Times of the compactions planned (``.compaction.requested`` / ``.inflight``) and not
    completed (no ``<t>.commit``), oldest first. Pure."""
    done = {i.time for i in instants if i.completed and i.action in WRITE_ACTIONS}
    return sorted({i.time for i in instants if i.action == Action.COMPACTION.value} - done)


def _pending_writes(instants: list[Instant]) -> list[str]:
    done = {i.time for i in instants if i.completed}
    return sorted({i.time for i in instants if not i.completed and i.action in WRITE_ACTIONS} - done)


def _compaction_commits(instants: list[Instant]) -> set[str]:
    done = {i.time for i in instants if i.completed and i.action == Action.COMMIT.value}
    return {i.time for i in instants if i.action == Action.COMPACTION.value} & done


async def _properties(rs: Store, dest: str) -> TableProperties:
    path = join(dest, HOODIE_DIR, "hoodie.properties")
    try:
        data = await rs.get(path)
    except NotFound:
        raise NotATable.make(dest) from None
    return decode_properties(data, where=path)


def _rel(partition: str, name: str) -> str:
    return f"{partition}/{name}" if partition else name


async def _latest_schema(rs: Store, dest: str, instants: list[Instant]) -> str | None:
    for i in sorted((i for i in instants if i.completed and i.action in WRITE_ACTIONS), reverse=True):
        path = join(dest, HOODIE_DIR, i.file_name)
        schema = decode_commit_metadata(await rs.get(path), where=path).extra_metadata.get("schema")
        if schema:
            return schema
    return None


def _merged_file(
    base_bytes: bytes | None,
    logs: list[LogBytes],
    trusted: frozenset[str],
    recipe: SliceRecipe,
    name: str,
    base_instant: str,
) -> tuple[bytes, int, int]:
    """The new base file of one operation: (Parquet bytes with the bloom footer, rows,
    rows written by the logs); empty bytes when the slice holds no record and has no base
    file. ``base_bytes``: the base file's Parquet bytes (None: a log-only slice), decoded
    here. Pure (runs in a worker thread, off the event loop)."""
    base = pq.read_table(pa.BufferReader(base_bytes)) if base_bytes is not None else None
    merged = merge_slice(base, live_blocks(logs, trusted.__contains__), recipe)
    if merged is None:
        return b"", 0, 0
    merged = merged.replace_schema_metadata(None)
    names = merged.column_names
    meta = [c for c in META_COLUMNS if c in names]
    merged = merged.select(meta + [c for c in names if c not in meta])
    from_logs = 0
    if _COMMIT_TIME in names and merged.num_rows:
        from_logs = int(pc.sum(pc.greater(merged.column(_COMMIT_TIME), base_instant)).as_py() or 0)
    if META_COLUMNS[4] in names:
        merged = set_file_name(merged, name)
    return parquet_with_index(merged, BLOOM), merged.num_rows, from_logs


async def _execute(
    rs: Store,
    dest: str,
    tc: str,
    plan: CompactionPlan,
    props: TableProperties,
    instants: list[Instant],
    config: CommitterConfig,
    report: CompactionReport,
) -> None:
    """Steps 2-4 of the module doc for the plan of ``tc`` (its ``.requested`` exists)."""
    hoodie = join(dest, HOODIE_DIR)
    plan_bytes = encode_compaction_plan(plan)
    inflight = Instant(tc, Action.COMPACTION.value, State.INFLIGHT).file_name
    if not any(i.time == tc and i.state is State.INFLIGHT for i in instants):
        await rs.put(join(hoodie, inflight), plan_bytes, mode=PutMode.OVERWRITE)
    # the blocks that count: those of the instants completed when the plan was made (every
    # completed write instant before ``tc``; a deltacommit completed later writes its logs
    # against the new slice)
    trusted = frozenset(i.time for i in instants if i.completed and i.action in WRITE_ACTIONS and i.time < tc)
    recipe = SliceRecipe(
        key_fields=props.record_key_fields,
        payload=payload_of(props.values.get(PAYLOAD_CLASS)),
        precombine=props.values.get(PRECOMBINE_FIELD) or None,
        meta_fields=props.meta_fields,
    )
    stats: dict[int, WriteStat] = {}

    async def one(job: tuple[int, Any]) -> None:
        idx, op = job
        # the base file and every log file of the slice fetched at once (not one after
        # another); the logs are merged in their plan order whatever order they arrive in
        rels = [_rel(op.partition, n) for n in op.delta_files]
        paths = ([_rel(op.partition, op.data_file)] if op.data_file else []) + rels
        fetched = await gather_limited([partial(rs.get, join(dest, p)) for p in paths], len(paths))
        base = fetched[0] if op.data_file else None
        logs = [
            LogBytes(rel, data) for rel, data in zip(rels, fetched[len(paths) - len(rels) :], strict=True)
        ]
        name = base_file_name(op.file_id, write_token(idx, 0, 0), tc)
        body, rows, from_logs = await anyio.to_thread.run_sync(
            _merged_file, base, logs, trusted, recipe, name, op.base_instant
        )
        if not body:
            return
        rel = _rel(op.partition, name)
        await rs.put(join(dest, rel), body, mode=PutMode.OVERWRITE)  # a rerun: the same file again
        stats[idx] = WriteStat(
            file_id=op.file_id,
            path=rel,
            prev_commit=op.base_instant,
            num_writes=rows,
            num_update_writes=from_logs,
            total_write_bytes=len(body),
            partition_path=op.partition,
            file_size_in_bytes=len(body),
        )
        report.log_files += len(op.delta_files)

    await run_parallel(
        list(enumerate(plan.operations)), one, max(1, min(config.io_threads, COMPACTION_CONCURRENCY))
    )
    by_partition: dict[str, list[WriteStat]] = {}
    for idx in sorted(stats):
        by_partition.setdefault(stats[idx].partition_path, []).append(stats[idx])
    extra = {"schema": schema} if (schema := await _latest_schema(rs, dest, instants)) else {}
    meta = CommitMetadata(
        partition_to_write_stats=by_partition,
        compacted=True,
        extra_metadata=extra,
        operation_type=OPERATION_TYPE,
    )
    # the commit: created last, once (an existing one is an earlier run's, its answer lost)
    await create_once(rs, join(hoodie, f"{tc}.{Action.COMMIT.value}"), encode_commit_metadata(meta))
    report.file_groups += len(plan.operations)
    report.files += [s.path for _, s in sorted(stats.items())]
    report.bytes_written += sum(s.file_size_in_bytes for s in stats.values())
    report.rows += sum(s.num_writes for s in stats.values())


async def _finish_pending(
    rs: Store, dest: str, instants: list[Instant], config: CommitterConfig, report: CompactionReport
) -> list[Instant]:
    """Complete every pending compaction of ``instants``, oldest first, from its stored
    plan (the caller holds the lock). The timeline listed afterwards."""
    pending = pending_compactions(instants)
    if not pending:
        return instants
    props = await _properties(rs, dest)
    for t in pending:
        path = join(dest, HOODIE_DIR, Instant(t, Action.COMPACTION.value, State.REQUESTED).file_name)
        try:
            raw = await rs.get(path)
        except NotFound:  # only the inflight file is left (Hudi's own tables): the same plan
            path = join(dest, HOODIE_DIR, Instant(t, Action.COMPACTION.value, State.INFLIGHT).file_name)
            raw = await rs.get(path)
        plan = decode_compaction_plan(raw, where=path)
        await _execute(rs, dest, t, plan, props, instants, config, report)
        report.resumed.append(t)
        log.info("completed the pending compaction %s of %s with its stored plan", t, dest)
    return await Timeline(rs, dest, config=config).files()


async def _claim(rs: Store, dest: str, data: bytes, after: str | None) -> str:
    """Create ``<t>.compaction.requested`` holding ``data`` at a time ``t`` later than
    ``after``; returns ``t``."""
    for _ in range(100):
        t = next_instant(datetime.now(UTC), after=after)
        path = join(dest, HOODIE_DIR, Instant(t, Action.COMPACTION.value, State.REQUESTED).file_name)
        try:
            await rs.put(path, data, mode=PutMode.CREATE)
        except AlreadyExists:
            if await rs.get(path) != data:  # not ours (a retried create whose answer was lost)
                after = t
                continue
        if await write_claimed(rs, dest, t):
            # a write claimed this very time (writers claim a staging folder, then look for
            # a compaction's claim of their time, as this looks for theirs): give it up
            await rs.delete(path)
            after = t
            continue
        return t
    raise ConflictError(f"compaction of {dest!r}: no free instant time to claim")


async def _dead_or_alive(
    rs: Store, dest: str, pending: list[str], config: CommitterConfig, report: CompactionReport
) -> list[str]:
    """Roll back the pending writes whose writers are dead (the caller holds the lock);
    the live ones."""
    from amcommit.committer.job import abort_held
    from amcommit.table.commit.kind import TableKind
    from amcommit.table.timeline.heartbeat import judge_writers, writer_alive

    ttl = table_settings(config).writer_ttl
    beats, now = await judge_writers(rs, dest, pending)
    alive = []
    for t in pending:
        if writer_alive(t, beats.get(t), now, ttl):
            alive.append(t)
        else:
            await abort_held(TableKind(), rs, dest, t, config=config)
            report.rolled_back.append(t)
    return alive


async def _compact_locked(
    s: Store, dest: str, config: CommitterConfig, target_io: float, report: CompactionReport
) -> _Busy | None:
    rs = RetryingStore.of(s, config)
    instants = await _finish_pending(
        rs, dest, await Timeline(rs, dest, config=config).files(), config, report
    )
    pending = _pending_writes(instants)
    if pending:
        alive = await _dead_or_alive(rs, dest, pending, config, report)
        if alive:
            return _Busy(tuple(alive))
        instants = await Timeline(rs, dest, config=config).files()
    props = await _properties(rs, dest)
    if not props.merge_on_read:
        return None  # a Copy-on-Write table has no log files

    commits = await Timeline(rs, dest, config=config).commits_held()
    plan = plan_compaction(file_groups(commits), target_io_mb=target_io)
    if plan is None:
        return None
    data = encode_compaction_plan(plan)
    tc = await _claim(rs, dest, data, instants[-1].time if instants else None)
    # a write that began after the first listing may have read the table before the plan
    # existed: withdraw the plan (nothing else was written) and wait for that write
    again = await Timeline(rs, dest, config=config).files()
    late = [t for t in _pending_writes(again) if t not in pending]
    if late:
        req = Instant(tc, Action.COMPACTION.value, State.REQUESTED).file_name
        await rs.delete(join(dest, HOODIE_DIR, req))
        report.withdrawn.append(tc)
        return _Busy(tuple(late))
    await _execute(rs, dest, tc, plan, props, again, config, report)
    report.instant = tc
    return None


def _owner() -> str:
    return f"compaction-{secrets.token_hex(6)}"


async def compact_store(
    store: Store,
    dest: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    target_io_mb: float | None = None,
    wait: bool = True,
) -> CompactionReport:
    """Compact the Merge-on-Read table at ``dest`` (module doc): complete pending
    compactions, then plan and run one under ``target_io_mb`` (default: the config's
    ``compaction_target_io``). ``wait``: while other writes are pending, wait for them (up to
    ``lock_wait``; then :class:`~amcommit.errors.ConflictError`, one line naming them);
    False: return at once with ``report.deferred`` naming them. A Copy-on-Write table, or
    one without log files, gives an empty report (no instant)."""
    settings = table_settings(config)
    target = float(target_io_mb if target_io_mb is not None else settings.compaction_target_io)
    if not target > 0:
        from amcommit.errors import ConfigError

        raise ConfigError("target_io_mb must be a number of megabytes > 0")
    report = CompactionReport(dest=dest)
    deadline = time.monotonic() + config.lock_wait
    delay = 0.05
    while True:
        busy = await run_locked(
            store,
            dest,
            _owner(),
            config,
            lambda s: _compact_locked(s, dest, config, target, report),
            staging=STAGING_DIR,
        )
        if busy is None:
            return report
        if not wait:
            report.deferred = list(busy.pending)
            return report
        if time.monotonic() >= deadline:
            raise ConflictError(
                f"compaction of {dest!r} waits for the pending write(s) {', '.join(busy.pending)} "
                "(their writers are alive); gave up after lock_wait: run it again once they ended"
            )
        await anyio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def finish_pending_compactions(
    store: Store, dest: str, config: CommitterConfig = DEFAULT_CONFIG, instants: list[Instant] | None = None
) -> list[str]:
    """Complete the pending compactions of the table at ``dest`` (waiting for the table's
    lock while a live compactor holds it): what a Merge-on-Read write calls before it reads
    the file slices (module doc). ``instants``: a listing of the timeline, if the caller has
    one. The compactions completed here (a compaction completed meanwhile by its own
    process is not counted). One listing when none is pending."""
    listed = instants if instants is not None else await Timeline(store, dest, config=config).files()
    if not pending_compactions(listed):
        return []
    report = CompactionReport(dest=dest)

    async def body(s: Store) -> None:
        rs = RetryingStore.of(s, config)
        await _finish_pending(rs, dest, await Timeline(rs, dest, config=config).files(), config, report)

    await run_locked(store, dest, _owner(), config, body, staging=STAGING_DIR)
    return report.resumed


async def compact_if_due(
    store: Store, dest: str, config: CommitterConfig = DEFAULT_CONFIG
) -> CompactionReport | None:
    """Inline compaction, called by a Merge-on-Read write after its deltacommit committed:
    compact (not waiting for other pending writes: deferred then) once ``compact_every``
    deltacommits completed since the latest compaction; None when not due (or
    ``compact_every`` is 0). One listing of the timeline when not due."""
    every = table_settings(config).compact_every
    if every <= 0:
        return None
    instants = await Timeline(store, dest, config=config).files()
    if deltacommits_since_compaction(instants, _compaction_commits(instants)) < every:
        return None
    return await compact_store(store, dest, config=config, wait=False)


async def compact_async(
    url: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    target_io_mb: float | None = None,
    wait: bool = True,
    store_options: dict[str, Any] | None = None,
) -> CompactionReport:
    """:func:`compact_store` of the table at store URL ``url`` (``file://``, ``abfs[s]://``,
    ``gs://``, plain paths); ``store_options`` open the store."""
    from amcommit.store.schemes import open_location

    store, dest = open_location(url, **(store_options or {}))
    async with store:
        return await compact_store(store, dest, config=config, target_io_mb=target_io_mb, wait=wait)


def compact(
    url: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    target_io_mb: float | None = None,
    wait: bool = True,
    store_options: dict[str, Any] | None = None,
) -> CompactionReport:
    """The blocking form of :func:`compact_async`."""
    from amcommit.loop import run_blocking

    return run_blocking(
        lambda: compact_async(
            url, config=config, target_io_mb=target_io_mb, wait=wait, store_options=store_options
        )
    )
