"""Crash safety of an upsert's commit: a real subprocess (tests.table.kill_child) SIGKILLed
before each mutating store request of the commit of a prepared upsert (file groups rewritten,
new ones inserted), then the commit resumed, or separately aborted, in this process.

At every point hudi-rs sees the table before the upsert or after it, never a mix; the final
listing is exactly that of the committed upsert (resume) or of the table before it (abort,
unless the commit had passed its point of no return: then abort completes it)."""

from __future__ import annotations

import json as _json
import multiprocessing as _mp
import os
import re
import signal as _signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pyarrow as pa
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.mutate import engine as mutate
from amcommit.table.settings import TableConfig
from tests.forkrun import PRELOAD
from tests.matrix import table_runner as _tr
from tests.matrix.conftest import matrix_blob, matrix_dfs, matrix_gcs_fake  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.kill_child import KillAt
from tests.table.test_mutate import SCHEMA, hudi_snapshot
from tests.table.writehelpers import listing

CFG = TableConfig(writer_ttl=600.0)
KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "precombine_field": "ts", "config": CFG}
FIRST = [{"id": i, "p": "abc"[i % 3], "v": "0", "ts": 1} for i in range(12)]
UPSERT = [
    {"id": 1, "p": "b", "v": "u", "ts": 2},
    {"id": 3, "p": "a", "v": "u", "ts": 2},
    {"id": 50, "p": "c", "v": "n", "ts": 1},
]
_FILE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-0_")


def _rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["p"], r["v"], r["ts"]) for r in rows)


BEFORE = _rows(FIRST)
AFTER = _rows([r for r in FIRST if (r["id"], r["p"]) not in {(1, "b"), (3, "a")}] + UPSERT)


def _child(root: str, instant: str, n: int) -> bool:
    r = subprocess.run(
        [sys.executable, "-m", "tests.table.kill_child", root, "tbl", instant, "commit", str(n)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    if r.returncode == 0:
        assert "completed" in r.stdout
        return True
    assert r.returncode == -9, r.stderr[-2000:]
    return False


async def _fresh(tmp_path: Path, name: str, table_commit: str = "staged") -> tuple[LocalStore, str, str, str]:
    root = str(tmp_path / name)
    os.makedirs(root)
    store = LocalStore(root, fsync=False)
    kw = KW | {"config": CFG.with_options(table_commit=table_commit)}
    first = await mutate.upsert(store, "tbl", pa.Table.from_pylist(FIRST, schema=SCHEMA), **kw)
    prepared = await mutate.prepare(
        store, "tbl", pa.Table.from_pylist(UPSERT, schema=SCHEMA), operation="UPSERT", **kw
    )
    assert prepared.report.updated == 2 and prepared.report.inserted == 1
    return store, os.path.join(root, "tbl"), first.instant, prepared.report.instant


async def _normal(store: LocalStore, first: str, second: str) -> list[str]:
    return sorted(
        _FILE_ID.sub("F_", n).replace(first, "I1").replace(second, "I2") for n in await listing(store, "tbl")
    )


@pytest.mark.parametrize("table_commit", ["staged", "direct"])
async def test_upsert_commit_killed_at_every_request_then_resume_or_abort(
    tmp_path: Path, table_commit: str
) -> None:
    """(direct: the upsert's new versions and new file groups are in the table under their
    MERGE / CREATE markers when the commit is killed; the same listings at the end.)"""
    store, _, first, second = await _fresh(tmp_path, "ref-commit", table_commit)
    if table_commit == "direct":
        names = await listing(store, "tbl")
        attempt_files = [
            n for n in names if "/.temp/" in n and "/MARKERS" in n and not n.endswith("MARKERS.type")
        ]
        lines = [ln for n in attempt_files for ln in (await store.get(f"tbl/{n}")).decode().splitlines()]
        marks = sorted(ln.rpartition(".")[2] for ln in lines if ".parquet.marker." in ln)
        assert marks == ["MERGE"] * 3, names  # (the insert goes into c's small file group)
    await commit_job(store, "tbl", second, config=CFG)
    committed = await _normal(store, first, second)
    store, _, first, second = await _fresh(tmp_path, "ref-abort", table_commit)
    await abort_job(store, "tbl", second, config=CFG)
    aborted = await _normal(store, first, second)
    assert committed != aborted
    n = 1
    while True:
        done = False
        for then in ("commit", "abort"):
            store, uri, first, second = await _fresh(tmp_path, f"{then}{n}", table_commit)
            done = _child(str(Path(uri).parent), second, n)
            assert hudi_snapshot(uri) in (BEFORE, AFTER), n  # the whole upsert or nothing
            await (commit_job if then == "commit" else abort_job)(store, "tbl", second, config=CFG)
            got, seen = await _normal(store, first, second), hudi_snapshot(uri)
            if then == "commit":
                assert (got, seen) == (committed, AFTER), n
            else:
                assert (got, seen) in ((aborted, BEFORE), (committed, AFTER)), n
        if done:
            break
        n += 1
    assert n > 10, n


# -- the same on the emulators: Azure Blob (Azurite), ADLS Gen2 (the test server), GCS
# (fake-gcs-server). The commit's requests differ per store (Blob: copy + delete, ADLS Gen2: an
# atomic rename, GCS: rewrite + delete), so each is killed; suite budget: a spread of kill
# points, each resumed (always committed, exactly), some also aborted. The child is forked
# from the fork server test_write_kills uses (kill_child.run_spec: the job commit, or abort,
# through a KillStore). hudi-rs reads Azurite and fake-gcs-server, not the ADLS test server.

_FORKS = _mp.get_context("forkserver")
_FORKS.set_forkserver_preload(PRELOAD)  # one fork server per process: every kill test's list


def _fork_child(info: dict[str, Any], dest: str, instant: str, what: str, n: int) -> bool:
    """``what`` (commit/abort) of ``instant`` in a forked child killed before its n-th
    mutating request; True if it completed."""
    from tests.table import kill_child

    spec = {"backend": info, "dest": dest, "instant": instant, "what": what, "n": n, "config": _CHILD_CFG}
    proc = _FORKS.Process(target=kill_child.run_spec, args=(_json.dumps(spec),), name=f"upsert-kill-{what}")
    proc.start()
    proc.join(120)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    assert proc.exitcode in (0, -_signal.SIGKILL), f"{what} child failed (exit {proc.exitcode})"
    return proc.exitcode == 0


_CHILD_CFG = {"io_threads": 1, "load_threads": 1, "retry_base_delay": 0.005, "retry_max_delay": 0.1}


def _hudi(backend: str, info: dict[str, Any], dest: str) -> list[tuple[Any, ...]] | None:
    where = _tr.hudi_location(cast(Any, SimpleNamespace(backend=backend, info=info, dest=dest)))
    if where is None:
        return None
    uri, opts = where
    return hudi_snapshot(uri, storage=opts)


async def _fresh_on(store: Store, dest: str, table_commit: str = "staged") -> tuple[str, str]:
    """The table of _fresh at ``dest`` of ``store``: (first instant, prepared instant)."""
    kw = KW | {"config": CFG.with_options(table_commit=table_commit)}
    first = await mutate.upsert(store, dest, pa.Table.from_pylist(FIRST, schema=SCHEMA), **kw)
    prepared = await mutate.prepare(
        store, dest, pa.Table.from_pylist(UPSERT, schema=SCHEMA), operation="UPSERT", **kw
    )
    return first.instant, prepared.report.instant


async def _normal_on(store: Store, dest: str, first: str, second: str) -> list[str]:
    return sorted(
        _FILE_ID.sub("F_", n).replace(first, "I1").replace(second, "I2") for n in await listing(store, dest)
    )


def _spread(total: int, k: int) -> list[int]:
    return sorted({max(1, round(total * (i + 1) / (k + 1))) for i in range(k)} | {1, total})


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("backend", "table_commit"),
    [
        ("blob", "staged"),
        ("dfs", "staged"),
        ("gcs-fake", "staged"),
        ("blob", "direct"),
        ("dfs", "direct"),
        ("gcs-fake", "direct"),
    ],
)
def test_upsert_commit_killed_on_emulators(
    backend: str, table_commit: str, request: pytest.FixtureRequest
) -> None:
    """The commit of a prepared upsert killed before its n-th mutating request (a spread of
    n), then resumed: committed, the listing exactly the uninterrupted commit's; at some n
    aborted instead: exactly the table before, or (past the point of no return) the
    committed one, never rolled back again for a later n. hudi-rs sees all or nothing
    after every kill. (direct: the new versions are in the table under MERGE markers.)"""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    counter: list[int] = []

    async def go() -> None:
        store = open_store(info)
        async with store:
            first, second = await _fresh_on(store, "ref-commit", table_commit)
            names = await listing(store, "ref-commit")
            attempt_files = [
                n for n in names if "/.temp/" in n and "/MARKERS" in n and not n.endswith("MARKERS.type")
            ]
            marks = [
                ln
                for n in attempt_files
                for ln in (await store.get(f"ref-commit/{n}")).decode().splitlines()
                if ln.endswith(".parquet.marker.MERGE")
            ]
            assert len(marks) == (3 if table_commit == "direct" else 0), marks
            count = KillAt(store, 10**9)
            await commit_job(count, "ref-commit", second, config=CFG)  # type: ignore[arg-type]
            total = count.count
            counter.append(total)
            committed = await _normal_on(store, "ref-commit", first, second)
            first, second = await _fresh_on(store, "ref-abort", table_commit)
            await abort_job(store, "ref-abort", second, config=CFG)
            aborted = await _normal_on(store, "ref-abort", first, second)
            assert committed != aborted
            assert total > 10, total
            spread = _spread(total, 4)
            aborts = set(_spread(total, 2))
            past = False
            for n in spread:
                for then in ("commit", "abort") if n in aborts else ("commit",):
                    dest = f"{then}{n}"
                    first, second = await _fresh_on(store, dest, table_commit)
                    done = await anyio.to_thread.run_sync(_fork_child, info, dest, second, "commit", n)
                    assert done == (n > total), n
                    seen = await anyio.to_thread.run_sync(_hudi, backend, info, dest)
                    assert (seen is None) == (backend == "dfs")
                    assert seen in (None, BEFORE, AFTER), n  # the whole upsert or nothing
                    await (commit_job if then == "commit" else abort_job)(store, dest, second, config=CFG)
                    got = await _normal_on(store, dest, first, second)
                    seen = await anyio.to_thread.run_sync(_hudi, backend, info, dest)
                    if then == "commit":
                        assert got == committed and seen in (None, AFTER), n
                    else:
                        assert got in (aborted, committed) and seen in (
                            None,
                            BEFORE if got == aborted else AFTER,
                        ), n
                        assert got == committed or not past, (
                            f"abort after request {n} rolled back a committed write"
                        )
                        past = past or got == committed
            assert past, "no abort completed the commit (the point of no return was never reached)"

    anyio.run(go)
    print(f"{backend}: {counter[0]} requests")
