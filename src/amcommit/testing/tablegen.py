"""Test and benchmark generator of Apache Hudi Copy-on-Write tables, version 6.

Writes valid tables *directly* (not through amcommit's write path): ``hoodie.properties``,
one ``.requested`` / ``.inflight`` / completed instant file per write (JSON commit metadata
built with :mod:`amcommit.table.format.model`), and small Parquet base files that carry Hudi's meta
columns. hudi-rs reads what it writes (tests/table/test_reader_oracle.py checks that).

A table is described by a list of :class:`Write`: each one is an instant with an operation
and, per partition, how many files (and rows per file) it adds. Overwrites list the file
groups they replace themselves (``INSERT_OVERWRITE``: every live group of the partitions
written; ``INSERT_OVERWRITE_TABLE``: every live group). ``failed=True`` leaves the instant
inflight with its files on disk (an orphan write, as a crashed writer leaves it).

Upserts and deletes (operation ``"UPSERT"`` / ``"DELETE"``, action ``commit``) follow Hudi's
Copy-on-Write merge (``HoodieMergeHandle``): every file group holding an updated or deleted
record (or chosen for inserts into a small file, ``grow``) gets a new base file version
``<fileId>_<token>_<instant>.parquet`` holding the old records in their order -- unchanged ones
with their meta columns as they were (``_hoodie_commit_time``, ``_hoodie_commit_seqno``), only
``_hoodie_file_name`` pointing at the new file; updated ones with the new value, stamped with
the new instant and a new seqno; deleted ones left out (a group whose every record is deleted
gets an empty version) --, then the records inserted into it. Its write stat has
``prevCommit`` = the previous version's instant, ``numWrites`` = the records in the new file,
``numUpdateWrites``, ``numDeletes``, ``numInserts``; new file groups have ``prevCommit`` =
``null`` and ``numInserts`` = ``numWrites``. :meth:`GeneratedTable.snapshot` is the table's
content as of a completed instant (the model the readers are checked against).

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

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from amcommit.table.format.model import CommitMetadata, Operation, WriteStat, encode_commit_metadata
from amcommit.table.format.naming import META_COLUMNS, base_file_name, commit_seqno, format_instant

__all__ = ["GeneratedTable", "Record", "Write", "generate", "write_local"]

UPSERT = "UPSERT"
DELETE = "DELETE"
"""Hudi's ``WriteOperationType`` names of the record-level writes (action ``commit``)."""

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

    operation: Operation | str = Operation.INSERT
    files: dict[str, int] = field(default_factory=lambda: {"a": 1})
    """Partition value -> number of new file groups."""
    rows: int = 3
    """Rows per file."""
    failed: bool = False
    label: str | None = None
    updates: tuple[int, ...] = ()
    """Ids of live records (key ``k<id>``) given a new value: their file groups are rewritten."""
    deletes: tuple[int, ...] = ()
    """Ids of live records deleted: their file groups are rewritten without them."""
    grow: dict[str, int] = field(default_factory=dict)
    """Partition value -> new records inserted into the partition's smallest live file group
    (Hudi's small-file handling: they go into that group's new version, ``numInserts``)."""


@dataclass(frozen=True)
class Record:
    """One record as stored: its key, partition path, value and meta columns."""

    id: int
    partition: str
    value: str
    commit_time: str
    seqno: str

    @property
    def key(self) -> str:
        return f"k{self.id}"


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
    deltas: dict[str, tuple[frozenset[str], dict[str, Record]]] = field(default_factory=dict)
    """Completed instant -> (keys it removed, records it wrote, by key): what it changed."""
    versions: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    """``(partition path, file id)`` -> its committed base file versions ``(instant, path)``,
    oldest first (replaced groups included)."""

    def snapshot(self, as_of: str) -> dict[str, Record]:
        """The records (by key) a snapshot as of the completed instant ``as_of`` reads."""
        state: dict[str, Record] = {}
        for t in self.completed:
            if t > as_of:
                break
            gone, put = self.deltas[t]
            for k in gone:
                state.pop(k, None)
            state.update(put)
        return state

    def incremental(self, since: str | None, until: str) -> dict[str, Record]:
        """The records an incremental read of ``(since, until]`` returns by Hudi's definition:
        those of the snapshot as of ``until`` whose latest change lies in the range."""
        return {k: r for k, r in self.snapshot(until).items() if since is None or r.commit_time > since}


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
        "hoodie.datasource.write.drop.partition.columns=false",
        "hoodie.table.create.schema=" + AVRO_SCHEMA.replace(":", "\\:"),
    ]
    return ("\n".join(lines) + "\n").encode()


_STUB = b"PAR1stubPAR1"


def _parquet(rel: str, records: list[Record]) -> bytes:
    """A base file holding ``records``, meta columns first; ``_hoodie_file_name`` is its own."""
    name = rel.rsplit("/", 1)[-1]
    n = len(records)
    cols = {
        META_COLUMNS[0]: pa.array([r.commit_time for r in records], pa.string()),
        META_COLUMNS[1]: pa.array([r.seqno for r in records], pa.string()),
        META_COLUMNS[2]: pa.array([r.key for r in records], pa.string()),
        META_COLUMNS[3]: pa.array([r.partition for r in records], pa.string()),
        META_COLUMNS[4]: pa.array([name] * n, pa.string()),
        "id": pa.array([r.id for r in records], pa.int64()),
        "value": pa.array([r.value for r in records], pa.string()),
        PARTITION_FIELD: pa.array([r.partition.split("=", 1)[1] for r in records], pa.string()),
    }
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    return buf.getvalue()


def _new_records(instant: str, part: str, file_index: int, first_id: int, rows: int) -> list[Record]:
    return [
        Record(i, part, f"v{i}@{instant}", instant, commit_seqno(instant, file_index, n))
        for n, i in enumerate(range(first_id, first_id + rows))
    ]


def _action(op: Operation | str) -> str:
    if op in (Operation.INSERT_OVERWRITE, Operation.INSERT_OVERWRITE_TABLE):
        return "replacecommit"
    return "commit"


@dataclass
class _Pending:
    """What one write adds: objects, its files by partition, their records and write stats."""

    objs: dict[str, bytes]
    files: str
    added: dict[str, dict[str, str]]
    content: dict[tuple[str, str], list[Record]]
    stats: dict[str, list[WriteStat]]

    def put(self, part: str, fid: str, rel: str, records: list[Record], stat: WriteStat) -> None:
        data = _parquet(rel, records) if self.files == "parquet" else _STUB
        self.objs[rel] = data
        self.added.setdefault(part, {})[fid] = rel
        self.content[(part, fid)] = records
        self.stats.setdefault(part, []).append(
            msgspec.structs.replace(stat, total_write_bytes=len(data), file_size_in_bytes=len(data))
        )


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
    live: dict[str, dict[str, str]] = {}  # partition path -> file id -> rel path (newest version)
    content: dict[tuple[str, str], list[Record]] = {}  # (partition, file id) -> newest version's records
    version_of: dict[tuple[str, str], str] = {}  # (partition, file id) -> newest version's instant
    out = GeneratedTable(name, objs, [], [], {}, {}, {})
    next_id = 0
    groups_made = 0
    for n, w in enumerate(writes):
        t = format_instant(start + n * step)
        op = str(w.operation.value if isinstance(w.operation, Operation) else w.operation)
        action = _action(w.operation)
        if (w.updates or w.deletes or w.grow) and action != "commit":
            raise ValueError("updates, deletes and grow go with a commit (UPSERT, DELETE), not an overwrite")
        out.instants.append(t)
        objs[f".hoodie/{t}.{action}.requested"] = b""
        objs[f".hoodie/{t}.{action}.inflight"] = b""
        stats: dict[str, list[WriteStat]] = {}
        added: dict[str, dict[str, str]] = {}
        new_content: dict[tuple[str, str], list[Record]] = {}
        rows_total = 0
        file_index = 0

        pending = _Pending(objs, files, added, new_content, stats)
        put = pending.put

        for value, count in w.files.items():
            part = f"{PARTITION_FIELD}={value}"
            if f"{part}/.hoodie_partition_metadata" not in objs:
                objs[f"{part}/.hoodie_partition_metadata"] = (
                    f"#partition metadata\ncommitTime={t}\npartitionDepth=1\n".encode()
                )
            for i in range(count):
                fid = f"{n:08x}-{i:04x}-4000-8000-{groups_made:012x}-0"
                groups_made += 1
                rel = f"{part}/{base_file_name(fid, f'{file_index}-1-0', t)}"
                records = _new_records(t, part, file_index, next_id, w.rows)
                next_id += w.rows
                rows_total += w.rows
                stat = WriteStat(
                    file_id=fid, path=rel, num_writes=w.rows, num_inserts=w.rows, partition_path=part
                )
                put(part, fid, rel, records, stat)
                file_index += 1
        # record-level changes: the file groups they touch get a new version
        where = (
            {r.id: (p, fid) for (p, fid), rs in content.items() for r in rs} if w.updates or w.deletes else {}
        )
        touched: dict[tuple[str, str], tuple[set[int], set[int], int]] = {}
        for ids, kind in ((w.updates, 0), (w.deletes, 1)):
            for i in ids:
                if i not in where:
                    raise ValueError(f"record k{i} is not in the table before write {n}")
                upd, dele, _ = touched.setdefault(where[i], (set(), set(), 0))
                (upd, dele)[kind].add(i)
        for value, count in w.grow.items():
            part = f"{PARTITION_FIELD}={value}"
            fids = sorted(live.get(part, {}), key=lambda f: (len(content[(part, f)]), f))
            if not fids:
                raise ValueError(f"no live file group in {part} to grow")
            upd, dele, _ = touched.get((part, fids[0]), (set(), set(), 0))
            touched[(part, fids[0])] = (upd, dele, count)
        for (part, fid), (upd, dele, grow) in sorted(touched.items()):
            rel = f"{part}/{base_file_name(fid, f'{file_index}-{n}-0', t)}"
            records = []
            seq = 0
            for r in content[(part, fid)]:
                if r.id in dele:
                    continue
                if r.id in upd:
                    r = Record(r.id, part, f"v{r.id}@{t}", t, commit_seqno(t, file_index, seq))
                    seq += 1
                records.append(r)
            fresh = [
                Record(i, part, f"v{i}@{t}", t, commit_seqno(t, file_index, seq + k))
                for k, i in enumerate(range(next_id, next_id + grow))
            ]
            next_id += grow
            records += fresh
            stat = WriteStat(
                file_id=fid,
                path=rel,
                prev_commit=version_of[(part, fid)],
                num_writes=len(records),
                num_deletes=len(dele),
                num_update_writes=len(upd),
                num_inserts=grow,
                partition_path=part,
            )
            put(part, fid, rel, records, stat)
            rows_total += len(records)
            file_index += 1
        replace: dict[str, list[str]] | None = None
        hidden: list[str] = []
        if w.operation == Operation.INSERT_OVERWRITE:
            replace = {p: sorted(live.get(p, {})) for p in added}
        elif w.operation == Operation.INSERT_OVERWRITE_TABLE:
            replace = {p: sorted(g) for p, g in live.items()}
        out.files_by_instant[t] = [r for g in added.values() for r in g.values()]
        out.rows_by_instant[t] = rows_total
        if w.failed:
            out.replaced_by_instant[t] = []
            continue
        removed: set[str] = set()
        if replace is not None:
            for p, fids in replace.items():
                for fid in fids:
                    live[p].pop(fid)
                    hidden.extend(rel for _, rel in out.versions[(p, fid)])
                    removed.update(r.key for r in content.pop((p, fid)))
        for p, g in added.items():
            live.setdefault(p, {}).update(g)
            for fid, rel in g.items():
                out.versions.setdefault((p, fid), []).append((t, rel))
                version_of[(p, fid)] = t
        written: dict[str, Record] = {}
        for key_group, records in new_content.items():
            removed.update(r.key for r in content.get(key_group, []))
            content[key_group] = records
            written.update((r.key, r) for r in records)
        extra = {"schema": AVRO_SCHEMA}
        if w.label is not None:
            extra["amcommit.label"] = w.label
        meta = CommitMetadata(
            partition_to_write_stats=stats,
            extra_metadata=extra,
            operation_type=op,
            partition_to_replace_file_ids=replace,
        )
        objs[f".hoodie/{t}.{action}"] = encode_commit_metadata(meta)
        out.mtimes[f".hoodie/{t}.{action}"] = (start + n * step).timestamp() + 0.25
        out.completed.append(t)
        out.replaced_by_instant[t] = hidden
        out.deltas[t] = (frozenset(removed - written.keys()), written)
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
