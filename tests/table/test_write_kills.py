"""Crash safety of table commits and aborts: a real subprocess SIGKILLed before each of its
mutating store requests, then the write resumed (commit again) or aborted, in this process.

At every point: hudi-rs sees the whole instant or nothing, and the final listing is exactly
the committed table (resume) or exactly the table before the write (abort, unless the commit
had passed its point of no return: then abort completes it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from amcommit.committer.config import CommitterConfig
from amcommit.committer.job import abort_job, commit_job
from amcommit.store.local import LocalStore
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

CFG = CommitterConfig(writer_ttl=600.0)
FIRST = rows(0, 6)
SECOND = rows(10, 5, parts=("a", "c"), tag="s")


def _child(root: str, instant: str, what: str, n: int, ttl: float = 0.0) -> bool:
    """Run the child; True if it completed (was not killed)."""
    r = subprocess.run(
        [sys.executable, "-m", "tests.table.kill_child", root, "tbl", instant, what, str(n), str(ttl)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
        cwd=str(Path(__file__).resolve().parents[2]),
    )
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
    assert n > (20 if what == "commit" else 5), n


@pytest.mark.parametrize("n", [6, 12, 18])
async def test_next_writer_finishes_or_rolls_back_a_killed_writer(tmp_path: Path, n: int) -> None:
    """A writer killed during its commit (holding the table lock, heartbeat fresh); another
    write's commit takes the lock over once it expired, completes the dead commit (journal)
    or rolls the dead instant back once its heartbeat is stale, then commits: instants
    complete in order and hudi-rs sees every committed row exactly once."""
    from tests.table.writehelpers import hudi_incremental as inc

    cfg = CommitterConfig(lock_ttl=2.0, lock_wait=30.0, writer_ttl=2.0)
    store, uri, _first, second = await _fresh(tmp_path, "t")
    w3 = await begin(store, "tbl", config=cfg)
    third = rows(50, 3, tag="t")
    await write_tasks(store, w3, third)
    assert not _child(str(Path(uri).parent), second, "commit", n, ttl=2.0)
    report = await commit_job(store, "tbl", w3.instant, config=cfg)
    assert report.success
    seen = hudi_rows(uri)
    with_second = keys(FIRST + SECOND + third)
    without = keys(FIRST + third)
    assert seen in (with_second, without), seen
    assert inc(uri, second, None) == keys(third)
    names = await listing(store, "tbl")
    assert not any(".temp/" in x or ".heartbeat/" in x for x in names), names
    if seen == without:
        assert not any(second in x for x in names)
