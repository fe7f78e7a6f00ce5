"""Rollback of a failed Merge-on-Read deltacommit, recorded as a rollback instant
(:mod:`amcommit.table.commit.rollback_record`): the write's base files and its own whole log
files deleted, ``R.rollback.requested`` / ``.inflight`` / ``R.rollback`` recorded; killed
(SIGKILL, a real child) before every mutating request of the rollback, then resumed; read by
hudi-rs and amcommit's reader in every query type afterwards; later writes go on."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import fastavro
import hudi

from amcommit.api import abort_job
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.commit.clean import clean
from amcommit.table.commit.table_commit import staged_times
from amcommit.table.format.naming import parse_log_file_name
from amcommit.table.format.rollback_meta import (
    RollbackMetadata,
    RollbackPlan,
    decode_rollback_metadata,
    decode_rollback_plan,
    encode_rollback_metadata,
    encode_rollback_plan,
)
from amcommit.table.mutate import engine as mutate
from amcommit.table.query.read import read_store
from amcommit.table.timeline.instants import list_instants
from tests.table.test_mor_write import FIRST, KILL_CFG, LATER, MOR, UPSERT
from tests.table.test_mutate import _t, hudi_snapshot, model_upsert, rows_of
from tests.table.test_read_oracle import compare

DATA = Path(__file__).parent.parent / "data" / "hudi-java" / "mor-v6"


async def _files(store: Store, dest: str) -> list[str]:
    return sorted([i.path[len(dest) + 1 :] async for i in store.list(dest, recursive=True) if not i.is_dir])


def _rows(t: Any) -> list[tuple[Any, ...]]:
    return sorted(zip(*(t[c].to_pylist() for c in ("id", "p", "v", "ts")), strict=True))


def _times(root: str) -> list[str]:
    hoodie = os.path.join(root, ".hoodie")
    return sorted(f.split(".")[0] for f in os.listdir(hoodie) if f.endswith((".deltacommit", ".commit")))


async def test_rollback_killed_at_every_request_then_resumed(tmp_path: Any) -> None:
    """A prepared (never committed) deltacommit with base and log files is rolled back by a
    child SIGKILLed before its n-th mutating request, for every n (both readers then see
    the table as before the write, a pending rollback instant or not), then by a clean (even
    n with a pending rollback: it completes it) and ``abort_job`` here: the table's files are then exactly those before the write plus one rollback
    instant (three files); its metadata names the target and exactly the write's data files;
    hudi-rs and amcommit read the table as before it in every query type; a later upsert
    into the same slices writes a log file and reads right; clean leaves nothing of the
    rolled-back write (there is nothing: its files are gone) and deletes no live file."""
    from tests.forkrun import run_module

    before = rows_of(model_upsert({}, FIRST))
    by_clean = 0
    n = 1
    while True:
        root = str(tmp_path / f"r{n}")
        os.makedirs(root)
        store = LocalStore(root, fsync=False)
        async with store:
            await mutate.upsert(store, "tbl", _t(FIRST), precombine_field="ts", **MOR | {"config": KILL_CFG})
            was = await _files(store, "tbl")
            prep = await mutate.prepare(
                store,
                "tbl",
                _t(UPSERT),
                operation="UPSERT",
                precombine_field="ts",
                **MOR | {"config": KILL_CFG},
            )
            t = prep.report.instant
            written = sorted(
                f for f in set(await _files(store, "tbl")) - set(was) if not f.startswith(".hoodie/")
            )
            assert [f for f in written if parse_log_file_name(f.rpartition("/")[2])], written
            r = run_module("tests.table.kill_child", [root, "tbl", t, "abort", str(n)])
            done = r.returncode == 0 and "completed" in r.stdout
            assert done or r.returncode == -9, r.stderr[-2000:]
            uri = os.path.join(root, "tbl")
            assert hudi_snapshot(uri) == before, n  # never a part of the failed write
            assert _rows(await read_store(store, "tbl")) == before, n
            rbs = [i for i in await list_instants(store, "tbl") if i.action == "rollback"]
            pending_rb = sorted({i.time for i in rbs} - {i.time for i in rbs if i.completed})
            staged = await staged_times(store, "tbl")
            if n % 2 == 0 and pending_rb:
                # a killed rollback whose staging is gone is completed by the next clean (under
                # the table's lock); one with its staging is left to the job's abort
                rep = await clean(store, "tbl", retain_commits=10, config=KILL_CFG)
                assert rep.rolled_back == ([] if t in staged else [t]) and rep.instant is None, n
                if t not in staged:
                    by_clean += 1
                    now = await _files(store, "tbl")
                    assert sorted(set(now) - set(was)) == [
                        f".hoodie/{pending_rb[0]}.rollback{s}" for s in ("", ".inflight", ".requested")
                    ], n
            await abort_job(store, "tbl", t, config=KILL_CFG)  # resume (or do) the rollback
            now = await _files(store, "tbl")
            extra = sorted(set(now) - set(was))
            assert not set(was) - set(now), n
            rb = extra[0].split("/")[1].split(".")[0]
            assert extra == [f".hoodie/{rb}.rollback{s}" for s in ("", ".inflight", ".requested")], (n, extra)
            assert rb > t
            base = join(store.root_uri, "tbl")
            meta = decode_rollback_metadata(await store.get(f"tbl/.hoodie/{rb}.rollback"), root_uri=base)
            assert (meta.instant, meta.target, meta.action) == (rb, t, "deltacommit")
            assert sorted(f for fs in meta.deleted.values() for f in fs) == written, n
            plan = decode_rollback_plan(
                await store.get(f"tbl/.hoodie/{rb}.rollback.requested"), root_uri=base
            )
            assert plan.files == meta.deleted
            assert await store.get(f"tbl/.hoodie/{rb}.rollback.inflight") == b""
            assert hudi_snapshot(uri) == before, n
            times = _times(uri)
            compare(uri, times, hudi.HudiTableBuilder.from_base_uri(uri).build())
            # the table goes on: the same slices get a log file again, read right
            rep = await mutate.upsert(
                store, "tbl", _t(LATER), precombine_field="ts", **MOR | {"config": KILL_CFG}
            )
            assert rep.files_logged == 1
            assert hudi_snapshot(uri) == rows_of(model_upsert(model_upsert({}, FIRST), LATER)), n
            kept = [f for f in await _files(store, "tbl") if not f.startswith(".hoodie/")]
            await clean(store, "tbl", retain_commits=1, config=KILL_CFG)
            assert [f for f in await _files(store, "tbl") if not f.startswith(".hoodie/")] == kept
            compare(uri, _times(uri), hudi.HudiTableBuilder.from_base_uri(uri).build())
        if done:
            break
        n += 1
    assert n > 4, n  # the rollback's plan, inflight, deletes, instant files, completion
    assert by_clean > 0


def _java_schema(table: str, name: str) -> Any:
    with zipfile.ZipFile(DATA / f"{table}.zip") as z:
        data = z.read(f"{table}/.hoodie/{name}")
    return fastavro.reader(io.BytesIO(data)).writer_schema


def test_rollback_avro_resolves_against_javas_schemas() -> None:
    """The plan and metadata amcommit writes are read through the schemas Java wrote in
    ``v6_nonpartitioned_rollback`` (Avro schema resolution, as Java's reader resolves its own
    schema against the file's): every field found, values as written."""
    root = "file:/t/tbl"
    plan = RollbackPlan(
        "20250101000000000", "deltacommit", {"p=a": ["p=a/f1.parquet", "p=a/.f2_1.log.1_0-1-0"]}
    )
    data = encode_rollback_plan(plan, root_uri=root)
    java = _java_schema("v6_nonpartitioned_rollback", "20250126040936578.rollback.requested")
    (rec,) = list(fastavro.reader(io.BytesIO(data), reader_schema=java))
    assert rec["instantToRollback"] == {"commitTime": plan.target, "action": "deltacommit"}
    assert rec["RollbackRequests"][0]["filesToBeDeleted"] == [
        f"{root}/p=a/f1.parquet",
        f"{root}/p=a/.f2_1.log.1_0-1-0",
    ]
    assert decode_rollback_plan(data, root_uri=root) == plan
    meta = RollbackMetadata("20250101000000001", plan.target, "deltacommit", 7, plan.files)
    data = encode_rollback_metadata(meta, root_uri=root)
    java = _java_schema("v6_nonpartitioned_rollback", "20250126040936578.rollback")
    (rec,) = list(fastavro.reader(io.BytesIO(data), reader_schema=java))
    assert rec["commitsRollback"] == [plan.target] and rec["totalFilesDeleted"] == 2
    assert rec["instantsRollback"] == [{"commitTime": plan.target, "action": "deltacommit"}]
    assert rec["partitionMetadata"]["p=a"]["successDeleteFiles"] == [f"{root}/{f}" for f in plan.files["p=a"]]
    assert decode_rollback_metadata(data, root_uri=root) == meta
