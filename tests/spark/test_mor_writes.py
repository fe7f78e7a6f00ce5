"""Spark upserts and deletes of Merge-on-Read tables (``amcommit.spark.upsert/delete`` and
``write_batch(..., operation=...)``), read back by hudi-rs and by ``format("amcommit")``.

The sequence of the Spark mutation tests (insert, upsert with updates across partitions and
duplicates in the batch, delete with an absent key, upsert re-adding a deleted key) into a
table created with ``tableType=MERGE_ON_READ``: after each write, the snapshot (hudi-rs and
amcommit's Spark reader) equals the model, the read-optimized read equals the base files'
state, every write is a ``deltacommit``, updates and deletes went to log files and no base
file was ever rewritten. A ``foreachBatch`` upsert stream (``write_batch``) into a MoR table
commits each micro-batch once: a replayed batch is skipped by its label.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import amcommit.spark as amspark
from amcommit.errors import AmcommitError
from amcommit.table.format.naming import parse_base_file_name, parse_log_file_name
from tests.spark.test_mutate import _df, _snapshot, _steps
from tests.table.test_mutate import Model, hudi_snapshot, model_delete, model_upsert, rows_of

pytestmark = pytest.mark.spark

MOR = {"recordKey": "id", "partitionBy": "p", "precombineField": "ts", "tableType": "MERGE_ON_READ"}
EVERY3 = {"hoodie.compact.inline.max.delta.commits": "3"}


def _files(dest: Path) -> tuple[set[str], set[str]]:
    """(base files, log files) under ``dest``, relative paths."""
    bases, logs = set(), set()
    for f in dest.rglob("*"):
        if ".hoodie" in f.parts or not f.is_file():
            continue
        rel = f.relative_to(dest).as_posix()
        if parse_base_file_name(f.name) is not None:
            bases.add(rel)
        elif parse_log_file_name(f.name) is not None:
            logs.add(rel)
    return bases, logs


def _completed(dest: Path) -> list[str]:
    return sorted(
        f.name for f in (dest / ".hoodie").iterdir() if f.name.endswith((".commit", ".deltacommit"))
    )


def test_spark_upserts_and_deletes_write_log_files(spark: Any, tmp_path: Path) -> None:
    dest = tmp_path / "mor"
    url = str(dest)
    m: Model = {}
    ro: Model = {}  # the base files' state: each key as the write that inserted it wrote it
    before: set[str] = set()
    for i, (op, rows) in enumerate(_steps()):
        if op == "upsert":
            rep = amspark.upsert(_df(spark, rows), url, **MOR)
            new = {k: r for k, r in model_upsert({}, rows).items() if k not in m and k not in ro}
            m = model_upsert(m, rows)
            ro.update(new)
        else:
            rep = amspark.delete(_df(spark, rows, "id long, p string"), url, recordKey="id", partitionBy="p")
            m = model_delete(m, rows)
        assert rep.files_rewritten == 0, op
        assert hudi_snapshot(url) == rows_of(m), f"step {i}: hudi-rs snapshot"
        assert _snapshot(spark, url) == rows_of(m), f"step {i}: Spark snapshot"
        got_ro = _snapshot(spark, url, **{"hoodie.datasource.query.type": "read_optimized"})
        assert got_ro == rows_of(ro), f"step {i}: read-optimized"
        bases, logs = _files(dest)
        assert before <= bases, f"step {i}: a base file was removed or rewritten"
        before = bases
        done = _completed(dest)
        assert len(done) == i + 1 and all(n.endswith(".deltacommit") for n in done), done
        meta = json.loads((dest / ".hoodie" / done[-1]).read_text())
        assert meta["operationType"] == op.upper()
        stats = [s for ss in meta["partitionToWriteStats"].values() for s in ss]
        logged = sorted(s["path"] for s in stats if ".log." in s["path"])
        if i == 0:
            assert not logs and not logged and rep.files_logged == 0
        else:  # every update and delete of an existing record went to a log file
            assert rep.files_logged == len(logged) > 0 and set(logged) <= logs, (i, logged)
            for s in stats:
                if ".log." in s["path"]:
                    assert s["logFiles"][-1] == s["path"].rsplit("/", 1)[-1] and s["baseFile"]
    # step 1 updated keys 1 (b) and 2 (a), step 2 deleted 3 (b) and 4 (a), step 3 updated
    # 5 (b) and re-added 3 (b): log files in both partitions, none in c
    assert {p.split("/")[0] for p in _files(dest)[1]} == {"p=a", "p=b"} or {
        p.split("/")[0] for p in _files(dest)[1]
    } == {"a", "b"}


def test_spark_table_type_refusals(spark: Any, tmp_path: Path) -> None:
    rows = [{"id": 1, "p": "a", "v": "x", "ts": 1}]
    cow = str(tmp_path / "cow")
    amspark.upsert(_df(spark, rows), cow, recordKey="id", partitionBy="p")
    with pytest.raises(AmcommitError) as e:
        amspark.upsert(_df(spark, rows), cow, **MOR)
    assert "is a COPY_ON_WRITE table; a write asked for MERGE_ON_READ" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(AmcommitError) as e:
        amspark.upsert(_df(spark, rows), str(tmp_path / "bad"), **(MOR | {"tableType": "MOR"}))
    assert str(e.value).endswith(
        "option 'tableType': table type 'MOR' is not one of COPY_ON_WRITE, MERGE_ON_READ"
    )
    assert not (tmp_path / "bad").exists()
    mor = str(tmp_path / "mor")
    amspark.upsert(_df(spark, rows), mor, **MOR)
    with pytest.raises(AmcommitError) as e:
        amspark.upsert(_df(spark, rows), mor, **(MOR | {"tableType": "COPY_ON_WRITE"}))
    assert "is a MERGE_ON_READ table; a write asked for COPY_ON_WRITE" in str(e.value)
    assert len(_completed(tmp_path / "mor")) == 1


def test_foreach_batch_upserts_into_mor_exactly_once(spark: Any, tmp_path: Path) -> None:
    from amcommit.spark.stream import QUERY_ID_KEY

    dest = tmp_path / "stream"
    batches = [
        [{"id": i, "p": "ab"[i % 2], "v": f"b0-{i}", "ts": 1} for i in range(20)],
        [{"id": i, "p": "ab"[i % 2], "v": f"b1-{i}", "ts": 2} for i in range(0, 20, 3)],
        [{"id": i, "p": "ab"[i % 2], "v": f"b2-{i}", "ts": 3} for i in (1, 2, 30)],
    ]
    sc = spark.sparkContext
    sc.setLocalProperty(QUERY_ID_KEY, "q-mor")
    m: Model = {}
    try:
        for n, rows in enumerate(batches):
            # inline compaction once 3 deltacommits are due (Hudi's option name)
            rep = amspark.write_batch(_df(spark, rows), n, str(dest), operation="upsert", **MOR, **EVERY3)
            assert rep.success and not getattr(rep, "skipped_label", None)
            m = model_upsert(m, rows)
            if n == 1:  # the batch replayed (a restarted query): its label is committed
                again = [dict(r, v="replayed") for r in rows]
                rep = amspark.write_batch(
                    _df(spark, again), n, str(dest), operation="upsert", **MOR, **EVERY3
                )
                assert rep.skipped_label
    finally:
        sc.setLocalProperty(QUERY_ID_KEY, None)
    assert hudi_snapshot(str(dest)) == rows_of(m) == _snapshot(spark, str(dest))
    done = _completed(dest)
    # three deltacommits, then the inline compaction's commit (write_batch compacts as
    # upsert/delete do); the read-optimized view then holds every update
    assert [n.rpartition(".")[2] for n in done] == ["deltacommit"] * 3 + ["commit"], done
    assert _files(dest)[1], "the updates of batches 1 and 2 are in log files"
    ro = (
        spark.read.format("amcommit").option("hoodie.datasource.query.type", "read_optimized").load(str(dest))
    )
    assert sorted((r.id, r.v) for r in ro.collect()) == sorted((k[1], v["v"]) for k, v in m.items())


def test_spark_upsert_completes_a_pending_compaction_first(spark: Any, tmp_path: Path) -> None:
    """A compaction SIGKILLed after its plan was written leaves it pending; a Spark upsert
    completes it (under the table's lock) before it reads the file slices, so its log files
    are named after the compacted slices and a later compaction loses none of its updates."""
    import anyio

    from amcommit.store.local import LocalStore
    from amcommit.table.commit.compaction import compact_store, pending_compactions
    from amcommit.table.mutate import engine as mutate
    from amcommit.table.timeline.instants import list_instants
    from tests.table.test_compaction import KILL_CFG, _kill_child
    from tests.table.test_mor_write import MOR as ENGINE_MOR
    from tests.table.test_mutate import _steps as engine_steps
    from tests.table.test_mutate import _t

    async def build(root: str) -> Model:
        m: Model = {}
        async with LocalStore(root, fsync=False) as store:
            for op, rows in engine_steps():
                if op == "upsert":
                    await mutate.upsert(
                        store, "tbl", _t(rows), precombine_field="ts", **ENGINE_MOR | {"config": KILL_CFG}
                    )
                    m = model_upsert(m, rows)
                else:
                    await mutate.delete(store, "tbl", _t(rows), **ENGINE_MOR | {"config": KILL_CFG})
                    m = model_delete(m, rows)
        return m

    async def pending(root: str) -> list[str]:
        async with LocalStore(root, fsync=False) as store:
            return pending_compactions(await list_instants(store, "tbl"))

    for n in range(1, 12):  # the first kill point that leaves a planned compaction pending
        root = tmp_path / f"k{n}"
        root.mkdir()
        m = anyio.run(build, str(root))
        assert not _kill_child(str(root), n), "the compaction completed before any kill point left it pending"
        tcs = anyio.run(pending, str(root))
        if tcs:
            break
    else:
        raise AssertionError("no kill point left a compaction pending")
    (tc,) = tcs
    dest = root / "tbl"
    rows = [dict(r, v=f"spark-{r['id']}", ts=50) for r in m.values()]
    rep = amspark.upsert(_df(spark, rows), str(dest), recordKey="id", partitionBy="p", precombineField="ts")
    m = model_upsert(m, rows)
    assert anyio.run(pending, str(root)) == [], "the Spark write left the compaction pending"
    assert rep.files_logged > 0
    meta = json.loads((dest / ".hoodie" / f"{rep.instant}.deltacommit").read_text())
    logs = [s["path"] for ss in meta["partitionToWriteStats"].values() for s in ss if ".log." in s["path"]]
    bases = {parse_log_file_name(p.rsplit("/", 1)[-1]).base_instant for p in logs}  # type: ignore[union-attr]
    assert tc in bases, (tc, bases)  # logs of the compacted groups name the new slices
    assert hudi_snapshot(str(dest)) == rows_of(m) == _snapshot(spark, str(dest))

    async def compact_again() -> None:
        async with LocalStore(str(root), fsync=False) as store:
            await compact_store(store, "tbl", config=KILL_CFG)

    anyio.run(compact_again)  # every slice compacted: the Spark write's updates all kept
    assert hudi_snapshot(str(dest)) == rows_of(m)
    ro = _snapshot(spark, str(dest), **{"hoodie.datasource.query.type": "read_optimized"})
    assert ro == rows_of(m)
