"""State shared by the stages of one job commit, and the engine's stage constants.

Every store operation of a job commit, an abort and a task commit goes through
:meth:`JobContext.call` (single operations) or :meth:`JobContext.list` (listings), thin
methods over THE retry layer, :mod:`amcommit.store.retry` (which says which layer retries
what). Bookkeeping after the point of no return (the journal's ``renamed`` and
``committed`` writes, ``_SUCCESS``) uses the *patient* policy
(:attr:`JobContext.patient_retry`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from amcommit.committer.config import CommitterConfig
from amcommit.committer.journal import Journal
from amcommit.committer.layout import JobLayout
from amcommit.committer.report import JobReport, Progress, ProgressCallback
from amcommit.committer.spool import EntrySpool
from amcommit.errors import CommitError
from amcommit.manifest import Scope
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.limits import Limiter
from amcommit.store.retry import Backoff, RetryPolicy, policies_of, retry_call, retry_list

if TYPE_CHECKING:
    from amcommit.committer.stages.load_manifests import LoadedManifests

T = TypeVar("T")


FAILED_IN_BATCH_CONCURRENCY = 16
"""The requests of one batch (renames, deletes) that failed are sent again this many at a
time."""


@dataclass
class JobContext:
    """The environment of a job commit's stages: the store, the job's layout, its config,
    limiter, progress callback, the journal (set by the orchestrator) and the report, the
    sink of counters and stage times. Stages read it; what they compute for each other
    travels as their explicit inputs and results (``run(ctx, inputs) -> result`` in each
    stage module), never through here. Only the frame (``committer/job.py``, the journal
    state machine ``committer/machine.py``) sets ``journal``; it and the kinds' plans set
    ``config`` (a resumed commit keeps its conflict mode; a table commit appends)."""

    store: Store
    layout: JobLayout
    config: CommitterConfig
    report: JobReport
    limiter: Limiter
    progress: ProgressCallback | None = None
    journal: Journal | None = None
    _retry: tuple[CommitterConfig, RetryPolicy, RetryPolicy] | None = field(
        default=None, init=False, repr=False
    )

    @property
    def scope(self) -> Scope:
        return Scope(
            root_uri=self.store.root_uri,
            dest=self.layout.dest,
            temp_dir=self.layout.temp_root,
            tasks_dir=self.layout.tasks_dir,
        )

    def _policies(self) -> tuple[CommitterConfig, RetryPolicy, RetryPolicy]:
        c = self.config
        cached = self._retry
        if cached is None or cached[0] is not c:  # built once per config (frozen), not per call
            cached = self._retry = (c, *policies_of(c))
        return cached

    @property
    def retry(self) -> RetryPolicy:
        """The job's retry policy for store operations (see :mod:`amcommit.store.retry`)."""
        return self._policies()[1]

    @property
    def patient_retry(self) -> RetryPolicy:
        """The policy for bookkeeping after the point of no return."""
        return self._policies()[2]

    def backoff(self) -> Backoff:
        """A backoff under the job's retry policy, limiter and statistics (for a loop that
        retries a whole pass, or a request that failed inside a batch)."""
        return Backoff(self.retry, limiter=self.limiter, stats=self.report.job_stats)

    def emit(self, stage: str, done: int, total: int, phase: str = "progress") -> None:
        if self.progress is not None:
            self.progress(Progress(stage, done, total, phase))

    async def call(self, fn: Callable[[], Awaitable[T]], *, patient: bool = False) -> T:
        """Run one store operation under the job's limiter, with the retry layer
        (:func:`amcommit.store.retry.retry_call`). ``fn`` must be safe to call again. ``patient``: use
        :attr:`patient_retry`."""
        return await retry_call(
            fn,
            policy=self.patient_retry if patient else self.retry,
            limiter=self.limiter,
            stats=self.report.job_stats,
        )

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        """``store.list`` with the retry layer (:func:`amcommit.store.retry.retry_list`): a listing that fails with a
        retryable error (at its start or midway) is started again and the entries already
        yielded are skipped (exact paths are remembered: memory grows with the listing;
        for unbounded listings restart the whole operation instead, as
        :func:`~amcommit.committer.stages.check_conflicts.record_victims` does)."""
        return retry_list(
            self.store,
            prefix,
            recursive=recursive,
            policy=self.retry,
            limiter=self.limiter,
            stats=self.report.job_stats,
        )

    @asynccontextmanager
    async def stage(self, name: str) -> AsyncIterator[None]:
        """Time a stage into the report; failures name the stage."""
        t0 = time.perf_counter()
        self.emit(name, 0, 0, "start")
        try:
            with self.report.job_stats.time(name):
                yield
            self.emit(name, 0, 0, "end")
        except CommitError as e:
            if not e.stage:
                e.stage = name
            self.report.failed_stage = self.report.failed_stage or name
            raise
        except BaseException:
            self.report.failed_stage = self.report.failed_stage or name
            raise
        finally:
            self.report.stage_seconds[name] = self.report.stage_seconds.get(name, 0.0) + (
                time.perf_counter() - t0
            )


@dataclass
class CommitRun:
    """What one orchestrator run has loaded (not the stages': they get it as inputs). The
    orchestrator owns the spool (it closes it when the run ends) and the loaded manifests,
    which the failure path needs to roll back."""

    spool: EntrySpool | None = None
    loaded: LoadedManifests | None = None

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
