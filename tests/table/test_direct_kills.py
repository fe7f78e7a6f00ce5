"""Crash safety of table writes that copy nothing (amcommit.table.write.direct), on local files: a
real subprocess SIGKILLed before each of its mutating store requests (the job commit, the job
abort, a task attempt), then the write resumed or aborted in this process.

At every point hudi-rs sees the whole instant or nothing, and the final listing is exactly
the committed table (resume) or the table before the write (abort, unless the commit had
passed its point of no return: then the abort completes it); no loser's file stays."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.store.local import LocalStore
from amcommit.table.settings import TableConfig
from amcommit.table.write.direct import sweep_late_markers
from tests.forkrun import run_module
from tests.table.directhelpers import direct_attempt, direct_tasks
from tests.table.test_write_kills import _child
from tests.table.writehelpers import begin, hudi_incremental, hudi_rows, keys, listing, rows, write

CFG = TableConfig(writer_ttl=600.0)
FIRST = rows(0, 6)
SECOND = rows(10, 5, parts=("a", "c"), tag="s")
_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-0_\d+-\d+-\d+_")
_MARKERS = re.compile(r"/MARKERS\d+$")
_REPO = str(Path(__file__).resolve().parents[2])


async def _fresh(tmp_path: Path, name: str, losers: int = 1) -> tuple[LocalStore, str, str, str]:
    """A table (one committed write) and a second, direct write whose tasks committed, with
    ``losers`` attempts that wrote and never committed: (store, uri, first, second)."""
    root = str(tmp_path / name)
    os.makedirs(root)
    store = LocalStore(root, fsync=False)
    w1, _ = await write(store, "tbl", FIRST, config=CFG)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND, losers=losers)
    return store, os.path.join(root, "tbl"), w1.instant, w.instant


async def _normal(store: LocalStore, first: str, second: str) -> list[str]:
    """The table's listing, names normalised; a MARKERS<n> file (its n from the attempt id,
    which holds the instant) as ``MARKERSn`` followed by its lines, normalised too."""
    out = []
    for n in await listing(store, "tbl"):
        name = _NAME.sub("F_", n).replace(first, "I1").replace(second, "I2")
        if _MARKERS.search(name):
            lines = (await store.get(f"tbl/{n}")).decode()
            body = _NAME.sub("F_", lines).replace(second, "I2")
            name = _MARKERS.sub("/MARKERSn", name) + " " + repr(body)
        out.append(name)
    return sorted(out)


async def _after(tmp_path: Path, name: str, what: str, n: int, then: str) -> tuple[bool, list[str], bool]:
    store, uri, first, second = await _fresh(tmp_path, name)
    done = _child(str(Path(uri).parent), second, what, n)
    seen = hudi_rows(uri)
    old_rows, new_rows = keys(FIRST), keys(FIRST + SECOND)
    assert seen in (old_rows, new_rows), (n, seen)  # the whole instant or nothing
    if seen == new_rows:
        assert hudi_incremental(uri, first, second) == keys(SECOND)
    op = commit_job if then == "commit" else abort_job
    await op(store, "tbl", second, config=CFG)
    after = hudi_rows(uri)
    assert after in (old_rows, new_rows)
    return done, await _normal(store, first, second), after == new_rows


@pytest.mark.parametrize("what", ["commit", "abort"])
async def test_direct_job_killed_at_every_request_then_resume_or_abort(tmp_path: Path, what: str) -> None:
    store, _, first, second = await _fresh(tmp_path, "ref-commit")
    await commit_job(store, "tbl", second, config=CFG)
    committed = await _normal(store, first, second)
    store, _, first, second = await _fresh(tmp_path, "ref-abort")
    await abort_job(store, "tbl", second, config=CFG)
    aborted = await _normal(store, first, second)
    assert committed != aborted
    # no staging left; of the markers only the loser's attempt's file (its files gone, kept
    # for writer_ttl), in Hudi's timeline-server format
    assert not any(".aux/" in x for x in committed + aborted)
    loser = "".join(f"p={p}/F_I2.parquet.marker.CREATE\n" for p in ("a", "c"))
    assert [x for x in committed if ".temp/" in x] == [
        ".hoodie/.temp/I2/MARKERS.type",
        f".hoodie/.temp/I2/MARKERSn {loser!r}",
    ]
    assert not any(".temp/" in x for x in aborted)
    n = 1
    while True:
        done, got, new = await _after(tmp_path, f"r{n}", what, n, what)
        if what == "commit":
            assert (got, new) == (committed, True), n
        else:
            assert (got, new) in ((aborted, False), (committed, True)), n
        if what == "commit":
            _, got, new = await _after(tmp_path, f"a{n}", what, n, "abort")
            assert (got, new) in ((aborted, False), (committed, True)), n
        if done:
            break
        n += 1
    assert n > (8 if what == "commit" else 4), n


def _task_child(root: str, instant: str, n: int, attempt: int, kill: int) -> bool:
    spec = {
        "root": root,
        "dest": "tbl",
        "instant": instant,
        "rows": SECOND,
        "n": n,
        "tasks": 2,
        "attempt": attempt,
        "kill": kill,
    }
    r = run_module("tests.table.directhelpers", [json.dumps(spec)])  # forked (tests/forkrun.py)
    if r.returncode == 0:
        assert "completed" in r.stdout
        return True
    assert r.returncode == -9, r.stderr[-2000:]
    return False


async def test_direct_task_killed_at_every_request_then_retried(tmp_path: Path) -> None:
    """Task 1's first attempt killed before each of its requests (markers, uploads, the
    manifest), a second attempt run as Spark would, then the job committed (exactly the
    table a clean run commits, the dead attempt's files gone) or aborted (exactly the old
    table)."""
    root = str(tmp_path / "ref")
    os.makedirs(root)
    store = LocalStore(root, fsync=False)
    w1, _ = await write(store, "tbl", FIRST, config=CFG)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND)
    await commit_job(store, "tbl", w.instant, config=CFG)
    committed = await _normal(store, w1.instant, w.instant)
    k = 1
    while True:
        for then in ("commit", "abort"):
            root = str(tmp_path / f"t{k}{then}")
            os.makedirs(root)
            store = LocalStore(root, fsync=False)
            w1, _ = await write(store, "tbl", FIRST, config=CFG)
            before = await _normal(store, w1.instant, "-")
            w = await begin(store, "tbl", config=CFG)
            await direct_attempt(store, w, SECOND, 0, 2)
            done = _task_child(root, w.instant, 1, 0, k)
            await direct_attempt(store, w, SECOND, 1, 2, attempt=1)  # Spark's retry
            uri = os.path.join(root, "tbl")
            assert hudi_rows(uri) == keys(FIRST)
            if then == "commit":
                await commit_job(store, "tbl", w.instant, config=CFG)
                assert hudi_rows(uri) == keys(FIRST + SECOND)
                # the dead attempt's marker whose upload never landed stays (younger than
                # writer_ttl: the upload might still land) until a later sweep past its grace
                got = await _normal(store, w1.instant, w.instant)
                extra = list(got)
                for name in committed:
                    extra.remove(name)
                assert all(x.startswith(".hoodie/.temp/I2/") for x in extra), (k, extra)
                await sweep_late_markers(store, "tbl", grace=0.0)
                assert await _normal(store, w1.instant, w.instant) == committed, k
            else:
                await abort_job(store, "tbl", w.instant, config=CFG)
                assert hudi_rows(uri) == keys(FIRST)
                assert await _normal(store, w1.instant, w.instant) == before, k
        if done:
            break
        k += 1
    assert k >= 6, k  # MARKERS.type, 2 rewrites of the MARKERS file, 2 uploads, the manifest
