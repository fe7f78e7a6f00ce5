"""The job commit of a table write: files first, the completed instant last.

``commit_job(store, dest, instant)`` on a table destination runs :class:`~amcommit.table.commit.kind.TableKind`'s hooks: the
usual journaled commit (:mod:`amcommit.committer.job`: manifests, journal, renames, resume,
rollback, retries) under the table's destination lock, with these table stages
(:class:`TablePlan`, run by the engine's journal state machine,
:mod:`amcommit.committer.machine`):

==================  =================================================================
``check_order``     instants complete in allocation order (pitfall 8): a *later* completed
                    write instant fails the commit (the write is rolled back: run it
                    again); an *earlier* inflight one whose writer is alive (heartbeat)
                    is waited for without holding the lock (up to ``lock_wait``); one
                    whose writer is gone is rolled back first.
``check_conflicts`` an UPSERT / DELETE only: a file group it rewrites that an instant
                    completed after the write read it rewrote or replaced fails the commit
                    (:class:`~amcommit.table.errors.WriteConflict`; the write is rolled back).
``plan_commit``     the commit metadata (write stats, row counts, ``extraMetadata.schema``,
                    ``operationType``, and for overwrites ``partitionToReplaceFileIds``
                    computed from the timeline under the lock) is saved in the staging
                    folder: a resume publishes exactly it.
``prepare_dirs``,   the files are renamed into the table under their base file names.
``rename_files``    Readers do not see them yet: they are stamped with an inflight instant.
``partition_meta``  ``.hoodie_partition_metadata`` in every partition written (create-only).
(journal renamed)   point of no return (as for plain commits: ``abort_job`` completes).
``publish``         the completed ``<instant>.commit`` / ``.replacecommit`` is published
                    atomically: the saved plan is renamed to it (stores with atomic
                    renames), else a create-only put of the plan's bytes. This is the
                    commit.
==================  =================================================================

Then the heartbeat and the staging folder (``.hoodie/.aux/amcommit/<instant>/``) are removed
(the journal last); a direct write's markers after the lock is released
(:meth:`~amcommit.table.commit.kind.TableKind.guard`). Overwrites never
delete or move old files: replaced file groups stay until a clean. The ``.requested`` and
inflight files stay next to the completed instant, as Hudi leaves them.
"""

from __future__ import annotations

import io
import logging
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
import msgspec

from amcommit.committer.completeness import partial_allowed
from amcommit.committer.config import CommitterConfig
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.job import abort_held
from amcommit.committer.journal import Journal, restore_renames
from amcommit.committer.kind import JobKind
from amcommit.committer.machine import Fresh
from amcommit.committer.report import JobReport
from amcommit.committer.stages.load_manifests import LoadedManifests, ManifestCheck
from amcommit.errors import (
    AlreadyExists,
    CommitError,
    ConflictError,
    IncompleteJob,
    ManifestError,
    NotFound,
)
from amcommit.manifest import CheckedManifest, TaskManifest
from amcommit.parallel import run_parallel
from amcommit.paths import basename, join, path_to_uri, relative_to
from amcommit.store.base import PutMode, Store
from amcommit.store.names import shorten
from amcommit.table.commit.undo import rollback_table_write
from amcommit.table.format.model import (
    WRITE_ACTIONS,
    Action,
    CommitMetadata,
    Instant,
    Operation,
    State,
    WriteStat,
    decode_commit_metadata,
    encode_commit_metadata,
)
from amcommit.table.format.naming import (
    BASE_FILE_EXTENSION,
    HOODIE_DIR,
    PARTITION_METADATA_FILE,
    foreign_file,
    heartbeat_path,
)
from amcommit.table.format.properties import TableProperties
from amcommit.table.format.tasknames import ROWS_KEY
from amcommit.table.format.writestats import (
    STATS_KEY,
    SplicedStats,
    paths_of_task_stats,
    rewrites_of_task_stats,
    rows_of_task_stats,
    seen_logs_of_task_stats,
    spliced_write_stats,
    write_stat,
)
from amcommit.table.report import TableReport, table_report
from amcommit.table.settings import DEFAULT_SETTINGS, TableSettings
from amcommit.table.timeline.heartbeat import delete_beat, judge_writers, writer_alive
from amcommit.table.timeline.instants import LoadedCommit, completed_instant, snapshot
from amcommit.table.timeline.labelmeta import Label, committed_by, label_metadata, label_of
from amcommit.table.timeline.reader import Timeline
from amcommit.table.write.direct import (
    Marker,
    Published,
    check_markers,
    check_one_mode,
    is_direct,
    reconcile,
    remove_markers,
    sweep_instant,
)
from amcommit.table.write.staging import find_table_layout, staged_instants, table_layout
from amcommit.table.write.task import WriteMarker, read_marker, read_properties

__all__ = [
    "OrderPlan",
    "TablePlan",
    "completed_instant",
    "plan_order",
]

PLAN_NAME = "commit-plan.json"

log = logging.getLogger("amcommit.table.commit.table_commit")


class WaitForEarlier(Exception):
    """Raised inside the locked commit body: release the lock, wait for ``instant``, retry."""

    def __init__(self, instant: str) -> None:
        super().__init__(instant)
        self.instant = instant


@dataclass
class OrderPlan:
    """What the order check found for instant ``mine`` (pure result of :func:`plan_order`)."""

    later_completed: str | None = None
    wait_for: str | None = None
    dead: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    """Completed instants whose staging folder is still there (a writer died after
    publishing, before its cleanup): the next commit removes it."""


def pending_write_times(instants: Sequence[Instant], staged: set[str]) -> set[str]:
    """Times of write instants that are not completed (plus staged-only claims)."""
    done = {i.time for i in instants if i.completed}
    pending = {i.time for i in instants if not i.completed and i.action in WRITE_ACTIONS}
    return (pending | staged) - done


def plan_order(
    mine: str,
    instants: Sequence[Instant],
    staged: set[str],
    beats: dict[str, float],
    now: float,
    ttl: float,
) -> OrderPlan:
    """Pure: a later completed write instant; else the earliest earlier pending instant
    whose writer is alive (to wait for); and the earlier ones whose writers are gone."""
    plan = OrderPlan()
    plan.leftovers = sorted(staged & {i.time for i in instants if i.completed and i.action in WRITE_ACTIONS})
    later = sorted(i.time for i in instants if i.completed and i.action in WRITE_ACTIONS and i.time > mine)
    if later:
        plan.later_completed = later[0]
        return plan
    for t in sorted(pending_write_times(instants, staged)):
        if t >= mine:
            continue
        if writer_alive(t, beats.get(t), now, ttl):
            if plan.wait_for is None:
                plan.wait_for = t
        else:
            plan.dead.append(t)
    return plan


async def staged_times(store: Store, dest: str) -> set[str]:
    """Instants with a staging folder (:func:`~amcommit.table.write.staging.staged_instants`)."""
    staged, legacy = await staged_instants(store, dest)
    return staged | legacy


async def _order_inputs(store: Store, dest: str) -> tuple[list[Instant], set[str]]:
    """The timeline and the staged instants: two listings (``.hoodie/`` once, through the
    timeline handle, and the staging folders), sent together."""
    instants: list[Instant] = []
    staged: set[str] = set()

    async def timeline() -> None:
        instants.extend(await Timeline(store, dest).files())

    async def staging() -> None:
        staged.update(await staged_times(store, dest))

    async with anyio.create_task_group() as tg:
        tg.start_soon(timeline)
        tg.start_soon(staging)
    return instants, staged


async def _order_state_and_timeline(
    store: Store, dest: str, mine: str, ttl: float
) -> tuple[OrderPlan, list[Instant]]:
    """:func:`plan_order` on fresh listings, and the timeline it judged. The writers of
    earlier pending instants (if any) are judged by the store's clock
    (:func:`~amcommit.table.timeline.heartbeat.judge_writers`)."""
    instants, staged = await _order_inputs(store, dest)
    staged.discard(mine)
    earlier = [t for t in pending_write_times(instants, staged) if t < mine]
    beats, now = await judge_writers(store, dest, earlier)
    return plan_order(mine, instants, staged, beats, now, ttl), instants


async def _order_state(store: Store, dest: str, mine: str, ttl: float) -> OrderPlan:
    return (await _order_state_and_timeline(store, dest, mine, ttl))[0]


def later_completed(mine: str, instants: Sequence[Instant]) -> str | None:
    """The earliest completed write instant later than ``mine``, if any (pure)."""
    later = [i.time for i in instants if i.completed and i.action in WRITE_ACTIONS and i.time > mine]
    return min(later) if later else None


def completed_in(instants: Sequence[Instant], instant: str) -> Instant | None:
    """The completed write instant at time ``instant`` in a listed timeline, if any."""
    found = [i for i in instants if i.time == instant and i.completed and i.action in WRITE_ACTIONS]
    return min(found) if found else None


def _out_of_order(mine: str, later: str) -> CommitError:
    return CommitError(
        f"instant {mine} cannot complete: the later instant {later} completed first (incremental "
        "readers would skip it); the write was rolled back, run it again",
        stage="check_order",
    )


async def check_order(ctx: JobContext, kind: JobKind, writer_ttl: float) -> list[Instant]:
    """The ``check_order`` stage (under the lock, before anything changes); returns the
    timeline it judged (listed under the lock: :func:`plan_commit` plans from it).
    ``kind``: the table's kind, to abort other writes with (the lock is held);
    ``writer_ttl``: judges the other writers' heartbeats."""
    store, dest, mine = ctx.store, ctx.layout.dest, ctx.layout.job_id
    for _ in range(100):
        plan, instants = await _order_state_and_timeline(store, dest, mine, writer_ttl)
        if plan.later_completed is not None:
            await abort_held(kind, store, dest, mine, config=ctx.config)
            raise _out_of_order(mine, plan.later_completed)
        if plan.dead:
            for t in plan.dead:  # the writer is gone: roll its instant back (or complete it)
                if (await abort_held(kind, store, dest, t, config=ctx.config)).success:
                    ctx.report.completed_previous = t  # its commit was past the point of no return
                ctx.report.job_stats.incr("table_dead_writers_rolled_back")
            continue
        if plan.wait_for is not None:
            raise WaitForEarlier(plan.wait_for)
        for t in plan.leftovers:  # committed by a writer that died before its cleanup
            left = await find_table_layout(store, dest, t)
            staging = table_layout(dest, t) if left is None else left
            await ctx.call(lambda j=staging.job_dir: store.delete(j, recursive=True))  # type: ignore[misc]
            await delete_beat(store, dest, t)
        return instants
    raise CommitError(f"instant {mine}: the timeline keeps changing", stage="check_order")


async def wait_for_earlier(
    store: Store, dest: str, mine: str, other: str, deadline: float, ttl: float
) -> None:
    """Wait (not holding the lock) until instant ``other`` is completed, gone, or its writer
    dead; ConflictError naming it once ``deadline`` (monotonic) passes. Says so first, in
    one line (WARNING on this module's logger)."""
    delay = 0.05
    told = False
    while True:
        plan = await _order_state(store, dest, mine, ttl)
        if plan.wait_for != other:
            return
        if not told:
            told = True
            sign = await _sign_of_life(store, dest, other)
            log.warning(
                "instant %s of %s waits for the earlier instant %s, whose writer is alive (%s): at "
                "most %.0f s (lock_wait), less once that write ends or that is %g s old (writer_ttl; "
                "at once if its process dies on this host)",
                mine,
                path_to_uri(store.root_uri, dest),
                other,
                sign,
                max(0.0, deadline - time.monotonic()),
                ttl,
            )
        if time.monotonic() >= deadline:
            sign = await _sign_of_life(store, dest, other)
            raise ConflictError(
                f"instant {mine} must complete after the earlier instant {other}, whose writer is "
                f"still running ({sign}); gave up waiting (lock_wait). Run the commit again "
                "once that write finished, or roll it back (`amcommit rollback DEST --instant "
                f"{other}`) if its writer is gone"
            )
        await anyio.sleep(delay)
        delay = min(delay * 2, 1.0, ttl / 8)


async def _sign_of_life(store: Store, dest: str, instant: str) -> str:
    """What the writer of pending ``instant`` was judged alive by, for a message: its fresh
    heartbeat, or (none there: another writer's instant, or one whose first beat is still
    to come) its young ``.requested`` file or job marker (:func:`~amcommit.table.timeline.heartbeat.judge_writers`)."""
    try:
        await store.stat(join(dest, heartbeat_path(instant)))
    except NotFound:
        return "no heartbeat file; its write began less than writer_ttl ago"
    return "fresh heartbeat"


def _rows_by_path(loaded: LoadedManifests) -> dict[str, int]:
    """Row count by path (relative to the table) from each manifest's ``extra_data``: its
    ``hudi.rows`` (an older amcommit's task commit), else the write stats it carries."""
    rows: dict[str, int] = {}
    for extra in loaded.extra_data:
        raw = extra.get(ROWS_KEY)
        if not raw:
            stats = extra.get(STATS_KEY)
            if stats:
                rows.update(rows_of_task_stats(stats))
            continue
        try:
            got = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise ManifestError(f"a task manifest's extra_data[{ROWS_KEY!r}] is not JSON") from None
        if isinstance(got, dict):
            if all(type(v) is int for v in got.values()):
                rows.update(got)
            else:
                rows.update({k: int(v) for k, v in got.items()})
    return rows


async def _schema_of(
    ctx: JobContext,
    loaded: LoadedManifests,
    marker: WriteMarker,
    table: str,
    writes: Sequence[Instant],
    commits: Sequence[LoadedCommit],
) -> str:
    """The schema this commit records: the write's (declared to ``begin_write``, else that
    of a written file) evolved from the table's latest committed one by the schema-on-write
    rules (:func:`~amcommit.table.format.schema.evolve_schema`: SchemaMismatch fails the commit
    before anything is published). ``begin_write``'s own result is taken when the latest
    write instant is still the one it checked against (no read)."""
    from amcommit.table.format.schema import avro_schema, evolve_schema
    from amcommit.table.write.task import committed_schema, latest_write

    base = latest_write(list(writes))
    if marker.recorded_schema and marker.schema_base == ("" if base is None else base.time):
        return marker.recorded_schema
    known = {c.instant.time: c.metadata for c in commits}
    if base is None:
        table_schema = None
    elif base.time in known:
        table_schema = known[base.time].extra_metadata.get("schema") or None
    else:
        table_schema = await committed_schema(ctx.store, ctx.layout.dest, base, ctx.config)
    write_schema = marker.avro_schema
    if not write_schema:
        import pyarrow.parquet as pq

        in_place = is_direct(loaded.extra_data)  # a direct write's files are at their names
        for e in loaded.spool.entries():
            path = e.dst if in_place else e.src
            data = await ctx.call(lambda p=path: ctx.store.get(p))  # type: ignore[misc]
            write_schema = avro_schema(pq.ParquetFile(io.BytesIO(data)).schema_arrow, table)
            break
    if write_schema:
        return evolve_schema(table_schema, write_schema, allow_missing=marker.allow_missing_columns)
    if table_schema:
        return table_schema
    props = await read_properties(ctx.store, ctx.layout.dest, ctx.config)
    if props is not None and props.create_schema:
        return props.create_schema
    raise CommitError("the write has no schema: give avro_schema to begin_write", stage="plan_commit")


def rewrite_conflict(
    rewrites: Sequence[tuple[str, str, str]],
    commits: Sequence[LoadedCommit],
    mine: str,
    seen_logs: dict[tuple[str, str], frozenset[str]] | None = None,
) -> tuple[str, str, str] | None:
    """``(other instant, partition, fileId)`` of the first file group this write rewrites
    (``(partition, fileId, prevCommit)`` each) that another completed commit later than its
    ``prevCommit`` added a version of, or replaced, or (Merge-on-Read) added a log file to
    that is not among the log files this write saw (``seen_logs``: by group, the
    ``logFiles`` of its log stat; a log write's ``prevCommit`` is the slice's base instant);
    None if none did. Pure (Hudi's ``SimpleConcurrentFileWritesConflictResolutionStrategy``,
    by file group)."""
    prev = {(p, fid): t for p, fid, t in rewrites}
    saw = seen_logs or {}
    for c in sorted(commits, key=lambda c: c.instant.time):
        t = c.instant.time
        if t == mine:
            continue
        touched = [(f.partition, f.file_id) for f in c.added()] + c.replaced()
        touched += [
            (lg.partition, lg.file_id)
            for lg in c.logs()
            if basename(lg.path) not in saw.get((lg.partition, lg.file_id), frozenset())
        ]
        for group in touched:
            seen = prev.get(group)
            if seen is not None and t > seen:
                return t, group[0], group[1]
    return None


async def check_conflicts(
    ctx: JobContext, kind: JobKind, loaded: LoadedManifests, instants: Sequence[Instant]
) -> None:
    """The ``check_conflicts`` stage of a record-level write (under the lock, before the
    plan): :class:`~amcommit.table.errors.WriteConflict` after rolling the write back if a
    file group it rewrites changed since it read it (:func:`rewrite_conflict`). Reads the
    metadata of the completed write instants after the oldest ``prevCommit`` only."""
    from amcommit.table.errors import WriteConflict

    rewrites = [
        r for extra in loaded.extra_data if (raw := extra.get(STATS_KEY)) for r in rewrites_of_task_stats(raw)
    ]
    if not rewrites:
        return
    seen: dict[tuple[str, str], frozenset[str]] = {}
    for extra in loaded.extra_data:
        raw = extra.get(STATS_KEY)
        if raw and '"logFiles"' in raw:
            seen.update(seen_logs_of_task_stats(raw))
    mine = ctx.layout.job_id
    oldest = min(t for _, _, t in rewrites)
    later = [i for i in instants if i.completed and i.action in WRITE_ACTIONS and oldest < i.time != mine]
    found = rewrite_conflict(rewrites, await _load_commits(ctx, later), mine, seen)
    if found is not None:
        other, partition, file_id = found
        await abort_held(kind, ctx.store, ctx.layout.dest, mine, config=ctx.config)
        raise WriteConflict.make(mine, other, partition, file_id)


async def _load_commits(ctx: JobContext, instants: Sequence[Instant]) -> list[LoadedCommit]:
    """The metadata of the completed write instants among ``instants`` (read in parallel)."""
    dest = ctx.layout.dest
    done = [i for i in instants if i.completed and i.action in WRITE_ACTIONS]
    metas: dict[Instant, CommitMetadata] = {}

    async def one(i: Instant) -> None:
        path = join(dest, HOODIE_DIR, i.file_name)
        data = await ctx.call(lambda: ctx.store.get(path))
        metas[i] = decode_commit_metadata(data, where=path)

    await run_parallel(done, one, ctx.config.io_threads)
    return [LoadedCommit(i, metas[i]) for i in done]


async def plan_commit(
    ctx: JobContext,
    marker: WriteMarker,
    loaded: LoadedManifests,
    instants: Sequence[Instant] | None = None,
    props: TableProperties | None = None,
) -> tuple[CommitMetadata, SplicedStats | None]:
    """The commit metadata of this write: ``(metadata, spliced)``; encode it with
    ``encode_commit_metadata(metadata, spliced=spliced)``.

    ``spliced``: the write stats of each partition as the task commits encoded them
    (:func:`~amcommit.table.format.writestats.spliced_write_stats`), the metadata then has none of
    its own; None when they cannot be used: the metadata then holds every stat, built from
    the rename entries.

    ``instants``: the timeline as the order check listed it under the lock (listed here if
    None). Commit metadata is read only where it is needed: every completed write instant
    for an overwrite (the replaced file groups), the latest one when the write's schema must
    be checked (again) against it (:func:`_schema_of`), none otherwise. ``props``: the
    table's properties (read here if None)."""
    dest = ctx.layout.dest
    if props is None:
        props = await read_properties(ctx.store, dest, ctx.config)
    if props is None:
        raise CommitError(f"{dest!r} lost its hoodie.properties", stage="plan_commit")
    depth = len(props.partition_fields)
    op = Operation(marker.operation)
    spool = loaded.spool
    spliced = spliced_write_stats(loaded.extra_data, loaded.manifests, spool.count, spool.total_bytes, depth)
    stats = _write_stats(ctx, loaded, props.partition_fields) if spliced is None else {}
    written = spliced if spliced is not None else stats
    if instants is None:
        instants = await Timeline(ctx.store, dest, config=ctx.config).files()
    writes = [i for i in instants if i.completed and i.action in WRITE_ACTIONS]
    replacing = op.action is Action.REPLACE_COMMIT
    commits = await _load_commits(ctx, writes) if replacing else []
    replace: dict[str, list[str]] | None = None
    if replacing:
        snap = snapshot(commits)
        replace = {p: [] for p in written}
        if op is Operation.INSERT_OVERWRITE_TABLE:
            for f in snap:
                replace.setdefault(f.partition, [])
        for f in snap:
            if f.partition in replace:
                replace[f.partition].append(f.file_id)
        for ids in replace.values():
            ids.sort()
    meta = CommitMetadata(
        partition_to_write_stats=dict(sorted(stats.items())),
        extra_metadata={"schema": await _schema_of(ctx, loaded, marker, props.name, writes, commits)},
        operation_type=op.value,
        partition_to_replace_file_ids=replace,
    )
    return meta, spliced


def _write_stats(
    ctx: JobContext, loaded: LoadedManifests, partition_fields: Sequence[str]
) -> dict[str, list[WriteStat]]:
    """Every write stat, built from the rename entries (and the manifests' row counts);
    ManifestError / CommitError naming a file that is not a base file of this instant, has
    no row count or is not as deep as the partition fields."""
    dest, instant = ctx.layout.dest, ctx.layout.job_id
    depth = len(partition_fields)
    rows = _rows_by_path(loaded)
    stats: dict[str, list[WriteStat]] = {}
    prefix = dest + "/" if dest else ""
    # "<fileId>_<writeToken>_<instant>.parquet": the instant is known, so a name is checked
    # by its suffix and one split (what parse_base_file_name's pattern checks, 3x faster)
    suffix = f"_{instant}{BASE_FILE_EXTENSION}"
    cut = len(prefix)
    for e in loaded.spool.entries():
        dst = e.dst
        rel = dst[cut:] if dst.startswith(prefix) else relative_to(dst, dest)
        part, _, name = rel.rpartition("/")
        file_id, sep, token = name[: -len(suffix)].partition("_")
        if not (name.endswith(suffix) and sep and file_id and token and "_" not in token):
            raise ManifestError(f"{rel!r} is not a base file of instant {instant}")
        group = stats.get(part)
        if group is None:  # a new partition: check its depth once
            if (part.count("/") + 1 if part else 0) != depth:
                raise CommitError(
                    f"{rel!r} is not {depth} partition folder(s) deep (partition fields {list(partition_fields)})",
                    stage="plan_commit",
                )
            group = stats[part] = []
        n = rows.get(rel)
        if n is None:
            raise ManifestError(f"no row count for {rel!r} in its task manifest")
        group.append(write_stat(rel, part, file_id, n, e.size))
    for lst in stats.values():
        lst.sort(key=lambda s: s.path)
    return stats


def own_files_check(dest: str, instant: str, depth: int, *, logs: bool = False) -> ManifestCheck:
    """The table's check of each task manifest while the job commit loads them
    (:attr:`~amcommit.committer.stages.load_manifests.LoadInputs.check`): a write of
    ``instant`` publishes only its own base files, ``<fileId>_<writeToken>_<instant>.parquet``
    in partition folders ``depth`` deep (:func:`~amcommit.table.format.naming.foreign_file`;
    nothing into ``.hoodie/``, nothing stamped with another instant), and the write stats a
    task manifest carries name exactly the files it publishes (else the completed instant
    would name files that do not exist). ManifestError naming the manifest and the path;
    raised before anything is published. ``logs``: a Merge-on-Read table's write, whose log
    files (written in place under APPEND markers) are its own too."""
    cut = len(dest) + 1 if dest else 0

    def check(m: TaskManifest, c: CheckedManifest, name: str) -> None:
        rels = list(map(operator.itemgetter(slice(cut, None)), c.dsts))
        dirs = [d[cut:] if d != dest else "" for d in c.dirs]
        bad = foreign_file(rels, dirs, instant, depth, logs=logs)
        if bad is not None:
            path, why = bad
            raise ManifestError(
                f"destination {shorten(path)} is not this table write's to publish: {why}", manifest=name
            )
        raw = m.extra_data.get(STATS_KEY)
        named = None if raw is None else paths_of_task_stats(raw)
        if named is not None and (len(named) != len(rels) or set(named) != set(rels)):
            extra = sorted(set(named) - set(rels))
            if extra:
                why = f"its write stats name {shorten(extra[0])}, which it does not publish"
            else:
                missing = sorted(set(rels) - set(named)) or rels
                why = f"it publishes {shorten(missing[0])}, which its write stats do not name (once each)"
            raise ManifestError(why, manifest=name)

    return check


def partition_metadata(instant: str, depth: int) -> bytes:
    """``.hoodie_partition_metadata`` as Hudi writes it (a Java properties file)."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    return f"#partition metadata\n#{stamp}\ncommitTime={instant}\npartitionDepth={depth}\n".encode()


async def write_partition_metadata(
    ctx: JobContext, partitions: Sequence[str], new_dirs: frozenset[str] = frozenset()
) -> None:
    """Create ``.hoodie_partition_metadata`` in each partition written (create-only: the
    first write into a partition names itself; an existing one is kept). ``new_dirs``:
    directories this run created (prepare_dirs), which cannot hold one yet."""
    dest, instant = ctx.layout.dest, ctx.layout.job_id

    # local files: a stat costs a fraction of a create-only put (temp file, link, unlink);
    # object stores answer a create-only put of an existing object as fast as a stat
    stat_first = ctx.store.capabilities.local_root is not None

    async def one(part: str) -> None:
        folder = join(dest, part) if part else dest
        path = join(folder, PARTITION_METADATA_FILE)
        data = partition_metadata(instant, part.count("/") + 1 if part else 0)
        if stat_first and folder not in new_dirs:
            try:
                await ctx.call(lambda: ctx.store.stat(path))
                return
            except NotFound:
                pass
        try:
            await ctx.call(lambda: ctx.store.put(path, data, mode=PutMode.CREATE))
        except AlreadyExists:
            pass

    # local files: one at a time (a few system calls each; five at once on worker threads
    # took ~2 ms where one after the other takes ~0.6)
    parallel = ctx.config.io_threads if ctx.store.capabilities.parallel_io else 1
    await run_parallel(sorted(partitions), one, parallel)


async def publish(ctx: JobContext, action: Action, data: bytes) -> None:
    """Publish the completed instant (see module doc); a repeat recognises its own file.

    What is atomic: on stores with atomic renames (local files, ADLS Gen2, GCS moves) the
    saved commit plan itself (``commit-plan.json`` in the staging folder, written by
    ``plan_commit``, the exact bytes ``data``) is renamed to ``.hoodie/<instant>.<action>``:
    one atomic rename, and the ~1 MB of metadata of a 2,000-file commit is written once,
    not twice. Elsewhere a create-only put of ``data`` (atomic: the object appears whole or
    not at all), and the plan stays until cleanup. Neither the rename nor the create-only
    put ever replaces a file, so the instant file is read (to recognise this write's own,
    published by an earlier try or run, e.g. a rename whose answer was lost: its source is
    then gone) only when one is in the way or the plan is missing; :class:`TablePlan`
    ends before this when the instant was already completed as the commit began, under
    the same lock."""
    store, dest, instant = ctx.store, ctx.layout.dest, ctx.layout.job_id
    name = Instant(instant, action.value, State.COMPLETED).file_name
    final = join(dest, HOODIE_DIR, name)

    async def ours() -> bool:
        try:
            return await ctx.call(lambda: store.get(final), patient=True) == data
        except NotFound:
            return False

    try:
        if store.capabilities.atomic_rename:
            plan = join(ctx.layout.job_dir, PLAN_NAME)
            await ctx.call(lambda: store.rename(plan, final), patient=True)
        else:
            await ctx.call(lambda: store.put(final, data, mode=PutMode.CREATE), patient=True)
    except (AlreadyExists, NotFound):
        if not await ours():
            raise CommitError(f"{final!r} exists and is not this write's commit", stage="publish") from None


async def skip_labelled(ctx: JobContext, by: str, run: CommitRun) -> None:
    """This write's label was committed by instant ``by``: roll the write back exactly as
    ``abort_job`` does (staged files, staging folder, heartbeat, inflight and requested
    instant files) and say so in the report. Runs under the lock, before anything of this
    write was published."""
    ctx.config = ctx.config.with_options(cleanup_skipped=False)
    await rollback_table_write(ctx, None, run=run)
    ctx.config = ctx.config.with_options(cleanup_skipped=True)  # the staging folder is gone
    report = table_report(ctx.report)
    report.skipped_label = by
    report.files = report.bytes = report.renamed = 0
    report.filenames = []
    report.job_stats.incr("table_labels_skipped")
    log.info("write %s skipped: label %s was committed by instant %s", ctx.layout.job_id, report.label, by)


class TablePlan:
    """The table's part of the journal state machine
    (:class:`~amcommit.committer.machine.CommitPlan`; the stages of the module doc): the
    commit body of :class:`~amcommit.table.commit.kind.TableKind` (``kind``: to abort other
    writes with). One object per commit run: it keeps what its steps read (the write's
    marker, the table's properties, the timeline, the saved plan) for the later ones.

    ``label`` (else the one given to ``begin_write``): checked after ``check_order``, before
    the plan; a label already committed skips the write (:func:`skip_labelled`). A labelled
    write committed from the store with ``allow_partial`` overriding its completeness check
    is refused (IncompleteJob) before anything changes: a label is never published without
    all of its write's tasks.
    ``settings``: the table's (``writer_ttl`` judges other writers). Once the
    plan is saved the label is in it, so a resume (by anyone) publishes it with the label.
    ``markers_after_lock``: a direct write's markers (and the files of late losers: uploads
    landed since the reconcile) are removed by the caller after the lock is released (the
    writer's own ``commit_job``, :meth:`~amcommit.table.commit.kind.TableKind.guard`, as Hudi
    removes its marker folder after the commit: they are not in the job directory); else
    here, right after the publish (a commit completed by an abort or by another writer)."""

    def __init__(
        self,
        *,
        kind: JobKind,
        label: Label | None = None,
        settings: TableSettings = DEFAULT_SETTINGS,
        markers_after_lock: bool = False,
        published: list[Published] | None = None,
    ) -> None:
        self.kind = kind
        self.published = published
        """(with ``markers_after_lock``) where :meth:`publish` records what the caller's
        marker sweep after the lock needs to know of this instant (:class:`Published`)."""
        self.label = label
        self.settings = settings
        self.markers_after_lock = markers_after_lock
        self.marker: WriteMarker | None = None
        self.op = Operation.INSERT
        self.action: Action | None = None
        """The instant's action, if the marker or the published instant names it
        (``deltacommit`` on Merge-on-Read); else the operation's."""
        self.props: TableProperties | None = None
        self.in_order: list[Instant] | None = None
        """The timeline, if the early order check found it in order (nothing to act on)."""
        self.data = b""
        """The commit metadata to publish (the saved plan's bytes)."""
        self.written: list[str] = []
        """The partitions written."""
        self.direct = False
        self.checked: list[Marker] | None = None
        """A fresh run's trusted markers, as its marker check listed them (the reconcile
        uses that listing: see :meth:`place`)."""
        self.listed: list[Instant] | None = None
        """The timeline this run listed under the lock (the order check's), if it ran one."""

    async def begin(self, ctx: JobContext) -> bool:
        """The write's marker (its operation, its label), then the table's properties and
        the order's inputs (a few listings, under the lock), read at the same time as the
        journal: all are reads, and a first run needs them before anything is planned. The
        timeline listed also says whether this write was published already. Only a
        timeline in order is taken from there, and only by a first run; anything to act on
        (a write to roll back or wait for, an out-of-order instant) runs check_order after
        the load, as it would without."""
        store, layout, report = ctx.store, ctx.layout, table_report(ctx.report)
        dest, instant = layout.dest, layout.job_id
        try:
            self.marker = await ctx.call(lambda: read_marker(store, layout))
            self.op = Operation(self.marker.operation)
            self.action = self.marker.write_action()
        except NotFound:  # a cleanup cut short (flat stores delete the marker first): published?
            published = await completed_instant(store, dest, instant)
            if published is None:
                raise
            got = await ctx.call(lambda: store.get(join(dest, HOODIE_DIR, published.file_name)))
            kind_of_op = decode_commit_metadata(got).operation_type
            # a compaction's commit at this time ("COMPACT": no operation amcommit writes): it
            # is published, nothing to commit; the report names the operation as recorded
            self.op = (
                Operation(kind_of_op) if kind_of_op in {o.value for o in Operation} else Operation.INSERT
            )
            self.action = Action(published.action)
        report.instant, report.operation = instant, self.op.value
        if self.label is None and self.marker is not None:
            self.label = self.marker.label()
        label = self.label
        report.label = None if label is None else label.text()
        if label is not None and partial_allowed(report.completeness):
            # a label is published only with its data: a partial commit would use it up, and
            # the replay of the batch would then be skipped (the missing rows lost for good)
            raise IncompleteJob(
                f"table write {instant} carries label {label.text()}: committing it partially "
                f"({report.completeness}) would use up the label without all of its data; nothing "
                "was published (abort-job it, then replay the batch)",
                stage="commit_job",
            )
        report.conflict_mode = "append"
        ctx.config = ctx.config.with_options(conflict_mode="append", delete_target_files=False)
        done: Instant | None = None  # this write's completed instant, if it was published

        async def props_of() -> None:
            self.props = await read_properties(store, dest, ctx.config)

        async def order() -> None:
            nonlocal done
            async with ctx.stage("check_order"):
                plan, timeline = await _order_state_and_timeline(
                    store, dest, instant, self.settings.writer_ttl
                )
                done = completed_in(timeline, instant)
                if plan == OrderPlan():  # in order, nothing to roll back, wait for or remove
                    self.in_order = timeline

        await run_parallel([order, props_of], lambda step: step(), 2)
        return done is not None

    async def finished(self, ctx: JobContext, journal: Journal | None) -> None:
        if journal is not None:
            restore_renames(journal, ctx.report)
        # a direct write cut short after its publish: its markers (and late losers) next
        await _remove_direct_markers(ctx, self.settings.writer_ttl)
        await delete_beat(ctx.store, ctx.layout.dest, ctx.layout.job_id)

    def manifest_check(self, ctx: JobContext, journal: Journal | None) -> ManifestCheck | None:
        dest, props = ctx.layout.dest, self.props
        if props is None and journal is None:
            raise CommitError(f"{dest!r} lost its hoodie.properties", stage="load_manifests")
        return (
            None
            if props is None
            else own_files_check(
                dest, ctx.layout.job_id, len(props.partition_fields), logs=props.merge_on_read
            )
        )

    async def loaded(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal | None) -> None:
        store, dest, instant = ctx.store, ctx.layout.dest, ctx.layout.job_id
        check_one_mode(loaded.extra_data, instant)
        self.direct = is_direct(loaded.extra_data)
        if journal is None and self.direct:
            # markers are input too: one naming a file this write may not delete refuses the
            # commit here, before anything is planned, reconciled or published
            async with ctx.stage("check_markers"):
                self.checked = await check_markers(
                    store, dest, instant, ctx.config, depth=_depth_of(self.props)
                )
        if journal is not None:  # a resume publishes exactly the saved plan
            plan_path = join(ctx.layout.job_dir, PLAN_NAME)
            self.data = await ctx.call(lambda: store.get(plan_path))
            meta = decode_commit_metadata(self.data, where=plan_path)
            self.written = sorted(meta.partition_to_write_stats)
            planned = label_of(meta.extra_metadata)  # the plan's label is the one published
            table_report(ctx.report).label = None if planned is None else planned.text()

    async def check(self, ctx: JobContext, loaded: LoadedManifests) -> Fresh | None:
        store, dest, label = ctx.store, ctx.layout.dest, self.label
        if self.in_order is not None:
            instants = self.in_order
        else:
            async with ctx.stage("check_order"):
                instants = await check_order(ctx, self.kind, self.settings.writer_ttl)
        self.listed = instants
        if label is not None:
            async with ctx.stage("check_label"):
                # the label is looked up in the timeline the order check listed (the
                # lock is held since: no amcommit writer completed meanwhile)
                by = await committed_by(store, dest, label, config=ctx.config, instants=instants)
            if by is not None:
                assert ctx.journal is None
                await skip_labelled(ctx, by, _run_of(loaded))
                return None
        if self.op in (Operation.UPSERT, Operation.DELETE):
            async with ctx.stage("check_conflicts"):
                await check_conflicts(ctx, self.kind, loaded, instants)
        async with ctx.stage("plan_commit"):
            # no marker only when the instant was published (begin said so)
            assert self.marker is not None, "table write without its staging marker"
            meta, spliced = await plan_commit(ctx, self.marker, loaded, instants, self.props)
            if label is not None:
                meta.extra_metadata.update(label_metadata(label))
            self.data = data = encode_commit_metadata(meta, spliced=spliced)
            self.written = sorted(spliced if spliced is not None else meta.partition_to_write_stats)
            plan_path = join(ctx.layout.job_dir, PLAN_NAME)
            await ctx.call(lambda: store.put(plan_path, data, mode=PutMode.OVERWRITE))
        return Fresh(layout="table")

    async def _reconcile(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        """A direct write's losers deleted: the marked files the winning manifests do not name.

        A fresh run reconciles from the listing its marker check made (:meth:`loaded`, under
        this lock hold, before the plan and the journal were saved): one listing and read of
        the marker folder less. Safe at every point: the listing only misses markers that
        late (losing) attempts wrote in those two requests, and such a marker is one a
        listing made here could miss as well (written just after it); its file is deleted
        by the sweep after the publish (the guard's, or the next commit's, clean's or
        rollback's), as before. A resumed run (a new plan object: ``checked`` is None) and
        :meth:`placed` list again."""
        dest = ctx.layout.dest
        async with ctx.stage("reconcile"):
            await reconcile(
                ctx.store,
                dest,
                ctx.layout.job_id,
                _winners(loaded, dest),
                ctx.config,
                depth=_depth_of(self.props),
                checked=self.checked,
            )

    async def place(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        from amcommit.committer.stages import prepare_dirs, rename_files

        if self.direct:
            # the files are in place already: delete those of attempts that did not win
            await self._reconcile(ctx, loaded)
            async with ctx.stage("partition_meta"):
                await write_partition_metadata(ctx, self.written)
            return
        async with ctx.stage("prepare_dirs"):
            prepared = await prepare_dirs.run(ctx, prepare_dirs.PrepareInputs(loaded))
        async with ctx.stage("rename_files"):
            # no more rename workers than files (the stage feeds its workers from the
            # spool, an iterator of unknown length: 128 workers for a 10-file micro-batch
            # cost ~2 ms to start)
            config = ctx.config
            ctx.config = config.with_options(io_threads=max(1, min(config.io_threads, loaded.spool.count)))
            try:
                await rename_files.run(ctx, rename_files.RenameInputs(loaded))
            finally:
                ctx.config = config
        # after the renames, not at the same time: each stage's end is then a point between
        # requests (the kill tests stop the commit there), and the point of no return stays
        # the end of the renames
        async with ctx.stage("partition_meta"):
            await write_partition_metadata(ctx, self.written, prepared.new_dirs)

    async def placed(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        if self.direct:
            # (a journal ``renamed`` before any reconcile: an abort found every file in
            # place and completes the write) the losers go before the publish, always
            await self._reconcile(ctx, loaded)
        async with ctx.stage("partition_meta"):
            await write_partition_metadata(ctx, self.written)

    async def publish(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal) -> None:
        store, dest, instant = ctx.store, ctx.layout.dest, ctx.layout.job_id
        async with ctx.stage("publish"):
            # only a later completed instant matters here: it cannot happen under the lock
            # discipline. A first run judged the timeline it listed under this lock hold (the
            # order check refused a later completed instant there): that listing is used, not
            # taken again. A resumed run lists it (once) right before the instant is published.
            listed = self.listed
            if listed is None:
                listed = await Timeline(store, dest, config=ctx.config).files()
            later = later_completed(instant, listed)
            table_report(ctx.report).active_writes = 1 + len(
                {i.time for i in listed if i.completed and i.action in WRITE_ACTIONS}
            )
            if later is not None:
                raise CommitError(
                    f"instant {instant} is ready but the later instant {later} completed "
                    "first; abort this write (`amcommit abort-job`) and run it again",
                    stage="publish",
                )
            await publish(ctx, self.action or self.op.action, self.data)
        if self.published is not None:
            # the winners of the bytes just published (as the sweep would read them back)
            winners = frozenset(s.path for s in decode_commit_metadata(self.data).write_stats())
            self.published.append(Published(winners, _depth_of(self.props)))
        if self.direct and not self.markers_after_lock:
            # completed for another (an abort past the point of no return, a later writer): the
            # markers now (the files of late losers first); see ``markers_after_lock``
            async with ctx.stage("remove_markers"):
                await remove_markers(
                    store,
                    dest,
                    instant,
                    _winners(loaded, dest),
                    grace=self.settings.writer_ttl,
                    config=ctx.config,
                )
        ctx.report.success = True
        ctx.report.finished = time.time()

    async def committed(self, ctx: JobContext) -> None:
        # (under the lock, even for the writer's own commit whose guard removes the beat
        # again after it: a kill after the lock's release must not leave the beat of a
        # completed instant, which a commit_job run again would not remove)
        await delete_beat(ctx.store, ctx.layout.dest, ctx.layout.job_id)


def _run_of(loaded: LoadedManifests) -> CommitRun:
    """A run holding what the frame's run holds (for :func:`skip_labelled`'s rollback)."""
    return CommitRun(spool=loaded.spool, loaded=loaded)


def _depth_of(props: TableProperties | None) -> int | None:
    """The table's partition field count, None when its properties were not read."""
    return None if props is None else len(props.partition_fields)


def _winners(loaded: LoadedManifests, dest: str) -> set[str]:
    """The base files (relative to the table) the winning manifests name."""
    return {relative_to(e.dst, dest) for e in loaded.spool.entries()}


async def _remove_direct_markers(ctx: JobContext, grace: float) -> None:
    """A completed write's markers left by a run cut short after its publish (or written by
    a late attempt since): :func:`~amcommit.table.write.direct.sweep_instant`. Nothing for a staged
    write (no marker)."""
    async with ctx.stage("remove_markers"):
        await sweep_instant(ctx.store, ctx.layout.dest, ctx.layout.job_id, grace=grace, config=ctx.config)


async def skipped_before(
    store: Store, dest: str, instant: str, label: Label, config: CommitterConfig
) -> JobReport | None:
    """The report of a labelled write skipped before (its staging is gone, its instant not
    completed, its label committed by another instant); None otherwise."""
    from amcommit.paths import path_to_uri

    if await completed_instant(store, dest, instant) is not None:
        return None
    by = await committed_by(store, dest, label, config=config)
    if by is None or by == instant:
        return None
    report = TableReport(job_id=instant, dest_uri=path_to_uri(store.root_uri, dest), success=True)
    report.instant, report.label, report.skipped_label = instant, label.text(), by
    report.finished = time.time()
    return report
