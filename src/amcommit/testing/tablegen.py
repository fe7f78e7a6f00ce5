"""Test and benchmark generator of Apache Hudi Copy-on-Write tables, version 6.

Writes valid tables *directly* (not through amcommit's write path): ``hoodie.properties``,
one ``.requested`` / ``.inflight`` / completed instant file per write (JSON commit metadata
built with :mod:`amcommit.table.model`), and small Parquet base files that carry Hudi's meta
columns. hudi-rs reads what it writes (tests/table/test_reader_oracle.py checks that).

A table is described by a list of :class:`Write`: each one is an instant with an operation
and, per partition, how many files (and rows per file) it adds. Overwrites list the file
groups they replace themselves (``INSERT_OVERWRITE``: every live group of the partitions
written; ``INSERT_OVERWRITE_TABLE``: every live group). ``failed=True`` leaves the instant
inflight with its files on disk (an orphan write, as a crashed writer leaves it).

``files="parquet"`` writes real Parquet files; ``files="stub"`` writes the same few bytes
everywhere (benchmarks of planning, which never opens base files).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from amcommit.table.model import CommitMetadata, Operation, WriteStat, encode_commit_metadata
from amcommit.table.naming import META_COLUMNS, base_file_name, commit_seqno, format_instant

__all__ = ["GeneratedTable", "Write", "generate", "write_local"]

PARTITION_FIELD = "p"

AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "gen_record",
        "namespace": "hoodie.gen",
        "fields": [
            {"name": "id", "type": ["null", "long"], "default": None},
            {"name": "value", "type": ["null", "string"], "default": None},
            {"name": PARTITION_FIELD, "type": ["null", "string"], "default": None},
        ],
    }
)


@dataclass(frozen=True)
class Write:
    """One instant of a generated table."""

    operation: Operation = Operation.INSERT
    files: dict[str, int] = field(default_factory=lambda: {"a": 1})
    """Partition value -> number of new file groups."""
    rows: int = 3
    """Rows per file."""
    failed: bool = False
    label: str | None = None


@dataclass
class GeneratedTable:
    """What :func:`generate` made: objects by path relative to the table root, and the facts."""

    name: str
    objects: dict[str, bytes]
    instants: list[str]
    """Times of the writes, in order (failed ones included)."""
    completed: list[str]
    rows_by_instant: dict[str, int]
    files_by_instant: dict[str, list[str]]
    """Relative paths of base files each instant added."""
    replaced_by_instant: dict[str, list[str]]
    """Relative paths of every base file each instant's replacement hid."""
    mtimes: dict[str, float] = field(default_factory=dict)
    """Modification time to set on some objects (completed instants: duration)."""


def properties(name: str) -> bytes:
    """A ``hoodie.properties`` for a non-partitioned-key, partition field ``p`` table."""
    lines = [
        "#Properties saved by the amcommit test generator",
        f"hoodie.table.name={name}",
        "hoodie.table.type=COPY_ON_WRITE",
        "hoodie.table.version=6",
        "hoodie.timeline.layout.version=1",
        f"hoodie.table.partition.fields={PARTITION_FIELD}",
        "hoodie.table.recordkey.fields=_hoodie_record_key",
        "hoodie.table.keygenerator.class=org.apache.hudi.keygen.SimpleKeyGenerator",
        "hoodie.table.base.file.format=PARQUET",
        "hoodie.table.timeline.timezone=UTC",
        "hoodie.datasource.write.hive_style_partitioning=true",
        "hoodie.populate.meta.fields=true",
        "hoodie.table.create.schema=" + AVRO_SCHEMA.replace(":", "\\:"),
    ]
    return ("\n".join(lines) + "\n").encode()


_STUB = b"PAR1stubPAR1"


def _parquet(instant: str, part: str, rel: str, file_index: int, first_id: int, rows: int) -> bytes:
    name = rel.rsplit("/", 1)[-1]
    ids = list(range(first_id, first_id + rows))
    cols = {
        META_COLUMNS[0]: pa.array([instant] * rows, pa.string()),
        META_COLUMNS[1]: pa.array([commit_seqno(instant, file_index, n) for n in range(rows)], pa.string()),
        META_COLUMNS[2]: pa.array([f"k{i}" for i in ids], pa.string()),
        META_COLUMNS[3]: pa.array([part] * rows, pa.string()),
        META_COLUMNS[4]: pa.array([name] * rows, pa.string()),
        "id": pa.array(ids, pa.int64()),
        "value": pa.array([f"v{i}@{instant}" for i in ids], pa.string()),
        PARTITION_FIELD: pa.array([part.split("=", 1)[1]] * rows, pa.string()),
    }
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    return buf.getvalue()


def generate(
    writes: Iterable[Write],
    *,
    name: str = "gen",
    start: datetime = datetime(2026, 11, 1, tzinfo=UTC),
    step: timedelta = timedelta(seconds=1),
    files: Literal["parquet", "stub"] = "parquet",
) -> GeneratedTable:
    """Build the objects of a table whose instants are ``start``, ``start + step``, ..."""
    objs: dict[str, bytes] = {".hoodie/hoodie.properties": properties(name)}
    live: dict[str, dict[str, str]] = {}  # partition path -> file id -> rel path
    out = GeneratedTable(name, objs, [], [], {}, {}, {})
    next_id = 0
    for n, w in enumerate(writes):
        t = format_instant(start + n * step)
        action = w.operation.action.value
        out.instants.append(t)
        objs[f".hoodie/{t}.{action}.requested"] = b""
        objs[f".hoodie/{t}.{action}.inflight"] = b""
        stats: dict[str, list[WriteStat]] = {}
        added: dict[str, dict[str, str]] = {}
        rows_total = 0
        for value, count in w.files.items():
            part = f"{PARTITION_FIELD}={value}"
            if f"{part}/.hoodie_partition_metadata" not in objs:
                objs[f"{part}/.hoodie_partition_metadata"] = (
                    f"#partition metadata\ncommitTime={t}\npartitionDepth=1\n".encode()
                )
            for i in range(count):
                fid = f"{n:08x}-{i:04x}-4000-8000-{len(live) + len(added):012x}-0"
                rel = f"{part}/{base_file_name(fid, f'{i}-1-0', t)}"
                data = _parquet(t, part, rel, i, next_id, w.rows) if files == "parquet" else _STUB
                next_id += w.rows
                objs[rel] = data
                added.setdefault(part, {})[fid] = rel
                stats.setdefault(part, []).append(
                    WriteStat(
                        file_id=fid,
                        path=rel,
                        num_writes=w.rows,
                        num_inserts=w.rows,
                        total_write_bytes=len(data),
                        partition_path=part,
                        file_size_in_bytes=len(data),
                    )
                )
                rows_total += w.rows
        replace: dict[str, list[str]] | None = None
        hidden: list[str] = []
        if w.operation is Operation.INSERT_OVERWRITE:
            replace = {p: sorted(live.get(p, {})) for p in added}
        elif w.operation is Operation.INSERT_OVERWRITE_TABLE:
            replace = {p: sorted(g) for p, g in live.items()}
        out.files_by_instant[t] = [r for g in added.values() for r in g.values()]
        out.rows_by_instant[t] = rows_total
        if w.failed:
            out.replaced_by_instant[t] = []
            continue
        if replace is not None:
            for p, fids in replace.items():
                for fid in fids:
                    hidden.append(live[p].pop(fid))
        for p, g in added.items():
            live.setdefault(p, {}).update(g)
        extra = {"schema": AVRO_SCHEMA}
        if w.label is not None:
            extra["amcommit.label"] = w.label
        meta = CommitMetadata(
            partition_to_write_stats=stats,
            extra_metadata=extra,
            operation_type=w.operation.value,
            partition_to_replace_file_ids=replace,
        )
        objs[f".hoodie/{t}.{action}"] = encode_commit_metadata(meta)
        out.mtimes[f".hoodie/{t}.{action}"] = (start + n * step).timestamp() + 0.25
        out.completed.append(t)
        out.replaced_by_instant[t] = hidden
    return out


def write_local(table: GeneratedTable, root: Path) -> Path:
    """Write ``table`` under ``root`` (created); returns ``root``. Instant files last."""
    root.mkdir(parents=True, exist_ok=True)
    order = sorted(table.objects, key=lambda p: (p.startswith(".hoodie/"), p))
    for rel in order:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(table.objects[rel])
        if rel in table.mtimes:
            os.utime(path, (table.mtimes[rel], table.mtimes[rel]))
    return root
