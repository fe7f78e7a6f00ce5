"""A job commit really killed (SIGKILL, in a subprocess) at each stage boundary, then
resumed by commit_job or undone by abort_job: the destination is always exact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from amcommit.committer import CommitterConfig, abort_job, commit_job, setup_job
from amcommit.paths import join
from amcommit.store.local import LocalStore
from tests.engine.helpers import run_task, snapshot, temp_files

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


def kill_at(store: LocalStore, dest: str, point: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]), *sys.path]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.engine.kill_child", store.root, dest, JOB, "overwrite", point],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=str(Path(__file__).parents[2]),
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize(("point", "past_no_return"), POINTS)
async def test_killed_then_resumed(tmp_path: Path, point: str, past_no_return: bool) -> None:
    store, dest = await prepare(tmp_path)
    kill_at(store, dest, point)
    report = await commit_job(store, dest, JOB, config=CommitterConfig(conflict_mode="overwrite"))
    assert report.success
    assert await snapshot(store, dest) == NEW
    assert await temp_files(store, dest) == []


@pytest.mark.parametrize(("point", "past_no_return"), POINTS)
async def test_killed_then_aborted(tmp_path: Path, point: str, past_no_return: bool) -> None:
    store, dest = await prepare(tmp_path)
    kill_at(store, dest, point)
    await abort_job(store, dest, JOB)
    # before the point of no return, abort restores the old data exactly; after it, abort
    # completes the commit (the old data is already partly deleted by design)
    assert await snapshot(store, dest) == (NEW if past_no_return else OLD)
    assert await temp_files(store, dest) == []
    await abort_job(store, dest, JOB)  # idempotent
    assert await snapshot(store, dest) == (NEW if past_no_return else OLD)
