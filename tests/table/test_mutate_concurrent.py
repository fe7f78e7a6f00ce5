"""No lost update: two OS processes (tests.table.upsert_child) upsert overlapping keys of one
table for many rounds, each retrying a batch that fails with WriteConflict (what a user
does). Every attempt either committed or failed cleanly with WriteConflict, leaving nothing
behind (no object carries its instant); the committed attempts are exactly the table's
completed instants after the first; and the final snapshot (amcommit's reader and hudi-rs)
equals the model: the committed batches applied in timeline order. A write that rewrote a
file group from a version older than its latest would drop the other writer's changes to
keys it did not touch, and the snapshot would differ from the model.

On local files and fake-gcs-server (one emulator: the conflict check and the lock are the
same code on every store)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pyarrow as pa
import pytest

from amcommit.table.format.model import State
from amcommit.table.mutate import engine as mutate
from amcommit.table.timeline.instants import list_instants
from amcommit.table.timeline.reader import Timeline
from tests.matrix import table_runner as _tr
from tests.matrix.conftest import matrix_gcs_fake, matrix_local  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.test_mutate import amcommit_snapshot, hudi_snapshot
from tests.table.upsert_child import CFG, KW, SCHEMA, batch

KEYS, PER_ROUND, ROUNDS = 24, 8, 20
ROOT = Path(__file__).resolve().parents[2]


def _writer(info: dict[str, Any], name: str, seed: int, barrier: Path) -> subprocess.Popen[str]:
    spec = {
        "barrier": str(barrier),
        "backend": info,
        "dest": "tbl",
        "writer": name,
        "rounds": ROUNDS,
        "keys": KEYS,
        "per_round": PER_ROUND,
        "seed": seed,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.table.upsert_child", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["local", "gcs-fake"])
def test_two_processes_upserting_overlapping_keys_lose_no_update(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    first = batch("init", 0, list(range(KEYS)))

    async def create() -> str:
        store = open_store(info)
        async with store:
            r = await mutate.upsert(
                store, "tbl", pa.Table.from_pylist(first, schema=SCHEMA), config=CFG, **KW
            )
            return r.instant

    initial = anyio.run(create)
    barrier = tmp_path / "barrier"  # both prepare their first batch before either commits it
    procs = {name: _writer(info, name, seed, barrier) for name, seed in (("A", 1), ("B", 2))}
    attempts: dict[str, list[dict[str, Any]]] = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=280)
        assert proc.returncode == 0, f"writer {name}: {err[-3000:]}"
        attempts[name] = [json.loads(line) for line in out.splitlines()]
    committed: dict[str, tuple[str, dict[str, Any]]] = {}
    conflicts: list[str] = []
    for name, mine in attempts.items():
        assert [a["round"] for a in mine if a["outcome"] == "committed"] == list(range(ROUNDS)), name
        for a in mine:
            if a["outcome"] == "committed":
                committed[a["instant"]] = (name, a)
            else:
                conflicts.append(a["instant"])

    async def check() -> None:
        store = open_store(info)
        async with store:
            # the active timeline and what archival moved into .hoodie/archived/ (it runs
            # after commits once more than keep_max_commits are active)
            archived = [
                e.instant.time
                for e in await Timeline(store, "tbl").archived()
                if e.instant.completed and e.instant.action == "commit"
            ]
            done = sorted(
                {
                    *archived,
                    *(
                        i.time
                        for i in await list_instants(store, "tbl")
                        if i.state is State.COMPLETED and i.action == "commit"
                    ),
                }
            )
            assert done == sorted([initial, *committed]), "the timeline is not exactly the committed writes"
            model = {(r["id"], r["p"]): (r["v"], r["ts"]) for r in first}
            for instant in sorted(committed):  # timeline order
                name, a = committed[instant]
                for r in batch(name, a["round"], a["keys"]):
                    model[(r["id"], r["p"])] = (r["v"], r["ts"])
            want = sorted((k[0], k[1], v, ts) for k, (v, ts) in model.items())
            assert await amcommit_snapshot(store, "tbl") == want
            where = _tr.hudi_location(cast(Any, SimpleNamespace(backend=backend, info=info, dest="tbl")))
            assert where is not None
            assert await anyio.to_thread.run_sync(lambda: hudi_snapshot(where[0], storage=where[1])) == want
            names = [i.path async for i in store.list("tbl", recursive=True)]
            for c in conflicts:  # a failed write left nothing: no file, instant or staging
                assert not [n for n in names if c in n], c
            assert not [n for n in names if "/.temp/" in n or "/.aux/" in n or "/.heartbeat/" in n], names

    anyio.run(check)
    print(f"{backend}: {len(committed)} committed, {len(conflicts)} conflicts retried")
    assert conflicts, "the writers never overlapped: the test did not exercise a conflict"
