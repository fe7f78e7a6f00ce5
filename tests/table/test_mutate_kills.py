"""Crash safety of an upsert's commit: a real subprocess (tests.table.kill_child) SIGKILLed
before each mutating store request of the commit of a prepared upsert (file groups rewritten,
new ones inserted), then the commit resumed, or separately aborted, in this process.

At every point hudi-rs sees the table before the upsert or after it, never a mix; the final
listing is exactly that of the committed upsert (resume) or of the table before it (abort,
unless the commit had passed its point of no return: then abort completes it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from amcommit.committer.job import abort_job, commit_job
from amcommit.store.local import LocalStore
from amcommit.table import mutate
from amcommit.table.settings import TableConfig
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


async def _fresh(tmp_path: Path, name: str) -> tuple[LocalStore, str, str, str]:
    root = str(tmp_path / name)
    os.makedirs(root)
    store = LocalStore(root, fsync=False)
    first = await mutate.upsert(store, "tbl", pa.Table.from_pylist(FIRST, schema=SCHEMA), **KW)
    prepared = await mutate.prepare(
        store, "tbl", pa.Table.from_pylist(UPSERT, schema=SCHEMA), operation="UPSERT", **KW
    )
    assert prepared.report.updated == 2 and prepared.report.inserted == 1
    return store, os.path.join(root, "tbl"), first.instant, prepared.report.instant


async def _normal(store: LocalStore, first: str, second: str) -> list[str]:
    return sorted(
        _FILE_ID.sub("F_", n).replace(first, "I1").replace(second, "I2") for n in await listing(store, "tbl")
    )


async def test_upsert_commit_killed_at_every_request_then_resume_or_abort(tmp_path: Path) -> None:
    store, _, first, second = await _fresh(tmp_path, "ref-commit")
    await commit_job(store, "tbl", second, config=CFG)
    committed = await _normal(store, first, second)
    store, _, first, second = await _fresh(tmp_path, "ref-abort")
    await abort_job(store, "tbl", second, config=CFG)
    aborted = await _normal(store, first, second)
    assert committed != aborted
    n = 1
    while True:
        done = False
        for then in ("commit", "abort"):
            store, uri, first, second = await _fresh(tmp_path, f"{then}{n}")
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
