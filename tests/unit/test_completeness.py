"""Completeness of a job committed from the store alone (issue 11 item 5): a Spark job the
driver never began to commit, or a job with fewer task manifests than recorded at setup,
is refused before anything changes; ``allow_partial`` / ``--allow-partial`` override; a
commit the driver began (journal present) resumes; a Hadoop job directory is committed
with a note that completeness could not be checked."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from amcommit.api import commit_job, setup_job
from amcommit.cli import main
from amcommit.committer.completeness import JobMarker, check_completeness, parse_marker
from amcommit.committer.layout import JobLayout
from amcommit.errors import IncompleteJob, PermissionDenied
from amcommit.manifest import TaskManifest
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import run_task, snapshot

JOB = "202611230001_0005"


def test_check_completeness_rules() -> None:
    assert check_completeness(JobMarker(expected_tasks=4), 4, False).startswith("complete: 4 task manifests")
    with pytest.raises(IncompleteJob, match=r"3 task manifests found, 4 expected.*--allow-partial"):
        check_completeness(JobMarker(expected_tasks=4), 3, False)
    with pytest.raises(IncompleteJob, match="5 task manifests found, 4 expected"):
        check_completeness(JobMarker(origin="spark", expected_tasks=4), 5, False)
    assert "PARTIAL" in check_completeness(JobMarker(expected_tasks=4), 3, True)
    with pytest.raises(IncompleteJob, match=r"set up by Spark.*3 task manifests present.*--allow-partial"):
        check_completeness(JobMarker(origin="spark"), 3, False)
    assert "allowed partial" in check_completeness(JobMarker(origin="spark"), 3, True)
    assert "Hadoop job directory" in check_completeness(JobMarker(hadoop=True), 2, False)
    assert check_completeness(JobMarker(origin="api"), 2, False).startswith("not checked")
    assert parse_marker(b'{"jobId": "j", "origin": "spark", "expectedTasks": 3}') == JobMarker("spark", 3)
    assert parse_marker(b'{"jobId": "j", "created": 1.0}') == JobMarker()  # markers before this change
    assert parse_marker(b"not json", hadoop=True) == JobMarker(hadoop=True)


def _prepare(tmp_path: Path, n_tasks: int, **setup: object) -> tuple[Path, list[TaskManifest]]:
    """``n_tasks`` committed tasks of a job set up with ``setup`` (origin, expected_tasks)."""
    dest = tmp_path / "out"
    manifests: list[TaskManifest] = []

    async def go() -> None:
        store = LocalStore("/")
        layout = await setup_job(store, str(dest).lstrip("/"), JOB, **setup)  # type: ignore[arg-type]
        for i in range(n_tasks):
            m = await run_task(store, layout, i, {f"p={i}/part-{i}.bin": b"x" * (i + 1)})
            assert m is not None
            manifests.append(m)

    anyio.run(go)
    return dest, manifests


def _listing(dest: Path) -> list[str]:
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())


def test_spark_job_refused_by_commit_job_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest, _ = _prepare(tmp_path, 3, origin="spark")
    before = _listing(dest)
    assert main(["commit-job", str(dest), "--job-id", JOB, "-q"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "3 task manifests present" in err and "--allow-partial" in err
    assert _listing(dest) == before  # nothing published, nothing deleted
    assert main(["commit-job", str(dest), "--job-id", JOB, "-q", "--allow-partial"]) == 0
    out = capsys.readouterr().out
    assert "committed 3 files" in out and "completeness: not checked (allowed partial)" in out
    assert (dest / "p=2" / "part-2.bin").read_bytes() == b"xxx"


def test_expected_task_count_checked(tmp_path: Path) -> None:
    dest, _ = _prepare(tmp_path, 3, expected_tasks=4)
    rel = str(dest).lstrip("/")
    store = LocalStore("/")
    before = _listing(dest)
    with pytest.raises(IncompleteJob, match="3 task manifests found, 4 expected"):
        anyio.run(lambda: commit_job(store, rel, JOB))
    assert _listing(dest) == before
    report = anyio.run(lambda: commit_job(store, rel, JOB, allow_partial=True))
    assert report.success and report.files == 3 and report.completeness is not None
    assert report.completeness.startswith("PARTIAL")


def test_complete_count_and_driver_given_manifests_pass(tmp_path: Path) -> None:
    dest, _ = _prepare(tmp_path, 2, expected_tasks=2, origin="spark")
    report = anyio.run(lambda: commit_job(LocalStore("/"), str(dest).lstrip("/"), JOB))
    assert report.success and report.completeness == "complete: 2 task manifests of 2 expected"

    dest2, manifests = _prepare(tmp_path / "b", 2, origin="spark")
    report = anyio.run(lambda: commit_job(LocalStore("/"), str(dest2).lstrip("/"), JOB, manifests=manifests))
    assert report.success and report.completeness is None  # the driver knows: not checked


def test_resume_of_a_commit_the_driver_began(tmp_path: Path) -> None:
    dest, manifests = _prepare(tmp_path, 2, origin="spark")
    rel = str(dest).lstrip("/")
    store = LocalStore("/")
    faulty = FaultyStore(store, seed=0)
    faulty.fail("rename", error=PermissionDenied, path="*.bin")  # the driver's commit fails midway
    with pytest.raises(PermissionDenied):
        anyio.run(lambda: commit_job(faulty, rel, JOB, manifests=manifests))
    assert (dest / "_temporary" / f"manifest_{JOB}" / "journal.json").exists()
    report = anyio.run(lambda: commit_job(store, rel, JOB))  # commit-job resumes: allowed
    assert report.success and report.files == 2
    assert report.completeness is not None and report.completeness.startswith("resumed")


def test_hadoop_job_directory_says_not_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "out"
    store = LocalStore("/")
    hadoop = JobLayout(str(dest).lstrip("/"), JOB, hadoop=True)

    async def hadoop_job() -> None:  # a job directory as Hadoop's committer lays it out
        await store.mkdirs(hadoop.manifests_dir)
        await store.mkdirs(hadoop.tasks_dir)
        await run_task(store, hadoop, 0, {"p=0/part-0.bin": b"x"})
        await run_task(store, hadoop, 1, {"p=1/part-1.bin": b"xx"})

    anyio.run(hadoop_job)
    assert main(["commit-job", str(dest), "--job-id", JOB, "-q"]) == 0
    out = capsys.readouterr().out
    assert "completeness: not checked: a Hadoop job directory does not record" in out
    assert anyio.run(lambda: snapshot(store, str(dest).lstrip("/"))) == {
        "p=0/part-0.bin": b"x",
        "p=1/part-1.bin": b"xx",
    }


def test_completeness_reads_are_retried(tmp_path: Path) -> None:
    """The journal stat, marker read and manifest listing of the completeness check go
    through the engine's retry layer: one throttled answer each does not fail the commit
    before it starts (it did: ``Throttled: list .../manifests``, matrix throttle-store)."""
    dest, _ = _prepare(tmp_path, 2, expected_tasks=2)
    job_dir = f"*/_temporary/manifest_{JOB}"
    faulty = FaultyStore(LocalStore("/"), seed=0)
    stat = faulty.throttle("stat", retry_after=0.0, path=f"{job_dir}/journal.json", count=1)
    get = faulty.throttle("get", retry_after=0.0, path=f"{job_dir}/_job.json", count=1)
    listing = faulty.throttle("list", retry_after=0.0, path=f"{job_dir}/00/manifests", count=1)
    report = anyio.run(lambda: commit_job(faulty, str(dest).lstrip("/"), JOB))
    assert report.success and report.completeness == "complete: 2 task manifests of 2 expected"
    assert (stat.fired, get.fired, listing.fired) == (1, 1, 1)


def test_partial_allowed_knows_only_the_overridden_notes() -> None:
    """``partial_allowed`` (the table commit refuses a labelled write committed so) is true
    exactly for the notes of a refusal that ``allow_partial`` overrode."""
    from amcommit.committer.completeness import partial_allowed

    overridden = [
        check_completeness(JobMarker(expected_tasks=1), 0, True),
        check_completeness(JobMarker(origin="spark"), 2, True),
    ]
    fine = [
        check_completeness(JobMarker(expected_tasks=1), 1, True),
        check_completeness(JobMarker(origin="api"), 0, True),
        check_completeness(JobMarker(hadoop=True), 3, True),
        "resumed: the commit was begun with its authorised manifests",
        None,
    ]
    assert [partial_allowed(n) for n in overridden] == [True, True], overridden
    assert [partial_allowed(n) for n in fine] == [False] * len(fine), fine
