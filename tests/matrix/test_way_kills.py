"""Issue 23 item 3 at every kill point: an overwrite that meets something in the way (an old
file ``p=7`` where the job writes ``p=7/x.bin``; an old directory ``p=7/x.bin/...`` where it
writes the file ``p=7/x.bin``), its commit SIGKILLed right after each of its mutating requests
(every put, rename, delete and mkdirs, one at a time), then resumed by ``commit_job``, and
separately undone by ``abort_job``: the destination is exactly the committed one, or exactly
the old one (the committed one when the kill fell past the point of no return), with no lock
and no job directory left.

On the stores with directories (local files, the ADLS Gen2 test server); on flat stores
nothing is in the way (the ``way-*`` scenarios of the matrix run there too, and kill these
commits at their key points on every backend).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amcommit.committer.journal import decode_journal
from amcommit.errors import NotFound
from amcommit.paths import relative_to
from tests.matrix import oracle
from tests.matrix.runner import (
    Cell,
    abort,
    assert_listing,
    check_final,
    check_outside,
    child_killed,
    commit,
    dest_files,
    setup,
    success_job,
    temp_leftovers,
)
from tests.matrix.scenarios import BY_NAME
from tests.matrix.stores import open_store

KILL_PATHS = ["*/p=7*", "*/trash*", "*/journal.json", "*/_SUCCESS*"]
"""The requests the commit is killed after: everything about ``p=7`` (moves aside,
directories created and removed, the rename onto it, old files below it), the trash, the
journal and ``_SUCCESS``; the other requests (lock, victim lists, other files, cleanup) are
the same as in any overwrite (tests/matrix/scenarios.py kills those at each stage)."""
MIN_REQUESTS = {"file": 8, "dir": 12}
"""A floor for the number of kill points (the requests matching :data:`KILL_PATHS`)."""


async def _journal_state(cell: Cell) -> str | None:
    try:
        return decode_journal(await cell.store.get(cell.layout(cell.sc.jobs[0]).journal_path)).state
    except NotFound:
        return None


async def _killed_then(cell: Cell, n: int, then: str) -> bool:
    """A fresh destination; the commit killed right after its ``n``-th mutating request,
    then ``then`` (resume / abort) in this process and the checks. True if the commit child
    completed (``n`` was past its last request)."""
    job, old = cell.sc.jobs[0], dict(cell.sc.old)
    await setup(cell)
    killed = child_killed(
        cell, "commit", job, {"type": "store", "op": "mutating", "path": KILL_PATHS, "nth": n}
    )
    committed = oracle.expect_commit(old, job, cell.directories)
    if then == "resume":
        report = await commit(cell, job)
        assert report.success, n
        await check_final(cell, committed, job)
        return not killed
    state = await _journal_state(cell)
    await abort(cell, job)
    got = await dest_files(cell)
    if state in ("renamed", "committed") or (await success_job(cell)) == job.job_id:
        want = committed  # past the point of no return: the abort completes the commit
    elif state == "renaming" and got == committed.dest:
        want = committed  # every file was in place (the journal's "renamed" not yet written)
    else:
        want = oracle.Expected(old, False)
    assert_listing(got, want.dest)
    await check_final(cell, want, job)
    left = await temp_leftovers(cell)
    assert left == [], f"after n={n}: {[relative_to(p, cell.dest) for p in left]}"
    await check_outside(cell)
    return not killed


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("backend", "way"),
    # the ADLS Gen2 server for the directory in the way only (suite budget): moving its
    # files aside and restoring them relies on the store's renames creating parents; the
    # file in the way takes the path the matrix's way-file kill scenarios cover there
    [("local", "file"), ("local", "dir"), ("dfs", "dir")],
)
def test_overwrite_with_something_in_the_way_killed_after_every_request(
    backend: str, way: str, request: pytest.FixtureRequest
) -> None:
    info: dict[str, Any] = request.getfixturevalue("matrix_" + backend)
    sdk_list = request.getfixturevalue("matrix_sdk_list")(backend, info)
    sc = BY_NAME[f"way-{way}-overwrite"]

    async def go() -> None:
        store = open_store(info)
        async with store:
            n = 1
            while True:
                done = await _killed_then(Cell(sc, backend, info, store, sdk_list), n, "resume")
                await _killed_then(Cell(sc, backend, info, store, sdk_list), n, "abort")
                if done:
                    break
                n += 1
            assert n > MIN_REQUESTS[way], n

    anyio.run(go)
