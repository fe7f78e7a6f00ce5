"""Issue 32 item 5 on the Spark task side (no SparkSession: the executor's own function,
:func:`amcommit.spark.task.run_task`, on real stores): a task whose rows make a base file of
another schema than the write's (a batch that does not match the DataFrame's schema) fails
with SchemaMismatch naming the file and the column; nothing of it is published or left in
the table, staged or direct, on local files and on fake-gcs-server (where files are uploaded
from local temporary files)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import anyio
import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from amcommit.api import abort_job
from amcommit.paths import relative_to
from amcommit.spark.options import WritePlan, build_plan
from amcommit.spark.task import run_task
from amcommit.store.schemes import open_location
from amcommit.table.errors import SchemaMismatch
from amcommit.table.format.model import Operation
from amcommit.table.format.schema import avro_schema
from amcommit.table.write.task import TableSpec, begin_write

SPARK = StructType(
    [StructField("id", LongType()), StructField("p", StringType()), StructField("v", StringType())]
)
ARROW = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string())])


def _listing(url: str, opts: dict[str, Any]) -> list[str]:
    async def main() -> list[str]:
        store, dest = open_location(url, **opts)
        async with store:
            got = [relative_to(i.path, dest) async for i in store.list(dest, recursive=True)]
            return sorted(n for n in got if not n.startswith(".hoodie/.heartbeat/"))

    return anyio.run(main)


def _begun(url: str, table_commit: str, opts: dict[str, Any]) -> WritePlan:
    plan = build_plan(
        {
            "path": url,
            "tableformat": "hudi",
            "partitionby": "p",
            "recordkey": "id",
            "table_commit": table_commit,
            **opts,
        },
        SPARK,
        False,
    )
    assert plan.table is not None

    async def begin() -> str:
        store, dest = open_location(url, **plan.store_options)
        async with store:
            w = await begin_write(
                store,
                dest,
                operation=Operation.INSERT,
                spec=TableSpec("t", ("p",), ("id",)),
                avro_schema=avro_schema(ARROW, "t"),
                config=plan.config(),
            )
            return w.instant

    instant = anyio.run(begin)
    table = dataclasses.replace(plan.table, instant=instant, operation=Operation.INSERT.value, new=False)
    return dataclasses.replace(plan, job_id=instant, table=table)


def _refused(url: str, table_commit: str, opts: dict[str, Any], store_opts: dict[str, Any]) -> None:
    plan = _begun(url, table_commit, opts)
    before = _listing(url, store_opts)
    for col, batch in [
        ("v", pa.record_batch({"id": pa.array([1, 2]), "p": ["a", "b"], "v": pa.array([1, 2])})),
        ("extra", pa.record_batch({"id": pa.array([3]), "p": ["a"], "v": ["x"], "extra": ["e"]})),
    ]:
        with pytest.raises(
            SchemaMismatch, match=rf"^base file 'p=[ab]/[^']*_{plan.job_id}\.parquet': column '{col}' "
        ) as e:
            run_task(plan, [batch], partition=0, attempt=0)
        assert e.value.column == col and "\n" not in str(e.value)
        after = _listing(url, store_opts)
        # no base file anywhere (table or staging); a direct attempt's markers stay for the
        # job's abort, which removes them
        assert not [n for n in after if n.endswith(".parquet")], after
        assert [
            n for n in after if not (n.endswith(".marker.CREATE") or ("/.temp/" in n and "/MARKERS" in n))
        ] == before
    # a good batch of the same write still goes through
    good = pa.record_batch({"id": pa.array([5]), "p": ["a"], "v": ["ok"]})
    res = run_task(plan, [good], partition=1, attempt=0)
    assert (res.rows, res.files) == (1, 1)

    async def abort() -> None:
        store, dest = open_location(url, **store_opts)
        async with store:
            await abort_job(store, dest, plan.job_id, config=plan.config())

    anyio.run(abort)
    assert not [n for n in _listing(url, store_opts) if n.endswith(".parquet") or ".temp/" in n]


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
def test_task_refuses_a_file_of_another_schema_local(tmp_path: Any, table_commit: str) -> None:
    _refused(str(tmp_path / "t"), table_commit, {}, {})


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
def test_task_refuses_a_file_of_another_schema_fake_gcs(fake_gcs: Any, table_commit: str) -> None:
    bucket = f"amc-fs-{uuid.uuid4().hex[:10]}"
    fake_gcs.create_bucket(bucket)
    store_opts = {"endpoint": fake_gcs.url}
    _refused(f"gs://{bucket}/t", table_commit, store_opts, store_opts)
