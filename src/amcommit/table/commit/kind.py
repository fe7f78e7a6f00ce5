"""The engine's hooks for a Hudi table write (:class:`TableKind`, a
:class:`~amcommit.committer.kind.JobKind`).

The engine's frame (:mod:`amcommit.committer.job`) runs a table write's commit and abort
through these hooks: staging in ``.hoodie/.aux/amcommit/$instant/`` (the job id is the
instant; a write staged in ``.hoodie/.temp/$instant/`` by an earlier version is found there
too) with the table's lock in ``.hoodie/.aux/amcommit/``; the commit's plan is :class:`~amcommit.table.commit.table_commit.TablePlan` (run by the engine's
journal state machine, :mod:`amcommit.committer.machine`);
an abort removes every file stamped with the instant, then its instant files
(:mod:`amcommit.table.commit.rollback`); a write is committed when its instant is completed. Around
the locked commit the writer's heartbeat is kept fresh and an earlier live writer is waited
for outside the lock; after a commit (outside the lock) the markers of a direct write are removed and late
markers swept (:func:`~amcommit.table.write.direct.sweep_late_markers`), then the table is cleaned
(``clean_retain_commits``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from contextvars import ContextVar

import anyio

from amcommit.committer.actions import Action
from amcommit.committer.config import CommitterConfig
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.jobs import DestinationJobs
from amcommit.committer.journal import Journal
from amcommit.committer.kind import FILES, FilesPlan, JobKind
from amcommit.committer.layout import JobLayout
from amcommit.committer.machine import CommitPlan
from amcommit.committer.report import JobReport
from amcommit.errors import AmcommitError, CommitError, LockLost, NotFound, StoreError
from amcommit.parallel import run_parallel
from amcommit.paths import join, path_to_uri
from amcommit.store.base import Store
from amcommit.table.commit.archive import archive_after_commit
from amcommit.table.commit.clean import clean_after_commit
from amcommit.table.commit.jobs import list_table_jobs
from amcommit.table.commit.table_commit import (
    TablePlan,
    WaitForEarlier,
    completed_instant,
    skipped_before,
    wait_for_earlier,
)
from amcommit.table.commit.undo import finish_rollback, rollback_table_write
from amcommit.table.format.model import Action as InstantAction
from amcommit.table.format.model import Operation, decode_commit_metadata
from amcommit.table.format.naming import HOODIE_DIR, STAGING_DIR, is_instant
from amcommit.table.report import TableReport, table_report
from amcommit.table.settings import TableSettings, table_settings
from amcommit.table.timeline.heartbeat import delete_beat, heartbeat, stop_beat
from amcommit.table.timeline.labelmeta import Label
from amcommit.table.write.direct import Published, sweep_after, sweep_instant
from amcommit.table.write.staging import (
    find_table_layout,
    is_legacy_layout,
    is_table_layout,
    legacy_table_layout,
    table_layout,
)
from amcommit.table.write.task import is_table, set_operation

__all__ = ["TableKind", "is_table"]

log = logging.getLogger("amcommit.job")


async def table_already_committed(store: Store, dest: str, instant: str) -> JobReport | None:
    """The report of a table write whose instant is completed and staging cleaned up."""
    done = await completed_instant(store, dest, instant)
    if done is None:
        return None
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, done.file_name)))
    report = TableReport(job_id=instant, dest_uri=path_to_uri(store.root_uri, dest), success=True)
    report.instant = instant
    report.label = meta.extra_metadata.get("amcommit.label")
    report.operation = meta.operation_type or (
        Operation.INSERT_OVERWRITE.value
        if done.action == InstantAction.REPLACE_COMMIT.value
        else Operation.INSERT.value
    )
    stats = meta.write_stats()
    report.files = report.renamed = len(stats)
    report.bytes = sum(s.file_size_in_bytes for s in stats)
    report.already_committed = True
    report.finished = time.time()
    return report


async def _markers_only(ctx: JobContext) -> bool:
    """True if the engine resolved an earlier version's layout (``.hoodie/.temp/<instant>/``)
    only because Hudi's marker folder of the instant is there: neither a job marker nor a
    journal in it (two stats, only for such a layout)."""
    if not is_legacy_layout(ctx.layout):
        return False
    for path in (ctx.layout.job_marker, ctx.layout.journal_path):
        try:
            await ctx.store.stat(path)
        except NotFound:
            continue
        return False
    return True


_GUARDED: ContextVar[str | None] = ContextVar("amcommit_table_guarded", default=None)
"""The instant whose ``commit_job`` (:meth:`TableKind.guard`) runs in this context: its
commit body leaves the markers to the guard, which removes them after the lock; a commit
the engine completes otherwise (an abort, another writer) removes them itself."""

_PUBLISHED: ContextVar[list[Published] | None] = ContextVar("amcommit_table_published", default=None)
"""(with :data:`_GUARDED`) where the guarded commit's plan records what it published, for
the guard's marker sweep after the lock (:class:`~amcommit.table.write.direct.Published`)."""


def _plain_job_refused(dest: str, job_id: str, stage: str) -> CommitError:
    """A plain job would put a ``_temporary`` folder and plain files into the table."""
    return CommitError(
        f"{dest!r} holds a Hudi table: plain job {job_id!r} cannot write into it (write through "
        "the table API, begin_write, or tableFormat=hudi)",
        stage=stage,
    )


class _DecidedMarkers(FilesPlan):
    """``commit_job`` of a write whose staging is gone, found by the engine only through
    its marker folder (:func:`_markers_only`): a completed write gets its report and its
    markers judged (:func:`~amcommit.table.write.direct.sweep_instant`; never the folder
    deleted as a whole: a young loser's marker stays); any other is no job to commit. Its
    commit is published from the start (:meth:`begin`): the frame runs none of the other
    steps (those of :class:`~amcommit.committer.kind.FilesPlan`, never reached)."""

    def __init__(self, writer_ttl: float) -> None:
        self.writer_ttl = writer_ttl

    async def begin(self, ctx: JobContext) -> bool:
        return True

    async def finished(self, ctx: JobContext, journal: Journal | None) -> None:
        ctx.config = ctx.config.with_options(cleanup_skipped=True)
        store, dest, instant = ctx.store, ctx.layout.dest, ctx.layout.job_id
        done = await table_already_committed(store, dest, instant)
        if done is None:
            raise CommitError(
                f"no job directory for table write {instant} under {dest!r} (never begun, rolled back, "
                "or skipped)",
                stage="commit_job",
            )
        report = table_report(ctx.report)
        for name in ("instant", "label", "operation", "files", "renamed", "bytes", "already_committed"):
            setattr(report, name, getattr(done, name))
        await sweep_instant(store, dest, instant, grace=self.writer_ttl, config=ctx.config)


class TableKind:
    """A write into a Hudi CoW table (module doc). ``label`` and ``operation``: this call's
    own (see ``commit_job``); the kind that finishes another write has neither.
    ``settings``: the table's (:class:`~amcommit.table.settings.TableSettings`); None: those
    given with the config of each call (a :class:`~amcommit.table.settings.TableConfig`'s,
    else the defaults)."""

    name = "table"

    def __init__(
        self,
        *,
        label: Label | None = None,
        operation: str | None = None,
        settings: TableSettings | None = None,
    ) -> None:
        self.label = label
        self.operation = operation
        self.settings = settings

    def settings_for(self, config: CommitterConfig) -> TableSettings:
        """The table settings a call with ``config`` runs with (class doc)."""
        return self.settings if self.settings is not None else table_settings(config)

    def new_report(self, job_id: str, dest_uri: str) -> JobReport:
        return TableReport(job_id=job_id, dest_uri=dest_uri)

    def refuse_setup(self, dest: str, job_id: str) -> None:
        raise _plain_job_refused(dest, job_id, "setup_job")

    def layouts(self, dest: str, job_id: str, job_attempt: int) -> Sequence[JobLayout]:
        plain = FILES.layouts(dest, job_id, job_attempt)  # a plain job's directory in a table
        if is_instant(job_id) and job_attempt == 0:
            return (table_layout(dest, job_id), legacy_table_layout(dest, job_id), *plain)
        return plain

    def lock_staging(self, job_id: str) -> str | None:
        return STAGING_DIR if is_instant(job_id) else None

    async def committed_without(
        self, store: Store, dest: str, job_id: str, job_attempt: int, config: CommitterConfig
    ) -> JobReport | None:
        if is_instant(job_id):
            done = await table_already_committed(store, dest, job_id)
            if done is not None:
                return done
        return await FILES.committed_without(store, dest, job_id, job_attempt, config)

    async def commit_plan(self, ctx: JobContext) -> CommitPlan:
        if not is_table_layout(ctx.layout):  # a plain job's directory in a table (never set up by us)
            return await FILES.commit_plan(ctx)
        if await _markers_only(ctx):
            return _DecidedMarkers(self.settings_for(ctx.config).writer_ttl)
        guarded = _GUARDED.get() == ctx.layout.job_id
        return TablePlan(
            kind=self.for_other_job(),
            label=self.label,
            settings=self.settings_for(ctx.config),
            markers_after_lock=guarded,
            published=_PUBLISHED.get() if guarded else None,
        )

    async def roll_back(
        self, ctx: JobContext, journal: Journal | None, run: CommitRun, action: Action
    ) -> bool:
        if not is_table_layout(ctx.layout):
            return await FILES.roll_back(ctx, journal, run, action)
        if await _markers_only(ctx):
            ctx.config = ctx.config.with_options(cleanup_skipped=True)  # markers, not a job directory
            if await completed_instant(ctx.store, ctx.layout.dest, ctx.layout.job_id) is not None:
                return True  # committed: the engine "completes" it (commit_plan, below)
        return await rollback_table_write(ctx, journal, run=run)

    async def abort_without(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        report: JobReport,
    ) -> JobReport:
        if not is_instant(job_id):
            return report
        done = await table_already_committed(store, dest, job_id)
        if done is not None:  # committed and cleaned up: nothing to abort
            return done
        # staging gone (a rollback interrupted after its cleanup): finish the rollback
        table_report(report).instant = job_id
        report.rolled_back = await finish_rollback(store, dest, job_id, partitions=None, config=config)
        return report

    def for_other_job(self) -> JobKind:
        return TableKind(settings=self.settings)

    async def list_jobs(self, store: Store, dest: str, config: CommitterConfig) -> DestinationJobs:
        """The table's pending instants (:func:`~amcommit.table.commit.jobs.list_table_jobs`); a
        destination without ``hoodie.properties`` is listed as plain files."""
        listed = await list_table_jobs(store, dest, config, self.settings_for(config).writer_ttl)
        return listed if listed is not None else await FILES.list_jobs(store, dest, config)

    async def guard(
        self,
        store: Store,
        dest: str,
        job_id: str,
        job_attempt: int,
        config: CommitterConfig,
        locked: Callable[[], Awaitable[JobReport]],
    ) -> JobReport:
        """``commit_job`` of a table write: under the table's lock, keeping the writer's
        heartbeat fresh; an earlier live instant is waited for outside the lock; then the
        table is cleaned (``clean_retain_commits``) outside the lock.

        ``label`` (overrides the one given to ``begin_write``): see
        :class:`~amcommit.table.commit.table_commit.TablePlan`. A write already skipped for its
        label (staging gone, instant not completed) gets the same skipped report again.
        ``operation``: settled first (:func:`~amcommit.table.write.task.set_operation`), before
        anything is published.

        A commit that fails with the write still in place (an error, or cancelled) marks the
        heartbeat *stopped* (:func:`~amcommit.table.timeline.heartbeat.stop_beat`): ``amcommit
        rollback`` and later writers treat the write as abandoned at once; running
        ``commit_job`` again beats again and resumes it."""
        if not is_instant(job_id) or job_attempt != 0:
            raise _plain_job_refused(dest, job_id, "commit_job")
        settings = self.settings_for(config)
        token = _GUARDED.set(job_id)  # this commit removes its markers after the lock (below)
        published: list[Published] = []
        token_published = _PUBLISHED.set(published)
        beat_end: list[Callable[[], Awaitable[None]]] = []
        try:
            report = await self._commit_guarded(
                store, dest, job_id, config, settings.writer_ttl, locked, beat_end
            )
        finally:
            _PUBLISHED.reset(token_published)
            _GUARDED.reset(token)

        async def final_beat() -> None:
            with anyio.CancelScope(shield=True):  # as it was inside _commit_guarded's finally
                for step in beat_end:
                    await step()

        async def markers() -> None:
            if report.success:
                await _markers_after(
                    store, dest, job_id, config, settings.writer_ttl, published[0] if published else None
                )

        # After the lock, at the same time: the last beat's removal and the marker sweep.
        # Both come after the instant is completed and the lock released, neither reads
        # what the other changes, and each is idempotent: a kill at any point between their
        # requests leaves at most a beat the heartbeat loop wrote again after the commit
        # removed it under the lock (as a kill before this stat did) and/or markers of a
        # completed instant (the next commit, clean or rollback sweeps them, as after a
        # kill before the sweep).
        await run_parallel([final_beat, markers], lambda step: step(), 2)
        if settings.clean_retain_commits is not None and not report.already_committed:
            await _clean_after(store, dest, config, settings.clean_retain_commits)
        if report.success and not report.already_committed:
            # (as Hudi's postCommit: clean, then archive; outside the lock, never failing it)
            await archive_after_commit(store, dest, config, table_report(report).active_writes, settings)
        return report

    async def _commit_guarded(
        self,
        store: Store,
        dest: str,
        instant: str,
        config: CommitterConfig,
        writer_ttl: float,
        attempt: Callable[[], Awaitable[JobReport]],
        beat_end: list[Callable[[], Awaitable[None]]] | None = None,
    ) -> JobReport:
        """``attempt`` within the write's heartbeat block (:meth:`guard`). ``beat_end``: where a
        commit that returned leaves the removal of its last beat, for the caller to run
        (with its marker sweep); else, and whenever the commit raised, it is done here."""
        deadline = time.monotonic() + config.lock_wait
        staging = await find_table_layout(store, dest, instant)
        if staging is None:
            if self.label is not None:
                skipped = await skipped_before(store, dest, instant, self.label, config)
                if skipped is not None:
                    return skipped
            return await attempt()  # already committed (or never begun): no heartbeat to keep
        stopped = False  # this writer gave up on the write: its heartbeat says so
        returned = False

        async def end_beat() -> None:
            # the heartbeat loop has stopped: remove a beat it left after a commit or rollback;
            # a commit that failed with the write still there says its writer stopped, so that
            # `amcommit rollback` (or the next writer) need not wait writer_ttl for it
            try:
                await store.stat(staging.job_marker)  # (its own layout, legacy or not)
            except NotFound:
                await delete_beat(store, dest, instant)
            except Exception:
                pass
            else:
                if stopped:
                    try:
                        await stop_beat(store, dest, instant)
                    except StoreError:
                        pass

        try:
            # a write an earlier version staged in .hoodie/.temp/ is finished without beats:
            # its keeper record would create a job directory of the new layout
            beats = (
                nullcontext()
                if is_legacy_layout(staging)
                else heartbeat(store, dest, instant, ttl=writer_ttl)
            )
            async with beats:
                if self.operation is not None:
                    await set_operation(store, dest, instant, Operation(self.operation), config)
                while True:
                    try:
                        report = await attempt()
                        break
                    except WaitForEarlier as w:
                        await wait_for_earlier(store, dest, instant, w.instant, deadline, writer_ttl)
            returned = True
        except LockLost:
            raise  # a taker completes or rolls back this very commit: leave the judging to it
        except BaseException:
            stopped = True
            raise
        finally:
            if returned and beat_end is not None:
                beat_end.append(end_beat)
            else:
                with anyio.CancelScope(shield=True):
                    await end_beat()
        return report


async def _markers_after(
    store: Store,
    dest: str,
    instant: str,
    config: CommitterConfig,
    grace: float,
    published: Published | None = None,
) -> None:
    """After a table commit, outside its lock (as Hudi deletes its marker folder after the
    commit): the committed write's markers are removed (the files of markers no winner
    names deleted first: uploads of late attempts; a loser's marker whose file was not found
    kept while younger than ``grace``), and late markers of other decided instants swept
    (:func:`~amcommit.table.write.direct.sweep_late_markers`; a staged write has no markers: one
    listing of ``.hoodie/.temp/``). A failure never fails the commit before it: it is
    logged, and the next commit, clean or rollback sweeps what it left."""
    await sweep_after(
        store,
        dest,
        f"the commit of {instant}",
        grace=grace,
        config=config,
        first=instant,
        first_published=published,
    )


async def _clean_after(store: Store, dest: str, config: CommitterConfig, retain_commits: int) -> None:
    """``clean_retain_commits``: clean after a table commit, outside the lock the commit
    held. A failed clean never fails the commit before it (that commit stays committed); it
    is logged, and the next clean completes what it left."""
    try:
        await clean_after_commit(store, dest, config, retain_commits=retain_commits)
    except AmcommitError as e:
        log.warning("clean after commit into %s failed (the commit stands): %s", dest, e)
