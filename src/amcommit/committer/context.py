"""State shared by the stages of one job commit, and the bounded parallel runner."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from amcommit.committer.config import CommitterConfig
from amcommit.committer.journal import Journal
from amcommit.committer.layout import JobLayout
from amcommit.committer.report import JobReport, Progress, ProgressCallback
from amcommit.committer.spool import EntrySpool
from amcommit.errors import CommitError, StoreError
from amcommit.manifest import Scope
from amcommit.store.base import Store
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy, call_with_retries

T = TypeVar("T")


@dataclass
class JobContext:
    """Everything a stage needs. Stages read and fill it; they never hold global state."""

    store: Store
    layout: JobLayout
    config: CommitterConfig
    report: JobReport
    limiter: Limiter
    progress: ProgressCallback | None = None
    spool: EntrySpool | None = None
    dirs: set[str] = field(default_factory=set)
    journal: Journal | None = None
    _retry: tuple[CommitterConfig, RetryPolicy] | None = field(default=None, init=False, repr=False)

    @property
    def scope(self) -> Scope:
        return Scope(
            root_uri=self.store.root_uri,
            dest=self.layout.dest,
            temp_dir=self.layout.temp_root,
            tasks_dir=self.layout.tasks_dir,
        )

    @property
    def retry(self) -> RetryPolicy:
        c = self.config
        cached = self._retry
        if cached is None or cached[0] is not c:  # built once per config (frozen), not per call
            cached = self._retry = (c, RetryPolicy(c.rename_attempts, c.retry_base_delay, c.retry_max_delay))
        return cached[1]

    def emit(self, stage: str, done: int, total: int, phase: str = "progress") -> None:
        if self.progress is not None:
            self.progress(Progress(stage, done, total, phase))

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run one store operation under the job's limiter, retrying transient failures."""

        async def once(_attempt: int) -> T:
            async with self.limiter.slot():
                return await fn()

        return await call_with_retries(
            once, policy=self.retry, limiter=self.limiter, stats=self.report.job_stats
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


async def run_parallel(
    items: Iterable[T] | AsyncIterator[T],
    worker: Callable[[T], Awaitable[None]],
    concurrency: int,
) -> None:
    """Run ``worker(item)`` for every item with at most ``concurrency`` at once.

    Items are pulled lazily (at most ``concurrency`` are in progress). A synchronous
    iterable is shared directly by the workers (no hand-off cost per item); an async
    iterator is fed through a small stream. The first failure cancels the rest and is
    raised (unwrapped from the exception group).
    """
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
