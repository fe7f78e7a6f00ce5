"""Reading a table's rows: ``amcommit.table.read`` and ``read_async``, for Copy-on-Write and
Merge-on-Read tables (Hudi table version 6), without Spark.

Query types (as hudi-rs and Hudi's Spark reader name them):

- ``snapshot`` (the default): per file group, its latest file slice as of ``as_of`` (None:
  the latest instant), the base file merged with the slice's log blocks
  (:func:`amcommit.table.query.merge.merge_slice`);
- ``read_optimized``: the base files of those slices only (a log-only group gives nothing);
- ``incremental`` (also chosen by giving ``since`` or ``until``): the records whose
  ``_hoodie_commit_time`` lies in ``(since, until]``, from the snapshot as of ``until`` of the
  file groups written in that range (as on Copy-on-Write; deletes are not returned, as
  hudi-rs 0.5 returns none). A table without meta fields (``hoodie.populate.meta.fields=false``)
  has no commit time per record: its incremental read returns the records of the file groups
  written in the range, as hudi-rs does.

The meta columns come first, as hudi-rs returns them; rows come file group by file group.

Cost: one listing of ``.hoodie/`` and one read per completed write instant up to ``as_of``
(the :class:`~amcommit.table.timeline.reader.Timeline`), one read of ``hoodie.properties``,
then one read per base file and log file of the slices read (at most :data:`READ_CONCURRENCY`
slices and :data:`REQUEST_CONCURRENCY` reads at once). Read-only: a commit completing during a read is seen whole or not at all.

Refusals, each one line: :class:`UnknownQueryType`, :class:`~amcommit.errors.ConfigError`
for arguments that do not go together, :class:`~amcommit.table.errors.RangeReversed`,
:class:`~amcommit.table.errors.UnknownInstant` (also for a time before the active timeline),
:class:`~amcommit.table.errors.CleanedPast`, :class:`~amcommit.table.errors.NotATable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.errors import ConfigError, NotFound
from amcommit.parallel import gather_limited
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.table.errors import NotATable
from amcommit.table.file_group.model import FileGroup, FileSlice
from amcommit.table.format.naming import HOODIE_DIR, META_COLUMNS
from amcommit.table.format.properties import TableProperties, decode_properties
from amcommit.table.query.merge import (
    LogBytes,
    SliceRecipe,
    arrow_schema_of_avro,
    live_blocks,
    merge_slice,
    payload_of,
)
from amcommit.table.timeline.reader import FROM_START, SliceView, Timeline

__all__ = ["QUERY_TYPES", "UnknownQueryType", "plan_slices", "read", "read_async", "read_store"]

QUERY_TYPES = ("snapshot", "read_optimized", "incremental")
READ_CONCURRENCY = 16
"""Slices read at once (fetched, decoded and merged; a slice's decode runs in a worker thread
while the others' requests are in flight)."""
REQUEST_CONCURRENCY = 48
"""GETs of base and log files in flight at once, over all the slices being read (one slice's
files are fetched together, and the slices after it start while its requests run)."""
PAYLOAD_CLASS = "hoodie.compaction.payload.class"
PRECOMBINE_FIELD = "hoodie.table.precombine.field"
COMMIT_TIME = META_COLUMNS[0]


class UnknownQueryType(ConfigError):
    """``query_type`` is none of :data:`QUERY_TYPES`."""

    @classmethod
    def make(cls, value: object) -> UnknownQueryType:
        return cls(f"unknown query type {value!r}: use one of {', '.join(QUERY_TYPES)}")


def _query(as_of: str | None, since: str | None, until: str | None, query_type: str) -> str:
    if not isinstance(query_type, str) or query_type.strip().lower() not in QUERY_TYPES:
        raise UnknownQueryType.make(query_type)
    q = query_type.strip().lower()
    ranged = since is not None or until is not None
    if ranged and as_of is not None:
        raise ConfigError(
            "as_of and since/until do not go together: time travel or an incremental read, not both"
        )
    if ranged and q == "read_optimized":
        raise ConfigError("since/until make a read incremental; query_type read_optimized takes as_of only")
    if q == "incremental" and as_of is not None:
        raise ConfigError("an incremental read takes since/until, not as_of")
    return "incremental" if ranged else q


async def _properties(store: Store, dest: str) -> TableProperties:
    path = join(dest, HOODIE_DIR, "hoodie.properties")
    try:
        data = await store.get(path)
    except NotFound:
        raise NotATable.make(dest) from None
    return decode_properties(data, where=path)


def _effective(group: FileGroup, view: SliceView) -> tuple[FileSlice | None, list[FileSlice]]:
    """The slice a reader reads of ``group`` (its latest), and the slices whose logs it
    merges, oldest first: a latest slice without a base file whose base instant is no
    completed instant (logs written against a pending compaction) is read with the slice
    before it, as Hudi's Java file-system view reads it."""
    slices = list(group.slices)
    if not slices:
        return None, []
    merged = [slices[-1]]
    while (
        len(slices) > len(merged)
        and merged[0].base is None
        and not view.trusts(merged[0].base_instant)
        and merged[0].base_instant not in view.completed
    ):
        merged.insert(0, slices[-1 - len(merged)])
    return merged[0], merged


def _ro_slice(group: FileGroup) -> FileSlice | None:
    for s in reversed(group.slices):
        if s.base is not None:
            return s
    return None


def _written_since(slices: Sequence[FileSlice], since: str | None) -> bool:
    if since is None:
        return True
    return any(s.base_instant > since or any(log.instant > since for log in s.logs) for s in slices)


def plan_slices(view: SliceView, query_type: str, since: str | None) -> list[tuple[list[FileSlice], bool]]:
    """What a query of type ``query_type`` (:data:`QUERY_TYPES`) reads of each file group of
    ``view``, in the view's order: ``(slices, logs)``, the first slice's base file (none: a
    log-only slice) and, if ``logs``, the log files of every slice in ``slices``, merged in
    order. Read-optimized: the latest slice with a base file, no logs; snapshot and
    incremental: the latest slice (with the one before it when its logs were written against
    a pending compaction); incremental leaves out the groups nothing after ``since`` wrote
    into. Pure; shared by :func:`read_store` and the Spark reader."""
    out: list[tuple[list[FileSlice], bool]] = []
    for g in view.groups:
        if query_type == "read_optimized":
            s = _ro_slice(g)
            if s is not None:
                out.append(([s], False))
            continue
        head, slices = _effective(g, view)
        if head is None or (query_type == "incremental" and not _written_since(slices, since)):
            continue
        out.append((slices, True))
    return out


async def _slice_rows(
    store: Store,
    dest: str,
    slices: list[FileSlice],
    view: SliceView,
    recipe: SliceRecipe,
    logs: bool,
    requests: anyio.CapacityLimiter,
) -> pa.Table | None:
    """The rows of one file group: its base file and log files fetched at once (one round
    trip of requests per slice, not one per file; every GET holds a token of ``requests``,
    shared by the slices read at once), then decoded and merged in a worker thread (the
    event loop keeps fetching other slices meanwhile)."""
    first = slices[0]
    paths: list[str] = []
    if logs:
        for s in slices:
            for log in s.logs:
                if log.path not in paths:  # a log file appended by several deltacommits is named by each
                    paths.append(log.path)
    wanted = ([first.base.path] if first.base is not None else []) + paths

    async def get(path: str) -> bytes:
        async with requests:
            return await store.get(join(dest, path))

    datas = await gather_limited([partial(get, p) for p in wanted], len(wanted) or 1)
    raw_base = datas[0] if first.base is not None else None
    files = [LogBytes(p, d) for p, d in zip(paths, datas[len(wanted) - len(paths) :], strict=True)]

    def decode() -> pa.Table | None:
        base = (
            pq.read_table(pa.BufferReader(raw_base)).replace_schema_metadata(None)
            if raw_base is not None
            else None
        )
        if not files:
            return base
        return merge_slice(base, live_blocks(files, view.trusts), recipe)

    return await anyio.to_thread.run_sync(decode)


def _meta_first(t: pa.Table) -> pa.Table:
    names = t.column_names
    meta = [c for c in META_COLUMNS if c in names]
    return t.select(meta + [c for c in names if c not in meta])


async def _empty_schema(tl: Timeline, props: TableProperties) -> pa.Schema:
    schema_text: str | None = None
    commits = await tl.commits()
    for c in reversed(commits):
        schema_text = c.metadata.extra_metadata.get("schema")
        if schema_text:
            break
    schema_text = schema_text or props.create_schema
    fields: list[pa.Field] = []
    if props.meta_fields:
        fields = [pa.field(c, pa.string()) for c in META_COLUMNS]
    if schema_text:
        for f in arrow_schema_of_avro(schema_text):
            if f.name not in META_COLUMNS:
                fields.append(f)
    return pa.schema(fields)


async def read_store(
    store: Store,
    dest: str,
    *,
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    query_type: str = "snapshot",
    config: CommitterConfig = DEFAULT_CONFIG,
) -> pa.Table:
    """The rows of the table at ``dest`` in ``store`` (see the module doc)."""
    q = _query(as_of, since, until, query_type)
    if isinstance(since, str) and since.strip() in FROM_START:
        since = None
    tl = await Timeline.open(store, dest, config=config)
    props = await _properties(tl.store, dest)
    view = await tl.file_groups(
        until if q == "incremental" else as_of, since=since if q == "incremental" else None
    )
    recipe = SliceRecipe(
        key_fields=props.record_key_fields,
        payload=payload_of(props.values.get(PAYLOAD_CLASS)),
        precombine=props.values.get(PRECOMBINE_FIELD) or None,
        meta_fields=props.meta_fields,
    )
    requests = anyio.CapacityLimiter(REQUEST_CONCURRENCY)
    jobs = [
        partial(_slice_rows, tl.store, dest, slices, view, recipe, logs, requests)
        for slices, logs in plan_slices(view, q, since)
    ]
    parts = [t for t in await gather_limited(jobs, READ_CONCURRENCY) if t is not None]
    if not parts:
        return (await _empty_schema(tl, props)).empty_table()
    out = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    if not props.meta_fields:  # Java writes them empty: readers leave them out, as hudi-rs does
        out = out.drop_columns([c for c in META_COLUMNS if c in out.column_names])
    elif q == "incremental":
        t = out.column(COMMIT_TIME)
        keep = pc.less_equal(t, until) if until is not None else None
        if since is not None:
            after = pc.greater(t, since)
            keep = after if keep is None else pc.and_(keep, after)
        if keep is not None:
            out = out.filter(keep)
    return _meta_first(out)


async def read_async(
    url: str,
    *,
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    query_type: str = "snapshot",
    store_options: dict[str, Any] | None = None,
) -> pa.Table:
    """The rows of the table at ``url`` (any store URL amcommit opens: ``file://``,
    ``abfs[s]://``, ``gs://``, plain paths), as a ``pyarrow.Table``; ``store_options`` go to
    :func:`amcommit.store.schemes.open_location`. See the module doc."""
    from amcommit.store.schemes import open_location

    _query(as_of, since, until, query_type)  # bad arguments refused before the store is opened
    store, dest = open_location(url, **(store_options or {}))
    async with store:
        return await read_store(store, dest, as_of=as_of, since=since, until=until, query_type=query_type)


def read(
    url: str,
    *,
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
    query_type: str = "snapshot",
    store_options: dict[str, Any] | None = None,
) -> pa.Table:
    """The blocking form of :func:`read_async` (its own event loop; callable from any
    thread, also inside a running loop)."""
    from amcommit.loop import run_blocking

    return run_blocking(
        lambda: read_async(
            url, as_of=as_of, since=since, until=until, query_type=query_type, store_options=store_options
        )
    )
