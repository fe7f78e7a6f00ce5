"""The Spark adapter's hook points: no-ops in production.

The driver, the tasks and the streaming sink call :data:`current` at a few points (a driver
store opened for the job commit or abort, rows written by a task, the streaming sink's
stages). The default :class:`SparkHooks` does nothing and parses nothing; test code
installs a subclass with :func:`install` (:mod:`amcommit.testing.spark` does, in the test
process and, through a ``sitecustomize`` on ``PYTHONPATH``, in Spark's Python processes). No job
option and no environment variable switches anything here.
"""

from __future__ import annotations

from collections.abc import Callable

from amcommit.store.base import Store


class SparkHooks:
    """The hook points; every method of this base class does nothing."""

    def driver_store(self, store: Store, phase: str) -> Store:
        """The store of one driver step (``phase``): ``"check"`` (the destination probe),
        ``"begin"`` (a table write's instant), the job ``"commit"`` or ``"abort"``."""
        return store

    def task_rows(
        self, partition: int, attempt: int, rows: int, done: bool, finish: Callable[[], None]
    ) -> None:
        """A task attempt wrote ``rows`` rows so far (``done``: all of them, before its
        files are closed); ``finish`` closes its files and waits for their uploads."""

    def stream_point(self, point: str, batch: int | None) -> None:
        """The streaming sink reached ``point`` (``task_rows``, ``before_commit``,
        ``after_commit``) of micro-batch ``batch``."""

    def stream_begun(self, batch: int | None, checkpoint: str | None) -> None:
        """Micro-batch ``batch``'s instant was just allocated (``begin_write``), before any
        task ran; ``batch`` is None where the sink does not know it (the
        ``format("amcommit")`` sink's driver side), ``checkpoint`` the query's checkpoint
        location if known."""

    def stream_store(self, store: Store, batch: int) -> Store:
        """The store micro-batch ``batch``'s job commit runs on."""
        return store


current: SparkHooks = SparkHooks()
"""The installed hooks (the no-op base unless test code installed others)."""


def install(hooks: SparkHooks) -> SparkHooks:
    """Make ``hooks`` the current hooks of this process; returns the previous ones."""
    global current
    previous, current = current, hooks
    return previous


__all__ = ["SparkHooks", "current", "install"]
