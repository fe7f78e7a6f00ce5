"""Pure parts of the Spark side of Hudi tables (no SparkSession): options, record keys,
meta columns in the task writer, read options and query planning."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import DateType, LongType, MapType, StringType, StructField, StructType

from amcommit.errors import ConfigError
from amcommit.spark.options import build_plan, default_table_name
from amcommit.spark.parquet import HudiMeta, PartitionedParquetWriter, record_keys
from amcommit.spark.reader import Query, ReadOptions, build_read_plan, group_files, parse_query, plan_files
from amcommit.table.file_group.model import FileVersion
from amcommit.table.format.bloom import build_footer, parse_footer
from amcommit.table.format.model import CommitMetadata, Instant, State, WriteStat
from amcommit.table.format.naming import META_COLUMNS, base_file_name, new_file_id
from amcommit.table.timeline.instants import LoadedCommit

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("cat", StringType()),
        StructField("day", DateType()),
        StructField("m", MapType(StringType(), StringType())),
    ]
)


def test_table_options() -> None:
    p = build_plan(
        {"path": "/tmp/x/my-events", "tableformat": "HUDI", "partitionby": "cat", "recordkey": "ID"},
        SCHEMA,
        False,
    )
    assert p.table is not None and p.table.name == "my_events" and p.table.record_key_fields == ("id",)
    assert p.data_columns == ("id", "cat", "day", "m")  # partition column kept in the files
    plain = build_plan({"path": "/tmp/x/e", "partitionby": "cat"}, SCHEMA, False)
    assert plain.table is None and "cat" not in plain.data_columns
    existing = build_plan({"path": "/tmp/x/e"}, SCHEMA, False, existing_table=True)
    assert existing.table is not None and not existing.table.new and existing.table.name == "e"
    for opts, match in [
        ({"tableformat": "delta"}, "option 'tableFormat' must be one of hudi"),
        ({"tablename": "t"}, "needs option\\('tableFormat', 'hudi'\\)"),
        (
            {"tableformat": "hudi", "recordkey": "idd"},
            "'recordKey' must name columns .*1st .*did you mean 'id'",
        ),
        ({"tableformat": "hudi", "recordkey": "m"}, "cannot be a record key"),
        ({"tableformat": "hudi", "tablename": "1x"}, "option 'tableName' must be letters"),
    ]:
        with pytest.raises(ConfigError, match=match) as e:
            build_plan({"path": "/tmp/x/e", **opts}, SCHEMA, False)
        assert "\n" not in str(e.value)
    assert default_table_name("gs://b/wh/2026-events/") == "t_2026_events"


def test_record_keys_as_hudi_key_generators_format_them() -> None:
    b = pa.record_batch(
        {
            "id": pa.array([1, 2], pa.int64()),
            "s": ["x", None],
            "d": [datetime.date(2026, 1, 2)] * 2,
            "f": [True, False],
        }
    )
    assert record_keys(b, ("id",)).to_pylist() == ["1", "2"]
    assert record_keys(b, ("id", "s", "d", "f")).to_pylist() == [
        "id:1,s:x,d:2026-01-02,f:true",
        "id:2,s:__null__,d:2026-01-02,f:false",
    ]
    with pytest.raises(ConfigError, match="record key column 's' is null or empty"):
        record_keys(b, ("s",))


def test_writer_meta_columns_first_and_names(tmp_path: Path) -> None:
    instant = "20261123112233444"
    names: list[str] = []

    def name(n: int) -> str:
        names.append(base_file_name(new_file_id(), "3-7-1", instant))
        return names[-1]

    w = PartitionedParquetWriter(
        partition_columns=("cat",),
        file_name=name,
        local_path=lambda rel: str(tmp_path / rel),
        on_closed=lambda rel, local: None,
        keep_partition_columns=True,
        meta=HudiMeta(instant, 3),
        max_records_per_file=2,
    )
    w.write(pa.record_batch({"id": pa.array([5, 6, 7], pa.int64()), "cat": ["a", "a", "b"]}))
    stats = w.close()
    assert stats.file_rows == {"cat=a/" + names[0]: 2, "cat=b/" + names[1]: 1}
    rows = []
    for rel, n in stats.file_rows.items():
        t = pq.read_table(tmp_path / rel)
        assert t.column_names == [*META_COLUMNS, "id", "cat"] and t.num_rows == n
        rows.extend(t.to_pylist())
    rows.sort(key=lambda r: r["id"])
    assert [r["_hoodie_commit_seqno"] for r in rows] == [f"{instant}_3_{i}" for i in range(3)]
    assert [r["_hoodie_record_key"] for r in rows] == [r["_hoodie_commit_seqno"] for r in rows]
    assert {r["_hoodie_commit_time"] for r in rows} == {instant}
    assert [r["_hoodie_partition_path"] for r in rows] == ["cat=a", "cat=a", "cat=b"]
    assert all(os.path.exists(tmp_path / r["_hoodie_partition_path"] / r["_hoodie_file_name"]) for r in rows)


def test_writer_footer_index_as_hudi_writes_it(tmp_path: Path) -> None:
    """Each table file's footer holds Hudi's key range and bloom filter of exactly its keys,
    over several row groups; a key of another file is ruled out."""
    instant = "20260101000000000"
    names = iter(base_file_name(new_file_id(), "0-1-0", instant) for _ in range(4))
    w = PartitionedParquetWriter(
        partition_columns=("cat",),
        file_name=lambda n: next(names),
        local_path=lambda rel: str(tmp_path / rel),
        on_closed=lambda rel, local: None,
        keep_partition_columns=True,
        meta=HudiMeta(instant, 0, ("id",)),
        row_group_rows=2,
    )
    for ids in ([9, 2, 7, 4], [11, 3, 8, 1]):
        w.write(pa.record_batch({"id": pa.array(ids, pa.int64()), "cat": ["a", "b"] * 2}))
    stats = w.close()
    assert len(stats.paths) == 2
    held: dict[str, list[str]] = {}
    for rel in stats.paths:
        f = pq.ParquetFile(tmp_path / rel)
        assert f.metadata.num_row_groups == 2
        keys = f.read(columns=["_hoodie_record_key"]).column(0).to_pylist()
        held[rel] = keys
        md = {k.decode(): v.decode() for k, v in (f.metadata.metadata or {}).items()}
        assert {k: md[k] for k in build_footer(keys)} == build_footer(keys)
        assert (md["hoodie_min_record_key"], md["hoodie_max_record_key"]) == (min(keys), max(keys))
        assert md["hoodie_bloom_filter_type_code"] == "DYNAMIC_V0"
    a, b = (
        parse_footer(
            {k.decode(): v.decode() for k, v in (pq.read_metadata(tmp_path / r).metadata or {}).items()}
        )
        for r in stats.paths
    )
    ka, kb = held[stats.paths[0]], held[stats.paths[1]]
    assert a.may_hold(ka) == [True] * len(ka) and b.may_hold(kb) == [True] * len(kb)
    assert not any(a.bloom.might_contain(kb)) and not any(b.bloom.might_contain(ka))  # type: ignore[union-attr]


def test_read_options() -> None:
    q = build_read_plan(
        {
            "path": "/t",
            "hoodie.datasource.query.type": "incremental",
            "hoodie.datasource.read.begin.instanttime": "000",
        }
    ).query
    assert q == Query(incremental=True, since=None, until=None)
    assert parse_query(ReadOptions(since="20260101000000000", until="20260102000000000")).incremental
    assert parse_query(ReadOptions(as_of="20260101000000000")) == Query(as_of="20260101000000000")
    assert parse_query(ReadOptions(query_type="read_optimized", as_of="20260101000000000")) == Query(
        as_of="20260101000000000", read_optimized=True
    )
    for opts, match in [
        ({"asof": "x"}, "'asOf' must be an instant time"),
        ({"until": "20260101000000000"}, "select an incremental query"),
        ({"since": "20260102000000000", "until": "20260101000000000"}, "before 'since'"),
        ({"since": "000", "asof": "20260101000000000"}, "for snapshot queries"),
        ({"beginninginstant": "1"}, "unknown option 'beginninginstant'"),
        ({"maxpartitionbytes": "lots"}, "'maxPartitionBytes' must be an integer|must be"),
        ({"query.type": "read_optimized", "since": "000"}, "read_optimized takes 'as.of.instant' only"),
    ]:
        with pytest.raises(ConfigError, match=match):
            build_read_plan({"path": "/t", **opts})


def _commit(
    t: str, files: dict[str, list[str]], replaced: dict[str, list[str]] | None = None
) -> LoadedCommit:
    stats = {
        p: [
            WriteStat(file_id=f, path=f"{p}/{f}_0-0-0_{t}.parquet", num_writes=1, file_size_in_bytes=10)
            for f in fs
        ]
        for p, fs in files.items()
    }
    action = "replacecommit" if replaced is not None else "commit"
    return LoadedCommit(
        Instant(t, action, State.COMPLETED),
        CommitMetadata(partition_to_write_stats=stats, partition_to_replace_file_ids=replaced),
    )


def test_plan_files() -> None:
    t1, t2, t3 = "20260101000000001", "20260101000000002", "20260101000000003"
    commits = [
        _commit(t1, {"p=a": ["f1"], "p=b": ["f2"]}),
        _commit(t2, {"p=a": ["f3"]}),
        _commit(t3, {"p=a": ["f4"]}, {"p=a": ["f1", "f3"]}),
    ]
    ids = lambda fs: sorted(f.file_id for f in fs)  # noqa: E731
    assert ids(plan_files(commits, Query())) == ["f2", "f4"]
    assert ids(plan_files(commits, Query(as_of=t2))) == ["f1", "f2", "f3"]
    assert ids(plan_files(commits, Query(incremental=True, since=t1))) == [
        "f4"
    ]  # f3 replaced within the range
    assert ids(plan_files(commits, Query(incremental=True, since=t1, until=t2))) == ["f3"]
    files = [FileVersion("p", str(i), f"p/{i}", t1, 60, 1) for i in range(5)]
    assert [len(p.files) for p in group_files(files, 100)] == [1, 1, 1, 1, 1]
    assert [len(p.files) for p in group_files(files, 130)] == [2, 2, 1]


def test_task_keep_alive_beats_while_the_job_is_active(tmp_path: Path) -> None:
    """A long task keeps its table write's heartbeat fresh, and stops once the job is over."""
    import anyio

    from amcommit.spark.task import keep_alive
    from amcommit.store.local import LocalStore
    from amcommit.table.format.model import Operation
    from amcommit.table.format.naming import heartbeat_path
    from amcommit.table.write.task import TableSpec, begin_write

    async def main() -> None:
        store = LocalStore("/")
        dest = str(tmp_path / "t").lstrip("/")
        w = await begin_write(store, dest, operation=Operation.INSERT, spec=TableSpec("t"))
        beat = tmp_path / "t" / heartbeat_path(w.instant)
        first = beat.stat().st_mtime_ns
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(keep_alive, store, w.layout, 0.2)
                await anyio.sleep(0.35)
                assert beat.stat().st_mtime_ns > first
                await store.delete(w.layout.job_marker)  # the job was committed or aborted
                await anyio.sleep(0.3)  # keep_alive returns by itself
        last = beat.stat().st_mtime_ns
        await anyio.sleep(0.2)
        assert beat.stat().st_mtime_ns == last
        await store.aclose()

    anyio.run(main)


def test_snap_bounds_to_instants() -> None:
    """Any time is a bound (as in Hudi); it moves to the latest write instant at or before it."""
    from amcommit.spark.reader import snap

    w = ["20260101000000001", "20260101000000005", "20260101000000009"]
    assert snap(Query(as_of="20260101000000006"), w) == Query(as_of=w[1])
    assert snap(Query(as_of="20250101000000000"), w).as_of == "00000000000000000"  # before all: empty
    assert snap(Query(), w) == Query()
    inc = snap(Query(incremental=True, since="20260101000000002", until="20260101000000008"), w)
    assert inc == Query(incremental=True, since=w[0], until=w[1])
    assert snap(Query(incremental=True, since="20250101000000000"), w) == Query(incremental=True)
    empty = snap(Query(incremental=True, since="20260101000000006", until="20260101000000007"), w)
    assert empty.since == empty.until == w[1]
    commits = [_commit(t, {"p": [f"f{i}"]}) for i, t in enumerate(w)]
    for q in [
        Query(as_of="20260101000000006"),
        Query(incremental=True, since="20260101000000002", until="20260101000000008"),
    ]:
        assert plan_files(commits, snap(q, w)) == plan_files(commits, q)
