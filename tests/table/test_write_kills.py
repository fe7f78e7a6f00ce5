"""Crash safety of table commits and aborts: a real subprocess SIGKILLed before each of its
mutating store requests, then the write resumed (commit again) or aborted, in this process.

At every point: hudi-rs sees the whole instant or nothing, and the final listing is exactly
the committed table (resume) or exactly the table before the write (abort, unless the commit
had passed its point of no return: then abort completes it)."""

from __future__ import annotations

import json as _json
import multiprocessing as _mp
import os
import re
import signal as _signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.store.local import LocalStore
from amcommit.table.commit.table_commit import completed_instant
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants
from tests.forkrun import PRELOAD, run_module
from tests.matrix import table_oracle as _to
from tests.matrix import table_runner as _tr
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake, matrix_sdk_list  # noqa: F401 (fixtures)
from tests.matrix.runner import CONFIG, Cell
from tests.matrix.scenarios import TABLE_JOBS, Scenario
from tests.matrix.stores import open_store
from tests.table.kill_child import KillAt
from tests.table.writehelpers import (
    begin,
    hudi_incremental,
    hudi_rows,
    keys,
    listing,
    rows,
    write,
    write_tasks,
)

CFG = TableConfig(writer_ttl=600.0)
FIRST = rows(0, 6)
SECOND = rows(10, 5, parts=("a", "c"), tag="s")


def _child(root: str, instant: str, what: str, n: int, ttl: float = 0.0) -> bool:
    """Run the child; True if it completed (was not killed)."""
    # forked from the fork server (tests/forkrun.py), SIGKILLed as a `python -m` child was
    r = run_module("tests.table.kill_child", [root, "tbl", instant, what, str(n), str(ttl)])
    if r.returncode == 0:
        assert "completed" in r.stdout
        return True
    assert r.returncode == -9, r.stderr[-2000:]
    return False


_FILE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-0_")


async def _fresh(tmp_path: Path, name: str) -> tuple[LocalStore, str, str, str]:
    """A new table (one committed write) with a second write begun and its tasks committed:
    (store, table uri, first instant, second instant). Built anew for every run: local etags
    include the inode, so a copied tree would look changed to the commit."""
    root = str(tmp_path / name)
    os.makedirs(root)
    store = LocalStore(root, fsync=False)
    w1, _ = await write(store, "tbl", FIRST, config=CFG)
    w = await begin(store, "tbl", config=CFG)
    await write_tasks(store, w, SECOND)
    return store, os.path.join(root, "tbl"), w1.instant, w.instant


async def _normal(store: LocalStore, first: str, second: str) -> list[str]:
    """The table's listing with instants and file ids replaced by placeholders."""
    return sorted(
        _FILE_ID.sub("F_", n).replace(first, "I1").replace(second, "I2") for n in await listing(store, "tbl")
    )


async def _after(tmp_path: Path, name: str, what: str, n: int, then: str) -> tuple[bool, list[str], bool]:
    """Kill the child at request ``n`` of ``what``, check what hudi-rs sees, then run ``then``
    (commit/abort) in this process: (child completed, normalised listing, rows are new)."""
    store, uri, first, second = await _fresh(tmp_path, name)
    done = _child(str(Path(uri).parent), second, what, n)
    seen = hudi_rows(uri)
    old_rows, new_rows = keys(FIRST), keys(FIRST + SECOND)
    assert seen in (old_rows, new_rows), (n, seen)  # the whole instant or nothing
    if seen == new_rows:  # incremental readers see the whole instant too
        assert hudi_incremental(uri, first, second) == keys(SECOND)
    if then == "commit":
        await commit_job(store, "tbl", second, config=CFG)
    else:
        await abort_job(store, "tbl", second, config=CFG)
    after = hudi_rows(uri)
    assert after in (old_rows, new_rows)
    return done, await _normal(store, first, second), after == new_rows


@pytest.mark.parametrize("what", ["commit", "abort"])
async def test_kill_at_every_request_then_resume_or_abort(tmp_path: Path, what: str) -> None:
    store, _, first, second = await _fresh(tmp_path, "ref-commit")
    await commit_job(store, "tbl", second, config=CFG)
    committed = await _normal(store, first, second)
    store, _, first, second = await _fresh(tmp_path, "ref-abort")
    await abort_job(store, "tbl", second, config=CFG)
    aborted = await _normal(store, first, second)
    assert committed != aborted
    n = 1
    while True:
        # resume: the same operation again
        done, got, new = await _after(tmp_path, f"r{n}", what, n, what)
        if what == "commit":
            assert (got, new) == (committed, True), n
        else:
            assert (got, new) in ((aborted, False), (committed, True)), n
        if what == "commit":  # and separately: abort after the kill
            _, got, new = await _after(tmp_path, f"a{n}", what, n, "abort")
            assert (got, new) in ((aborted, False), (committed, True)), n
        if done:
            break
        n += 1
    # every mutating request was a kill point: a floor, not an exact count (a commit of this
    # write sends ~20: cleanup on local files deletes the task attempts in one request)
    assert n > (15 if what == "commit" else 5), n


@pytest.mark.parametrize("n", [6, 12, 18])
async def test_next_writer_finishes_or_rolls_back_a_killed_writer(tmp_path: Path, n: int) -> None:
    """A writer killed during its commit (holding the table lock, heartbeat fresh); another
    write's commit takes the lock over once it expired, completes the dead commit (journal)
    or rolls the dead instant back once its heartbeat is stale, then commits: instants
    complete in order and hudi-rs sees every committed row exactly once."""
    from tests.table.writehelpers import hudi_incremental as inc

    cfg = TableConfig(lock_ttl=2.0, lock_wait=30.0, writer_ttl=2.0)
    store, uri, _first, second = await _fresh(tmp_path, "t")
    w3 = await begin(store, "tbl", config=cfg)
    third = rows(50, 3, tag="t")
    await write_tasks(store, w3, third)
    assert not _child(str(Path(uri).parent), second, "commit", n, ttl=2.0)
    published = f"{second}.commit" in [
        i.time + "." + i.action for i in await list_instants(store, "tbl") if i.completed
    ]
    report = await commit_job(store, "tbl", w3.instant, config=cfg)
    assert report.success
    seen = hudi_rows(uri)
    with_second = keys(FIRST + SECOND + third)
    without = keys(FIRST + third)
    assert seen in (with_second, without), seen
    assert inc(uri, second, None) == keys(third)
    names = await listing(store, "tbl")
    assert not any(".temp/" in x or ".aux/" in x or ".heartbeat/" in x for x in names), names
    if seen == without:
        assert not any(second in x for x in names)
    elif not published:  # the dead writer's half-done commit was completed by this one
        assert report.completed_previous == second


# -- the same on the emulators (Azurite, fake-gcs-server) ------------------------------------------
# A fresh table per kill, set up as the fault matrix does (old table put directly, the write
# begun with begin_write, its tasks committed): tests/matrix/table_runner.py, whose checks
# (exact objects and bytes against the oracle, SDK listing, hudi-rs) are reused here. The child
# is forked from a fork server that has imported everything (a new interpreter per kill costs
# ~0.5 s of CPU). Suite time budget: the dynamic overwrite (a replacecommit, the most requests)
# is killed on Azurite before every mutating request and resumed, and at a spread sample of them
# aborted; on fake-gcs-server, and the append on both, at a spread sample, resumed and aborted;
# the abort itself at a spread sample.


_FORKS = _mp.get_context("forkserver")
_FORKS.set_forkserver_preload(PRELOAD)  # one fork server per process: every kill test's list
_CHILD_CFG = CONFIG | {"io_threads": 1, "load_threads": 1}


def _fork_child(cell: Cell, instant: str, what: str, n: int) -> bool:
    """``what`` (commit/abort) of ``instant`` in a forked child killed before its n-th
    mutating request; True if it completed."""
    from tests.table import kill_child

    spec = {
        "backend": cell.info,
        "dest": cell.dest,
        "instant": instant,
        "what": what,
        "n": n,
        "config": _CHILD_CFG,
    }
    proc = _FORKS.Process(target=kill_child.run_spec, args=(_json.dumps(spec),), name=f"table-kill-{what}")
    proc.start()
    proc.join(120)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    assert proc.exitcode in (0, -_signal.SIGKILL), f"{what} child failed (exit {proc.exitcode})"
    return proc.exitcode == 0


def _cell(name: str, backend: str, info: dict[str, Any], store: Any, sdk_list: Any) -> Cell:
    job = TABLE_JOBS[name]
    return Cell(Scenario(f"kills-{name}", "", {}, (), tables=(job,)), backend, info, store, sdk_list)


async def _requests(cell: Cell, what: str) -> int:
    """How many mutating requests an uninterrupted ``what`` of the scenario's write makes."""
    await _tr.setup_table(cell)
    w = await _tr.begin(cell, cell.sc.tables[0])
    counter = KillAt(cell.store, 10**9)
    op = commit_job if what == "commit" else abort_job
    await op(counter, cell.dest, w.instant, config=_tr.config(**_CHILD_CFG))  # type: ignore[arg-type]
    return counter.count


async def _kill_then(cell: Cell, what: str, n: int, then: str) -> tuple[bool, bool]:
    """Kill ``what`` before request ``n``, check hudi-rs sees all or nothing, run ``then``
    here and check the exact end state: (child completed, the write is committed)."""
    await _tr.setup_table(cell)
    w = await _tr.begin(cell, cell.sc.tables[0])
    done = _fork_child(cell, w.instant, what, n)
    await _tr.check_all_or_nothing(cell, _to.OLD_ROWS, w)
    op = commit_job if then == "commit" else abort_job
    await op(cell.store, cell.dest, w.instant, config=_tr.config())
    committed = await completed_instant(cell.store, cell.dest, w.instant) is not None
    if committed:
        await _tr.check_table(cell, _tr.OLD, [w], _to.rows_after(w.job, _to.OLD_ROWS), hudi=False)
    else:
        await _tr.check_table(cell, _tr.OLD, [], _to.OLD_ROWS, hudi=False)
    return done, committed


def _spread(total: int, k: int = 5) -> list[int]:
    return sorted({max(1, round(total * (i + 1) / (k + 1))) for i in range(k)} | {1, total})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["blob", "gcs-fake"])
@pytest.mark.parametrize("name", ["overwrite-dyn", "append"])
def test_kill_at_requests_on_emulators(backend: str, name: str, request: pytest.FixtureRequest) -> None:
    """The commit killed before its n-th mutating request (every n for the overwrite, a
    spread for the append), then resumed (always committed, exactly); at a spread of n,
    separately aborted (rolled back exactly, or, once past the point of no return, committed
    exactly: never rolled back again for a later n); the abort killed at a spread of its
    requests, then aborted again. hudi-rs sees all or nothing after every kill."""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    sdk_list = request.getfixturevalue("matrix_sdk_list")(backend, info)

    async def go() -> None:
        store = open_store(info)
        async with store:

            def cell() -> Cell:
                return _cell(name, backend, info, store, sdk_list)

            total = await _requests(cell(), "commit")
            assert total > 20, total
            every = name == "overwrite-dyn" and backend == "blob"  # suite budget: a spread elsewhere
            spread = _spread(total, 2)
            past = False
            for n in range(1, total + 1) if every else spread:
                done, committed = await _kill_then(cell(), "commit", n, "commit")
                assert committed, f"resume after a kill before request {n}: not committed"
                assert done == (n > total), n
                if n not in spread:
                    continue
                _, committed = await _kill_then(cell(), "commit", n, "abort")
                assert committed or not past, (
                    f"abort after request {n} rolled back a write past its point of no return"
                )
                past = past or committed
            assert past, "no abort ever completed the commit (the point of no return was never reached)"
            print(f"{backend} {name}: {total} requests")
            aborts = await _requests(cell(), "abort")
            for n in _spread(aborts, 1):
                _, committed = await _kill_then(cell(), "abort", n, "abort")
                assert not committed, n

    anyio.run(go)
