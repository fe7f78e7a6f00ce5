"""State shared by the stages of one job commit, the engine's retry layer, and the
bounded parallel runner.

**Which layer retries.** Every store operation of a job commit, an abort and a task
commit goes through :meth:`JobContext.call` (single operations) or
:meth:`JobContext.list` (listings): the journal, manifest and victim listings and reads,
victim chunks, mkdirs, renames, deletes, ``_SUCCESS``, cleanup and the summary report.
Exactly one layer retries each request:

* stores with ``Capabilities.retries`` (the HTTP stores: Blob, ADLS Gen2, GCS) retry
  their requests themselves, through their own limiter; what they give up on is marked
  ``retries_spent`` and is final here. The engine makes one call per operation, and
  retries only a retryable error the store *declined* to repeat (a request it could not
  prove idempotent, e.g. GCS ``put(OVERWRITE)`` after a 503): every operation the engine
  makes is safe to repeat (whole-object puts of its own files, idempotent deletes, renames
  whose repetition is recognised by etag or rename id);
* for other stores (local files; :class:`~amcommit.store.faulty.FaultyStore`, whose faults
  are injected above whatever the wrapped store retries) this module is the retry layer,
  with the job's :class:`~amcommit.store.retry.RetryPolicy` (``rename_attempts``,
  ``retry_base_delay``, ``retry_max_delay``).

So an operation costs at most ``rename_attempts`` requests per layer that retries it,
never their product. Each attempt here takes one slot/token of the job's limiter
(``io_rate``); a throttling answer is reported to the limiter of the layer that retried it,
once (the store's for HTTP stores, the job's otherwise).

Bookkeeping after the point of no return (the journal's ``renamed`` and ``committed``
writes, ``_SUCCESS``) uses the *patient* policy (:attr:`JobContext.patient_retry`: four
times the attempts, six times the maximum delay: about 3 minutes of throttling storm with
the defaults), so a commit whose renames are all done does not fail on a transient error.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sized
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from amcommit.committer.config import CommitterConfig
from amcommit.committer.journal import Journal
from amcommit.committer.layout import JobLayout
from amcommit.committer.report import JobReport, Progress, ProgressCallback
from amcommit.committer.spool import EntrySpool
from amcommit.errors import CommitError, StoreError, Throttled
from amcommit.iostats import IOStatistics
from amcommit.manifest import Scope
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.limits import Limiter
from amcommit.store.retry import Backoff, RetryPolicy, call_with_retries

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
    stage module), never through here. Only the orchestrators (``committer/job.py``,
    ``table/commit.py``) set ``config`` (a resumed commit keeps its conflict mode) and
    ``journal``."""

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
        """The job's retry policy for store operations (see the module docstring)."""
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
        """Run one store operation under the job's limiter, with the engine's retry layer
        (see the module docstring). ``fn`` must be safe to call again. ``patient``: use
        :attr:`patient_retry`."""
        return await retry_call(
            fn,
            policy=self.patient_retry if patient else self.retry,
            limiter=self.limiter,
            stats=self.report.job_stats,
        )

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        """``store.list`` with the engine's retry layer: a listing that fails with a
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


def policies_of(config: CommitterConfig) -> tuple[RetryPolicy, RetryPolicy]:
    """``(normal, patient)`` retry policies of a configuration (see the module docstring)."""
    normal = RetryPolicy(config.rename_attempts, config.retry_base_delay, config.retry_max_delay)
    patient = RetryPolicy(
        max(4 * config.rename_attempts, 8), config.retry_base_delay, 6 * config.retry_max_delay
    )
    return normal, patient


async def retry_call(
    fn: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    limiter: Limiter | None = None,
    stats: IOStatistics | None = None,
) -> T:
    """One store operation through the engine's retry layer (see the module docstring):
    each attempt takes a slot of ``limiter``; answers that are not refusals are reported
    to it; errors an inner layer already retried (``retries_spent``) are raised at once."""

    async def once(_attempt: int) -> T:
        if limiter is None:
            return await fn()
        async with limiter.slot():
            try:
                result = await fn()
            except StoreError as e:
                if not e.retryable and not isinstance(e, Throttled):
                    limiter.succeeded()  # an answer (not found, exists, ...), not a refusal
                raise
        limiter.succeeded()
        return result

    return await call_with_retries(once, policy=policy, limiter=limiter, stats=stats)


async def retry_list(
    store: Store,
    prefix: str,
    *,
    recursive: bool = True,
    policy: RetryPolicy,
    limiter: Limiter | None = None,
    stats: IOStatistics | None = None,
) -> AsyncIterator[ObjectInfo]:
    """See :meth:`JobContext.list`. Each (re)start of the listing counts as one attempt
    of ``policy``; the entries of one successful listing are yielded once each."""
    seen: set[str] = set()
    backoff = Backoff(policy, limiter=limiter, stats=stats)
    attempt = 0
    while True:
        attempt += 1
        try:
            if limiter is not None:
                async with limiter.slot():
                    pass
            async for info in store.list(prefix, recursive=recursive):
                if info.path not in seen:
                    seen.add(info.path)
                    yield info
            if limiter is not None:
                limiter.succeeded()
            return
        except StoreError as e:
            delay = backoff.after(e, attempt)
            if stats is not None:
                stats.incr("committer_listing_restarted")
        await anyio.sleep(delay)


async def run_parallel(
    items: Iterable[T] | AsyncIterator[T],
    worker: Callable[[T], Awaitable[None]],
    concurrency: int,
) -> None:
    """Run ``worker(item)`` for every item with at most ``concurrency`` at once.

    Items are pulled lazily (at most ``concurrency`` are in progress). A synchronous
    iterable is shared directly by the workers (no hand-off cost per item); an async
    iterator is fed through a small stream. The first failure cancels the rest and is
    raised (unwrapped from the exception group). A sized collection gets no more workers
    than it has items (a task costs ~20 us to start: 128 of them for 3 directories cost
    more than the work), and a single item runs inline, without a task group.
    """
    if isinstance(items, Sized):
        if len(items) == 0:
            return
        if len(items) == 1 and not hasattr(items, "__aiter__"):
            for item in items:
                await worker(item)
            return
        concurrency = min(concurrency, len(items))
    try:
        async with anyio.create_task_group() as tg:
            if hasattr(items, "__aiter__"):
                await _feed_async(tg, items, worker, concurrency)  # type: ignore[arg-type]
            else:
                shared = iter(items)

                async def pull() -> None:
                    for item in shared:  # one event loop: next() never runs concurrently
                        await worker(item)

                for _ in range(concurrency):
                    tg.start_soon(pull)
    except BaseExceptionGroup as eg:
        raise _first_error(eg) from None


async def _feed_async(
    tg: anyio.abc.TaskGroup,
    items: AsyncIterator[T],
    worker: Callable[[T], Awaitable[None]],
    concurrency: int,
) -> None:
    send, receive = anyio.create_memory_object_stream[T](concurrency)

    async def consume(r: MemoryObjectReceiveStream[T]) -> None:
        async with r:
            async for item in r:
                await worker(item)

    for _ in range(concurrency):
        tg.start_soon(consume, receive.clone())
    receive.close()
    async with send:
        async for item in items:
            await send.send(item)


def _first_error(eg: BaseExceptionGroup[BaseException]) -> BaseException:
    """The most meaningful error of a group: a non-cancellation one, preferring ours."""
    flat: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                walk(sub)
        else:
            flat.append(e)

    walk(eg)
    for kind in (CommitError, StoreError, Exception):
        for e in flat:
            if isinstance(e, kind):
                return e
    return flat[0] if flat else eg
