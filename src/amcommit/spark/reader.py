"""Reading a Hudi table: ``spark.read.format("amcommit").load(dest)``.

Queries, selected with Hudi's own option names (short aliases in brackets):

* snapshot (default, ``hoodie.datasource.query.type=snapshot``): the latest committed file
  of every file group not replaced by an overwrite; uncommitted files (of an inflight or
  failed write) and replaced ones are never read, even while they are still on disk;
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
Nothing here writes.
"""

from __future__ import annotations

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
from amcommit.table.file_group.model import FileVersion
from amcommit.table.format.model import WRITE_ACTIONS, Instant
from amcommit.table.format.naming import PROPERTIES_FILE, check_instant
from amcommit.table.timeline.instants import (
    LoadedCommit,
    changes,
    snapshot,
)

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
    if qt not in ("", "snapshot", "incremental"):
        raise ConfigError("option 'hoodie.datasource.query.type' must be snapshot or incremental")
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
    return Query(as_of=_instant("asOf", o.as_of) if o.as_of.strip() else None)


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
class FilePart:
    """One input partition: the files it reads (paths relative to the table)."""

    files: tuple[str, ...]


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
    return Query(as_of=down(query.as_of) or _BEFORE_ALL)


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


async def _load(plan: ReadPlan) -> tuple[list[FileVersion], str | None]:
    """The files to read, and the Spark schema JSON of the newest committed file (None:
    the table has no file)."""
    store, dest = open_location(plan.url, **plan.store_options)
    async with store:
        try:
            await store.stat(join(dest, PROPERTIES_FILE))
        except NotFound:
            raise ConfigError(
                f"{plan.url!r} holds no Hudi table (no {PROPERTIES_FILE}); "
                "plain folders are read with spark.read.parquet"
            ) from None
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
        return files, schema_json


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
    files, schema_json = run_blocking(lambda: _load(plan))
    if schema_json is None:
        raise ConfigError(f"the table {plan.url!r} has no committed data files yet: nothing to read")
    return schema_json, group_files(files, plan.max_partition_bytes) or [FilePart(())]


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
    """Blocking: the rows of ``part``'s files as record batches of ``schema``."""

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


def spark_schema(schema_json: str) -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(schema_json))


__all__ = [
    "READ_KEYS",
    "FilePart",
    "Query",
    "ReadOptions",
    "ReadPlan",
    "build_read_plan",
    "conform",
    "group_files",
    "in_range",
    "load_plan",
    "parse_query",
    "plan_files",
    "read_files",
    "schema_instant",
    "snap",
    "table_spark_schema",
]
