"""Blocking facade for callers without an event loop (Spark tasks and driver, scripts).

Each call opens the store for the destination URL, runs the async operation to completion
in a private event loop, and closes the store. Called from a thread that already runs an
event loop, the work runs in a fresh loop on an anyio blocking-portal thread instead (so it
never re-enters that loop). The private loop is uvloop where installed and not turned off
(:mod:`amcommit.loop`); behaviour is the same on either. The same atomicity and
idempotency rules as the async API apply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from amcommit.committer import task as _task
from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.committer.report import JobReport, ProgressCallback
from amcommit.loop import run_blocking
from amcommit.manifest import TaskManifest
from amcommit.store.base import Store
from amcommit.store.schemes import open_location

T = TypeVar("T")


class BlockingCommitter:
    """The committer for one job writing into ``dest_url``, with blocking methods.

    ``store_options`` go to :func:`amcommit.store.open_location` (endpoint, credentials).
    ``store_factory`` may replace URL-based opening (tests wrap stores in FaultyStore).
    """

    def __init__(
        self,
        dest_url: str,
        job_id: str,
        *,
        config: CommitterConfig = DEFAULT_CONFIG,
        job_attempt: int = 0,
        store_options: dict[str, Any] | None = None,
        store_factory: Callable[[], tuple[Store, str]] | None = None,
    ) -> None:
        self.dest_url = dest_url
        self.job_id = job_id
        self.config = config
        self.job_attempt = job_attempt
        self.store_options = dict(store_options or {})
        self._factory = store_factory

    def _open(self) -> tuple[Store, str]:
        if self._factory is not None:
            return self._factory()
        return open_location(self.dest_url, **self.store_options)

    def _run(self, fn: Callable[[Store, str], Awaitable[T]]) -> T:
        async def main() -> T:
            store, dest = self._open()
            async with store:
                return await fn(store, dest)

        return run_blocking(main)

    def layout(self, dest: str) -> JobLayout:
        return JobLayout(dest, self.job_id, self.job_attempt)

    def setup_job(self, expected_tasks: int | None = None) -> None:
        from amcommit import api  # the front door, at call time: the engine does not import it

        self._run(
            lambda s, d: api.setup_job(
                s, d, self.job_id, job_attempt=self.job_attempt, expected_tasks=expected_tasks
            )
        )

    def setup_task(self, task_attempt_id: str) -> str:
        """Set up a task attempt; returns its working directory as a store path."""
        return self._run(lambda s, d: _task.setup_task(s, self.layout(d), task_attempt_id))

    def commit_task(
        self, task_id: str, task_attempt_id: str, extra_data: dict[str, str] | None = None
    ) -> TaskManifest:
        return self._run(
            lambda s, d: _task.commit_task(
                s, self.layout(d), task_id, task_attempt_id, config=self.config, extra_data=extra_data
            )
        )

    def abort_task(self, task_attempt_id: str) -> None:
        self._run(lambda s, d: _task.abort_task(s, self.layout(d), task_attempt_id))

    def commit_job(
        self,
        manifests: Sequence[TaskManifest] | None = None,
        progress: ProgressCallback | None = None,
        *,
        allow_partial: bool = False,
    ) -> JobReport:
        from amcommit import api  # the front door, at call time: the engine does not import it

        return self._run(
            lambda s, d: api.commit_job(
                s,
                d,
                self.job_id,
                config=self.config,
                manifests=manifests,
                progress=progress,
                job_attempt=self.job_attempt,
                allow_partial=allow_partial,
            )
        )

    def abort_job(self, progress: ProgressCallback | None = None) -> JobReport:
        from amcommit import api  # the front door, at call time: the engine does not import it

        return self._run(
            lambda s, d: api.abort_job(
                s, d, self.job_id, config=self.config, progress=progress, job_attempt=self.job_attempt
            )
        )
