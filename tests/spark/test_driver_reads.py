"""The Spark driver reads a table's ``hoodie.properties`` as few times as it can: the
destination check reads it once and hands it to ``begin_write``, and the job commit and
abort name the kind (``"table"``) instead of probing for it. Counted on the driver's real
steps (destination check, begin, commit, abort) of ``format("amcommit")``, over local
files, through the driver's store hook (a counting pass-through store); no Spark session
is needed for the driver's side."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from amcommit.spark import hooks
from amcommit.spark.hooks import SparkHooks
from amcommit.spark.source import AmcommitDataSource
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import PROPERTIES_FILE
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants
from amcommit.table.write.task import TableSpec, begin_write
from amcommit.testing.faults import FaultyStore

T = TypeVar("T")
SCHEMA = StructType([StructField("id", LongType()), StructField("p", StringType())])


class CountingStore(FaultyStore):
    """A pass-through store (no fault rules) that records every request: (phase, op, paths)."""

    def __init__(self, inner: Store, phase: str, log: list[tuple[str, str, tuple[str, ...]]]) -> None:
        super().__init__(inner)
        self.phase = phase
        self.log = log

    async def _call(self, op: str, paths: tuple[str, ...], fn: Callable[[], Awaitable[T]]) -> T:
        self.log.append((self.phase, op, paths))
        return await super()._call(op, paths, fn)


class Counting(SparkHooks):
    def __init__(self) -> None:
        self.log: list[tuple[str, str, tuple[str, ...]]] = []

    def driver_store(self, store: Store, phase: str) -> Store:
        return CountingStore(store, phase, self.log)

    def properties_reads(self) -> list[tuple[str, str]]:
        return [(phase, op) for phase, op, paths in self.log if paths[0].endswith(PROPERTIES_FILE)]


@pytest.fixture
def counting() -> Iterator[Counting]:
    counter = Counting()
    previous = hooks.install(counter)
    try:
        yield counter
    finally:
        hooks.install(previous)


def _table(tmp_path: Path) -> str:
    """A table with one completed (empty) write, made through the engine API."""
    url = str(tmp_path / "t")

    async def make() -> None:
        import pyarrow as pa

        from amcommit.api import commit_job
        from amcommit.table.format.schema import avro_schema

        schema = avro_schema(pa.schema([("id", pa.int64()), ("p", pa.string())]), "t")
        store = LocalStore("/", fsync=False)
        async with store:
            w = await begin_write(
                store,
                url.lstrip("/"),
                operation=Operation.INSERT,
                spec=TableSpec("t", record_key_fields=["id"]),
                avro_schema=schema,
            )
            report = await commit_job(store, url.lstrip("/"), w.instant, config=TableConfig())
            assert report.success

    anyio.run(make)
    return url


def _instants(url: str) -> list[str]:
    async def go() -> list[str]:
        store = LocalStore("/", fsync=False)
        async with store:
            return [
                f"{i.time}.{i.action}.{i.state.value}" for i in await list_instants(store, url.lstrip("/"))
            ]

    return anyio.run(go)


def test_table_write_reads_properties_once_and_names_the_kind(tmp_path: Path, counting: Counting) -> None:
    url = _table(tmp_path)
    before = _instants(url)
    writer = AmcommitDataSource({"path": url, "tableFormat": "hudi", "recordKey": "id"}).writer(SCHEMA, False)
    instant = writer.plan.job_id
    writer.commit([])
    # the destination check reads it (once); begin_write takes it from there; the front door
    # does not probe (the kind is named); the table commit reads it once, under its lock
    assert counting.properties_reads() == [("check", "get"), ("commit", "get")]
    after = _instants(url)
    assert after[: len(before)] == before
    assert [i for i in after if i.startswith(instant)] == [
        f"{instant}.commit.completed",
        f"{instant}.commit.inflight",
        f"{instant}.commit.requested",
    ]


def test_table_write_lists_the_timeline_twice(tmp_path: Path, counting: Counting) -> None:
    """The driver's table write lists ``.hoodie/`` once when it begins and once when it
    commits (issue 33: one timeline handle per operation)."""
    url = _table(tmp_path)
    writer = AmcommitDataSource({"path": url, "tableFormat": "hudi", "recordKey": "id"}).writer(SCHEMA, False)
    writer.commit([])
    hoodie = url.lstrip("/") + "/.hoodie"
    listed = [
        (phase, op) for phase, op, paths in counting.log if op == "list" and paths[0].rstrip("/") == hoodie
    ]
    assert [op for _, op in listed] == ["list", "list"], listed


def test_table_abort_names_the_kind(tmp_path: Path, counting: Counting) -> None:
    url = _table(tmp_path)
    before = _instants(url)
    writer = AmcommitDataSource({"path": url, "tableFormat": "hudi", "recordKey": "id"}).writer(SCHEMA, False)
    writer.abort([])
    assert [r for r in counting.properties_reads() if r[0] != "abort"] == [("check", "get")]
    assert ("abort", "stat") not in counting.properties_reads()  # no probe of the kind
    assert _instants(url) == before  # rolled back: the timeline as it was
