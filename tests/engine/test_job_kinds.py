"""The engine's one extension point: the job kind.

The frame (:mod:`amcommit.committer.job`) runs whatever kind it is given; these tests drive
it with a recording fake kind and prove that it knows no table: it asks the kind, never the
store's ``.hoodie`` folder, and importing it loads no table module. The front door
(:mod:`amcommit.api`) probes for a table once, and not at all when the caller names the kind.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from amcommit import api
from amcommit.committer.actions import Action
from amcommit.committer.config import CommitterConfig
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.job import abort_with, commit_with, setup_with
from amcommit.committer.jobs import DestinationJobs
from amcommit.committer.journal import Journal
from amcommit.committer.kind import FILES, JobKind
from amcommit.committer.layout import JobLayout
from amcommit.committer.machine import CommitPlan, Fresh
from amcommit.committer.report import JobReport
from amcommit.committer.stages import load_manifests
from amcommit.committer.stages.load_manifests import LoadedManifests, ManifestCheck
from amcommit.errors import CommitError, NotFound
from amcommit.paths import join, relative_to
from amcommit.store.base import ObjectInfo, PutMode, RenameResult, Store, WriteMode
from amcommit.store.local import LocalStore
from tests.engine.helpers import run_task, snapshot, temp_files

JOB = "job_kinds_0001"


class CountingStore(LocalStore):
    """A local store that records the paths it was asked to stat or get."""

    def __init__(self, root: str) -> None:
        super().__init__(root, fsync=False)
        self.asked: list[str] = []

    async def stat(self, path: str) -> ObjectInfo:
        self.asked.append(path)
        return await super().stat(path)

    async def get(self, path: str) -> bytes:
        self.asked.append(path)
        return await super().get(path)

    def table_probes(self) -> list[str]:
        return [p for p in self.asked if "/.hoodie" in p or p.endswith("hoodie.properties")]


class RecordingKind:
    """Plain files underneath, every hook the frame calls recorded in order."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def refuse_setup(self, dest: str, job_id: str) -> None:
        self.calls.append("refuse_setup")
        FILES.refuse_setup(dest, job_id)

    def layouts(self, dest: str, job_id: str, job_attempt: int) -> Sequence[JobLayout]:
        self.calls.append("layouts")
        return FILES.layouts(dest, job_id, job_attempt)

    def lock_staging(self, job_id: str) -> str | None:
        self.calls.append("lock_staging")
        return None

    async def committed_without(
        self, store: Store, dest: str, job_id: str, job_attempt: int, config: CommitterConfig
    ) -> JobReport | None:
        self.calls.append("committed_without")
        return await FILES.committed_without(store, dest, job_id, job_attempt, config)

    async def commit_plan(self, ctx: JobContext) -> CommitPlan:
        self.calls.append("commit_plan")
        return await FILES.commit_plan(ctx)

    async def roll_back(
        self, ctx: JobContext, journal: Journal | None, run: CommitRun, action: Action
    ) -> bool:
        self.calls.append(f"roll_back:{action.value}")
        return await FILES.roll_back(ctx, journal, run, action)

    async def abort_without(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        report: JobReport,
    ) -> JobReport:
        self.calls.append("abort_without")
        return report

    async def guard(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        locked: Callable[[], Awaitable[JobReport]],
    ) -> JobReport:
        self.calls.append("guard:before")
        report = await locked()
        self.calls.append("guard:after")
        return report

    def for_other_job(self) -> JobKind:
        return self

    async def list_jobs(self, store: Store, dest: str, config: CommitterConfig) -> DestinationJobs:
        self.calls.append("list_jobs")
        return await FILES.list_jobs(store, dest, config)

    def new_report(self, job_id: str, dest_uri: str) -> JobReport:
        return FILES.new_report(job_id, dest_uri)


async def test_frame_runs_a_recording_kind(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path))
    kind: RecordingKind = RecordingKind()
    as_kind: JobKind = kind  # the fake is a JobKind (mypy checks it)
    dest = join(store.root, "dest")
    layout = await setup_with(as_kind, store, dest, JOB)
    await run_task(store, layout, 0, {"a/part-0.txt": b"zero"})
    await run_task(store, layout, 1, {"b/part-1.txt": b"one"})
    report = await commit_with(as_kind, store, dest, JOB)
    assert report.success and report.files == 2
    assert kind.calls == [
        "refuse_setup",
        "layouts",
        "guard:before",
        "lock_staging",
        "layouts",
        "commit_plan",
        "guard:after",
    ]
    assert await snapshot(store, dest) == {"a/part-0.txt": b"zero", "b/part-1.txt": b"one"}
    assert await temp_files(store, dest) == []

    # committed and cleaned up: the frame asks the kind whether it was committed
    kind.calls.clear()
    again = await commit_with(as_kind, store, dest, JOB)
    assert again.already_committed and kind.calls == [
        "guard:before",
        "lock_staging",
        "layouts",
        "committed_without",
        "guard:after",
    ]

    # an abort of a job that never was: the kind finishes what is left (nothing)
    kind.calls.clear()
    gone = await abort_with(as_kind, store, dest, "job_never_set_up")
    assert not gone.success and kind.calls == [
        "layouts",
        "lock_staging",
        "layouts",
        "abort_without",
    ]

    # an abort of a set-up job: the kind rolls it back (nothing was renamed: delete the job)
    other = await setup_with(as_kind, store, dest, "job_kinds_0002")
    await run_task(store, other, 0, {"c/part-0.txt": b"c"})
    kind.calls.clear()
    await abort_with(as_kind, store, dest, "job_kinds_0002")
    assert kind.calls == ["layouts", "layouts", "roll_back:delete_job"]
    assert await temp_files(store, dest) == []
    assert store.table_probes() == []  # the frame never looked for a table


def test_engine_imports_no_table_module() -> None:
    code = (
        "import sys, amcommit.committer, amcommit.committer.job, amcommit.committer.kind; "
        "print(sorted(m for m in sys.modules if m.startswith('amcommit.table')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


async def test_named_kind_skips_the_table_probe(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path))
    dest = join(store.root, "dest")
    layout = await api.setup_job(store, dest, JOB, kind="files")
    await run_task(store, layout, 0, {"part-0.txt": b"x"})
    report = await api.commit_job(store, dest, JOB, kind="files")
    assert report.success and report.files == 1
    assert store.table_probes() == []

    # the caller did not say: one probe, then the engine asks no more
    layout = await api.setup_job(store, join(store.root, "other"), JOB)
    await run_task(store, layout, 0, {"part-0.txt": b"y"})
    assert len(store.table_probes()) == 1
    report = await api.commit_job(store, join(store.root, "other"), JOB)
    assert report.success and len(store.table_probes()) == 2


# -- a kind of its own, driven by the frame ------------------------------------------------


class RecordingStore(LocalStore):
    """A local store that records every request: (operation, path)."""

    def __init__(self, root: str) -> None:
        super().__init__(root, fsync=False)
        self.requests: list[tuple[str, str]] = []

    def paths(self) -> list[str]:
        return [relative_to(p, self.root) if p.startswith(self.root) else p for _, p in self.requests]

    async def stat(self, path: str) -> ObjectInfo:
        self.requests.append(("stat", path))
        return await super().stat(path)

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        self.requests.append(("list", prefix))
        return super().list(prefix, recursive=recursive)

    async def get(self, path: str) -> bytes:
        self.requests.append(("get", path))
        return await super().get(path)

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        self.requests.append(("put", path))
        return await super().put(path, data, mode=mode)

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        self.requests.append(("rename", src))
        return await super().rename(src, dst, src_etag=src_etag, rename_id=rename_id, src_meta=src_meta)

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        self.requests.append(("delete", path))
        return await super().delete(path, recursive=recursive)

    async def mkdirs(self, path: str) -> None:
        self.requests.append(("mkdirs", path))
        await super().mkdirs(path)


@dataclass
class NotesReport(JobReport):
    """The fake kind's report: the engine's fields and one of its own."""

    moved: int = 0


NOTES = ".notes"
"""The fake kind's own staging folder (job directories and the destination lock)."""


class NotesKind:
    """A kind of its own that knows nothing of plain files or tables: jobs stage in
    ``.notes/<jobId>/``, the lock is ``.notes/_commit.lock``, the commit moves each task
    output into place one by one (skipping those already there: a resume), then writes
    ``.notes/committed-<jobId>``; an abort moves them back and deletes the job. Every hook
    the frame calls is recorded; ``fail_after`` makes the next commit body fail after that
    many moves."""

    name = "notes"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail_after: int | None = None

    def refuse_setup(self, dest: str, job_id: str) -> None:
        self.calls.append("refuse_setup")

    def layouts(self, dest: str, job_id: str, job_attempt: int) -> Sequence[JobLayout]:
        self.calls.append("layouts")
        return (JobLayout(dest, job_id, job_attempt, staging=NOTES),)

    def lock_staging(self, job_id: str) -> str | None:
        self.calls.append("lock_staging")
        return NOTES

    async def committed_without(
        self, store: Store, dest: str, job_id: str, job_attempt: int, config: CommitterConfig
    ) -> JobReport | None:
        self.calls.append("committed_without")
        try:
            await store.stat(join(dest, NOTES, f"committed-{job_id}"))
        except NotFound:
            return None
        return NotesReport(job_id=job_id, dest_uri=dest, success=True, already_committed=True)

    async def commit_plan(self, ctx: JobContext) -> CommitPlan:
        self.calls.append("commit_plan")
        return NotesPlan(self)

    async def roll_back(
        self, ctx: JobContext, journal: Journal | None, run: CommitRun, action: Action
    ) -> bool:
        self.calls.append(f"roll_back:{action.value}")
        store = ctx.store
        if run.loaded is None:
            run.spool = load_manifests.new_spool(ctx)
            run.loaded = await load_manifests.run(ctx, load_manifests.LoadInputs(run.spool))
        for e in run.loaded.spool.entries():
            try:
                await store.stat(e.src)
            except NotFound:
                await store.rename(e.dst, e.src)  # moved by the failed commit: back it goes
        await store.delete(ctx.layout.job_dir, recursive=True)
        return False

    async def abort_without(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        report: JobReport,
    ) -> JobReport:
        self.calls.append("abort_without")
        return report

    async def guard(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        locked: Callable[[], Awaitable[JobReport]],
    ) -> JobReport:
        self.calls.append("guard:before")
        report = await locked()
        self.calls.append("guard:after")
        return report

    def for_other_job(self) -> JobKind:
        return self

    async def list_jobs(self, store: Store, dest: str, config: CommitterConfig) -> DestinationJobs:
        self.calls.append("list_jobs")
        return DestinationJobs(dest_uri=dest)

    def new_report(self, job_id: str, dest_uri: str) -> JobReport:
        self.calls.append("new_report")
        return NotesReport(job_id=job_id, dest_uri=dest_uri)


class NotesPlan:
    """The fake kind's part of a commit: no checks; the task outputs are moved one by one
    (skipping those already there: a resume); then ``.notes/committed-<jobId>``. The
    journal is the frame's."""

    def __init__(self, kind: NotesKind) -> None:
        self.kind = kind

    async def begin(self, ctx: JobContext) -> bool:
        return False

    async def finished(self, ctx: JobContext, journal: Journal | None) -> None:
        return None

    def manifest_check(self, ctx: JobContext, journal: Journal | None) -> ManifestCheck | None:
        return None

    async def loaded(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal | None) -> None:
        return None

    async def check(self, ctx: JobContext, loaded: LoadedManifests) -> Fresh | None:
        return Fresh(layout="notes")

    async def place(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        store, report = ctx.store, ctx.report
        assert isinstance(report, NotesReport)
        for e in loaded.spool.entries():
            try:
                await store.stat(e.dst)
                continue  # moved by an earlier run of this commit
            except NotFound:
                pass
            if self.kind.fail_after is not None and report.moved >= self.kind.fail_after:
                self.kind.fail_after = None
                raise CommitError("the fake body fails on purpose", stage="move")
            await store.rename(e.src, e.dst)
            report.moved += 1

    async def placed(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        return None

    async def publish(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal) -> None:
        await ctx.store.put(join(ctx.layout.dest, NOTES, f"committed-{ctx.layout.job_id}"), b"")
        ctx.report.success = True

    async def committed(self, ctx: JobContext) -> None:
        return None


async def _listing(store: Store, dest: str) -> list[str]:
    return sorted([relative_to(i.path, dest) async for i in store.list(dest, recursive=True) if not i.is_dir])


async def test_frame_drives_a_kind_of_its_own(tmp_path: Path) -> None:
    """The frame commits, aborts and resumes a job of a kind that is neither plain files nor
    a table, asking the kind for everything it needs: the job's layout and the lock's place
    (``.notes``), the plan (the frame's journal state machine runs it), the rollback, the
    report. No request of the whole run goes to
    ``_temporary``, ``_SUCCESS`` or ``.hoodie``: the frame knows neither plain files nor
    tables."""
    store = RecordingStore(str(tmp_path))
    kind = NotesKind()
    as_kind: JobKind = kind
    dest = join(store.root, "dest")

    # commit: the kind's body runs under the lock in its staging folder, reports its own field
    layout = await setup_with(as_kind, store, dest, "notes_1")
    assert layout.job_dir == join(dest, NOTES, "notes_1")
    await run_task(store, layout, 0, {"a/x.txt": b"x"})
    await run_task(store, layout, 1, {"b/y.txt": b"y"})
    kind.calls.clear()
    report = await commit_with(as_kind, store, dest, "notes_1")
    assert isinstance(report, NotesReport) and report.success and report.moved == 2
    assert kind.calls == [
        "guard:before",
        "lock_staging",
        "layouts",
        "new_report",
        "commit_plan",
        "guard:after",
    ]
    assert await _listing(store, dest) == [".notes/committed-notes_1", "a/x.txt", "b/y.txt"]
    assert await snapshot(store, join(dest, "a")) == {"x.txt": b"x"}

    # committed and cleaned up: the kind says so
    kind.calls.clear()
    again = await commit_with(as_kind, store, dest, "notes_1")
    assert again.already_committed and "committed_without" in kind.calls

    # resume after a failed commit body: the first run moves one file and fails; the job
    # stays; the next run finishes what the first began
    layout = await setup_with(as_kind, store, dest, "notes_2")
    await run_task(store, layout, 0, {"c/1.txt": b"1"})
    await run_task(store, layout, 1, {"c/2.txt": b"2"})
    kind.fail_after = 1
    with pytest.raises(CommitError, match="fails on purpose"):
        await commit_with(as_kind, store, dest, "notes_2")
    moved = [p for p in await _listing(store, dest) if p.startswith("c/")]
    assert len(moved) == 1
    kind.calls.clear()
    resumed = await commit_with(as_kind, store, dest, "notes_2")
    assert isinstance(resumed, NotesReport) and resumed.success and resumed.moved == 1
    assert kind.calls.count("commit_plan") == 1
    assert await snapshot(store, join(dest, "c")) == {"1.txt": b"1", "2.txt": b"2"}

    # abort after a failed commit body: the kind moves the file back and deletes the job
    layout = await setup_with(as_kind, store, dest, "notes_3")
    await run_task(store, layout, 0, {"d/1.txt": b"1"})
    await run_task(store, layout, 1, {"d/2.txt": b"2"})
    kind.fail_after = 1
    with pytest.raises(CommitError, match="fails on purpose"):
        await commit_with(as_kind, store, dest, "notes_3")
    kind.calls.clear()
    aborted = await abort_with(as_kind, store, dest, "notes_3")
    assert isinstance(aborted, NotesReport) and not aborted.success
    assert kind.calls == [
        "layouts",
        "lock_staging",  # an abort locks where the kind's commits lock
        "new_report",
        "layouts",
        "new_report",
        "roll_back:rollback",  # the frame's journal says the commit began, not all is in place
    ]
    assert [p for p in await _listing(store, dest) if p.startswith(("d/", ".notes/notes_3"))] == []

    # an abort of a job that never was: the kind finishes what is left (nothing)
    kind.calls.clear()
    gone = await abort_with(as_kind, store, dest, "notes_never")
    assert not gone.success and kind.calls == [
        "layouts",
        "lock_staging",
        "layouts",
        "new_report",
        "abort_without",
    ]

    # what the frame never asked for: anything of plain jobs or tables
    asked = store.paths()
    assert [
        p for p in asked if p.split("/")[1:2] == ["_temporary"] or "_SUCCESS" in p or ".hoodie" in p
    ] == []
    assert await _listing(store, dest) == [
        ".notes/committed-notes_1",
        ".notes/committed-notes_2",
        "a/x.txt",
        "b/y.txt",
        "c/1.txt",
        "c/2.txt",
    ]


async def test_plain_commit_named_files_makes_no_table_probe(tmp_path: Path) -> None:
    """``api.commit_job(..., kind=FILES)`` sends exactly the requests of the engine's plain
    commit; without ``kind`` the same commit sends one more, the probe: a stat of
    ``.hoodie/hoodie.properties``, and nothing else of a table."""
    counts: dict[str, Counter[tuple[str, str]]] = {}
    for case, kind in (("named", FILES), ("probed", None)):
        store = RecordingStore(str(tmp_path / case))
        dest = join(store.root, "dest")
        layout = await setup_with(FILES, store, dest, JOB)
        await run_task(store, layout, 0, {"p/part-0.txt": b"x"})
        await run_task(store, layout, 1, {"p/part-1.txt": b"y"})
        store.requests.clear()
        report = await api.commit_job(store, dest, JOB, kind=kind)
        assert report.success and report.files == 2
        counts[case] = Counter((op, relative_to(path, dest)) for op, path in store.requests)
    named, probed = counts["named"], counts["probed"]
    assert not [p for _, p in named if "hoodie" in p]
    assert probed - named == Counter({("stat", ".hoodie/hoodie.properties"): 1})
    assert named - probed == Counter()
    assert sum(probed.values()) == sum(named.values()) + 1
