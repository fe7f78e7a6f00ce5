"""The engine's one extension point: the job kind.

The frame (:mod:`amcommit.committer.job`) runs whatever kind it is given; these tests drive
it with a recording fake kind and prove that it knows no table: it asks the kind, never the
store's ``.hoodie`` folder, and importing it loads no table module. The front door
(:mod:`amcommit.api`) probes for a table once, and not at all when the caller names the kind.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from amcommit import api
from amcommit.committer.actions import Action
from amcommit.committer.config import CommitterConfig
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.job import abort_with, commit_with, setup_with
from amcommit.committer.jobs import DestinationJobs
from amcommit.committer.journal import Journal
from amcommit.committer.kind import FILES, JobKind
from amcommit.committer.layout import JobLayout
from amcommit.committer.report import JobReport
from amcommit.manifest import TaskManifest
from amcommit.paths import join
from amcommit.store.base import ObjectInfo, Store
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

    async def commit_body(
        self,
        ctx: JobContext,
        run: CommitRun,
        manifests: Sequence[TaskManifest] | None,
        etags: Sequence[str | None] | None,
    ) -> None:
        self.calls.append("commit_body")
        await FILES.commit_body(ctx, run, manifests, etags)

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
        "guard:before",
        "lock_staging",
        "layouts",
        "commit_body",
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
