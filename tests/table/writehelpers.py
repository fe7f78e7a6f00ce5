"""Helpers for table write tests: write rows through the engine API, read with hudi-rs."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from amcommit.api import commit_job
from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.report import JobReport
from amcommit.committer.task import commit_task, setup_task
from amcommit.paths import join, relative_to
from amcommit.store.base import Store
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import (
    base_file_name,
    commit_seqno,
    generated_record_key,
    new_file_id,
    write_token,
)
from amcommit.table.format.schema import avro_schema
from amcommit.table.timeline.reader import Timeline
from amcommit.table.write.task import TableSpec, TableWrite, begin_write

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string()), pa.field("v", pa.string())]
)
SPEC = TableSpec("t1", partition_fields=("p",))


def parquet_bytes(
    rows: Sequence[dict[str, Any]],
    schema: pa.Schema = SCHEMA,
    *,
    meta: tuple[str, str, str, int] | None = None,
) -> bytes:
    """Parquet bytes of ``rows``; ``meta`` = (instant, partition path, file name, task n):
    lead with Hudi's meta columns as the Spark writer fills them."""
    table = pa.Table.from_pylist(list(rows), schema=schema)
    if meta is not None:
        instant, part, name, n = meta
        k = len(rows)
        cols = {
            "_hoodie_commit_time": [instant] * k,
            "_hoodie_commit_seqno": [commit_seqno(instant, n, i) for i in range(k)],
            "_hoodie_record_key": [generated_record_key(instant, n, i) for i in range(k)],
            "_hoodie_partition_path": [part] * k,
            "_hoodie_file_name": [name] * k,
        }
        for i, (c, v) in enumerate(cols.items()):
            table = table.add_column(i, pa.field(c, pa.string()), pa.array(v, pa.string()))
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def by_partition(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(f"p={r['p']}", []).append(r)
    return out


async def begin(
    store: Store,
    dest: str,
    op: Operation = Operation.INSERT,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    spec: TableSpec = SPEC,
) -> TableWrite:
    return await begin_write(
        store, dest, operation=op, spec=spec, avro_schema=avro_schema(SCHEMA, spec.name), config=config
    )


async def write_tasks(
    store: Store, w: TableWrite, rows: Sequence[dict[str, Any]], *, tasks: int = 2, counts: bool = True
) -> None:
    """Spread ``rows`` over ``tasks`` tasks, each writing one file per partition."""
    parts = by_partition(rows)
    for n in range(tasks):
        ta = f"attempt_{w.instant}_m_{n:06d}_0"
        work = await setup_task(store, w.layout, ta)
        counted: dict[str, int] = {}
        for part, prow in sorted(parts.items()):
            mine = prow[n::tasks]
            if not mine:
                continue
            if w.properties.meta_fields:
                name = base_file_name(new_file_id(), write_token(n, 0, 0), w.instant)
                rel = f"{part}/{name}"
                data = parquet_bytes(mine, meta=(w.instant, part, name, n))
            else:
                rel = f"{part}/part-{n:05d}.parquet"
                data = parquet_bytes(mine)
            await store.put(join(work, rel), data)
            counted[rel] = len(mine)
        extra = {"hudi.rows": json.dumps(counted)} if counts else None
        await commit_task(store, w.layout, f"task_{w.instant}_m_{n:06d}", ta, extra_data=extra)


async def write(
    store: Store,
    dest: str,
    rows: Sequence[dict[str, Any]],
    op: Operation = Operation.INSERT,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    spec: TableSpec = SPEC,
) -> tuple[TableWrite, JobReport]:
    w = await begin(store, dest, op, config=config, spec=spec)
    await write_tasks(store, w, rows)
    report = await commit_job(store, dest, w.instant, config=config)
    return w, report


async def listing(store: Store, dest: str) -> list[str]:
    return sorted([relative_to(i.path, dest) async for i in store.list(dest, recursive=True)])


def rows(n0: int, n: int, parts: Sequence[str] = ("a", "b"), tag: str = "") -> list[dict[str, Any]]:
    return [{"id": i, "p": parts[i % len(parts)], "v": f"{tag}{i}"} for i in range(n0, n0 + n)]


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["id"], r["p"], r["v"])


def _table(base_uri: str, storage: dict[str, str] | None) -> Any:
    from hudi import HudiTableBuilder

    b = HudiTableBuilder.from_base_uri(base_uri)
    if storage:
        b = b.with_storage_options(storage)
    return b.build()


def _read(table: Any, options: Any) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for batch in table.read(options):
        out.extend(_key(r) for r in batch.to_pylist())
    return sorted(out)


def hudi_rows(
    base_uri: str, *, as_of: str | None = None, storage: dict[str, str] | None = None
) -> list[tuple[Any, ...]]:
    """Snapshot (or time travel) rows read by hudi-rs, as sorted (id, p, v)."""
    from hudi import HudiReadOptions

    opts = HudiReadOptions()
    if as_of:
        opts = opts.with_as_of_timestamp(as_of)
    return _read(_table(base_uri, storage), opts)


def hudi_incremental(
    base_uri: str, since: str | None, until: str | None, *, storage: dict[str, str] | None = None
) -> list[tuple[Any, ...]]:
    """Incremental rows (since, until] read by hudi-rs."""
    from hudi import HudiQueryType, HudiReadOptions

    opts = HudiReadOptions().with_query_type(HudiQueryType.Incremental)
    opts = opts.with_start_timestamp(since or "0")
    if until:
        opts = opts.with_end_timestamp(until)
    return _read(_table(base_uri, storage), opts)


def keys(rs: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(_key(r) for r in rs)


async def amcommit_rows(store: Store, dest: str) -> list[tuple[Any, ...]]:
    """The snapshot read by amcommit's reader as sorted ``(id, p, v)`` tuples (its file list,
    each file read from the store)."""
    out: list[tuple[Any, ...]] = []
    for f in await (await Timeline.open(store, dest)).snapshot():
        table = pq.read_table(io.BytesIO(await store.get(join(dest, f.path))))
        out.extend((r["id"], r["p"], r["v"]) for r in table.to_pylist())
    return sorted(out)
