"""Each job-commit stage driven alone: ``run(ctx, inputs) -> result`` on a local store
wrapped in the fault-injecting store, with its operations failing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from amcommit.api import setup_job
from amcommit.committer.config import CommitterConfig
from amcommit.committer.context import JobContext
from amcommit.committer.job import _new_context
from amcommit.committer.layout import JobLayout
from amcommit.committer.spool import EntrySpool
from amcommit.committer.stages import (
    check_conflicts,
    cleanup,
    delete_victims,
    load_manifests,
    prepare_dirs,
    publish_manifests,
    rename_files,
    renames_done,
    rollback,
    save_success,
    validate_output,
    write_summary,
)
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.victims import decode_victims, encode_victims, load_victims
from amcommit.errors import (
    CommitError,
    ConflictError,
    ManifestError,
    NotFound,
    PermissionDenied,
    RollbackError,
)
from amcommit.manifest import TaskManifest, decode_manifest, decode_success
from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import run_task, snapshot

JOB = "job_stage_0001"
DEST = "out"
CFG = CommitterConfig(rename_attempts=3, retry_base_delay=0.001, retry_max_delay=0.002, io_threads=4)
FILES = {0: {"p=1/a.bin": b"aaa", "top.bin": b"t"}, 1: {"p=2/b.bin": b"bbbb"}}


class Env:
    def __init__(self, store: LocalStore, faulty: FaultyStore, layout: JobLayout, config: CommitterConfig):
        self.store, self.faulty, self.layout = store, faulty, layout
        self.ctx: JobContext = _new_context(faulty, layout, config, None, None)
        self.spools: list[EntrySpool] = []

    async def load(self, manifests: list[TaskManifest] | None = None) -> LoadedManifests:
        spool = load_manifests.new_spool(self.ctx)
        self.spools.append(spool)
        return await load_manifests.run(self.ctx, load_manifests.LoadInputs(spool, manifests))

    async def renamed(self) -> LoadedManifests:
        loaded = await self.load()
        await prepare_dirs.run(self.ctx, prepare_dirs.PrepareInputs(loaded))
        await rename_files.run(self.ctx, rename_files.RenameInputs(loaded))
        return loaded


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = await make_env(tmp_path, CFG)
    yield e
    for s in e.spools:
        s.close()


async def make_env(tmp_path: Path, config: CommitterConfig, old: dict[str, bytes] | None = None) -> Env:
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    for rel, data in (old or {}).items():
        await store.put(join(DEST, rel), data)
    layout = await setup_job(store, DEST, JOB)
    for n, files in FILES.items():
        await run_task(store, layout, n, files)
    return Env(store, FaultyStore(store, seed=3), layout, config)


async def test_load_manifests_retries_reads_and_returns_what_it_loaded(env: Env) -> None:
    env.faulty.fail("get", path="*-manifest.json", count=2)
    loaded = await env.load()
    assert (loaded.manifests, loaded.spool.count) == (2, 3)
    assert loaded.dirs == {"out/p=1", "out/p=2"}
    assert sorted(e.dst for e in loaded.spool.entries()) == ["out/p=1/a.bin", "out/p=2/b.bin", "out/top.bin"]
    assert env.faulty.injected["error:get"] == 2 and env.ctx.report.files == 3


async def test_load_manifests_gives_up_on_a_refusal(env: Env) -> None:
    env.faulty.fail("get", error=PermissionDenied, path="*-manifest.json")
    with pytest.raises(PermissionDenied):
        await env.load()


async def test_load_manifests_refuses_duplicate_destinations(env: Env) -> None:
    m = decode_manifest(await env.store.get(env.layout.manifest_path("task_job_stage_0001_m_000001")))
    with pytest.raises(ManifestError, match="committed twice"):
        await env.load([m, m])


async def test_publish_manifests_replaces_a_stale_one_through_failing_puts(env: Env) -> None:
    path = env.layout.manifest_path("task_job_stage_0001_m_000000")
    m = decode_manifest(await env.store.get(path))
    await env.store.put(path, b"{}")  # another attempt's manifest
    env.faulty.fail("put", path="*-manifest.json", count=2)
    result = await publish_manifests.run(env.ctx, publish_manifests.PublishInputs([m]))
    assert result.changed == 2  # the stale one rewritten, the other task's removed
    assert decode_manifest(await env.store.get(path)) == m
    assert [i.path async for i in env.store.list(env.layout.manifests_dir)] == [path]


async def test_check_conflicts_fail_mode_names_the_partition(env: Env) -> None:
    await env.store.put("out/p=2/old.bin", b"old")
    env.ctx.config = CFG.with_options(conflict_mode="fail")
    env.faulty.fail("list", count=1)
    with pytest.raises(ConflictError, match="p=2"):
        await check_conflicts.run(env.ctx, check_conflicts.ConflictInputs(await env.load()))


async def test_check_conflicts_records_victims_restarting_a_failed_listing(tmp_path: Path) -> None:
    env = await make_env(
        tmp_path, CFG.with_options(conflict_mode="replace"), {"p=1/old.bin": b"o", "q/keep": b"k"}
    )
    loaded = await env.load()
    env.faulty.fail("list", path="out/p=1", count=1)
    result = await check_conflicts.run(env.ctx, check_conflicts.ConflictInputs(loaded))
    assert result.victim_chunks == 1
    saved = msgspec.json.decode(await env.store.get(env.layout.victims_path(0)))
    assert sorted(saved["dest_relative"]) == ["p=1/old.bin", "q/keep"]  # top-level files: dest is the root
    assert sorted((await load_victims(env.ctx, 1))[0]) == ["out/p=1/old.bin", "out/q/keep"]
    assert env.ctx.report.job_stats.counters.get("committer_listing_restarted") == 1


async def test_prepare_dirs_retries_mkdirs_and_refuses_a_file_in_the_way(env: Env) -> None:
    loaded = await env.load()
    env.faulty.fail("mkdirs", count=2)
    assert (await prepare_dirs.run(env.ctx, prepare_dirs.PrepareInputs(loaded))).created == 2
    assert (await env.store.stat("out/p=2")).is_dir
    await env.store.delete("out/p=2")
    await env.store.put("out/p=2", b"a user's file")
    with pytest.raises(ConflictError, match="in the way of directory"):
        await prepare_dirs.run(env.ctx, prepare_dirs.PrepareInputs(loaded))


async def test_rename_files_recovers_a_lost_rename_answer(env: Env) -> None:
    loaded = await env.load()
    await prepare_dirs.run(env.ctx, prepare_dirs.PrepareInputs(loaded))
    env.faulty.lose_response("rename", count=1)
    result = await rename_files.run(env.ctx, rename_files.RenameInputs(loaded))
    assert (result.renamed, result.recovered) == (3, 1)
    assert await snapshot(env.store, DEST) == {"p=1/a.bin": b"aaa", "top.bin": b"t", "p=2/b.bin": b"bbbb"}


async def test_rename_files_conflict_in_append_mode(env: Env) -> None:
    await env.store.put("out/top.bin", b"old")
    loaded = await env.load()
    with pytest.raises(ConflictError, match="already exists"):
        await rename_files.run(env.ctx, rename_files.RenameInputs(loaded))


async def test_delete_victims_retries_deletes_and_counts_removed(tmp_path: Path) -> None:
    env = await make_env(
        tmp_path, CFG.with_options(conflict_mode="replace"), {"p=1/old.bin": b"o", "p=1/a.bin": b"x"}
    )
    loaded = await env.load()
    chunks = (await check_conflicts.run(env.ctx, check_conflicts.ConflictInputs(loaded))).victim_chunks
    await prepare_dirs.run(env.ctx, prepare_dirs.PrepareInputs(loaded))
    await rename_files.run(env.ctx, rename_files.RenameInputs(loaded))
    env.faulty.fail("delete", count=2)
    result = await delete_victims.run(env.ctx, delete_victims.DeleteVictimsInputs(loaded, chunks))
    assert (result.deleted, result.removed) == (1, 1)  # a.bin was replaced, not removed
    assert await snapshot(env.store, DEST) == {"p=1/a.bin": b"aaa", "top.bin": b"t", "p=2/b.bin": b"bbbb"}
    assert [i async for i in env.store.list(env.layout.trash_dir)] == []


async def test_validate_output_finds_a_changed_file_through_failing_stats(env: Env) -> None:
    loaded = await env.renamed()
    env.faulty.fail("stat", count=2)
    assert (await validate_output.run(env.ctx, validate_output.ValidateInputs(loaded))).checked == 3
    await env.store.delete("out/p=2/b.bin")
    await env.store.put("out/p=2/b.bin", b"bb")
    with pytest.raises(CommitError, match="has 2 bytes, expected 4"):
        await validate_output.run(env.ctx, validate_output.ValidateInputs(loaded))


async def test_save_success_proves_a_rename_whose_answer_was_lost(env: Env) -> None:
    env.ctx.report.success = True
    success = env.ctx.report.to_success_data()
    env.faulty.lose_response("rename", path="*_SUCCESS*", count=1)
    await save_success.run(env.ctx, save_success.SaveSuccessInputs(success))
    assert decode_success(await env.store.get(env.layout.success_path)) == success
    assert env.faulty.injected["lost_response:rename"] == 1
    with pytest.raises(NotFound):
        await env.store.stat(env.layout.success_tmp_path)


async def test_write_summary_writes_the_report(tmp_path: Path) -> None:
    # the summary directory is opened from its URL (its own store): no fault hook here
    reports = tmp_path / "reports"
    env = await make_env(tmp_path, CFG.with_options(summary_report_directory=reports.as_uri()))
    env.ctx.report.files = 3
    await write_summary.run(env.ctx, write_summary.SummaryInputs(env.ctx.report))
    got = decode_success((reports / f"summary-{JOB}.json").read_bytes())
    assert got.job_id == JOB and not got.success


async def test_cleanup_retries_then_deletes_the_job_directory(env: Env) -> None:
    env.faulty.fail("delete", count=2)
    await cleanup.run(env.ctx, cleanup.CleanupInputs())
    assert await snapshot(env.store, DEST, include_temp=True) == {}
    with pytest.raises(NotFound):
        await env.store.stat(env.layout.job_dir)


async def test_cleanup_gives_up_on_a_refusal(env: Env) -> None:
    env.faulty.fail("delete", error=PermissionDenied)
    with pytest.raises(PermissionDenied):
        await cleanup.run(env.ctx, cleanup.CleanupInputs())
    assert (await env.store.stat(env.layout.job_dir)).is_dir


async def test_rollback_moves_files_back_and_fails_cleanly_on_a_refusal(env: Env) -> None:
    before = await snapshot(env.store, DEST, include_temp=True)
    loaded = await env.renamed()
    env.faulty.fail("rename", error=PermissionDenied, count=1)
    with pytest.raises(RollbackError, match="run abort again"):
        await rollback.run(env.ctx, rollback.RollbackInputs(loaded, keep_job=True))
    env.faulty.clear()
    env.faulty.fail("rename", count=1)  # transient: retried
    assert (await rollback.run(env.ctx, rollback.RollbackInputs(loaded, keep_job=True))).rolled_back
    assert await snapshot(env.store, DEST, include_temp=True) == before


async def test_renames_done_only_when_every_file_is_in_place(env: Env) -> None:
    loaded = await env.load()
    inputs = renames_done.RenamesDoneInputs(loaded)
    assert not (await renames_done.run(env.ctx, inputs)).done
    await prepare_dirs.run(env.ctx, prepare_dirs.PrepareInputs(loaded))
    await rename_files.run(env.ctx, rename_files.RenameInputs(loaded))
    env.faulty.fail("stat", count=2)
    assert (await renames_done.run(env.ctx, inputs)).done
    env.faulty.fail("stat", error=PermissionDenied)
    with pytest.raises(PermissionDenied):
        await renames_done.run(env.ctx, inputs)


def test_victim_chunks_are_relative_to_the_destination_and_old_chunks_still_read() -> None:
    data = encode_victims("root/out", ["root/out/p=1/a", "root/out/b"])
    assert decode_victims("other/root/out", data) == ["other/root/out/p=1/a", "other/root/out/b"]
    assert decode_victims("", encode_victims("", ["p=1/a"])) == ["p=1/a"]
    # a chunk saved by an earlier version: store paths as they were
    assert decode_victims("x/out", b'["x/out/p=1/a"]') == ["x/out/p=1/a"]
