"""Job side of the protocol: setup, commit (with resume), abort (with rollback), cleanup.

``commit_job`` runs the stages in order, keeping a journal on the store so that a commit
interrupted at any point (even by a killed process) can be completed by running
``commit_job`` again, or undone by ``abort_job``:

====================  ===========================================================
journal state          ``commit_job`` again            ``abort_job``
====================  ===========================================================
(none)                 fresh commit                    delete the job directory
``renaming``           resume the renames              roll back, then delete (but
                                                       complete the commit if every
                                                       file is already in place)
``renamed``            finish (delete old files, ...)  completes the commit instead
``committed``          only cleanup remains            completes the cleanup
====================  ===========================================================

The table is :func:`next_action` (a pure function; the runs below act on its answer). The
commit's walk through it is :func:`~amcommit.committer.machine.run_commit`, the same for
every kind: a kind contributes its plan (:meth:`~amcommit.committer.kind.JobKind.commit_plan`).

What is atomic: each file rename (on stores with atomic rename). What is not: the job
commit as a whole; its all-or-nothing outcome comes from the journal and the rules above.
A failure a retry cannot fix (conflict, a changed source, a bad manifest) rolls back what
was renamed before the error is raised (``config.rollback_on_failure``): the renamed files go
back to their task directories and the journal is deleted, but the job itself (task output,
manifests) is kept until ``abort_job``, so it can be committed again.

The point of no return is "every file renamed". The journal's ``renamed`` write records it
with the patient retry policy (:mod:`amcommit.committer.context`); if that write fails for
good (or the process dies just before it), the journal still says ``renaming``, and
``abort_job`` checks the store (:mod:`~amcommit.committer.stages.renames_done`:
every source gone, every destination provably this job's file) before rolling back, and
completes the commit instead. The residual risk is the proof itself: on a store that keeps
neither etags across renames nor a rename id, a destination is recognised by its size only
(the same rule the rollback uses to decide what to delete).
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Sequence

from amcommit import loop as amcommit_loop
from amcommit.committer.actions import Action as Action
from amcommit.committer.actions import next_action as next_action
from amcommit.committer.completeness import job_completeness, marker_fields
from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.journal import (
    load_journal,
    save_journal,
)
from amcommit.committer.kind import FILES, JobKind
from amcommit.committer.layout import JobLayout
from amcommit.committer.lock import LockBody, held_by, run_locked
from amcommit.committer.machine import run_commit
from amcommit.committer.report import JobReport, ProgressCallback
from amcommit.committer.stages import (
    cleanup,
    load_manifests,
    renames_done,
    rollback,
    write_summary,
)
from amcommit.committer.stages.rollback import forget_commit
from amcommit.errors import (
    AlreadyExists,
    CommitError,
    LockLost,
    ManifestError,
    RenameWorkerFailed,
    RollbackError,
    StoreError,
)
from amcommit.manifest import TaskManifest
from amcommit.paths import path_to_uri
from amcommit.store.base import PutMode, Store
from amcommit.store.limits import Limiter
from amcommit.store.retry import policies_of, retry_list

log = logging.getLogger("amcommit.job")


async def setup_with(
    kind: JobKind,
    store: Store,
    dest: str,
    job_id: str,
    *,
    job_attempt: int = 0,
    expected_tasks: int | None = None,
    origin: str = "api",
) -> JobLayout:
    """Create the job directory of a plain job in a destination of kind ``kind`` (which may
    refuse it), where the kind keeps it (the first of its layouts). CommitError if this job
    was set up before. Atomic: the job marker's create-only put decides; the directories
    after it are idempotent.

    ``expected_tasks`` (if the caller knows how many tasks make the job complete) and
    ``origin`` (who set it up, e.g. ``"spark"``) are recorded in the job marker; a later
    commit from the store alone checks them (:mod:`amcommit.committer.completeness`).
    """
    kind.refuse_setup(dest, job_id)
    layout = kind.layouts(dest, job_id, job_attempt)[0]
    marker = {"jobId": job_id, "created": time.time(), "layout": "amcommit/1"}
    body = json.dumps({**marker, **marker_fields(origin, expected_tasks)}).encode()
    try:
        await store.put(layout.job_marker, body, mode=PutMode.CREATE)
    except AlreadyExists:
        raise CommitError(f"job {job_id} was already set up in {dest!r}", stage="setup_job") from None
    await store.mkdirs(layout.manifests_dir)
    await store.mkdirs(layout.tasks_dir)
    return layout


async def _exists(store: Store, prefix: str, config: CommitterConfig) -> bool:
    async for _ in retry_list(store, prefix, recursive=False, policy=policies_of(config)[0]):
        return True
    return False


async def resolve_layout(
    store: Store,
    dest: str,
    job_id: str,
    job_attempt: int = 0,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    kind: JobKind = FILES,
) -> JobLayout | None:
    """The job's layout on the store: the first of ``kind``'s layouts
    (:meth:`~amcommit.committer.kind.JobKind.layouts`; plain files: ours, else Hadoop's,
    ``_temporary/$jobId``) whose job directory exists; None if none does. Listings are
    retried (``config``'s retry policy)."""
    for layout in kind.layouts(dest, job_id, job_attempt):
        if await _exists(store, layout.job_dir, config):
            return layout
    return None


def _new_context(
    store: Store,
    layout: JobLayout,
    config: CommitterConfig,
    progress: ProgressCallback | None,
    limiter: Limiter | None,
    kind: JobKind = FILES,
) -> JobContext:
    report = kind.new_report(layout.job_id, path_to_uri(store.root_uri, layout.dest))
    report.conflict_mode = config.conflict_mode
    report.event_loop = amcommit_loop.running()
    # the job's workers already bound concurrency (io_threads); its own limiter adds the
    # rate limit and throttling feedback. A caller's (shared) limiter is used as given.
    lim = limiter or Limiter(max_concurrency=None, rate=config.io_rate)
    return JobContext(store, layout, config, report, lim, progress)


async def commit_with(
    kind: JobKind,
    store: Store,
    dest: str,
    job_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    manifests: Sequence[TaskManifest] | None = None,
    manifest_etags: Sequence[str | None] | None = None,
    progress: ProgressCallback | None = None,
    job_attempt: int = 0,
    limiter: Limiter | None = None,
    allow_partial: bool = False,
) -> JobReport:
    """``commit_job`` of a destination of kind ``kind`` (no probe): the kind's guard around
    the commit under the destination lock (:func:`commit_held`)."""
    completed: list[str] = []  # the dead holder whose commit finish_previous completed

    async def finish_previous(prev: LockBody, s: Store) -> None:
        if await finish_previous_job(kind, s, dest, prev, config, limiter):
            completed.append(prev.owner)

    async def locked() -> JobReport:
        return await run_locked(
            store,
            dest,
            job_id,
            config,
            lambda s: commit_held(
                kind,
                s,
                dest,
                job_id,
                config=config,
                manifests=manifests,
                manifest_etags=manifest_etags,
                progress=progress,
                job_attempt=job_attempt,
                limiter=limiter,
                allow_partial=allow_partial,
                completed_previous=completed,
            ),
            job_attempt=job_attempt,
            finish_previous=finish_previous,
            staging=kind.lock_staging(job_id),
        )

    return await kind.guard(store, dest, job_id, job_attempt, config, locked)


async def finish_previous_job(
    kind: JobKind, store: Store, dest: str, prev: LockBody, config: CommitterConfig, limiter: Limiter | None
) -> bool:
    """Complete what the dead holder ``prev`` of the destination lock was doing (its
    journal is unfinished): its commit, or its abort. Runs under our lock. True if its
    commit was completed (our ``_SUCCESS`` then names it, so that job, run again, learns
    it is committed)."""
    other = kind.for_other_job()
    if prev.operation == "abort":
        report = await abort_held(
            other, store, dest, prev.owner, config=config, job_attempt=prev.job_attempt, limiter=limiter
        )
    else:
        report = await commit_held(
            other, store, dest, prev.owner, config=config, job_attempt=prev.job_attempt, limiter=limiter
        )
    return report.success


async def commit_held(
    kind: JobKind,
    store: Store,
    dest: str,
    job_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    manifests: Sequence[TaskManifest] | None = None,
    manifest_etags: Sequence[str | None] | None = None,
    progress: ProgressCallback | None = None,
    job_attempt: int = 0,
    limiter: Limiter | None = None,
    allow_partial: bool = False,
    completed_previous: Sequence[str] = (),
) -> JobReport:
    """Commit (or resume committing) job ``job_id`` into ``dest``; return its report. The
    caller holds the destination lock (:func:`commit_with` takes it).

    ``manifests``: the task manifests if the caller has them (Spark commit messages);
    otherwise they are loaded from the job directory. Given manifests are validated, then
    published in place of whatever the job directory holds (see
    :mod:`~amcommit.committer.stages.publish_manifests`; ``manifest_etags``,
    the etags the tasks saw after publishing, spare re-reading them), so that a resume or
    a rollback works from exactly the same manifests. Committing a job that is already
    committed and cleaned up returns the report the kind finds (``_SUCCESS``, an instant).

    Without ``manifests``, a job whose commit was not begun yet is first checked for
    completeness (:mod:`~amcommit.committer.completeness`): a Spark job, or one set up with
    ``expected_tasks`` that has another number of manifests, raises
    :class:`~amcommit.errors.IncompleteJob` before anything changes, unless
    ``allow_partial``. ``report.completeness`` says what was checked.
    """
    if manifest_etags is not None and (manifests is None or len(manifest_etags) != len(manifests)):
        raise ManifestError(
            f"{0 if manifests is None else len(manifests)} manifests but {len(manifest_etags)} manifest etags"
        )
    layout = await resolve_layout(store, dest, job_id, job_attempt, config=config, kind=kind)
    if layout is None:
        done = await kind.committed_without(store, dest, job_id, job_attempt, config)
        if done is not None:
            return done
        if manifests is None:
            raise CommitError(
                f"no job directory for job {job_id!r} under {dest!r} (never set up, aborted, or "
                "committed and cleaned up before the last commit into this destination)",
                stage="commit_job",
            )
        layout = JobLayout(dest, job_id, job_attempt)
    completeness = (
        None if manifests is not None else await job_completeness(store, layout, allow_partial, config)
    )
    ctx = _new_context(store, layout, config, progress, limiter, kind)
    report = ctx.report
    report.completeness = completeness
    report.completed_previous = completed_previous[-1] if completed_previous else None
    run = CommitRun()
    try:
        await run_commit(ctx, run, manifests, manifest_etags, await kind.commit_plan(ctx))
        report.success = True
    except BaseException as e:
        report.success = False
        report.error = _describe(e)
        report.finished = time.time()
        undo_failed = await _after_failure(ctx, run, e)
        if undo_failed is not None:
            raise _rollback_failed(ctx, e, undo_failed) from e
        raise
    finally:
        run.close()
    report.finished = time.time()
    report.store_stats = store.iostats.snapshot(prefix="store_")
    try:
        await write_summary.run(ctx, write_summary.SummaryInputs(report))
    except Exception as e:  # the commit succeeded; a report directory problem is not fatal
        report.error = f"summary report not written: {_describe(e)}"
    try:
        async with ctx.stage("cleanup"):
            await cleanup.run(ctx, cleanup.CleanupInputs())
    except StoreError as e:
        if not config.cleanup_failures_ignored:
            raise CommitError(
                f"the output is committed, but cleaning up the job directory failed ({e}); "
                "run commit_job again to finish the cleanup",
                stage="cleanup",
            ) from e
        report.error = f"cleanup failed: {_describe(e)}"
    return report


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _unfixable(e: BaseException) -> bool:
    """Errors a retry of the same commit cannot fix: conflicts, changed or missing sources,
    bad manifests. Store failures (outages, permissions) are not: the journal is kept so
    the commit can be resumed once the store is healthy."""
    return isinstance(e, (CommitError, ManifestError)) and not isinstance(
        e, (RollbackError, LockLost, RenameWorkerFailed)
    )


def _rollback_failed(ctx: JobContext, e: BaseException, undo: Exception) -> RollbackError:
    """The one-line error of a commit that failed and whose own rollback failed too: the
    destination holds part of the commit (its journal says so) until ``commit_job`` or
    ``abort_job`` of the job ends it."""
    layout = ctx.layout
    where = path_to_uri(ctx.store.root_uri, layout.dest)
    return RollbackError(
        f"the commit failed and undoing its renames failed too ({_describe(undo)}), so part of it is "
        f"published: run `amcommit abort-job {where} --job-id {layout.job_id}` to roll it back, or "
        f"`amcommit commit-job` with the same arguments to resume it; the commit failed with {_describe(e)}",
        stage=ctx.report.failed_stage or "",
    )


async def _after_failure(ctx: JobContext, run: CommitRun, e: BaseException) -> Exception | None:
    """Roll back (for unfixable errors during the renames, before the point of no return)
    and write the summary report. Never raises; returns the rollback's error if the
    rollback failed (the journal is then kept: ``abort_job`` finishes it).

    The rollback moves the renamed files back into their task directories and forgets the
    commit (journal, victim lists, trash), but keeps the job: task outputs, manifests and
    markers stay until ``abort_job``, so the job can be committed again (e.g. in another
    conflict mode)."""
    undo_failed: Exception | None = None
    journal = ctx.journal
    if (
        ctx.config.rollback_on_failure
        and _unfixable(e)
        and run.loaded is not None
        and journal is not None
        and journal.state == "renaming"
        and ctx.report.failed_stage in ("prepare_dirs", "rename_files")
    ):
        try:
            async with ctx.stage("rollback"):
                await rollback.run(ctx, rollback.RollbackInputs(run.loaded, keep_job=True))
                await forget_commit(ctx, journal.victim_chunks)
        except Exception as re:  # keep the journal; abort_job can finish the rollback
            ctx.report.error = f"{ctx.report.error}; rollback failed: {_describe(re)}"
            undo_failed = re
    try:
        await write_summary.run(ctx, write_summary.SummaryInputs(ctx.report))
    except Exception as we:
        ctx.report.error = f"{ctx.report.error}; summary report not written: {_describe(we)}"
    return undo_failed


async def abort_with(
    kind: JobKind,
    store: Store,
    dest: str,
    job_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    progress: ProgressCallback | None = None,
    job_attempt: int = 0,
    limiter: Limiter | None = None,
) -> JobReport:
    """Abort job ``job_id`` of a destination of kind ``kind`` (see :func:`abort_held`). If
    the job left a journal (its commit began) or holds the lock (it died holding it), the
    destination lock is held while the destination is rolled back or the commit completed;
    otherwise only the job directory is deleted, without waiting for the lock."""
    layout = await resolve_layout(store, dest, job_id, job_attempt, config=config, kind=kind)
    # the kind's lock (not the staging folder the job was found in: a kind may find jobs of
    # an earlier layout, e.g. a table write staged in .hoodie/.temp/, whose commits now lock
    # where the kind's other jobs do)
    staging = kind.lock_staging(job_id) if layout is None or layout.staging is not None else None
    journal = (
        None
        if layout is None
        else await load_journal(_new_context(store, layout, config, None, limiter, kind))
    )
    if journal is None and not await held_by(
        store, dest, job_id, policy=policies_of(config)[0], staging=staging
    ):
        return await abort_held(
            kind,
            store,
            dest,
            job_id,
            config=config,
            progress=progress,
            job_attempt=job_attempt,
            limiter=limiter,
        )
    return await run_locked(
        store,
        dest,
        job_id,
        config,
        lambda s: abort_held(
            kind, s, dest, job_id, config=config, progress=progress, job_attempt=job_attempt, limiter=limiter
        ),
        job_attempt=job_attempt,
        operation="abort",
        finish_previous=lambda prev, s: finish_previous_job(kind, s, dest, prev, config, limiter),
        staging=staging,
    )


async def abort_held(
    kind: JobKind,
    store: Store,
    dest: str,
    job_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    progress: ProgressCallback | None = None,
    job_attempt: int = 0,
    limiter: Limiter | None = None,
) -> JobReport:
    """Abort job ``job_id``: the destination ends as it was before the job, unless the
    commit had passed its point of no return (journal ``renamed``/``committed``, or
    ``renaming`` with every file found in place), in which case the commit is completed
    instead. Idempotent.
    """
    layout = await resolve_layout(store, dest, job_id, job_attempt, config=config, kind=kind)
    if layout is None:
        report = kind.new_report(job_id, path_to_uri(store.root_uri, dest))
        report = await kind.abort_without(store, dest, job_id, job_attempt, config, report)
        report.finished = time.time()
        return report
    ctx = _new_context(store, layout, config.with_options(cleanup_skipped=False), progress, limiter, kind)
    journal = await load_journal(ctx)
    action = next_action("abort", journal.state if journal is not None else None)
    run = CommitRun()
    try:
        if action is Action.CHECK_RENAMES:
            assert journal is not None
            async with ctx.stage("load_manifests"):
                run.spool = load_manifests.new_spool(ctx)
                loaded = run.loaded = await load_manifests.run(ctx, load_manifests.LoadInputs(run.spool))
            in_place = (await renames_done.run(ctx, renames_done.RenamesDoneInputs(loaded))).done
            action = next_action("abort", journal.state, renames_done=in_place)
            if action is Action.COMPLETE:
                # every file is in place although the journal never said so (its write
                # failed): the point of no return was passed; complete, never roll back
                journal.state = "renamed"
                journal.renamed = journal.recovered_renames = loaded.spool.count
                first = heapq.nsmallest(config.success_filenames, (e.dst for e in loaded.spool.entries()))
                journal.filenames = [path_to_uri(store.root_uri, d) for d in first]
                await save_journal(ctx, journal, patient=True)
        if action is not Action.COMPLETE and await kind.roll_back(ctx, journal, run, action):
            action = Action.COMPLETE  # past its point of no return after all: only completing remains
    finally:
        run.close()
    if action is Action.COMPLETE:
        # no journal: a kind's commit that published and whose cleanup was cut short after
        # the journal went (a directory deleted in any order, or a flat store's objects;
        # e.g. a table write whose instant is completed): the commit finishes the cleanup
        mode = journal.conflict_mode if journal is not None else config.conflict_mode
        return await commit_held(
            kind,
            store,
            dest,
            job_id,
            config=config.with_options(conflict_mode=mode),
            progress=progress,
            job_attempt=job_attempt,
            limiter=limiter,
        )
    ctx.report.finished = time.time()
    return ctx.report
