"""A job commit really killed (SIGKILL, in a subprocess) at each stage boundary, and in
the middle of a batch of local renames (right after any rename system call), then resumed
by commit_job or undone by abort_job: the destination is always exact."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.paths import join
from amcommit.store.local import LocalStore
from tests.engine.helpers import run_task, snapshot, temp_files
from tests.forkrun import run_module

JOB = "202611220002_0001"
OLD = {"p=1/same.parquet": b"old same", "p=1/old.parquet": b"old 1", "p=2/old.parquet": b"old 2"}
NEW = {"p=1/same.parquet": b"new same"} | {
    f"p={i % 3}/new-{i}.parquet": f"new {i}".encode() for i in range(8)
}

# (kill point, past the point of no return?)
POINTS = [
    ("load_manifests:end", False),
    ("check_conflicts:end", False),
    ("prepare_dirs:end", False),
    ("rename_files:progress:1", False),
    ("rename_files:progress:5", False),
    # every file renamed, the journal not yet "renamed": abort finds them all in place and
    # completes the commit (a commit whose renames are all done is never rolled back)
    ("rename_files:end", True),
    ("delete_victims:start", True),
    ("delete_victims:end", True),
    ("save_success:end", True),
    ("cleanup:start", True),
]


async def prepare(tmp_path: Path) -> tuple[LocalStore, str]:
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "warehouse/table one"
    for p, d in OLD.items():
        await store.put(join(dest, p), d)
    layout = await setup_job(store, dest, JOB)
    items = list(NEW.items())
    await run_task(store, layout, 0, dict(items[:4]))
    await run_task(store, layout, 1, dict(items[4:]))
    return store, dest


def kill_at(store: LocalStore, dest: str, point: str, batch: int | None = None) -> None:
    args = [store.root, dest, JOB, "overwrite", point, *([] if batch is None else [str(batch)])]
    proc = run_module("tests.engine.kill_child", args)  # forked (tests/forkrun.py), SIGKILLed
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


BATCHES = [pytest.param(None, id="batched"), pytest.param(1, id="one-by-one")]
"""The default (local renames in batches) and file-by-file renames (``rename_batch_size=1``,
the path of every other store)."""


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize(("point", "past_no_return"), POINTS)
async def test_killed_then_resumed(
    tmp_path: Path, point: str, past_no_return: bool, batch: int | None
) -> None:
    store, dest = await prepare(tmp_path)
    kill_at(store, dest, point, batch)
    report = await commit_job(store, dest, JOB, config=CommitterConfig(conflict_mode="overwrite"))
    assert report.success
    assert await snapshot(store, dest) == NEW
    assert await temp_files(store, dest) == []


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize(("point", "past_no_return"), POINTS)
async def test_killed_then_aborted(
    tmp_path: Path, point: str, past_no_return: bool, batch: int | None
) -> None:
    store, dest = await prepare(tmp_path)
    kill_at(store, dest, point, batch)
    if batch is None and point == "rename_files:progress:5":
        past_no_return = True  # a batch per task (4 files, then 5): 5 done means all 9 are
    await abort_job(store, dest, JOB)
    # before the point of no return, abort restores the old data exactly; after it, abort
    # completes the commit (the old data is already partly deleted by design)
    assert await snapshot(store, dest) == (NEW if past_no_return else OLD)
    assert await temp_files(store, dest) == []
    await abort_job(store, dest, JOB)  # idempotent
    assert await snapshot(store, dest) == (NEW if past_no_return else OLD)


# -- killed inside a batch of renames ---------------------------------------------------

BIG = {f"p={i % 4}/big-{i:04d}.parquet": f"big {i}".encode() for i in range(600)} | {
    "p=1/same.parquet": b"new same"
}
"""601 files in 3 tasks of ~200: with batches of 64, 4 batches per task, the last short."""
SYSCALLS = [1, 2, 63, 64, 65, 200, 202, 203, 450, 601, 602]
"""Kill right after the N-th rename system call: 602 in all. ``p=1/same.parquet`` is taken
(an old file): its forward rename fails in its batch, and after that batch the old file is
moved aside (one rename) and the new one renamed (another)."""


async def prepare_big(tmp_path: Path) -> tuple[LocalStore, str]:
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "warehouse/big"
    for p, d in OLD.items():
        await store.put(join(dest, p), d)
    layout = await setup_job(store, dest, JOB)
    items = list(BIG.items())
    for t in range(3):
        await run_task(store, layout, t, dict(items[t * 200 : (t + 1) * 200 + (1 if t == 2 else 0)]))
    return store, dest


async def assert_cut_after(store: LocalStore, dest: str, n: int) -> None:
    """The killed commit had renamed exactly what its first ``n`` rename calls did."""
    now = await snapshot(store, dest)
    published = {k for k, v in now.items() if BIG.get(k) == v}
    moved_aside = now.get("p=1/same.parquet") != b"old same"
    assert len(published) + moved_aside == n
    assert {k: v for k, v in now.items() if k not in published} == {
        k: v for k, v in OLD.items() if not (moved_aside and k == "p=1/same.parquet")
    }


@pytest.mark.parametrize("n", SYSCALLS)
async def test_killed_inside_a_batch_then_resumed(tmp_path: Path, n: int) -> None:
    store, dest = await prepare_big(tmp_path)
    kill_at(store, dest, f"renameat2:{n}", 64)
    await assert_cut_after(store, dest, n)
    report = await commit_job(store, dest, JOB, config=CommitterConfig(conflict_mode="overwrite"))
    assert report.success and report.resumed
    assert report.files == len(BIG)
    assert await snapshot(store, dest) == BIG
    assert await temp_files(store, dest) == []


@pytest.mark.parametrize("n", SYSCALLS)
async def test_killed_inside_a_batch_then_aborted(tmp_path: Path, n: int) -> None:
    store, dest = await prepare_big(tmp_path)
    kill_at(store, dest, f"renameat2:{n}", 64)
    await assert_cut_after(store, dest, n)
    await abort_job(store, dest, JOB)
    # every rename done, the journal not yet "renamed": abort completes the commit
    expected = BIG if n == 602 else OLD
    assert await snapshot(store, dest) == expected
    assert await temp_files(store, dest) == []
    await abort_job(store, dest, JOB)  # idempotent
    assert await snapshot(store, dest) == expected
