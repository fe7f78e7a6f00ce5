"""Job kinds: the engine's one extension point.

A job commit is a frame (:mod:`amcommit.committer.job`: lock, journal, manifests, resume,
rollback, cleanup) around a body that depends on what the destination is. A *kind* owns the
differences, through the small protocol :class:`JobKind`; the frame calls its hooks and
knows nothing else of it. :class:`FilesKind` is the kind of plain destinations (its plan,
:class:`FilesPlan`, is the plain commit); other kinds (a Hudi table's) are
built on the engine and given to it by the caller (the front door, ``amcommit.api``, picks
one): they depend on the engine, never the reverse.

=====================  ==============================================================
hook                   what the frame asks
=====================  ==============================================================
``refuse_setup``       may a plain job be set up in this destination?
``layouts``            where a job's directory may be (the first that exists is the job's)
``lock_staging``       the kind's staging folder holding a job's destination lock (or none)
``committed_without``  no job directory: was the job committed (and cleaned up)?
``commit_plan``        the kind's part of the commit under the lock (its checks, what it
                       puts in place and publishes; the frame owns the journal:
                       :mod:`amcommit.committer.machine`)
``roll_back``          the abort under the lock of a job whose commit did not pass its
                       point of no return (True: it had; the frame completes it instead)
``abort_without``      no job directory: what an abort still has to finish
``guard``              around the locked commit: before it, and after it commits
``for_other_job``      the kind to finish another job of the same destination with (a dead
                       lock holder's), without this call's per-job options
``list_jobs``          what ``amcommit jobs`` shows of the destination (reads only)
``new_report``         the report a commit or abort of the kind fills in (its own fields too)
=====================  ==============================================================

The task side of a kind is :class:`TaskKind`, carried by the job's layout
(:attr:`JobLayout.tasks <amcommit.committer.layout.JobLayout.tasks>`): the task commit
(:mod:`amcommit.committer.task`) calls it when a task starts and to name its outputs.
A kind's own settings and report fields are its own: the frame hands its hooks the
engine's config and the report the kind made (``new_report``), and reads neither further.

Nothing here is atomic by itself; each hook says what it publishes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from amcommit.committer.actions import Action
from amcommit.committer.config import CommitterConfig
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.jobs import DestinationJobs, list_plain_jobs
from amcommit.committer.journal import Journal
from amcommit.committer.layout import JobLayout
from amcommit.committer.leftovers import sweep_quietly
from amcommit.committer.machine import CommitPlan, Fresh
from amcommit.committer.report import JobReport
from amcommit.committer.stages import (
    check_conflicts,
    cleanup,
    delete_victims,
    prepare_dirs,
    rename_files,
    rollback,
    save_success,
    validate_output,
)
from amcommit.committer.stages.load_manifests import LoadedManifests, ManifestCheck
from amcommit.errors import ManifestError, NotFound
from amcommit.manifest import SuccessData, decode_success
from amcommit.paths import path_to_uri
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.retry import policies_of, retry_call


class TaskKind(Protocol):
    """The task side of a kind: what :func:`~amcommit.committer.task.setup_task` and
    :func:`~amcommit.committer.task.commit_task` do besides the plain protocol. A job's
    layout carries it (``JobLayout.tasks``; None for plain files)."""

    async def task_started(self, store: Store, layout: JobLayout, config: CommitterConfig) -> None:
        """A task attempt was set up, or its commit begins (e.g. a sign of the writer's life)."""
        ...

    async def name_outputs(
        self,
        store: Store,
        layout: JobLayout,
        task_attempt_id: str,
        files: Sequence[tuple[str, ObjectInfo]],
        extra: dict[str, str],
        config: CommitterConfig,
    ) -> dict[str, str]:
        """The destination name (relative to the destination) of each file of the attempt
        (``files``: path relative to the attempt directory, and its listing). May refuse a
        file (CommitError naming it) and change ``extra`` (the manifest's ``extra_data``)."""
        ...


class JobKind(Protocol):
    """The hooks a kind of destination gives the engine's frame (module doc)."""

    name: str
    """``"files"``, ``"table"``...: for messages and reports."""

    def refuse_setup(self, dest: str, job_id: str) -> None:
        """Raise CommitError if a plain job (``setup_job``) must not write into ``dest``."""
        ...

    def layouts(self, dest: str, job_id: str, job_attempt: int) -> Sequence[JobLayout]:
        """Where the job directory of job ``job_id`` may be, in the order the frame looks
        for it (:func:`~amcommit.committer.job.resolve_layout`: the first that exists is the
        job's). Pure."""
        ...

    def lock_staging(self, job_id: str) -> str | None:
        """The kind's own staging folder (relative to the destination; e.g. a table's
        ``.hoodie/.aux/amcommit``) holding the destination lock of job ``job_id``; None: the lock
        lives in ``_temporary/``. Pure."""
        ...

    async def committed_without(
        self, store: Store, dest: str, job_id: str, job_attempt: int, config: CommitterConfig
    ) -> JobReport | None:
        """The report of job ``job_id`` if it is committed and its job directory is gone;
        None otherwise. Reads only."""
        ...

    async def commit_plan(self, ctx: JobContext) -> CommitPlan:
        """The kind's part of the commit of ``ctx``'s job
        (:class:`~amcommit.committer.machine.CommitPlan`; the frame runs it, fresh or resumed
        from the journal, under the lock: :func:`~amcommit.committer.machine.run_commit`).
        May read the store to choose it (one object per commit run)."""
        ...

    async def roll_back(
        self, ctx: JobContext, journal: Journal | None, run: CommitRun, action: Action
    ) -> bool:
        """Abort ``ctx``'s job under the lock: undo what its commit did (``action``: the
        frame's plan, :class:`~amcommit.committer.actions.Action`) and delete the job. True if
        the commit turned out to be past its point of no return (the frame completes it)."""
        ...

    async def abort_without(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        report: JobReport,
    ) -> JobReport:
        """Abort of a job whose job directory is gone: finish what is left (``report``:
        the frame's empty report, to fill in and return)."""
        ...

    async def guard(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        locked: Callable[[], Awaitable[JobReport]],
    ) -> JobReport:
        """Run ``locked`` (the commit under the destination lock) with what must happen
        around it: before (checks, waiting for earlier writers) and after it commits."""
        ...

    def for_other_job(self) -> JobKind:
        """This kind without the per-job options of this call (to finish a dead holder's job)."""
        ...

    async def list_jobs(self, store: Store, dest: str, config: CommitterConfig) -> DestinationJobs:
        """The jobs of ``dest`` as ``amcommit jobs`` shows them (reads only; see
        :func:`~amcommit.committer.jobs.list_jobs`). NotFound if nothing exists at ``dest``."""
        ...

    def new_report(self, job_id: str, dest_uri: str) -> JobReport:
        """An empty report for a commit or abort of job ``job_id`` (a :class:`JobReport`,
        or a subclass holding the kind's own fields, which its hooks fill in)."""
        ...


async def _read_success(store: Store, layout: JobLayout, config: CommitterConfig) -> SuccessData | None:
    """This job's successful ``_SUCCESS``, if that is what the destination holds."""
    try:
        data = await retry_call(lambda: store.get(layout.success_path), policy=policies_of(config)[0])
    except NotFound:
        return None
    try:
        success = decode_success(data, name="_SUCCESS")
    except ManifestError:
        return None
    if not success.success:
        return None
    if success.job_id != layout.job_id and success.diagnostics.get("completed_previous_job") != layout.job_id:
        return None
    return success


async def _already_committed(store: Store, layout: JobLayout, config: CommitterConfig) -> JobReport | None:
    success = await _read_success(store, layout, config)
    if success is None:
        return None
    report = JobReport(job_id=layout.job_id, dest_uri=path_to_uri(store.root_uri, layout.dest), success=True)
    if success.job_id == layout.job_id:
        report.restore_from_success(success)
    else:  # completed by the job that took over its lock; that job's _SUCCESS says so
        report.committed_by = success.job_id
    report.already_committed = True
    report.committed_date = success.date
    report.finished = time.time()
    return report


class FilesPlan:
    """The plain commit's part of the journal state machine
    (:class:`~amcommit.committer.machine.CommitPlan`): conflicts checked and victims recorded
    (fresh), directories created and files renamed (the point of no return after them),
    then old files deleted, the output validated and ``_SUCCESS`` written. Stateless."""

    async def begin(self, ctx: JobContext) -> bool:
        return False

    async def finished(self, ctx: JobContext, journal: Journal | None) -> None:
        # only cleanup remains: report what the committing run wrote into _SUCCESS
        success = await _read_success(ctx.store, ctx.layout, ctx.config)
        if success is not None:
            ctx.report.restore_from_success(success)

    def manifest_check(self, ctx: JobContext, journal: Journal | None) -> ManifestCheck | None:
        return None

    async def loaded(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal | None) -> None:
        ctx.report.task_event_loops = sorted(
            {x["event_loop"] for x in loaded.extra_data if "event_loop" in x}
        )

    async def check(self, ctx: JobContext, loaded: LoadedManifests) -> Fresh | None:
        async with ctx.stage("check_conflicts"):
            chunks = (await check_conflicts.run(ctx, check_conflicts.ConflictInputs(loaded))).victim_chunks
        return Fresh(victim_chunks=chunks, layout="hadoop" if ctx.layout.hadoop else "amcommit")

    async def place(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        async with ctx.stage("prepare_dirs"):
            await prepare_dirs.run(ctx, prepare_dirs.PrepareInputs(loaded))
        async with ctx.stage("rename_files"):
            await rename_files.run(ctx, rename_files.RenameInputs(loaded))

    async def placed(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        return None

    async def publish(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal) -> None:
        report = ctx.report
        async with ctx.stage("delete_victims"):
            await delete_victims.run(ctx, delete_victims.DeleteVictimsInputs(loaded, journal.victim_chunks))
        if ctx.config.validate_output:
            async with ctx.stage("validate_output"):
                await validate_output.run(ctx, validate_output.ValidateInputs(loaded))
        report.success = True  # everything is in place; the report says so
        report.finished = time.time()
        report.store_stats = ctx.store.iostats.snapshot(prefix="store_")
        if ctx.config.success_marker:
            async with ctx.stage("save_success"):
                await save_success.run(ctx, save_success.SaveSuccessInputs(report.to_success_data()))

    async def committed(self, ctx: JobContext) -> None:
        return None


FILES_PLAN: CommitPlan = FilesPlan()
"""The plan of every plain commit (stateless)."""


async def _roll_back_files(ctx: JobContext, run: CommitRun, action: Action) -> None:
    """The plain abort under the lock: undo the renames (``action`` ROLLBACK), then delete
    the job directory."""
    if action is Action.ROLLBACK:
        assert run.loaded is not None
        async with ctx.stage("rollback"):
            await rollback.run(ctx, rollback.RollbackInputs(run.loaded))
    async with ctx.stage("cleanup"):
        await cleanup.run(ctx, cleanup.CleanupInputs())
    # what zombie attempts of finished jobs (this one's too) left (committer/leftovers.py)
    await sweep_quietly(ctx.store, ctx.layout.dest, ctx.config)


class FilesKind:
    """Plain destinations: ``_temporary/manifest_$jobId/`` (ours) or ``_temporary/$jobId/``
    (Hadoop's); the commit creates directories, renames, writes ``_SUCCESS``; an abort undoes
    the renames from the journal."""

    name = "files"

    def refuse_setup(self, dest: str, job_id: str) -> None:
        return None

    def layouts(self, dest: str, job_id: str, job_attempt: int) -> Sequence[JobLayout]:
        return (JobLayout(dest, job_id, job_attempt), JobLayout(dest, job_id, job_attempt, hadoop=True))

    def lock_staging(self, job_id: str) -> str | None:
        return None

    async def committed_without(
        self, store: Store, dest: str, job_id: str, job_attempt: int, config: CommitterConfig
    ) -> JobReport | None:
        return await _already_committed(store, JobLayout(dest, job_id, job_attempt), config)

    async def commit_plan(self, ctx: JobContext) -> CommitPlan:
        return FILES_PLAN

    async def roll_back(
        self, ctx: JobContext, journal: Journal | None, run: CommitRun, action: Action
    ) -> bool:
        await _roll_back_files(ctx, run, action)
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
        # the job directory is gone (or was never there): what its zombie attempts, or
        # those of other finished jobs, left is all an abort can still remove
        await sweep_quietly(store, dest, config)
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
        report = await locked()
        if not config.cleanup_skipped:  # after the lock is released (committer/leftovers.py)
            await sweep_quietly(store, dest, config)
        return report

    def for_other_job(self) -> JobKind:
        return self

    async def list_jobs(self, store: Store, dest: str, config: CommitterConfig) -> DestinationJobs:
        return await list_plain_jobs(store, dest, config=config)

    def new_report(self, job_id: str, dest_uri: str) -> JobReport:
        return JobReport(job_id=job_id, dest_uri=dest_uri)


FILES: JobKind = FilesKind()
"""The kind of plain destinations (stateless: one instance serves every job)."""
