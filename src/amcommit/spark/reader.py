"""Reading a Hudi table: ``spark.read.format("amcommit").load(dest)``.

Queries, selected with Hudi's own option names (short aliases in brackets):

* snapshot (default, ``hoodie.datasource.query.type=snapshot``): the latest committed file
  of every file group not replaced by an overwrite; uncommitted files (of an inflight or
  failed write) and replaced ones are never read, even while they are still on disk; on a
  Merge-on-Read table the latest file slice of every group, its base file merged with its
  log blocks (:func:`amcommit.table.query.merge.merge_slice`, by the table's payload; blocks
  of instants not completed, or after the instant read, are skipped);
* read-optimized (``hoodie.datasource.query.type=read_optimized``): the base files only
  (Merge-on-Read: updates still in log files are not seen; a log-only group gives nothing);
  on a Copy-on-Write table the same as a snapshot; takes ``as.of.instant``;
* time travel (``as.of.instant`` [``asOf``]): the snapshot as of that instant (inclusive);
* incremental (``hoodie.datasource.query.type=incremental``, implied by ``since``):
  the records whose latest change was committed in ``(begin, end]`` (the newest version in
  the range of each file group, its rows filtered by ``_hoodie_commit_time``, as Hudi does), ``hoodie.datasource.read.begin.instanttime``
  [``since``] exclusive (``0`` / ``000``: from the start),
  ``hoodie.datasource.read.end.instanttime`` [``until``] inclusive (default: latest).

Where each piece runs: ``schema()`` and ``reader()`` on the driver host (the timeline is
read there, and the files to read are planned with :mod:`amcommit.table.timeline.instants`, through
the reading API ``amcommit.table.timeline.reader.Timeline`` when it is present: it refuses a query
reaching past a clean); bounds may be any time (:func:`snap`);
:meth:`TableReader.read` in executor Python workers, one input partition per group of
files, reading with pyarrow and yielding Arrow record batches cast to the table's schema.

The schema is the table's as of the instant read (:func:`table_spark_schema`): the Avro
schema that instant's commit recorded (``extraMetadata.schema``: columns added later are not
there, columns a later write widened keep their type of then), with the Spark types stored in
the footer of its newest file where they agree (meta columns first, as Hudi's readers return
them); a snapshot reads the latest write's, a time travel the ``as.of.instant``'s, an
incremental query its end's. Older files are cast to it (a column they lack reads as null).
A Merge-on-Read table (``hoodie.table.type=MERGE_ON_READ``) is planned per file slice
(:func:`amcommit.table.query.read.plan_slices`, from
:meth:`amcommit.table.timeline.reader.Timeline.file_groups`: the same slices
``amcommit.table.read`` reads) and each slice is merged in one executor task: a partition
holds whole slices. Copy-on-Write tables are planned and read file by file as before.
Nothing here writes.
"""

from __future__ import annotations

import asyncio
import bisect
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from amcommit.errors import AmcommitError, ConfigError, NotFound
from amcommit.loop import run_blocking
from amcommit.options import Options, convert_options, show_key, suggest
from amcommit.paths import join
from amcommit.store.base import local_os_path
from amcommit.store.schemes import (
    convert_store_options,
    normalise_store_key,
    open_location,
    parse_location,
    store_options_type,
)
from amcommit.table.file_group.model import FileSlice, FileVersion
from amcommit.table.format.model import WRITE_ACTIONS, Instant
from amcommit.table.format.naming import META_COLUMNS, PROPERTIES_FILE, check_instant
from amcommit.table.format.properties import TableProperties, decode_properties
from amcommit.table.query.merge import LogBytes, SliceRecipe, live_blocks, merge_slice, payload_of
from amcommit.table.query.read import PAYLOAD_CLASS, PRECOMBINE_FIELD, plan_slices
from amcommit.table.timeline.instants import (
    LoadedCommit,
    changes,
    snapshot,
)
from amcommit.table.timeline.reader import SliceView, Timeline

SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
COMMIT_TIME = "_hoodie_commit_time"

READ_KEYS: dict[str, str] = {
    "path": "path",
    "hoodie.datasource.query.type": "query_type",
    "query.type": "query_type",
    "hoodie.datasource.read.begin.instanttime": "since",
    "since": "since",
    "hoodie.datasource.read.end.instanttime": "until",
    "until": "until",
    "as.of.instant": "as_of",
    "asof": "as_of",
    "maxpartitionbytes": "max_partition_bytes",
}
"""Read options (lowercase, as Spark passes them) -> :class:`ReadOptions` fields."""

START = frozenset({"0", "00", "000"})
"""Begin instants meaning "from the start of the timeline" (Hudi's idiom ``000``)."""


class ReadOptions(Options, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The read options of one query, typed."""

    kind = "read"

    path: str = ""
    query_type: str = ""
    since: str = ""
    until: str = ""
    as_of: str = ""
    max_partition_bytes: int = 128 * 1024 * 1024
    """Files are grouped into input partitions of about this many bytes."""


@dataclass(frozen=True)
class Query:
    """What to read: a snapshot (``as_of`` None = latest) or the changes in ``(since, until]``."""

    incremental: bool = False
    as_of: str | None = None
    since: str | None = None
    until: str | None = None
    read_optimized: bool = False
    """Base files only (Merge-on-Read: the logs are not merged); a snapshot query."""


@dataclass(frozen=True)
class ReadPlan:
    """A parsed query: URL, store options (never shown), the query, partition size."""

    url: str
    query: Query
    store_options: dict[str, Any] = field(default_factory=dict, repr=False)
    max_partition_bytes: int = 128 * 1024 * 1024


def _instant(option: str, value: str) -> str:
    try:
        return check_instant(value.strip())
    except ConfigError:
        raise ConfigError(
            f"option {option!r} must be an instant time (17 digits yyyyMMddHHmmssSSS, UTC)"
        ) from None


def parse_query(o: ReadOptions) -> Query:
    """The query the options select. Pure; ConfigError (one line) on a bad combination."""
    qt = o.query_type.strip().lower()
    if qt not in ("", "snapshot", "incremental", "read_optimized"):
        raise ConfigError(
            "option 'hoodie.datasource.query.type' must be snapshot, read_optimized or incremental"
        )
    if qt == "read_optimized" and (o.since.strip() or o.until.strip()):
        raise ConfigError(
            "options 'since' / 'until' select an incremental query; "
            "query type read_optimized takes 'as.of.instant' only"
        )
    incremental = qt == "incremental" or (qt == "" and bool(o.since.strip()))
    if incremental:
        if o.as_of.strip():
            raise ConfigError("option 'as.of.instant' (asOf) is for snapshot queries, not incremental ones")
        if not o.since.strip():
            raise ConfigError(
                "an incremental query needs option 'hoodie.datasource.read.begin.instanttime' (since); "
                "use '000' to start at the beginning"
            )
        since = None if o.since.strip() in START else _instant("since", o.since)
        until = _instant("until", o.until) if o.until.strip() else None
        if since is not None and until is not None and until < since:
            raise ConfigError(f"option 'until' ({until}) is before 'since' ({since})")
        return Query(incremental=True, since=since, until=until)
    if o.since.strip() or o.until.strip():
        raise ConfigError("options 'since' / 'until' select an incremental query, not a snapshot")
    return Query(
        as_of=_instant("asOf", o.as_of) if o.as_of.strip() else None, read_optimized=qt == "read_optimized"
    )


def build_read_plan(options: Mapping[str, Any]) -> ReadPlan:
    """Validate the read options. Pure; ConfigError naming the bad option (never a store
    option's value)."""
    raw = {str(k).lower(): v for k, v in options.items()}
    url = str(raw.get("path") or "").strip()
    if not url:
        raise ConfigError("no table: use spark.read.format('amcommit').load(url)")
    try:
        parsed = parse_location(url)
        store_type = store_options_type(parsed.scheme)
    except AmcommitError as e:
        raise ConfigError(f"bad table URL: {e}") from None
    read: dict[str, Any] = {}
    store: dict[str, Any] = {}
    for key, value in raw.items():
        if key in READ_KEYS:
            read[READ_KEYS[key]] = value
        elif key.startswith("store.") and len(key) > len("store."):
            store[key[len("store.") :]] = value
        elif normalise_store_key(key) in store_type.__struct_fields__:
            store[key] = value
        else:
            known = [*READ_KEYS, *store_type.__struct_fields__]
            raise ConfigError(
                f"unknown option {show_key(key)} for reading format 'amcommit'{suggest(key, known)} "
                f"(read options: {', '.join(sorted(READ_KEYS))}; store options of {parsed.scheme}://: "
                f"{', '.join(store_type.__struct_fields__)})"
            )
    o = convert_options(ReadOptions, read)
    if o.max_partition_bytes < 1:
        raise ConfigError("option 'maxPartitionBytes' must be at least 1")
    store_options = convert_store_options(store_type, store).given()
    if parsed.scheme == "file":
        url = "/" + parsed.path
    return ReadPlan(url, parse_query(o), store_options, o.max_partition_bytes)


def plan_files(commits: Sequence[LoadedCommit], query: Query) -> list[FileVersion]:
    """The base files a query reads. Pure.

    Incremental: the newest version in ``(since, until]`` of each file group the commits in
    that range wrote, less the file groups a replace commit in that range replaced (rows
    written and overwritten within the range are not returned, as Hudi's incremental readers
    do); :func:`in_range` then keeps the rows changed in the range."""
    if not query.incremental:
        return snapshot(commits, query.as_of)
    return changes(commits, query.since, query.until).visible()


@dataclass(frozen=True)
class SliceRead:
    """One file slice of a Merge-on-Read table to read in a task (paths relative to the
    table): its base file (None: a log-only slice) merged with ``logs``, in order."""

    base: str | None
    logs: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class MergeSpec:
    """How a task merges the slices of a Merge-on-Read table: which instants' log blocks
    count (``view``: a :class:`SliceView` without its groups) and by what payload."""

    view: SliceView
    recipe: SliceRecipe


@dataclass(frozen=True)
class FilePart:
    """One input partition: the files it reads (paths relative to the table), or, on a
    Merge-on-Read table, the file slices it merges (``merge`` set)."""

    files: tuple[str, ...]
    slices: tuple[SliceRead, ...] = ()
    merge: MergeSpec | None = None


def group_files(files: Sequence[FileVersion], max_bytes: int) -> list[FilePart]:
    """Files grouped, in order, into input partitions of about ``max_bytes``. Pure."""
    parts: list[FilePart] = []
    cur: list[str] = []
    size = 0
    for f in files:
        if cur and size + f.size > max_bytes:
            parts.append(FilePart(tuple(cur)))
            cur, size = [], 0
        cur.append(f.path)
        size += f.size
    if cur:
        parts.append(FilePart(tuple(cur)))
    return parts


def group_slices(slices: Sequence[SliceRead], max_bytes: int, merge: MergeSpec) -> list[FilePart]:
    """Slices grouped, in order, into input partitions of about ``max_bytes`` (a slice is
    never split: its logs are merged with its base file in one task). Pure."""
    parts: list[FilePart] = []
    cur: list[SliceRead] = []
    size = 0

    def close() -> None:
        files = tuple(p for s in cur for p in ((s.base,) if s.base else ()) + s.logs)
        parts.append(FilePart(files, tuple(cur), merge))

    for s in slices:
        if cur and size + s.size > max_bytes:
            close()
            cur, size = [], 0
        cur.append(s)
        size += s.size
    if cur:
        close()
    return parts


def snap(query: Query, writes: Sequence[str]) -> Query:
    """The same query with every bound moved to the latest completed write instant at or
    before it (None when there is none): Hudi takes any time as a bound, the timeline API
    takes instants only; both give the same files. Pure; ``writes`` sorted."""

    def down(t: str | None) -> str | None:
        if t is None:
            return None
        i = bisect.bisect_right(writes, t)
        return writes[i - 1] if i else None

    if query.incremental:
        since = down(query.since)
        until = query.until
        if until is not None:
            until = down(until)
            if until is None or (since is not None and until <= since):
                return Query(incremental=True, since=since, until=since or _BEFORE_ALL)
        return Query(incremental=True, since=since, until=until)
    if query.as_of is None:
        return query
    return Query(as_of=down(query.as_of) or _BEFORE_ALL, read_optimized=query.read_optimized)


_BEFORE_ALL = "00000000000000000"
"""A bound before every instant (an empty snapshot or range)."""


def schema_instant(query: Query, writes: Sequence[str]) -> str | None:
    """The write instant whose schema a (snapped, :func:`snap`) query reads with: the
    ``as_of`` of a time travel, the end of an incremental range, else the latest (None: no
    write). Pure; ``writes`` sorted."""
    bound = query.until if query.incremental else query.as_of
    if bound is not None and bound != _BEFORE_ALL:
        return bound
    return writes[-1] if writes else None


async def _plan(
    store: Any, dest: str, query: Query
) -> tuple[list[FileVersion], list[FileVersion], Instant | None, str | None]:
    """``(files the query reads, files of the latest snapshot, the write instant whose
    schema the query reads with, that instant's recorded schema when it is archived: its
    instant file is gone from .hoodie/)``.

    With the reading API (:class:`amcommit.table.timeline.reader.Timeline`, when present) a time
    travel or incremental query reaching past what a clean deleted is refused
    (``CleanedPast``, one line); otherwise the timeline is loaded whole."""
    from amcommit.table.timeline.reader import Timeline

    tl = await Timeline.open(store, dest)  # one handle: its listing serves the plan below
    lst = await tl.current()
    done = {i.time: i for i in lst.instants if i.completed and i.action in WRITE_ACTIONS}
    # (archived writes too: a time travel or incremental read may start before the active timeline)
    archived = {c.instant.time: c for c in await tl.archived_commits(lst)}
    done = {**{t: c.instant for t, c in archived.items()}, **done}
    writes = sorted(done)
    q = snap(query, writes)
    at = schema_instant(q, writes)
    files, latest = await _plan_files(tl, q)
    old = archived.get(at) if at is not None else None
    old_schema = None if old is None else old.metadata.extra_metadata.get("schema") or None
    return files, latest, None if at is None else done.get(at), old_schema


async def _plan_files(tl: Any, q: Query) -> tuple[list[FileVersion], list[FileVersion]]:
    latest = await tl.snapshot()
    if q.incremental:
        if q.until == _BEFORE_ALL or (q.since is not None and q.since == q.until):
            return [], latest
        return (await tl.changes(q.since, q.until)).visible(), latest
    if q.as_of == _BEFORE_ALL:
        return [], latest
    return (await tl.snapshot(q.as_of) if q.as_of is not None else latest), latest


def _slice_read(slices: Sequence[FileSlice], logs: bool) -> SliceRead:
    base = slices[0].base
    paths: list[str] = []
    size = base.size if base is not None else 0
    if logs:
        for s in slices:
            for log in s.logs:
                if log.path not in paths:  # a log file appended by several deltacommits
                    paths.append(log.path)
                    size += log.size
    return SliceRead(base.path if base is not None else None, tuple(paths), size)


async def _plan_mor(
    store: Any, dest: str, props: TableProperties, query: Query
) -> tuple[list[SliceRead], MergeSpec, list[FileVersion], Instant | None]:
    """A Merge-on-Read query: ``(slices to read, how to merge them, every base file of the
    view (for the schema), the write instant whose schema the query reads with)``. One
    listing of the timeline, one read per completed write instant up to the bound; refusals
    (CleanedPast, UnknownInstant) as :meth:`Timeline.file_groups`."""
    tl = await Timeline.open(store, dest)  # one handle: its listing serves file_groups too
    lst = await tl.current()
    done = {i.time: i for i in lst.instants if i.completed and i.action in WRITE_ACTIONS}
    q = snap(query, lst.writes)
    at = schema_instant(q, lst.writes)
    if q.incremental:
        empty = q.until == _BEFORE_ALL or (q.since is not None and q.since == q.until)
        kind = "incremental"
        view = await tl.file_groups(None if empty else q.until, since=None if empty else q.since)
    else:
        empty = q.as_of == _BEFORE_ALL
        kind = "read_optimized" if q.read_optimized else "snapshot"
        view = await tl.file_groups(None if empty else q.as_of)
    picked = [] if empty else plan_slices(view, kind, q.since if q.incremental else None)
    recipe = SliceRecipe(
        key_fields=props.record_key_fields,
        payload=payload_of(props.values.get(PAYLOAD_CLASS)),
        precombine=props.values.get(PRECOMBINE_FIELD) or None,
        meta_fields=props.meta_fields,
    )
    spec = MergeSpec(SliceView([], view.completed, view.start, view.as_of), recipe)
    bases = [s.base for g in view.groups for s in g.slices if s.base is not None]
    return [_slice_read(sl, logs) for sl, logs in picked], spec, bases, None if at is None else done.get(at)


def _meta_footer(props: TableProperties) -> str:
    """A footer schema of the meta columns only (a table with log files and no base file)."""
    fields = [{"name": c, "type": "string", "nullable": True, "metadata": {}} for c in META_COLUMNS]
    return json.dumps({"type": "struct", "fields": fields if props.meta_fields else []})


def _drop_meta(schema_json: str) -> str:
    """A schema without the meta columns (a table without meta fields: readers leave them
    out, as hudi-rs does)."""
    obj = json.loads(schema_json)
    obj["fields"] = [f for f in obj.get("fields", []) if f["name"] not in META_COLUMNS]
    return json.dumps(obj, separators=(",", ":"))


@dataclass(frozen=True)
class Loaded:
    """What the driver planned: the base files (Copy-on-Write) or the file slices and how to
    merge them (Merge-on-Read: ``merge`` set), and the Spark schema JSON (None: the table
    has no file)."""

    files: list[FileVersion]
    schema_json: str | None
    slices: list[SliceRead] = field(default_factory=list)
    merge: MergeSpec | None = None


async def _load(plan: ReadPlan) -> Loaded:
    """Plan the query: the files (or slices) to read and the table's Spark schema as of the
    instant read."""
    store, dest = open_location(plan.url, **plan.store_options)
    async with store:
        try:
            props = decode_properties(
                await store.get(join(dest, PROPERTIES_FILE)), where=join(dest, PROPERTIES_FILE)
            )
        except NotFound:
            raise ConfigError(
                f"{plan.url!r} holds no Hudi table (no {PROPERTIES_FILE}); "
                "plain folders are read with spark.read.parquet"
            ) from None
        if props.merge_on_read:
            return await _load_mor(store, dest, props, plan.query)
        files, latest, at, archived_schema = await _plan(store, dest, plan.query)
        # the newest file written at or before the instant whose schema is read
        upto = [f for f in (*files, *latest) if at is None or f.instant <= at.time]
        newest = max(upto or latest or files, key=lambda f: (f.instant, f.path), default=None)
        schema_json = None if newest is None else await _footer_schema(store, dest, newest.path)
        if schema_json is not None and at is not None:
            from amcommit.table.write.task import committed_schema

            avro = archived_schema or await committed_schema(store, dest, at)
            if avro is not None:
                schema_json = table_spark_schema(schema_json, avro)
        return Loaded(files, schema_json)


async def _load_mor(store: Any, dest: str, props: TableProperties, query: Query) -> Loaded:
    from amcommit.table.write.task import committed_schema

    slices, spec, bases, at = await _plan_mor(store, dest, props, query)
    upto = [f for f in bases if at is None or f.instant <= at.time]
    newest = max(upto or bases, key=lambda f: (f.instant, f.path), default=None)
    avro = await committed_schema(store, dest, at)
    if newest is not None:
        schema_json: str | None = await _footer_schema(store, dest, newest.path)
    elif avro is not None:
        schema_json = _meta_footer(props)
    else:
        schema_json = None
    if schema_json is not None and avro is not None:
        schema_json = table_spark_schema(schema_json, avro)
    if schema_json is not None and not props.meta_fields:
        schema_json = _drop_meta(schema_json)
    return Loaded([], schema_json, slices, spec)


async def _footer_schema(store: Any, dest: str, rel: str) -> str:
    path = join(dest, rel)
    os_path = local_os_path(store, path)
    if os_path is not None:
        meta = pq.read_metadata(os_path)
        arrow = pq.read_schema(os_path)
    else:
        data = await store.get(path)
        meta = pq.read_metadata(io.BytesIO(data))
        arrow = pq.read_schema(io.BytesIO(data))
    kv = meta.metadata or {}
    if SPARK_SCHEMA_KEY in kv:
        return str(kv[SPARK_SCHEMA_KEY].decode())
    from pyspark.sql.pandas.types import from_arrow_schema

    return str(from_arrow_schema(arrow, prefer_timestamp_ntz=False).json())


_AVRO_SPARK = {
    "boolean": "boolean",
    "int": "integer",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "bytes": "binary",
    "fixed": "binary",
    "enum": "string",
    "null": "void",
}
_LOGICAL_SPARK = {
    "date": "date",
    "timestamp-micros": "timestamp",
    "timestamp-millis": "timestamp",
    "local-timestamp-micros": "timestamp_ntz",
    "local-timestamp-millis": "timestamp_ntz",
}


def _avro_base(t: Any) -> tuple[Any, bool]:
    if isinstance(t, list):
        rest = [b for b in t if b != "null"]
        return (rest[0] if len(rest) == 1 else "string"), len(rest) < len(t)
    return t, t == "null"


def avro_to_spark(t: Any) -> tuple[Any, bool]:
    """``(Spark type JSON, nullable)`` of an Avro type (Hudi's Avro -> Spark mapping). Pure."""
    base, nullable = _avro_base(t)
    if isinstance(base, str):
        return _AVRO_SPARK.get(base, "string"), nullable
    kind, logical = base.get("type"), base.get("logicalType")
    if logical == "decimal":
        return f"decimal({base.get('precision')},{base.get('scale', 0)})", nullable
    if logical in _LOGICAL_SPARK:
        return _LOGICAL_SPARK[logical], nullable
    if kind == "array":
        item, item_null = avro_to_spark(base.get("items"))
        return {"type": "array", "elementType": item, "containsNull": item_null}, nullable
    if kind == "map":
        value, value_null = avro_to_spark(base.get("values"))
        return (
            {"type": "map", "keyType": "string", "valueType": value, "valueContainsNull": value_null},
            nullable,
        )
    if kind == "record":
        fields = []
        for f in base.get("fields", []):
            ft, fn = avro_to_spark(f["type"])
            fields.append({"name": f["name"], "type": ft, "nullable": fn, "metadata": {}})
        return {"type": "struct", "fields": fields}, nullable
    return _AVRO_SPARK.get(str(kind), "string"), nullable


_INTEGERS = frozenset({"byte", "short", "integer"})


def _same_spark_type(a: Any, b: Any) -> bool:
    """The footer's Spark type ``a`` is the Avro-derived ``b`` (nullability aside; Spark's
    byte and short are Avro ints; char/varchar are strings in the footer already)."""
    if isinstance(a, str) and isinstance(b, str):
        return a == b or (a in _INTEGERS and b == "integer")
    if not (isinstance(a, dict) and isinstance(b, dict)) or a.get("type") != b.get("type"):
        return False
    kind = a.get("type")
    if kind == "array":
        return _same_spark_type(a.get("elementType"), b.get("elementType"))
    if kind == "map":
        return _same_spark_type(a.get("keyType"), b.get("keyType")) and _same_spark_type(
            a.get("valueType"), b.get("valueType")
        )
    if kind == "struct":
        fa, fb = a.get("fields", []), b.get("fields", [])
        return len(fa) == len(fb) and all(
            x["name"] == y["name"] and _same_spark_type(x["type"], y["type"])
            for x, y in zip(fa, fb, strict=True)
        )
    return bool(a == b)


def table_spark_schema(footer_json: str, avro_json: str) -> str:
    """The Spark schema (JSON) of a table as of an instant: the columns of the Avro schema
    its commit recorded, in its order, after the footer's meta columns; each with the
    footer's Spark type where it is the same type (its exact Spark type and metadata),
    else the Avro schema's (a column the file lacks, or one a later write widened), and
    nullable if either says so. Columns of the footer the Avro schema does not name are
    kept, last. Pure; the footer's schema unchanged if ``avro_json`` is not a record."""
    from amcommit.table.format.naming import META_COLUMNS

    footer = json.loads(footer_json)
    try:
        avro = json.loads(avro_json)
    except ValueError:
        return footer_json
    if not isinstance(avro, dict) or avro.get("type") != "record":
        return footer_json
    by_name = {f["name"]: f for f in footer.get("fields", [])}
    out = [f for f in footer.get("fields", []) if f["name"] in META_COLUMNS]
    named = {f["name"] for f in out}
    for af in avro.get("fields", []):
        name = af["name"]
        if name in named:
            continue
        spark_type, nullable = avro_to_spark(af["type"])
        f = by_name.get(name)
        if f is not None and _same_spark_type(f["type"], spark_type):
            out.append({**f, "nullable": bool(f.get("nullable", True) or nullable)})
        else:
            out.append({"name": name, "type": spark_type, "nullable": nullable, "metadata": {}})
        named.add(name)
    out.extend(f for f in footer.get("fields", []) if f["name"] not in named)
    return json.dumps({"type": "struct", "fields": out}, separators=(",", ":"))


def load_plan(plan: ReadPlan) -> tuple[str, list[FilePart]]:
    """Blocking: read the timeline, plan the files; returns (schema JSON, input partitions)."""
    loaded = run_blocking(lambda: _load(plan))
    if loaded.schema_json is None:
        raise ConfigError(f"the table {plan.url!r} has no committed data files yet: nothing to read")
    if loaded.merge is not None:
        parts = group_slices(loaded.slices, plan.max_partition_bytes, loaded.merge)
        return loaded.schema_json, parts or [FilePart((), (), loaded.merge)]
    return loaded.schema_json, group_files(loaded.files, plan.max_partition_bytes) or [FilePart(())]


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in its order (missing ones null), cast to its
    types (INT96 timestamps, Hudi's nullable strings). Pure."""
    cols = []
    for f in schema:
        i = table.schema.get_field_index(f.name)
        if i < 0:
            cols.append(pa.nulls(table.num_rows, f.type))
        else:
            col = table.column(i)
            cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def in_range(table: pa.Table, query: Query) -> pa.Table:
    """For an incremental query, only the rows whose ``_hoodie_commit_time`` is in range."""
    if not query.incremental or COMMIT_TIME not in table.column_names:
        return table
    col = table.column(COMMIT_TIME)
    mask = None
    if query.since is not None:
        mask = pc.greater(col, query.since)
    if query.until is not None:
        upper = pc.less_equal(col, query.until)
        mask = upper if mask is None else pc.and_(mask, upper)
    return table if mask is None else table.filter(mask)


def read_files(plan: ReadPlan, part: FilePart, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Blocking: the rows of ``part``'s files (or merged slices) as record batches of
    ``schema``."""
    if part.merge is not None:
        for s in part.slices:
            table = run_blocking(lambda s=s: _merged_slice(plan, s, part.merge))  # type: ignore[misc]
            if table is not None:
                table = in_range(table, plan.query)
                if table.num_rows:
                    yield from conform(table, schema).to_batches()
        return

    async def fetch(rel: str) -> bytes | str:
        store, dest = open_location(plan.url, **plan.store_options)
        async with store:
            path = join(dest, rel)
            os_path = local_os_path(store, path)
            if os_path is not None:
                return os_path
            return await store.get(path)

    for rel in part.files:
        src = run_blocking(lambda rel=rel: fetch(rel))  # type: ignore[misc]
        source: Any = io.BytesIO(src) if isinstance(src, bytes) else src
        pf = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        for rg in range(pf.num_row_groups):
            table = in_range(pf.read_row_group(rg), plan.query)
            if table.num_rows:
                yield from conform(table, schema).to_batches()


async def _merged_slice(plan: ReadPlan, s: SliceRead, merge: MergeSpec | None) -> pa.Table | None:
    """The rows of one Merge-on-Read file slice: its base file merged with its log files
    (fetched at once, one store opened per slice)."""
    assert merge is not None
    store, dest = open_location(plan.url, **plan.store_options)
    async with store:

        async def get(rel: str) -> bytes:
            return bytes(await store.get(join(dest, rel)))

        base: pa.Table | None = None
        if s.base is not None:
            os_path = local_os_path(store, join(dest, s.base))
            source: Any = os_path if os_path is not None else pa.BufferReader(await get(s.base))
            base = pq.read_table(source, coerce_int96_timestamp_unit="us").replace_schema_metadata(None)
        if not s.logs:
            return base
        datas = await asyncio.gather(*(get(p) for p in s.logs))
    files = [LogBytes(p, d) for p, d in zip(s.logs, datas, strict=True)]
    return merge_slice(base, live_blocks(files, merge.view.trusts), merge.recipe)


def spark_schema(schema_json: str) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(schema_json))


__all__ = [
    "READ_KEYS",
    "FilePart",
    "MergeSpec",
    "Query",
    "ReadOptions",
    "ReadPlan",
    "SliceRead",
    "build_read_plan",
    "conform",
    "group_files",
    "group_slices",
    "in_range",
    "load_plan",
    "parse_query",
    "plan_files",
    "read_files",
    "schema_instant",
    "snap",
    "table_spark_schema",
]
