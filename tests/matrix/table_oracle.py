"""The fault matrix's oracle for Hudi table commits (pure functions, no store).

A table scenario starts from :func:`old_table`: a committed table (one ``INSERT`` instant
:data:`OLD_INSTANT` with two file groups in ``p=a`` and one in ``p=b``), written directly
from Hudi's format (properties, instant files, partition metadata, Parquet base files with
meta columns) and independent of amcommit's write path. A :class:`TableJob` is one write
into it (operation, rows per task); its files are named and filled by :func:`task_files`
once its instant is known (the instant comes from ``begin_write`` and is in every name).

Expected results (paths relative to the table):

* committed: the old objects unchanged (overwrites keep replaced files on disk until a
  clean), the new base files, ``.hoodie/<I>.<action>.requested``, the inflight file, the
  completed instant (its JSON: :func:`expected_metadata`), a ``.hoodie_partition_metadata``
  naming ``I`` in each partition the write created; nothing under ``.hoodie/.temp``, ``.hoodie/.aux/amcommit`` or
  ``.hoodie/.heartbeat``;
* rolled back: exactly the old objects;
* rows (what hudi-rs must see): :func:`rows_after` / :data:`OLD_ROWS`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

Row = tuple[int, str, str]
"""(id, p, v): a row as hudi-rs returns it (tests.table.writehelpers' key)."""

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string()), pa.field("v", pa.string())]
)
TABLE_NAME = "t1"
OLD_INSTANT = "20200101000000000"
"""Far before any instant begin_write allocates now."""

INSERT, OVERWRITE, OVERWRITE_TABLE = "insert", "insert_overwrite", "insert_overwrite_table"
ACTION = {INSERT: "commit", OVERWRITE: "replacecommit", OVERWRITE_TABLE: "replacecommit"}
OPERATION_TYPE = {INSERT: "INSERT", OVERWRITE: "INSERT_OVERWRITE", OVERWRITE_TABLE: "INSERT_OVERWRITE_TABLE"}
TEMP, STAGING, HEARTBEAT = ".hoodie/.temp/", ".hoodie/.aux/amcommit/", ".hoodie/.heartbeat/"


@dataclass(frozen=True)
class TableJob:
    """One write into the table: ``operation`` (``insert`` / ``insert_overwrite`` /
    ``insert_overwrite_table``) and per task its rows (one base file per partition)."""

    operation: str
    tasks: tuple[tuple[Row, ...], ...]


def file_id(n: int) -> str:
    """A fixed, valid Hudi file id (UUID + ``-0``)."""
    return f"{n:08x}-0000-4000-8000-000000000000-0"


def parquet(rows: Sequence[Row], instant: str, part: str, name: str, task: int) -> bytes:
    """A base file as the Spark task writer writes it: Hudi's five meta columns first."""
    k = len(rows)
    cols: dict[str, list[Any]] = {
        "_hoodie_commit_time": [instant] * k,
        "_hoodie_commit_seqno": [f"{instant}_{task}_{i}" for i in range(k)],
        "_hoodie_record_key": [f"{instant}_{task}_{i}" for i in range(k)],
        "_hoodie_partition_path": [part] * k,
        "_hoodie_file_name": [name] * k,
    }
    fields = [pa.field(c, pa.string()) for c in cols] + list(SCHEMA)
    data = {**cols, "id": [r[0] for r in rows], "p": [r[1] for r in rows], "v": [r[2] for r in rows]}
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pydict(data, schema=pa.schema(fields)), buf)
    return buf.getvalue()


def partition_of(row: Row) -> str:
    return f"p={row[1]}"


def task_files(instant: str, job: TableJob, first_id: int = 0x100) -> list[dict[str, tuple[bytes, int]]]:
    """Per task: relative path -> (bytes, rows) of the base files it writes for ``instant``."""
    out = []
    n = first_id
    for t, rows in enumerate(job.tasks):
        files: dict[str, tuple[bytes, int]] = {}
        by: dict[str, list[Row]] = {}
        for r in rows:
            by.setdefault(partition_of(r), []).append(r)
        for part, prow in sorted(by.items()):
            name = f"{file_id(n)}_{t}-0-0_{instant}.parquet"
            n += 1
            files[f"{part}/{name}"] = (parquet(prow, instant, part, name, t), len(prow))
        out.append(files)
    return out


def partition_metadata_text(instant: str, depth: int = 1) -> str:
    return f"commitTime={instant}\npartitionDepth={depth}\n"


def partition_metadata_lines(data: bytes) -> list[str]:
    """The properties of a ``.hoodie_partition_metadata`` (comment lines, e.g. its time, left out)."""
    return [ln.strip() for ln in data.decode("latin-1").splitlines() if ln.strip() and not ln.startswith("#")]


# -- the old table --------------------------------------------------------------------------------
OLD_JOB = TableJob(
    INSERT,
    (
        ((1, "a", "old1"), (2, "b", "old2")),
        ((3, "a", "old3"),),
    ),
)
OLD_ROWS: list[Row] = sorted(r for t in OLD_JOB.tasks for r in t)


def _stat(rel: str, data: bytes, rows: int) -> dict[str, Any]:
    part, _, name = rel.rpartition("/")
    return {
        "fileId": name.split("_")[0],
        "path": rel,
        "numWrites": rows,
        "numInserts": rows,
        "totalWriteBytes": len(data),
        "partitionPath": part,
        "fileSizeInBytes": len(data),
    }


def old_table(avro_schema: str, properties: bytes) -> dict[str, bytes]:
    """The old table's objects (relative path -> bytes). ``properties``: the bytes of
    ``hoodie.properties`` (built by the caller from amcommit's encoder, which the table
    contract fixes: tests/table/test_schema_properties.py checks it against Hudi's)."""
    files = {rel: v for t in task_files(OLD_INSTANT, OLD_JOB, first_id=1) for rel, v in t.items()}
    stats: dict[str, list[dict[str, Any]]] = {}
    for rel, (data, rows) in sorted(files.items()):
        stats.setdefault(rel.rpartition("/")[0], []).append(
            _stat(rel, data, rows)
            | {"prevCommit": "null", "numDeletes": 0, "numUpdateWrites": 0, "totalWriteErrors": 0}
        )
    meta = {
        "partitionToWriteStats": stats,
        "compacted": False,
        "extraMetadata": {"schema": avro_schema},
        "operationType": "INSERT",
    }
    out = {rel: data for rel, (data, _) in files.items()}
    out[".hoodie/hoodie.properties"] = properties
    out[f".hoodie/{OLD_INSTANT}.commit.requested"] = b""
    out[f".hoodie/{OLD_INSTANT}.inflight"] = b""
    out[f".hoodie/{OLD_INSTANT}.commit"] = json.dumps(meta).encode()
    for part in stats:
        out[f"{part}/.hoodie_partition_metadata"] = (
            "#partition metadata\n" + partition_metadata_text(OLD_INSTANT)
        ).encode()
    return out


# -- expectations ---------------------------------------------------------------------------------
def new_rows(job: TableJob) -> list[Row]:
    return sorted(r for t in job.tasks for r in t)


def rows_after(job: TableJob, before: Sequence[Row] = ()) -> list[Row]:
    """The snapshot after ``job`` committed on a table whose snapshot was ``before``."""
    new = new_rows(job)
    if job.operation == OVERWRITE_TABLE:
        return new
    if job.operation == OVERWRITE:
        written = {r[1] for r in new}
        return sorted([r for r in before if r[1] not in written] + new)
    return sorted([*before, *new])


def instant_files(instant: str, operation: str) -> dict[str, bytes | None]:
    """The instant's files in ``.hoodie/`` after its commit (None: the completed one, whose
    JSON :func:`check_metadata` checks)."""
    if ACTION[operation] == "commit":
        return {
            f".hoodie/{instant}.commit.requested": b"",
            f".hoodie/{instant}.inflight": b"",
            f".hoodie/{instant}.commit": None,
        }
    return {
        f".hoodie/{instant}.replacecommit.requested": b"",
        f".hoodie/{instant}.replacecommit.inflight": b"",
        f".hoodie/{instant}.replacecommit": None,
    }


def expected_committed(
    old: Mapping[str, bytes], instant: str, job: TableJob, new: Mapping[str, bytes]
) -> dict[str, bytes | None]:
    """Every object of the table after the commit (None: checked by content, see
    :func:`instant_files` and partition metadata)."""
    out: dict[str, bytes | None] = dict(old)
    out |= dict(new)
    out |= instant_files(instant, job.operation)
    for rel in new:
        pm = f"{rel.rpartition('/')[0]}/.hoodie_partition_metadata"
        if pm not in out:
            out[pm] = None
    return out


def expected_metadata(
    old: Mapping[str, bytes], instant: str, job: TableJob, new: Mapping[str, tuple[bytes, int]], schema: str
) -> dict[str, Any]:
    """The fields of the completed instant's JSON that readers use."""
    stats: dict[str, list[dict[str, Any]]] = {}
    for rel, (data, rows) in sorted(new.items()):
        stats.setdefault(rel.rpartition("/")[0], []).append(_stat(rel, data, rows))
    want: dict[str, Any] = {
        "partitionToWriteStats": stats,
        "operationType": OPERATION_TYPE[job.operation],
        "schema": schema,
    }
    if ACTION[job.operation] == "replacecommit":
        old_groups: dict[str, list[str]] = {}
        for rel in old:
            if rel.endswith(".parquet"):
                part, _, name = rel.rpartition("/")
                old_groups.setdefault(part, []).append(name.split("_")[0])
        parts = set(stats) | (set(old_groups) if job.operation == OVERWRITE_TABLE else set())
        want["partitionToReplaceFileIds"] = {p: sorted(old_groups.get(p, [])) for p in sorted(parts)}
    return want


def actual_metadata(data: bytes) -> dict[str, Any]:
    """The same fields read from a completed instant's JSON."""
    m = json.loads(data)
    keep = (
        "fileId",
        "path",
        "numWrites",
        "numInserts",
        "totalWriteBytes",
        "partitionPath",
        "fileSizeInBytes",
    )
    got: dict[str, Any] = {
        "partitionToWriteStats": {
            p: sorted(({k: s.get(k) for k in keep} for s in lst), key=lambda s: s["path"])
            for p, lst in m.get("partitionToWriteStats", {}).items()
        },
        "operationType": m.get("operationType"),
        "schema": m.get("extraMetadata", {}).get("schema"),
    }
    if "partitionToReplaceFileIds" in m and m["partitionToReplaceFileIds"] is not None:
        got["partitionToReplaceFileIds"] = {p: sorted(v) for p, v in m["partitionToReplaceFileIds"].items()}
    return got
