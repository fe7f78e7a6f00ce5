"""What zombie task attempts leave after their job is over (issue 37,
:mod:`amcommit.committer.leftovers`): the next plain commit or abort into the destination,
and ``amcommit jobs --remove-leftovers``, delete it; a live job's directory (a marker, a
journal, the lock, Hadoop's layout, a marker being created) is never touched. On local
files (directories) and Azurite (flat blobs), with exact listings and bytes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import pytest

from amcommit.api import abort_job, commit_job, remove_leftovers, setup_job
from amcommit.committer.journal import Journal
from amcommit.committer.layout import JobLayout
from amcommit.committer.lock import LockBody, lock_path
from amcommit.committer.task import build_manifest
from amcommit.manifest import encode_json
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task, snapshot, task_ids

BACKENDS = ["backend_local", "backend_blob_azurite"]


@pytest.fixture(params=BACKENDS)
def two(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def zombie_after_abort(store: Store, dest: str, *jobs: str) -> None:
    """Each job of ``jobs`` (default ``gone``) is set up, one task commits, the job is
    aborted; then an attempt still running (it passed its last check just before the
    abort) sets up, writes files and publishes its task's manifest, and is killed before
    its task commit's check of the job marker (which would take the manifest back): the
    job directory is back, without its marker."""
    layouts = []
    for job in jobs or ("gone",):
        layout = await setup_job(store, dest, job, origin="spark")
        await run_task(store, layout, 0, {"cat=b/part-0.parquet": b"task 0"})
        layouts.append(layout)
    for layout in layouts:
        await abort_job(store, dest, layout.job_id)
        assert not [i async for i in store.list(layout.job_dir, recursive=True)]
    for layout in layouts:
        files = {"cat=b/part-1.parquet": b"zombie", "cat=d/part-1.parquet": b"z"}
        await run_task(store, layout, 1, files, attempt=2, commit=False)
        task, attempt = task_ids(layout.job_id, 1, 2)
        manifest = await build_manifest(store, layout, task, attempt)
        await store.put(layout.manifest_path(task), encode_json(manifest))


async def live_jobs(store: Store, dest: str, *, locked: bool = False) -> None:
    """Job directories that must stay: a live job (marker; a committed task), a job whose
    marker is gone but whose journal is there (its commit's cleanup was cut short), Hadoop's
    layout (no marker of ours), a job directory whose marker is being created (its put's
    temporary object only); with ``locked``, a commit holding the lock that published the
    manifests Spark handed it into a job directory without a marker."""
    live = await setup_job(store, dest, "live")
    await run_task(store, live, 0, {"cat=b/live.parquet": b"live"})
    journaled = await setup_job(store, dest, "journaled")
    await run_task(store, journaled, 0, {"cat=b/j.parquet": b"j"})
    journal = Journal(job_id="journaled", state="committed", conflict_mode="append")
    await store.put(journaled.journal_path, msgspec.json.encode(journal))
    await store.delete(journaled.job_marker)
    hadoop = JobLayout(dest, "hjob", hadoop=True)
    await store.put(join(hadoop.task_attempt_dir("attempt_hjob_m_000000_0"), "part-0"), b"hadoop")
    await store.put(join(JobLayout(dest, "setting").job_dir, ".amcommit-tmp-0123"), b"{}")
    if locked:
        await store.put(
            join(JobLayout(dest, "locked").manifests_dir, "task_locked_m_000000-manifest.json"), b"{}"
        )
        body = LockBody(
            owner="locked", host="h", pid=1, acquired=time.time(), heartbeat=time.time(), token="t"
        )
        await store.put(lock_path(dest), msgspec.json.encode(body))


def without(files: dict[str, bytes], prefix: str) -> dict[str, bytes]:
    return {k: v for k, v in files.items() if not k.startswith(prefix)}


async def test_leftover_removed_by_next_commit(two: StoreUnderTest) -> None:
    store, dest = two.store, join(two.base, "dest")
    old = await setup_job(store, dest, "old")
    await run_task(store, old, 0, {"cat=a/old.parquet": b"old"})
    await commit_job(store, dest, "old")
    await zombie_after_abort(store, dest)
    await live_jobs(store, dest)
    before = await snapshot(store, dest, include_temp=True)
    assert sorted(k for k in before if k.startswith("_temporary/manifest_gone/")) == [
        "_temporary/manifest_gone/00/manifests/task_gone_m_000001-manifest.json",
        "_temporary/manifest_gone/00/task-attempts/attempt_gone_m_000001_2",
        "_temporary/manifest_gone/00/tasks/attempt_gone_m_000001_2/cat=b/part-1.parquet",
        "_temporary/manifest_gone/00/tasks/attempt_gone_m_000001_2/cat=d/part-1.parquet",
    ]

    nxt = await setup_job(store, dest, "next")
    await run_task(store, nxt, 0, {"cat=c/next.parquet": b"next"})
    report = await commit_job(store, dest, "next")
    assert report.success and report.files == 1
    after = await snapshot(store, dest, include_temp=True)
    assert after == {**without(before, "_temporary/manifest_gone/"), "cat=c/next.parquet": b"next"}
    assert json.loads(await store.get(join(dest, "_SUCCESS")))["jobId"] == "next"


async def test_leftover_removed_by_next_abort_live_lock_kept(two: StoreUnderTest) -> None:
    """An abort without a journal (no lock taken) sweeps too; a job directory the lock names
    stays, although it has neither marker nor journal."""
    store, dest = two.store, join(two.base, "dest")
    await zombie_after_abort(store, dest)
    await live_jobs(store, dest, locked=True)
    before = await snapshot(store, dest, include_temp=True)
    nxt = await setup_job(store, dest, "next")
    await run_task(store, nxt, 0, {"cat=c/next.parquet": b"next"})
    report = await abort_job(store, dest, "next")
    assert not report.success
    after = await snapshot(store, dest, include_temp=True)
    assert after == without(before, "_temporary/manifest_gone/")
    assert "_temporary/manifest_locked/00/manifests/task_locked_m_000000-manifest.json" in after


async def test_abort_of_a_gone_job_sweeps_other_leftovers(two: StoreUnderTest) -> None:
    """Aborting a job whose directory is gone (Spark's abort after a cleanup, or a retry)
    still removes what zombies of other finished jobs left."""
    store, dest = two.store, join(two.base, "dest")
    await zombie_after_abort(store, dest)
    await live_jobs(store, dest)
    before = await snapshot(store, dest, include_temp=True)
    await abort_job(store, dest, "never_there")
    assert await snapshot(store, dest, include_temp=True) == without(before, "_temporary/manifest_gone/")


async def test_remove_leftovers_says_what_it_removed_and_kept(two: StoreUnderTest) -> None:
    store, dest = two.store, join(two.base, "dest")
    await zombie_after_abort(store, dest, "gone", "gone2")
    await live_jobs(store, dest, locked=True)
    before = await snapshot(store, dest, include_temp=True)
    sweep = await remove_leftovers(store, dest)
    assert sorted(sweep.removed) == ["gone", "gone2"]
    assert sorted(sweep.kept) == ["journaled", "locked"]
    after = await snapshot(store, dest, include_temp=True)
    assert after == without(without(before, "_temporary/manifest_gone/"), "_temporary/manifest_gone2/")
    again = await remove_leftovers(store, dest)  # idempotent
    assert again.removed == [] and await snapshot(store, dest, include_temp=True) == after


async def test_commit_with_cleanup_skipped_keeps_leftovers(two: StoreUnderTest) -> None:
    """``cleanup_skipped`` (keep everything for inspection) keeps the leftovers too."""
    from amcommit.committer import CommitterConfig

    store, dest = two.store, join(two.base, "dest")
    await zombie_after_abort(store, dest)
    nxt = await setup_job(store, dest, "next")
    await run_task(store, nxt, 0, {"cat=c/next.parquet": b"next"})
    await commit_job(store, dest, "next", config=CommitterConfig(cleanup_skipped=True))
    files = await snapshot(store, dest, include_temp=True)
    assert "_temporary/manifest_gone/00/tasks/attempt_gone_m_000001_2/cat=b/part-1.parquet" in files


def test_cli_jobs_shows_and_removes_leftovers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import anyio

    from amcommit.cli.main import main

    dest = tmp_path / "dest"
    d = str(dest).lstrip("/")

    async def make() -> None:
        async with LocalStore("/") as store:
            await zombie_after_abort(store, d)
            await live_jobs(store, d)

    anyio.run(make)
    assert main(["jobs", str(dest), "--json"]) == 0
    states = {j["jobId"]: j["state"] for j in json.loads(capsys.readouterr().out)["jobs"]}
    assert states == {
        "gone": "leftover",
        "live": "set up",
        "hjob": "set up",
        "setting": "set up",  # its marker is being created: no job attempt directory yet
        "journaled": "committed",
    }
    before = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert main(["jobs", str(dest), "--remove-leftovers"]) == 0
    out = capsys.readouterr().out
    assert "removed what task attempts left after job gone was over" in out
    listed = out.split("was over\n", 1)[1]  # the listing after the removal
    assert "gone" not in listed and "leftover" not in listed and "live" in listed
    after = {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}
    assert after == {p for p in before if not p.startswith("_temporary/manifest_gone/")}
    assert not (dest / "_temporary" / "manifest_gone").exists()


class _MarkerAppears:
    """``store`` whose first read of the destination lock first creates ``marker``: a job
    set up (its marker put) while the sweep looks at its directory."""

    def __init__(self, store: Store, marker: str) -> None:
        self.inner, self.marker, self.done = store, marker, False

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def get(self, path: str) -> bytes:
        if path.endswith("/_commit.lock") and not self.done:
            self.done = True
            await self.inner.put(self.marker, b"{}")
        return await self.inner.get(path)


async def test_marker_created_during_the_sweep_keeps_the_directory(two: StoreUnderTest) -> None:
    """The marker is looked at again right before anything is deleted: a job directory whose
    marker appeared after the first look is kept whole."""
    store, dest = two.store, join(two.base, "dest")
    await zombie_after_abort(store, dest)
    marker = JobLayout(dest, "gone").job_marker
    appearing = _MarkerAppears(store, marker)
    before = await snapshot(store, dest, include_temp=True)
    sweep = await remove_leftovers(appearing, dest)  # type: ignore[arg-type]
    assert appearing.done and sweep.removed == [] and sweep.kept == ["gone"]
    after = await snapshot(store, dest, include_temp=True)
    assert after == {**before, "_temporary/manifest_gone/_job.json": b"{}"}
