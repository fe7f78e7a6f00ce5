"""A write SIGKILLed after its instant completed but before its markers were deleted leaves
``.hoodie/.temp/<t>/MARKERS*`` of a *completed* instant (nothing pending shows it). The
next write, a ``clean``, or an ``abort-job`` of that instant removes them, and nothing
else: the table's listing is then exactly that of the same operations uninterrupted (up
to file ids and instant times). A Merge-on-Read deltacommit and a Copy-on-Write direct
write (per-attempt markers), on local files and Azure Blob (Azurite); the write runs in a
child forked from the suite's fork server and SIGKILLs itself just before the n-th request
matching a pattern (tests.table.killstore)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.commit.clean import clean
from amcommit.table.mutate import engine as mutate
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants
from tests.matrix.conftest import matrix_blob, matrix_local  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.directhelpers import direct_tasks, marker_folder
from tests.table.test_mor_kills import CFG, _files, _fork, _ours
from tests.table.test_mor_write import FIRST, LATER, MOR, UPSERT
from tests.table.test_mutate import _t, model_upsert, rows_of
from tests.table.writehelpers import begin, hudi_rows, keys, listing, rows, write

PLAIN = TableConfig(writer_ttl=600.0, table_commit="direct")
ZERO = rows(0, 6)
SECOND = rows(10, 5, parts=("a", "c"), tag="s")
THIRD = rows(30, 4, tag="t")

MARKER_DELETE = r"^delete .*/\.hoodie/\.temp/"
LOCK_RELEASE = r"^delete .*/_commit\.lock$"
KILLS = {
    "before-markers": (MARKER_DELETE, 1),  # the instant completed, its lock released
    "between-marker-deletes": (MARKER_DELETE, 2),  # MARKERS.type gone, MARKERS<n> left
    "before-lock-release": (LOCK_RELEASE, 1),  # the dead writer's lock left too
}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"(?<![0-9])[0-9]{17}(?![0-9])")


def _table_kw(table_type: str) -> dict[str, Any]:
    return MOR | {"config": CFG, "precombine_field": "ts", "table_type": table_type}


def _norm(names: list[str]) -> list[str]:
    """File names up to file ids and instant times (numbered in time order)."""
    times = sorted({t for n in names for t in _TIME.findall(n)})
    rank = {t: f"T{i}" for i, t in enumerate(times)}
    return sorted(_TIME.sub(lambda m: rank[m.group(0)], _UUID.sub("F", n)) for n in names)


def _child(info: dict[str, Any], dest: str, pattern: str, n: int, table_type: str) -> bool:
    from tests.table import mor_emu_child

    spec = {"backend": info, "dest": dest, "op": "upsert", "n": n, "rows": UPSERT, "pattern": pattern}
    if table_type != "MERGE_ON_READ":
        spec["table_type"] = table_type
    return _fork(mor_emu_child.run_spec, spec)


async def _then(store: Store, dest: str, then: str, instant: str, table_type: str) -> None:
    if then == "write":
        await mutate.upsert(store, dest, _t(LATER), **_table_kw(table_type))
    elif then == "clean":
        await clean(store, dest, retain_commits=1, config=CFG)
    else:
        await abort_job(store, dest, instant, config=CFG)


async def _leftover_markers(store: Store, dest: str) -> list[str]:
    return [f for f in await _files(store, dest) if f.startswith(".hoodie/.temp/")]


CASES = [("local", "MERGE_ON_READ", kill, then) for kill in KILLS for then in ("write", "clean", "abort")] + [
    ("local", "COPY_ON_WRITE", "before-markers", "write"),
    ("local", "COPY_ON_WRITE", "before-markers", "clean"),
    ("blob", "MERGE_ON_READ", "before-markers", "write"),
    ("blob", "MERGE_ON_READ", "before-markers", "clean"),
    ("blob", "MERGE_ON_READ", "between-marker-deletes", "abort"),
    ("blob", "COPY_ON_WRITE", "before-markers", "clean"),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("backend", "table_type", "kill", "then"), CASES)
def test_completed_instants_markers_are_removed(
    backend: str, table_type: str, kill: str, then: str, request: pytest.FixtureRequest
) -> None:
    info = request.getfixturevalue("matrix_" + backend)
    pattern, nth = KILLS[kill]
    kw = _table_kw(table_type)
    after = model_upsert(model_upsert({}, FIRST), UPSERT)
    want_rows = rows_of(model_upsert(after, LATER) if then == "write" else after)

    async def go() -> None:
        store = open_store(info)
        async with store:
            # the reference: the same operations, uninterrupted
            await mutate.upsert(store, "ref", _t(FIRST), **kw)
            await mutate.upsert(store, "ref", _t(UPSERT), **kw)
            ref_instant = [i.time for i in await list_instants(store, "ref") if i.completed][-1]
            if then != "abort":  # (an abort of a completed write is refused: see below)
                await _then(store, "ref", then, ref_instant, table_type)
            want = _norm(await _files(store, "ref"))
            assert await _leftover_markers(store, "ref") == []

            dest = "killed"
            await mutate.upsert(store, dest, _t(FIRST), **kw)
            assert not await anyio.to_thread.run_sync(_child, info, dest, pattern, nth, table_type)
            done = [i.time for i in await list_instants(store, dest) if i.completed]
            assert len(done) == 2, done  # the killed write's instant completed
            t = done[-1]
            left = await _leftover_markers(store, dest)
            assert left and all(f.startswith(f".hoodie/.temp/{t}/MARKERS") for f in left), left
            assert await _ours(store, dest) == rows_of(after)
            await _then(store, dest, then, t, table_type)
            assert await _leftover_markers(store, dest) == []
            assert _norm(await _files(store, dest)) == want
            assert await _ours(store, dest) == want_rows

    anyio.run(go)


@pytest.mark.parametrize("then", ["clean", "abort"])
async def test_a_pending_writers_markers_stay(tmp_path: Path, then: str) -> None:
    """Beside a completed instant's leftover markers (as a kill before their delete leaves
    them: the bytes saved before its commit, put back after it), a pending direct write of
    this process (alive; staged; its markers written, not committed): a ``clean`` or the
    completed instant's ``abort-job`` removes the leftover and leaves the pending write's
    marker folder byte for byte; that write then commits."""
    store = LocalStore(str(tmp_path), fsync=False)
    await write(store, "tbl", ZERO, config=PLAIN)
    done = await begin(store, "tbl", config=PLAIN)
    await direct_tasks(store, done, SECOND)
    saved = await marker_folder(store, "tbl", done.instant)
    assert saved
    assert (await commit_job(store, "tbl", done.instant, config=PLAIN)).success
    assert await marker_folder(store, "tbl", done.instant) == {}
    for rel, data in saved.items():
        await store.put(join("tbl", rel), data)
    live = await begin(store, "tbl", config=PLAIN)
    await direct_tasks(store, live, THIRD)
    pending = await marker_folder(store, "tbl", live.instant)
    assert pending and live.instant != done.instant
    if then == "clean":
        await clean(store, "tbl", retain_commits=5, config=PLAIN)
    else:
        await abort_job(store, "tbl", done.instant, config=PLAIN)
    assert await marker_folder(store, "tbl", done.instant) == {}
    assert await marker_folder(store, "tbl", live.instant) == pending
    assert [x for x in await listing(store, "tbl") if x.startswith(".hoodie/.temp/")] == sorted(pending)
    assert (await commit_job(store, "tbl", live.instant, config=PLAIN)).success
    assert hudi_rows(str(tmp_path / "tbl")) == keys(ZERO + SECOND + THIRD)
    assert [x for x in await listing(store, "tbl") if x.startswith(".hoodie/.temp/")] == []
