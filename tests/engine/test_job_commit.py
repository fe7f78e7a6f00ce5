"""The manifest committer protocol, end to end, on every engine backend.

Hadoop's test catalogue as a minimum, plus resume, rollback and overwrite guarantees.
"""

from __future__ import annotations

import json

import anyio
import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.committer.task import commit_task, setup_task
from amcommit.errors import CommitError, ConflictError, ManifestError, PermissionDenied, Transient
from amcommit.manifest import decode_success
from amcommit.paths import join, path_to_uri
from amcommit.store.base import PutMode, Store
from amcommit.testing.faults import FaultyStore
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task, snapshot, task_ids, temp_files

JOB = "202611220001_0001"


def dest_of(sut: StoreUnderTest, name: str = "dest") -> str:
    return join(sut.base, name)


async def success_of(sut: StoreUnderTest, dest: str) -> dict[str, object]:
    return json.loads(await sut.store.get(join(dest, "_SUCCESS")))  # type: ignore[no-any-return]


async def test_three_tasks_commit_completely(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    expected: dict[str, bytes] = {}
    for n in range(3):
        files = {f"part=a{n % 2}/part-{n:05d}.parquet": f"task {n}".encode(), f"top-{n}.txt": b"x" * n}
        expected.update(files)
        await run_task(s, layout, n, files)
    assert await snapshot(s, dest) == {}  # nothing visible before job commit
    report = await commit_job(s, dest, JOB)
    assert report.success and report.files == 5 + 1 and report.manifests == 3
    assert await snapshot(s, dest) == expected
    assert await temp_files(s, dest) == []
    success = decode_success(await s.get(join(dest, "_SUCCESS")))
    assert success.success and success.job_id == JOB and success.metrics["files"] == 6
    assert len(success.filenames) == 6 and all(f.startswith(s.root_uri) for f in success.filenames)


async def test_later_attempt_wins(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"a.txt": b"attempt 0", "only-in-0.txt": b"0"}, attempt=0)
    await run_task(s, layout, 0, {"a.txt": b"attempt 1"}, attempt=1)
    await commit_job(s, dest, JOB)
    assert await snapshot(s, dest) == {"a.txt": b"attempt 1"}
    assert await temp_files(s, dest) == []


async def test_aborted_and_failed_attempts_never_visible(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"aborted.txt": b"no"}, attempt=0, abort=True)
    await run_task(s, layout, 0, {"failed.txt": b"no"}, attempt=1, commit=False)
    await run_task(s, layout, 0, {"good.txt": b"yes"}, attempt=2)
    await commit_job(s, dest, JOB)
    assert await snapshot(s, dest) == {"good.txt": b"yes"}
    assert await temp_files(s, dest) == []


async def test_task_with_no_output_and_job_with_no_tasks(engine_sut: StoreUnderTest) -> None:
    s = engine_sut.store
    d1 = dest_of(engine_sut, "one")
    layout = await setup_job(s, d1, JOB)
    m = await run_task(s, layout, 0, {})
    assert m is not None and m.files == []
    r = await commit_job(s, d1, JOB)
    assert r.success and r.files == 0
    d2 = dest_of(engine_sut, "two")
    await setup_job(s, d2, JOB)
    r2 = await commit_job(s, d2, JOB)
    assert r2.success and r2.manifests == 0
    assert (await success_of(engine_sut, d2))["success"] is True


async def test_abort_task_then_job_leaves_destination_empty(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"a": b"1"}, abort=True)
    await run_task(s, layout, 1, {"b": b"2"})
    await abort_job(s, dest, JOB)
    await abort_job(s, dest, JOB)  # idempotent
    assert await snapshot(s, dest) == {}
    assert await temp_files(s, dest) == []
    with pytest.raises(CommitError):
        await commit_job(s, dest, JOB)  # nothing left to commit


async def test_duplicate_task_commit_and_idempotent_abort_task(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    task, ta = task_ids(JOB, 0)
    work = await setup_task(s, layout, ta)
    await s.put(join(work, "f"), b"data")
    await commit_task(s, layout, task, ta)
    await commit_task(s, layout, task, ta)  # committed twice: same manifest
    await commit_job(s, dest, JOB)
    assert await snapshot(s, dest) == {"f": b"data"}


async def test_repeated_setup_fails(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    with pytest.raises(CommitError, match="already set up"):
        await setup_job(s, dest, JOB)
    _, ta = task_ids(JOB, 0)
    await setup_task(s, layout, ta)
    with pytest.raises(CommitError, match="already set up"):
        await setup_task(s, layout, ta)


async def test_concurrent_jobs_into_one_destination(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    jobs = ["202611220001_0001", "202611220001_0002"]
    layouts = [await setup_job(s, dest, j) for j in jobs]
    for i, layout in enumerate(layouts):
        await run_task(s, layout, 0, {f"job{i}/part-0": f"job {i}".encode()})
    await commit_job(s, dest, jobs[0])
    # job 1's temporary data is untouched by job 0's commit and cleanup
    assert await snapshot(s, dest) == {"job0/part-0": b"job 0"}
    assert await temp_files(s, dest) != []
    await commit_job(s, dest, jobs[1])
    assert await snapshot(s, dest) == {"job0/part-0": b"job 0", "job1/part-0": b"job 1"}
    assert await temp_files(s, dest) == []


@pytest.mark.parametrize("name", ["with space", "ünïcødé", "pct%25done", "plus+sign", "hash#tag"])
async def test_destination_with_special_characters(engine_sut: StoreUnderTest, name: str) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut, f"out {name}")
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {f"{name}/file {name}.txt": name.encode()})
    await commit_job(s, dest, JOB)
    assert await snapshot(s, dest) == {f"{name}/file {name}.txt": name.encode()}


async def test_many_tasks(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    ntasks, nfiles = (1000, 20) if engine_sut.name in ("local", "faulty(local)") else (50, 4)
    layout = await setup_job(s, dest, JOB)
    expected = {}

    async def task(n: int) -> None:
        files = {f"p={n % 7}/part-{n:05d}-{i:02d}": f"{n}/{i}".encode() for i in range(nfiles)}
        expected.update(files)
        await run_task(s, layout, n, files)

    async with anyio.create_task_group() as tg:
        for n in range(ntasks):
            tg.start_soon(task, n)
    report = await commit_job(s, dest, JOB, config=CommitterConfig(io_threads=32))
    assert report.files == ntasks * nfiles
    got = await snapshot(s, dest)
    assert got == expected


async def test_corrupt_and_foreign_manifests_rejected_before_any_rename(engine_sut: StoreUnderTest) -> None:
    s = engine_sut.store
    cases = {
        "garbage": b"{not json",
        "wrong type": None,
        "foreign job": None,
        "outside dest": None,
        "negative size": None,
    }
    for i, case in enumerate(cases):
        dest = dest_of(engine_sut, f"case{i}")
        layout = await setup_job(s, dest, JOB)
        await run_task(s, layout, 0, {"good.txt": b"good"})
        m = await run_task(s, layout, 1, {"other.txt": b"other"})
        assert m is not None
        if case == "garbage":
            data = b"{not json"
        else:
            if case == "wrong type":
                m.type = "org.example.NotAManifest/1"
            elif case == "foreign job":
                m.job_id = "someone_else"
            elif case == "outside dest":
                m.files[0].dest = s.root_uri + join(sut_base(engine_sut), "elsewhere.txt")
            elif case == "negative size":
                m.files[0].size = -1
            from amcommit.manifest import encode_json

            data = encode_json(m)
        await s.put(layout.manifest_path(m.task_id), data, mode=PutMode.OVERWRITE)
        with pytest.raises(ManifestError):
            await commit_job(s, dest, JOB)
        assert await snapshot(s, dest) == {}, case


def sut_base(sut: StoreUnderTest) -> str:
    return sut.base


async def test_duplicate_destinations_across_tasks(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"same.txt": b"0", "a": b"a"})
    await run_task(s, layout, 1, {"same.txt": b"1", "b": b"b"})
    with pytest.raises(ManifestError, match=r"same\.txt"):
        await commit_job(s, dest, JOB)
    assert await snapshot(s, dest) == {}


async def test_rename_failures_then_resume(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    expected = {}
    for n in range(4):
        files = {f"f{n}-{i}": f"{n}{i}".encode() for i in range(5)}
        expected.update(files)
        await run_task(s, layout, n, files)
    faulty = FaultyStore(s, seed=3)
    faulty.fail("rename", error=Transient, path=f"{dest}/_temporary/*", after=7)  # every later one
    cfg = CommitterConfig(rename_attempts=2, retry_base_delay=0.001, retry_max_delay=0.002, io_threads=4)
    with pytest.raises(Transient):
        await commit_job(faulty, dest, JOB, config=cfg)
    partial = await snapshot(s, dest)
    assert 0 < len(partial) < len(expected)
    report = await commit_job(s, dest, JOB)
    assert report.resumed and report.success
    assert await snapshot(s, dest) == expected
    assert report.recovered_renames == 0 or report.recovered_renames <= len(partial)
    assert await temp_files(s, dest) == []


async def test_rename_failures_then_abort_rolls_back(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    await s.put(join(dest, "existing.txt"), b"old")
    layout = await setup_job(s, dest, JOB)
    for n in range(3):
        await run_task(s, layout, n, {f"new{n}-{i}": b"n" for i in range(4)})
    faulty = FaultyStore(s, seed=3)
    faulty.fail("rename", error=Transient, path=f"{dest}/_temporary/*", after=5)
    cfg = CommitterConfig(rename_attempts=1, io_threads=2)
    with pytest.raises(Transient):
        await commit_job(faulty, dest, JOB, config=cfg)
    await abort_job(s, dest, JOB)
    assert await snapshot(s, dest) == {"existing.txt": b"old"}
    assert await temp_files(s, dest) == []


async def test_lost_rename_responses_are_recovered(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    expected = {f"f{i}": f"content {i}".encode() for i in range(12)}
    await run_task(s, layout, 0, expected)
    faulty = FaultyStore(s, seed=5)
    faulty.lose_response("rename", path=f"{dest}/_temporary/*/tasks/*", probability=0.5)
    report = await commit_job(faulty, dest, JOB, config=CommitterConfig(retry_base_delay=0.001))
    # a retried rename may lose its (recovered) answer again: count files, not injections
    files_hit = {paths[1] for kind, op, paths in faulty.events if kind == "lost_response"}
    assert report.recovered_renames == len(files_hit) > 0
    assert await snapshot(s, dest) == expected
    success = await success_of(engine_sut, dest)
    assert success["metrics"]["recovered_renames"] == report.recovered_renames  # type: ignore[index]


async def test_throttling_storm_still_exact(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    expected = {f"f{i}": bytes([i]) for i in range(40)}
    await run_task(s, layout, 0, expected)
    faulty = FaultyStore(s, seed=9)
    faulty.throttle(["rename", "stat", "mkdirs"], retry_after=0.001, probability=0.3)
    report = await commit_job(faulty, dest, JOB, config=CommitterConfig(retry_base_delay=0.001))
    assert report.success and await snapshot(s, dest) == expected
    assert report.job_stats.counters.get("store_io_throttled", 0) > 0


NEW_FILES = {f"p=1/n{i}": b"new" for i in range(10)} | {"p=1/clash.txt": b"new"}


async def _append_conflict(engine_sut: StoreUnderTest) -> tuple[Store, str, str]:
    """An append commit meets an existing file: it fails, rolls back, keeps the job."""
    s, dest = engine_sut.store, dest_of(engine_sut)
    await s.put(join(dest, "p=1/clash.txt"), b"old")
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, NEW_FILES)
    with pytest.raises(ConflictError) as err:
        await commit_job(s, dest, JOB, config=CommitterConfig(io_threads=2))
    assert await snapshot(s, dest) == {"p=1/clash.txt": b"old"}
    assert await s.get(join(dest, "p=1/clash.txt")) == b"old"
    # the job is kept (task output, manifest), the failed commit's journal is not
    left = await temp_files(s, dest)
    assert any(p.endswith("-manifest.json") for p in left), left
    assert not any(p.endswith("journal.json") or "/trash/" in p for p in left), left
    return s, dest, str(err.value)


async def test_append_conflict_rolls_back_and_keeps_the_job(engine_sut: StoreUnderTest) -> None:
    s, dest, msg = await _append_conflict(engine_sut)
    uri = path_to_uri(s.root_uri, join(dest, "p=1/clash.txt"))
    assert f"destination {uri!r} already exists" in msg
    assert "--mode replace" in msg and f"--job-id {JOB}" in msg and "abort-job" in msg
    # committed again in another mode, the same job now succeeds
    cfg = CommitterConfig(conflict_mode="replace", validate_output=True)
    report = await commit_job(s, dest, JOB, config=cfg)
    assert report.success
    assert await snapshot(s, dest) == NEW_FILES
    assert await temp_files(s, dest) == []


async def test_append_conflict_then_abort(engine_sut: StoreUnderTest) -> None:
    s, dest, _ = await _append_conflict(engine_sut)
    await abort_job(s, dest, JOB)
    assert await snapshot(s, dest) == {"p=1/clash.txt": b"old"}
    assert await temp_files(s, dest) == []


async def test_delete_target_files_replaces_same_names(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    await s.put(join(dest, "clash.txt"), b"old")
    await s.put(join(dest, "keep.txt"), b"keep")
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"clash.txt": b"new"})
    await commit_job(s, dest, JOB, config=CommitterConfig(delete_target_files=True))
    assert await snapshot(s, dest) == {"clash.txt": b"new", "keep.txt": b"keep"}


async def test_conflict_mode_fail(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    await s.put(join(dest, "p=1/old"), b"old")
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"p=1/new": b"new", "p=2/new": b"new"})
    with pytest.raises(ConflictError, match="p=1"):
        await commit_job(s, dest, JOB, config=CommitterConfig(conflict_mode="fail"))
    assert await snapshot(s, dest) == {"p=1/old": b"old"}
    # an empty partition is fine
    d2 = dest_of(engine_sut, "d2")
    await s.put(join(d2, "p=9/old"), b"old")
    l2 = await setup_job(s, d2, JOB)
    await run_task(s, l2, 0, {"p=1/new": b"new"})
    await commit_job(s, d2, JOB, config=CommitterConfig(conflict_mode="fail"))
    assert await snapshot(s, d2) == {"p=9/old": b"old", "p=1/new": b"new"}


async def test_overwrite_replaces_everything(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    for p in ("p=1/old-a", "p=2/old-b", "top-old", "p=1/same-name"):
        await s.put(join(dest, p), b"old")
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"p=1/new": b"new", "p=1/same-name": b"new"})
    report = await commit_job(s, dest, JOB, config=CommitterConfig(conflict_mode="overwrite"))
    assert await snapshot(s, dest) == {"p=1/new": b"new", "p=1/same-name": b"new"}
    assert report.victims_deleted == 3 and report.moved_aside == 1


async def test_replace_keeps_untouched_partitions(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    for p in ("p=1/old-a", "p=2/old-b", "p=2/sub/old-c"):
        await s.put(join(dest, p), b"old")
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"p=1/new": b"new", "p=3/new": b"new"})
    await commit_job(s, dest, JOB, config=CommitterConfig(conflict_mode="replace"))
    assert await snapshot(s, dest) == {
        "p=1/new": b"new",
        "p=2/old-b": b"old",
        "p=2/sub/old-c": b"old",
        "p=3/new": b"new",
    }


async def test_failed_overwrite_never_loses_the_old_data(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    old = {"p=1/a": b"old a", "p=1/same": b"old same", "p=2/b": b"old b"}
    for p, d in old.items():
        await s.put(join(dest, p), d)
    layout = await setup_job(s, dest, JOB)
    new = {"p=1/same": b"new same"} | {f"p=1/n{i}": b"new" for i in range(8)}
    await run_task(s, layout, 0, new)
    faulty = FaultyStore(s, seed=2)
    faulty.fail("rename", error=Transient, path=f"{dest}/_temporary/*", after=4)
    with pytest.raises(Transient):
        await commit_job(
            faulty,
            dest,
            JOB,
            config=CommitterConfig(conflict_mode="overwrite", rename_attempts=1, io_threads=1),
        )
    during = await snapshot(s, dest)
    # every old file is still there (in place or moved aside in the job's trash)
    assert set(old) - {"p=1/same"} <= set(during)
    await abort_job(s, dest, JOB)
    assert await snapshot(s, dest) == old
    assert await temp_files(s, dest) == []


async def test_source_changed_after_task_commit(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    m = await run_task(s, layout, 0, {f"f{i}": b"v1" for i in range(5)})
    assert m is not None
    if not m.files[0].etag:
        pytest.skip("store records no etags")
    _, ta = task_ids(JOB, 0)
    await s.put(join(layout.task_attempt_dir(ta), "f3"), b"changed!")
    with pytest.raises(CommitError, match="changed"):
        await commit_job(s, dest, JOB, config=CommitterConfig(io_threads=1))
    assert await snapshot(s, dest) == {}


async def test_validate_output_and_summary_report(engine_sut: StoreUnderTest, tmp_path: object) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"a": b"aa", "b": b"bbb"})
    cfg = CommitterConfig(validate_output=True, summary_report_directory=str(tmp_path))
    report = await commit_job(s, dest, JOB, config=cfg)
    assert "validate_output" in report.stage_seconds
    summary = json.loads((tmp_path / f"summary-{JOB}.json").read_text())  # type: ignore[operator]
    assert summary["success"] is True and summary["metrics"]["files"] == 2


async def test_summary_written_when_commit_fails(engine_sut: StoreUnderTest, tmp_path: object) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"x": b"1"})
    await run_task(s, layout, 1, {"x": b"2"})
    cfg = CommitterConfig(summary_report_directory=str(tmp_path))
    with pytest.raises(ManifestError):
        await commit_job(s, dest, JOB, config=cfg)
    summary = json.loads((tmp_path / f"summary-{JOB}.json").read_text())  # type: ignore[operator]
    assert summary["success"] is False and "ManifestError" in summary["diagnostics"]["exception"]


async def test_commit_again_after_success_is_a_no_op(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"a": b"1"})
    r1 = await commit_job(s, dest, JOB)
    r2 = await commit_job(s, dest, JOB)
    assert r2.success and r2.files == r1.files == 1
    assert await snapshot(s, dest) == {"a": b"1"}


async def test_job_layout_paths() -> None:
    ours = JobLayout("d", "j1", 0)
    assert ours.manifests_dir == "d/_temporary/manifest_j1/00/manifests"
    assert ours.task_attempt_dir("attempt_x_0") == "d/_temporary/manifest_j1/00/tasks/attempt_x_0"
    assert JobLayout("d", "j1", 3, hadoop=True).attempt_dir == "d/_temporary/j1/03"


async def test_cleanup_failure_after_commit(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    await run_task(s, layout, 0, {"a": b"1"})
    faulty = FaultyStore(s, seed=1)
    faulty.fail("delete", error=PermissionDenied, path=f"{dest}/_temporary/*")
    with pytest.raises(CommitError, match="output is committed"):
        await commit_job(faulty, dest, JOB)
    assert await snapshot(s, dest) == {"a": b"1"}
    assert (await success_of(engine_sut, dest))["success"] is True
    report = await commit_job(s, dest, JOB)  # finishes the cleanup
    assert report.success and await temp_files(s, dest) == []
    # with cleanup failures ignored, the commit reports instead of raising
    d2 = dest_of(engine_sut, "d2")
    l2 = await setup_job(s, d2, JOB)
    await run_task(s, l2, 0, {"b": b"2"})
    f2 = FaultyStore(s, seed=1)
    f2.fail("delete", error=PermissionDenied, path=f"{d2}/_temporary/*")
    r2 = await commit_job(f2, d2, JOB, config=CommitterConfig(cleanup_failures_ignored=True))
    assert r2.success and r2.error and "cleanup failed" in r2.error


async def test_given_manifests_are_published_so_a_resume_commits_exactly_them(
    engine_sut: StoreUnderTest,
) -> None:
    """commit_job(manifests=...) (what Spark's driver does): the published manifests on
    the store are made exactly the given ones before anything is renamed, so a resume from
    the store after a failure commits the same files (not the last attempt's, not a task
    outside the job)."""
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    authorised = await run_task(s, layout, 0, {"a.txt": b"attempt 0", "only-in-0.txt": b"0"}, attempt=0)
    await run_task(s, layout, 0, {"a.txt": b"attempt 1 (denied)"}, attempt=1)  # published last
    m1 = await run_task(s, layout, 1, {f"b{i}.txt": b"b" for i in range(6)})
    await run_task(s, layout, 2, {"not-in-the-job.txt": b"no"})
    assert authorised is not None and m1 is not None
    faulty = FaultyStore(s, seed=5)
    faulty.fail("rename", error=Transient, path=f"{dest}/_temporary/*", after=3)
    cfg = CommitterConfig(rename_attempts=1, io_threads=1)
    with pytest.raises(Transient):
        await commit_job(faulty, dest, JOB, config=cfg, manifests=[authorised, m1])
    report = await commit_job(s, dest, JOB)  # resumed from what the store holds
    assert report.resumed and report.success
    assert await snapshot(s, dest) == {"a.txt": b"attempt 0", "only-in-0.txt": b"0"} | {
        f"b{i}.txt": b"b" for i in range(6)
    }
    assert await temp_files(s, dest) == []


async def test_given_manifests_already_published_are_not_rewritten(engine_sut: StoreUnderTest) -> None:
    s, dest = engine_sut.store, dest_of(engine_sut)
    layout = await setup_job(s, dest, JOB)
    ms = [await run_task(s, layout, n, {f"f{n}.txt": b"x"}) for n in range(3)]
    given = [m for m in ms if m is not None]
    report = await commit_job(s, dest, JOB, manifests=given)
    assert report.success and report.files == 3
    assert report.job_stats.counters.get("committer_manifests_republished", 0) == 0
    with pytest.raises(ManifestError, match="3 manifests but 2 manifest etags"):
        await commit_job(s, dest_of(engine_sut, "other"), JOB, manifests=given, manifest_etags=[None, None])
