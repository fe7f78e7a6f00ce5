"""Beginning a write into a Hudi table: properties, instant allocation, staging (engine API).

A table write is a job whose id is its instant::

    write = await begin_write(store, dest, operation=Operation.INSERT, spec=TableSpec("t", ("p",)))
    work = await setup_task(store, write.layout, attempt_id)       # tasks as for any job
    ...                                                             # write Parquet files below work
    await commit_task(store, write.layout, task_id, attempt_id, extra_data={"hudi.rows": ...})
    report = await commit_job(store, dest, write.instant)           # or abort_job(...)

or, with the base files written where the ``table_commit`` setting says (the staged way as
above, or ``direct``: straight to their final names under Hudi's direct markers,
:mod:`amcommit.table.write.direct`, and the job commit renames nothing)::

    task = await setup_table_task(store, write, task_id, attempt_id, config=config)
    rel = task.new_file("p=a")                                      # a base file name
    await task.put(rel, parquet_bytes, rows=n)
    await task.commit()                                             # or task.abort()

:func:`begin_write` (not atomic as a whole; each step is one atomic create-only put):

1. reads ``.hoodie/hoodie.properties``; on a first write creates it (create-only: of two
   first writers one creates it, the other continues the table if the specs agree, else
   fails with one line);
2. allocates the instant: strictly later than every instant in ``.hoodie/`` and every
   staging folder in ``.hoodie/.aux/amcommit/`` (and every folder in ``.hoodie/.temp/``: an
   earlier version's staging, or markers), claimed by the create-only put of the job marker
   ``.hoodie/.aux/amcommit/<instant>/_job.json``. It then lists again: if any instant later than the
   claimed one appeared meanwhile (a concurrent writer), the claim is given up and a later
   time taken, so instants complete in allocation order without anyone waiting forever;
3. writes the heartbeat, then ``<instant>.<action>.requested`` and the inflight file
   (``<instant>.inflight`` for commits, ``<instant>.replacecommit.inflight``), both empty.

Before step 2 the write's schema (``avro_schema``) is checked against the table's latest
committed schema by Hudi's schema-on-write rules (:func:`amcommit.table.format.schema.evolve_schema`):
a write that breaks them is refused with one line
(:class:`~amcommit.table.errors.SchemaMismatch`) and nothing is written. The job commit
checks again, under the lock, against the schema committed last by then.

A crash between these steps leaves an instant without a live heartbeat: a later commit rolls
it back (:mod:`amcommit.table.commit.table_commit`), or ``amcommit rollback DEST --instant I`` does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from amcommit.committer.completeness import marker_fields
from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.errors import AlreadyExists, CommitError, ConfigError, ManifestError, NotFound
from amcommit.manifest import TaskManifest
from amcommit.parallel import run_parallel
from amcommit.paths import basename, check_path, join
from amcommit.store.base import ObjectInfo, PutMode, Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.model import WRITE_ACTIONS, Action, Instant, Operation, State, write_action
from amcommit.table.format.naming import (
    HOODIE_DIR,
    PROPERTIES_FILE,
    STAGING_DIR,
    TEMP_DIR,
    base_file_name,
    new_file_id,
    next_instant,
    parse_base_file_name,
)
from amcommit.table.format.properties import (
    COPY_ON_WRITE,
    TABLE_TYPES,
    TableProperties,
    decode_properties,
    encode_properties,
    new_properties,
)
from amcommit.table.format.tasknames import ROWS_KEY, task_write_token
from amcommit.table.format.writestats import MUTATIONS_KEY, MutationFields
from amcommit.table.settings import Placement, table_settings
from amcommit.table.timeline.heartbeat import beat
from amcommit.table.timeline.labelmeta import Label
from amcommit.table.timeline.reader import Timeline
from amcommit.table.write.staging import instant_dirs, table_layout

if TYPE_CHECKING:
    from amcommit.table.write.direct import AttemptMarkers

__all__ = [
    "MutationFields",
    "TableSpec",
    "TableTask",
    "TableWrite",
    "WriteMarker",
    "begin_write",
    "committed_schema",
    "inflight_instant",
    "is_table",
    "latest_write",
    "read_marker",
    "read_properties",
    "requested_instant",
    "set_operation",
    "setup_table_task",
    "write_schema",
]

MARKER_LAYOUT = "amcommit-table/1"
_MAX_CLAIMS = 200


class TableSpec(msgspec.Struct, frozen=True):
    """What a first write creates (ignored, but checked for agreement, on later writes)."""

    name: str
    partition_fields: tuple[str, ...] = ()
    record_key_fields: tuple[str, ...] = ()
    """() = generated keys."""
    meta_fields: bool = True
    """``hoodie.populate.meta.fields``: the base files carry Hudi's five meta columns first
    (the Spark writer writes them). False for files without them: hudi-rs then reads
    snapshots and incremental ranges at file level, but Spark's Hudi incremental query
    refuses such tables. With True, every file MUST carry them (hudi-rs fails otherwise)."""
    table_type: str | None = None
    """``COPY_ON_WRITE`` or ``MERGE_ON_READ`` (``hoodie.table.type``); None: not named (a new
    table is Copy-on-Write). A later write that names another type than the table's is
    refused (ConfigError, one line) before anything is written."""
    payload_class: str | None = None
    """A new Merge-on-Read table's ``hoodie.compaction.payload.class``."""
    precombine_field: str | None = None
    """A new Merge-on-Read table's ``hoodie.table.precombine.field``."""


@dataclass(frozen=True)
class TableWrite:
    """A begun write: tasks use ``layout``; ``commit_job(store, dest, instant)`` commits it."""

    dest: str
    instant: str
    operation: Operation
    layout: JobLayout
    properties: TableProperties
    label: Label | None = None


class WriteMarker(msgspec.Struct, kw_only=True, rename="camel"):
    """``.hoodie/.aux/amcommit/<instant>/_job.json``: what the job commit needs to know."""

    job_id: str
    created: float
    layout: str = MARKER_LAYOUT
    operation: str = Operation.INSERT.value
    avro_schema: str | None = None
    origin: str = "api"
    expected_tasks: int | None = None
    label_app: str | None = None
    """The write's label (:class:`amcommit.table.commit.labels.Label`), if it has one."""
    label_version: int | None = None
    allow_missing_columns: bool = False
    """The write may leave out columns of the table (they stay, nullable, and read as null
    for its rows); refused otherwise (:func:`amcommit.table.format.schema.evolve_schema`)."""
    schema_base: str | None = None
    """The completed write instant whose schema :func:`begin_write` checked ``avro_schema``
    against ("" for a table without one), and ``recorded_schema`` the schema the commit
    records if that instant is still the latest at commit (else it checks again)."""
    recorded_schema: str | None = None
    action: str | None = None
    """The write's timeline action (``deltacommit`` on a Merge-on-Read table); None: the
    operation's (:attr:`~amcommit.table.format.model.Operation.action`)."""
    owner: dict[str, str] | None = None
    """Who runs the write, in the caller's words (``begin_write(owner=)``, e.g. the streaming
    sink's query and driver process): recorded with the claim itself, so a caller knows its
    own dead runs' writes by it even when a run died right after the instant was claimed."""

    def write_action(self) -> Action:
        """The action the write's instant is requested, and completed, as."""
        return Action(self.action) if self.action else Operation(self.operation).action

    def label(self) -> Label | None:
        """The label given to :func:`begin_write`, None without one."""
        if self.label_app is None or self.label_version is None:
            return None
        return Label(self.label_app, self.label_version)


def requested_instant(instant: str, operation: Operation, action: Action | None = None) -> Instant:
    """``action``: the write's (default: the operation's)."""
    return Instant(instant, (action or operation.action).value, State.REQUESTED)


def inflight_instant(instant: str, operation: Operation, action: Action | None = None) -> Instant:
    return Instant(instant, (action or operation.action).value, State.INFLIGHT)


def inflight_file_name(instant: str, operation: Operation, action: Action | None = None) -> str:
    """``<t>.inflight`` for a commit (Hudi's version-6 name), ``<t>.<action>.inflight`` else
    (``deltacommit``, ``replacecommit``)."""
    if (action or operation.action) is Action.COMMIT:
        return f"{instant}.inflight"
    return inflight_instant(instant, operation, action).file_name


async def read_properties(
    store: Store, dest: str, config: CommitterConfig = DEFAULT_CONFIG
) -> TableProperties | None:
    """The table's properties, None if ``dest`` holds no ``hoodie.properties``."""
    path = join(dest, PROPERTIES_FILE)
    try:
        data = await RetryingStore.of(store, config).get(path)
    except NotFound:
        return None
    return decode_properties(data, where=path)


async def is_table(store: Store, dest: str, config: CommitterConfig = DEFAULT_CONFIG) -> bool:
    """True if ``dest`` holds a Hudi table (``.hoodie/hoodie.properties`` exists)."""
    path = join(dest, PROPERTIES_FILE)
    try:
        await RetryingStore.of(store, config).stat(path)
    except NotFound:
        return False
    return True


async def read_marker(store: Store, layout: JobLayout) -> WriteMarker:
    """The write's job marker; ManifestError if it is not a table write's marker."""
    data = await store.get(layout.job_marker)
    try:
        m = msgspec.json.decode(data, type=WriteMarker)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ManifestError(f"{layout.job_marker}: not a table write's job marker ({e})") from None
    if m.layout != MARKER_LAYOUT:
        raise ManifestError(f"{layout.job_marker}: not a table write's job marker")
    return m


def _check_compatible(props: TableProperties, spec: TableSpec, dest: str) -> None:
    diffs = []
    if props.name != spec.name:
        diffs.append(f"name {props.name!r} (asked {spec.name!r})")
    if props.partition_fields != tuple(spec.partition_fields):
        diffs.append(f"partition fields {list(props.partition_fields)} (asked {list(spec.partition_fields)})")
    if props.record_key_fields != tuple(spec.record_key_fields):
        diffs.append(
            f"record key fields {list(props.record_key_fields)} (asked {list(spec.record_key_fields)})"
        )
    if diffs:
        raise ConfigError(f"{dest!r} holds a Hudi table with another {'; '.join(diffs)}")
    check_table_type(props, spec.table_type, dest)


def check_table_type(props: TableProperties, asked: str | None, dest: str) -> None:
    """ConfigError (one line) if ``asked`` (a table type a write names; None: none named)
    is not the table's. Pure."""
    if asked is None:
        return
    want = str(asked).strip().upper()
    if want not in TABLE_TYPES:
        raise ConfigError(f"invalid table type {asked!r}: {' or '.join(TABLE_TYPES)}")
    if want != props.table_type:
        raise ConfigError(
            f"{dest!r} is a {props.table_type} table; a write asked for {want} (a table's type "
            "is chosen when it is created): nothing was written"
        )


async def _create_table(
    store: Store, dest: str, spec: TableSpec, avro_schema: str | None, config: CommitterConfig
) -> TableProperties:
    rs = RetryingStore.of(store, config)
    others = []
    async for info in store.list(dest, recursive=False):
        name = basename(info.path)
        if name != HOODIE_DIR:
            others.append(name)
            break
    if others:
        raise CommitError(
            f"{dest!r} holds files that are not a Hudi table (e.g. {others[0]!r}): a table is "
            "created only in an empty destination",
            stage="begin_write",
        )
    props = new_properties(
        spec.name,
        partition_fields=tuple(spec.partition_fields),
        record_key_fields=tuple(spec.record_key_fields),
        create_schema=avro_schema,
        meta_fields=spec.meta_fields,
        table_type=(spec.table_type or COPY_ON_WRITE).strip().upper(),
        payload_class=spec.payload_class,
        precombine_field=spec.precombine_field,
    )
    path = join(dest, PROPERTIES_FILE)
    data = encode_properties(props)
    try:
        await rs.put(path, data, mode=PutMode.CREATE)
        return props
    except AlreadyExists:
        pass  # a concurrent first writer (or our own lost answer): continue its table
    theirs = await read_properties(store, dest, config)
    assert theirs is not None
    _check_compatible(theirs, spec, dest)
    return theirs


class _SchemaOnly(msgspec.Struct, rename="camel"):
    """The part of a completed instant's metadata holding its schema."""

    extra_metadata: dict[str, str] = msgspec.field(default_factory=dict)


def latest_write(instants: list[Instant]) -> Instant | None:
    """The latest completed write instant (commit or replacecommit), if any. Pure."""
    done = [i for i in instants if i.completed and i.action in WRITE_ACTIONS]
    return max(done, key=lambda i: i.time) if done else None


async def committed_schema(
    store: Store,
    dest: str,
    instant: Instant | None,
    config: CommitterConfig = DEFAULT_CONFIG,
    *,
    timeline: Timeline | None = None,
) -> str | None:
    """The Avro schema (JSON) recorded by the completed write ``instant``
    (``extraMetadata.schema``); None for no instant or one without a schema. One read;
    none with ``timeline`` (the operation's handle) when it read that instant already (its
    metadata is cached there, and the operation's later reads of it are then free too)."""
    if instant is None:
        return None
    if timeline is not None:
        return (await timeline.commit_metadata(instant)).extra_metadata.get("schema") or None
    path = join(dest, HOODIE_DIR, instant.file_name)
    data = await RetryingStore.of(store, config).get(path)
    try:
        meta = msgspec.json.decode(data, type=_SchemaOnly)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ManifestError(f"{path}: not valid Hudi commit metadata ({e})") from None
    return meta.extra_metadata.get("schema") or None


async def _claimed_times(store: Store, dest: str) -> set[str]:
    """Times of every staging folder in ``.hoodie/.aux/amcommit/`` and every folder in
    ``.hoodie/.temp/`` (an earlier version's staging, or a marker folder): every amcommit
    writer claims one before its instant files appear in ``.hoodie/``."""
    import anyio

    times: set[str] = set()

    async def one(folder: str) -> None:
        times.update(await instant_dirs(store, join(dest, folder)))

    # the two listings at once (reads only: their order does not matter)
    async with anyio.create_task_group() as tg:
        for folder in (STAGING_DIR, TEMP_DIR):
            tg.start_soon(one, folder)
    return times


async def _taken_times(store: Store, dest: str, instants: Sequence[Instant]) -> set[str]:
    """Times of every instant of ``instants`` (the timeline as listed) and of every staging
    or marker folder (:func:`_claimed_times`)."""
    return {i.time for i in instants} | await _claimed_times(store, dest)


async def _claims_after(
    store: Store, dest: str, instant: str, *, look_for_compaction: bool
) -> tuple[set[str], bool]:
    """The looks a writer makes right after claiming ``instant`` (its job marker put): the
    times of every staging or marker folder (:func:`_claimed_times`) and, on a
    Merge-on-Read table (``look_for_compaction``), whether a compaction claimed the same
    time (:func:`compaction_claimed`). Reads only, made at once: each was made after the
    claim, which is what the claim protocol needs (module doc of
    :mod:`amcommit.table.commit.compaction`)."""
    import anyio

    compacting = False

    async def compaction() -> None:
        nonlocal compacting
        compacting = await compaction_claimed(store, dest, instant)

    async with anyio.create_task_group() as tg:
        if look_for_compaction:
            tg.start_soon(compaction)
        claimed = await _claimed_times(store, dest)
    return claimed, compacting


async def _prepare_write(store: Store, dest: str, instant: str, layout: JobLayout) -> None:
    """The claimed write's folders (manifests, tasks) and its first heartbeat, at once:
    none of them is seen by another writer before the instant files that follow (which a
    reader or a cleaner judges by), so their order among themselves does not matter; all
    three are done before this returns, so the instant files still come after the beat."""
    import anyio

    async with anyio.create_task_group() as tg:
        tg.start_soon(store.mkdirs, layout.manifests_dir)
        tg.start_soon(store.mkdirs, layout.tasks_dir)
        tg.start_soon(beat, store, dest, instant)  # one overwriting put, retried by the handle


async def begin_write(
    store: Store,
    dest: str,
    *,
    operation: Operation,
    spec: TableSpec | None = None,
    avro_schema: str | None = None,
    config: CommitterConfig = DEFAULT_CONFIG,
    origin: str = "api",
    expected_tasks: int | None = None,
    error_if_exists: bool = False,
    label: Label | None = None,
    allow_missing_columns: bool = False,
    owner: Mapping[str, str] | None = None,
    properties: TableProperties | None = None,
    merge_on_read: bool = False,
    timeline: Timeline | None = None,
) -> TableWrite:
    """Begin a write into the table at ``dest`` (created on its first write from ``spec``);
    see the module doc for what is atomic.

    ``avro_schema``: the rows' Avro schema (:func:`amcommit.table.format.schema.avro_schema`),
    checked here against the table's latest committed schema (SchemaMismatch before
    anything is written) and again by the commit; None: the commit derives it from a
    written file and checks it then (or takes the table's latest schema for a write
    without files). ``allow_missing_columns``: the rows may leave out columns of the table
    (Hudi's ``hoodie.write.set.null.for.missing.columns``): they read as null for them.
    ``error_if_exists`` (Spark's mode ``errorifexists``/``fail``): refuse, before anything is
    written, a table that already holds a completed write.
    ``label``: the write's label (:mod:`amcommit.table.commit.labels`), kept in the job marker; the
    commit accepts each label once (the check is made at commit, under the lock; a caller
    may ask :func:`~amcommit.table.commit.labels.committed_by` first to skip the work).
    ``owner``: who runs the write (short strings; :attr:`WriteMarker.owner`), in the job
    marker from the moment the instant is claimed.
    ``properties``: the table's ``hoodie.properties``, when the caller read them for this
    very write (the Spark driver's destination check): not read again (a table's
    properties are written once, create-only). None: read here (one read).
    ``merge_on_read``: the caller writes Merge-on-Read tables (their updates into log files:
    :mod:`amcommit.table.mutate.engine`); other callers are refused such a table in one line.
    On a Merge-on-Read table the instant is a ``deltacommit`` (overwrites: ``replacecommit``).
    ``timeline``: the operation's timeline handle, when the caller listed the timeline for
    this very write (an upsert planning from it): its listing is used, not taken again.
    None: one listing of ``.hoodie/`` here. The instant is claimed by a create-only put of
    the job marker (atomic: one writer per time); a second claim after a lost race lists
    again.
    """
    check_path(dest)
    operation = Operation(operation)
    if label is not None and not isinstance(label, Label):
        raise ConfigError(f"label must be an amcommit.table.commit.labels.Label, got {type(label).__name__}")
    rs = RetryingStore.of(store, config)
    props = properties if properties is not None else await read_properties(store, dest, config)
    if props is None:
        if spec is None:
            raise ConfigError(
                f"{dest!r} is not a Hudi table (no {PROPERTIES_FILE}): give a TableSpec to create one"
            )
        props = await _create_table(store, dest, spec, avro_schema, config)
    elif spec is not None:
        _check_compatible(props, spec, dest)
    props.check_supported(dest, merge_on_read=merge_on_read)
    action = write_action(operation, props.merge_on_read)
    tl = timeline if timeline is not None else Timeline(rs, dest, config=config)
    instants = await tl.files()
    if error_if_exists and any(i.completed and i.action in WRITE_ACTIONS for i in instants):
        raise CommitError(
            f"table {dest!r} already holds data and the write mode refuses existing data "
            "(errorifexists/fail); use append or overwrite",
            stage="begin_write",
        )
    schema_base: str | None = None
    recorded: str | None = None
    if avro_schema is not None:  # schema on write: refused here, before anything is written
        from amcommit.table.format.schema import evolve_schema

        base = latest_write(instants)
        table_schema = await committed_schema(store, dest, base, config, timeline=tl)
        recorded = evolve_schema(table_schema, avro_schema, allow_missing=allow_missing_columns)
        schema_base = "" if base is None else base.time
    after: str | None = None
    for claim in range(_MAX_CLAIMS):
        if claim:  # a lost race: the timeline moved on, look again
            instants = (await tl.refresh()).files
        taken = await _taken_times(store, dest, instants)
        floor = max([*taken, *([after] if after else [])], default=None)
        instant = next_instant(datetime.now(UTC), floor)
        layout = table_layout(dest, instant)
        marker = WriteMarker(
            job_id=instant,
            created=time.time(),
            operation=operation.value,
            avro_schema=avro_schema,
            origin=origin,
            label_app=None if label is None else label.app_id,
            label_version=None if label is None else label.version,
            allow_missing_columns=allow_missing_columns,
            schema_base=schema_base,
            recorded_schema=recorded,
            action=None if action is operation.action else action.value,
            owner=None if owner is None else dict(owner),
        )
        body = json.loads(msgspec.json.encode(marker))
        body.update(marker_fields(origin, expected_tasks))
        data = json.dumps(body).encode()
        try:
            await rs.put(layout.job_marker, data, mode=PutMode.CREATE)
        except AlreadyExists:
            after = instant
            continue
        # amcommit writers claim a staging folder before their instant files appear in
        # .hoodie/: the folders alone say whether one allocated past us meanwhile (a foreign
        # writer's later instant is judged by the commit's order check, under the lock)
        # the two looks for another's claim run at once: both are reads made after our own
        # claim (the put above returned), which is all their argument needs
        claimed, compacting = await _claims_after(rs, dest, instant, look_for_compaction=props.merge_on_read)
        later = [t for t in claimed if t > instant]
        if later:  # a concurrent writer allocated past us meanwhile: give this time up
            await rs.delete(layout.job_dir, recursive=True)
            after = max(later)
            continue
        if compacting:
            # a compaction claimed this very time (it claims by creating its requested
            # file, then checks for a writer's staging folder of the same time, as this
            # write checks for its file after its own claim): at least one gives it up
            await rs.delete(layout.job_dir, recursive=True)
            after = instant
            continue
        break
    else:
        raise CommitError(f"could not allocate an instant in {dest!r} (too many concurrent writers)")
    await _prepare_write(rs, dest, instant, layout)
    hoodie = join(dest, HOODIE_DIR)
    for name in (
        requested_instant(instant, operation, action).file_name,
        inflight_file_name(instant, operation, action),
    ):
        path = join(hoodie, name)
        try:
            await rs.put(path, b"", mode=PutMode.CREATE)
        except AlreadyExists:
            pass  # our own put whose answer was lost (the time is claimed by our marker)
    return TableWrite(
        dest=dest, instant=instant, operation=operation, layout=layout, properties=props, label=label
    )


async def set_operation(
    store: Store, dest: str, instant: str, operation: Operation, config: CommitterConfig = DEFAULT_CONFIG
) -> bool:
    """Settle the operation the begun write ``instant`` commits, when it is only known after
    :func:`begin_write` (e.g. a Spark overwrite whose dynamic/static mode the tasks report):
    ``commit_job(..., operation=...)`` calls it before its commit publishes anything.

    The action must stay that of the ``.requested`` instant (both overwrites are replace
    commits; an append is a commit): CommitError otherwise, and also if the write's commit
    already began (its journal exists) with another operation. The job marker is rewritten
    with one whole-object put (atomic; its other fields are kept). True if it changed."""
    operation = Operation(operation)
    layout = table_layout(dest, instant)
    rs = RetryingStore.of(store, config)
    marker = await read_marker(rs, layout)
    current = Operation(marker.operation)
    if current is operation:
        return False
    if current.action is not operation.action or marker.action is not None:
        raise CommitError(
            f"table write {instant}: operation {operation.value} is a {operation.action.value}, but the "
            f"instant was requested as {current.value} ({current.action.value}); nothing was changed",
            stage="commit_job",
        )
    try:
        await rs.stat(layout.journal_path)
    except NotFound:
        pass
    else:
        raise CommitError(
            f"table write {instant}: its commit began as {current.value}; it cannot change to "
            f"{operation.value} now (nothing was changed)",
            stage="commit_job",
        )
    body = json.loads(await rs.get(layout.job_marker))
    body["operation"] = operation.value
    data = json.dumps(body).encode()
    await rs.put(layout.job_marker, data, mode=PutMode.OVERWRITE)
    return True


@dataclass
class TableTask:
    """One task attempt of a table write through the engine API (:func:`setup_table_task`).

    Its base files go where its :attr:`placement` says (decided once, from the
    ``table_commit`` setting of the task's config:
    :attr:`~amcommit.table.settings.TableSettings.placement`):

    - ``staged``: into the task attempt directory under ``.hoodie/.aux/amcommit/<instant>/``; the
      task commit (:func:`~amcommit.committer.task.commit_task`) names them, the job commit
      renames them into the table;
    - ``direct``: straight to their final names in the table, each after its Hudi marker
      (:func:`~amcommit.table.write.direct.write_in_place`: ``CREATE`` for a new file group,
      ``MERGE`` for a new version of one); the task commit publishes a manifest that says so
      (:func:`~amcommit.table.write.direct.commit_direct_task`), and the job commit renames
      nothing: it deletes the files of attempts that did not win, then publishes.

    Files must then be named as base files of this write (:meth:`new_file`); a staged task
    may also use other ``*.parquet`` names (its task commit names them).

    What is atomic: each :meth:`put` is one upload (a direct one follows its marker, and a
    crash between them leaves a marker that the job commit or a rollback acts on);
    :meth:`commit` publishes the manifest by one atomic step; nothing a reader sees changes
    before the job commit publishes the instant (files of a direct write are stamped with an
    instant that is not completed)."""

    store: Store
    write: TableWrite
    task_id: str
    task_attempt_id: str
    work: str
    """The task attempt directory (where a staged task writes)."""
    placement: Placement
    """Where its base files go (decided by :func:`setup_table_task`, class doc)."""
    config: CommitterConfig = DEFAULT_CONFIG
    files: dict[str, tuple[int, str | None, int]] = field(default_factory=dict)
    """Path relative to the table (staged: to the attempt directory) -> (size, etag, rows)."""
    mutations: dict[str, MutationFields] = field(default_factory=dict)
    """A record-level write's own write stat fields by the same path."""
    markers: AttemptMarkers | None = None
    """A direct attempt's marker file (:class:`~amcommit.table.write.direct.AttemptMarkers`:
    one ``MARKERS<n>`` file, rewritten before each upload), made at its first :meth:`put`."""
    schema: str | None = None
    """The Avro schema (JSON) the write records (:func:`write_schema`), against which
    :meth:`put` checks each file's footer; None: not checked (a write without a declared
    schema)."""

    @property
    def direct(self) -> bool:
        """Its files go straight to their final names (:attr:`Placement.DIRECT`)."""
        return self.placement is Placement.DIRECT

    @property
    def token(self) -> str:
        """The write token of this attempt's files (from its attempt id: two attempts never
        share one)."""
        return task_write_token(self.task_attempt_id)

    def new_file(self, partition: str, file_id: str | None = None, token: str | None = None) -> str:
        """The path (relative to the table) of a base file of this write in ``partition``
        ("" for an unpartitioned table): ``file_id`` (default: a new file group) and this
        attempt's :attr:`token` unless given. Pure."""
        name = base_file_name(file_id or new_file_id(), token or self.token, self.write.instant)
        return f"{partition}/{name}" if partition else name

    async def put(
        self,
        rel: str,
        data: bytes,
        *,
        rows: int,
        new_version: bool = False,
        mutation: MutationFields | None = None,
    ) -> ObjectInfo:
        """Write base file ``rel`` (path relative to the table) holding ``rows`` rows.
        ``new_version``: it is a new version of an existing file group (an upsert's or
        delete's rewrite: a ``MERGE`` marker when direct), else a new file group
        (``CREATE``). ``mutation``: its write stat fields (``prevCommit``, counts). A direct
        write decided meanwhile (committed or rolled back) fails with CommitError, its file
        removed again.

        Before anything is uploaded, the file's Parquet footer (only the footer) is checked
        against the write's :attr:`schema` (:func:`~amcommit.table.format.schema.check_footer`): a
        file whose own schema differs (a column the schema lacks, a type other than the
        schema's or narrower) fails with SchemaMismatch naming the file and the column, and
        nothing of it is written."""
        import anyio

        from amcommit.table.format.schema import check_footer
        from amcommit.table.write.direct import IOType, write_in_place

        if self.schema:  # the footer parsed in a worker thread, not on the event loop
            await anyio.to_thread.run_sync(check_footer, rel, data, self.schema)

        if self.direct:
            parsed = parse_base_file_name(basename(rel))
            if parsed is None or parsed.instant != self.write.instant:
                raise CommitError(
                    f"{rel!r} is not a base file name of instant {self.write.instant} (a direct "
                    "table write names its files itself: TableTask.new_file)",
                    stage="write_task",
                )
            io_type = IOType.MERGE if new_version else IOType.CREATE
            got = await write_in_place(
                self.store,
                self.write.dest,
                self.write.instant,
                rel,
                data,
                io_type=io_type,
                config=self.config,
                markers=self._markers(),
            )
            if got is None:
                raise CommitError(
                    f"table write {self.write.instant} was committed or rolled back while task "
                    f"attempt {self.task_attempt_id} was still writing: its file {rel!r} was removed",
                    stage="write_task",
                )
            info = got
        else:
            path = join(self.work, rel)
            info = await RetryingStore.of(self.store, self.config).put(path, data, mode=PutMode.OVERWRITE)
        self.files[rel] = (info.size, info.etag, rows)
        if mutation is not None:
            self.mutations[rel] = mutation
        return info

    async def put_log(self, rel: str, data: bytes, *, rows: int, mutation: MutationFields) -> ObjectInfo:
        """Write the Merge-on-Read log file ``rel`` (relative to the table; a new log version
        of a file slice, :func:`~amcommit.table.format.naming.log_file_name`) holding
        ``rows`` records, in place under Hudi's ``APPEND`` marker (a direct task only:
        CommitError otherwise). ``mutation``: its write stat fields (``logVersion``,
        ``baseFile``, ``logFiles``, counts). Its blocks are stamped with this write's
        instant, so readers skip them until the instant completes. No marker-driven step
        (reconcile, rollback) ever deletes a file an ``APPEND`` marker names. A write
        decided meanwhile fails with CommitError, its file removed again."""
        from amcommit.table.write.direct import IOType, write_in_place

        if not self.direct or mutation.log_version is None:
            raise CommitError(
                f"{rel!r}: log files are written in place (table_commit=direct) with their log version",
                stage="write_task",
            )
        got = await write_in_place(
            self.store,
            self.write.dest,
            self.write.instant,
            rel,
            data,
            io_type=IOType.APPEND,
            config=self.config,
            markers=self._markers(),
        )
        if got is None:
            raise CommitError(
                f"table write {self.write.instant} was committed or rolled back while task "
                f"attempt {self.task_attempt_id} was still writing: its file {rel!r} was removed",
                stage="write_task",
            )
        self.files[rel] = (got.size, got.etag, rows)
        self.mutations[rel] = mutation
        return got

    def _markers(self) -> AttemptMarkers:
        """The attempt's marker file (made once)."""
        from amcommit.table.write.direct import AttemptMarkers

        if self.markers is None:
            self.markers = AttemptMarkers(
                self.store, self.write.dest, self.write.instant, self.task_attempt_id, self.config
            )
        return self.markers

    async def commit(self, extra_data: Mapping[str, str] | None = None) -> TaskManifest:
        """Commit the task attempt: publish its manifest (one atomic step; the last attempt
        of a task to commit wins). ``extra_data``: more entries for a staged task's
        manifest (a direct one carries only its write stats)."""
        from amcommit.committer.task import commit_task
        from amcommit.table.write.direct import commit_direct_task

        if self.direct:
            files = [(rel, size, etag, rows) for rel, (size, etag, rows) in sorted(self.files.items())]
            return await commit_direct_task(
                self.store,
                self.write.layout,
                self.task_id,
                self.task_attempt_id,
                files,
                config=self.config,
                mutations=self.mutations,
            )
        extra = dict(extra_data or {})
        extra[ROWS_KEY] = json.dumps({rel: rows for rel, (_, _, rows) in self.files.items()})
        if self.mutations:
            extra[MUTATIONS_KEY] = msgspec.json.encode(self.mutations).decode()
        return await commit_task(
            self.store,
            self.write.layout,
            self.task_id,
            self.task_attempt_id,
            config=self.config,
            extra_data=extra,
        )

    async def abort(self) -> None:
        """Give the attempt up: a staged attempt's directory is deleted; a direct attempt's
        files are deleted (their markers stay: the job commit or a rollback removes them)."""
        from amcommit.committer.task import abort_task

        if self.direct:
            rs = RetryingStore.of(self.store, self.config)
            for rel in sorted(self.files):
                await rs.delete(join(self.write.dest, rel))
            self.files.clear()
            return
        await abort_task(self.store, self.write.layout, self.task_attempt_id, config=self.config)


async def setup_table_task(
    store: Store,
    write: TableWrite,
    task_id: str,
    task_attempt_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
) -> TableTask:
    """Set up task attempt ``task_attempt_id`` of ``task_id`` of the begun ``write``
    (:func:`~amcommit.committer.task.setup_task`: single-use attempt ids, the writer's
    heartbeat beaten) and return its :class:`TableTask`, staged or direct as
    ``table_settings(config).placement`` says (every task of one write must use the same
    setting). Reads the write's job marker once, for the schema its files must hold
    (:func:`write_schema`), while the attempt is set up (a read: if the setup fails, the
    read is dropped; no file is written before both are done)."""
    from amcommit.committer.task import setup_task

    got: dict[str, Any] = {}

    async def attempt() -> None:
        got["work"] = await setup_task(store, write.layout, task_attempt_id, config=config)

    async def marker() -> None:
        got["marker"] = await read_marker(RetryingStore.of(store, config), write.layout)

    await run_parallel([attempt, marker], lambda step: step(), 2)
    placement = table_settings(config).placement
    return TableTask(
        store,
        write,
        task_id,
        task_attempt_id,
        got["work"],
        placement,
        config,
        schema=write_schema(got["marker"]),
    )


def write_schema(marker: WriteMarker) -> str | None:
    """The Avro schema (JSON) a write's base files must hold (pure): the one
    :func:`begin_write` checked and the commit records (``recorded_schema``: the table's
    columns and the write's, widened), else the declared one, None if the write declared
    none."""
    return marker.recorded_schema or marker.avro_schema or None


async def compaction_claimed(store: Store, dest: str, instant: str) -> bool:
    """True if a compaction claimed the time ``instant`` (its ``.compaction.requested``
    exists): one stat. A write and a compaction that claim one time each look for the
    other's claim after making their own, so at least one of them gives the time up and
    two instants never share a time (:func:`amcommit.table.commit.compaction`'s claim)."""
    name = Instant(instant, Action.COMPACTION.value, State.REQUESTED).file_name
    try:
        await store.stat(join(dest, HOODIE_DIR, name))
        return True
    except NotFound:
        return False


async def write_claimed(store: Store, dest: str, instant: str) -> bool:
    """True if an amcommit write claimed the time ``instant`` (its staging marker exists):
    one stat (see :func:`compaction_claimed`)."""
    try:
        await store.stat(table_layout(dest, instant).job_marker)
        return True
    except NotFound:
        return False
