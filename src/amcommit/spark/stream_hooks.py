"""TEST-ONLY kill points of the streaming sink (production code: read on every micro-batch,
they do nothing unless the environment variable is set).

``AMCOMMIT_TESTING_STREAM_FAULT="<point>@<batchId>[=<seconds>]"`` in the driver's
environment (Spark's Python workers inherit it). ``kill`` means SIGKILL of the whole process
group of the driver (the test starts the driver in a session of its own: the Python driver,
its JVM and every Python worker die at once, as in a crash of the driver host):

``after_begin``   killed right after the batch's instant was allocated (``begin_write``,
                  its keep-alive process started), before any task ran; the
                  ``format("amcommit")`` sink's driver side sees no batch id: it is the
                  newest one of the checkpoint's offsets log (a local checkpoint)
``task_write``    a task is killed after it wrote its first rows (mid task writes)
``before_commit`` ``commit()`` is entered (every task wrote and committed) and killed
``in_renames``    killed inside the job commit, before its second rename of a data file
``after_commit``  killed after the batch committed, before Spark records
                  ``checkpoint/commits/<batchId>``
``slow_task``     tasks sleep ``seconds`` after their first rows (a batch a test can
                  ``stop()`` in the middle of); they first create the file named by
                  ``AMCOMMIT_TESTING_STREAM_SIGNAL`` if set (the test driver waits for it),
                  and stop sleeping early once the file named by
                  ``AMCOMMIT_TESTING_STREAM_RELEASE`` exists, if that is set
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from typing import Any, cast

from amcommit.errors import StoreError
from amcommit.store.base import RenameRequest, RenameResult, Store, batch_renamer

ENV = "AMCOMMIT_TESTING_STREAM_FAULT"
SIGNAL_ENV = "AMCOMMIT_TESTING_STREAM_SIGNAL"
RELEASE_ENV = "AMCOMMIT_TESTING_STREAM_RELEASE"
PGID_ENV = "AMCOMMIT_TESTING_STREAM_PGID"
POINTS = frozenset({"after_begin", "task_write", "before_commit", "in_renames", "after_commit", "slow_task"})

__all__ = ["ENV", "fault_at", "kill_after_begin", "kill_driver", "kill_in_renames", "maybe_kill"]


def fault_at(point: str, batch: int | None) -> float | None:
    """The hook's seconds (0.0 if none given) if ``point`` is armed for ``batch``, else None."""
    spec = os.environ.get(ENV, "")
    if not spec or batch is None:
        return None
    where, _, secs = spec.partition("=")
    name, _, at = where.partition("@")
    if name != point or not at.strip().lstrip("-").isdigit() or int(at) != batch:
        return None
    return float(secs) if secs else 0.0


def kill_driver() -> None:
    """SIGKILL the driver's process group (``AMCOMMIT_TESTING_STREAM_PGID``, set by the
    test driver: Spark's Python workers run in a group of their own), then this one."""
    pgid = os.environ.get(PGID_ENV, "")
    if pgid.isdigit():
        os.killpg(int(pgid), signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover  (never reached)


def maybe_kill(point: str, batch: int | None) -> None:
    secs = fault_at(point, batch)
    if secs is None:
        return
    if point == "slow_task":
        flag = os.environ.get(SIGNAL_ENV)
        if flag:
            with open(flag, "a"):
                pass
        release = os.environ.get(RELEASE_ENV)
        end = time.monotonic() + secs
        while time.monotonic() < end and not (release and os.path.exists(release)):
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        return
    kill_driver()


def kill_after_begin(batch: int | None, checkpoint: str | None) -> None:
    """The ``after_begin`` point (``batch`` None: the newest batch of the checkpoint's
    offsets log, read only when the point is armed)."""
    if not os.environ.get(ENV, "").startswith("after_begin@"):
        return
    if batch is None and checkpoint:
        try:
            names = os.listdir(os.path.join(checkpoint.removeprefix("file:"), "offsets"))
        except OSError:
            names = []
        batch = max((int(n) for n in names if n.isdigit()), default=None)
    maybe_kill("after_begin", batch)


class _KillOnRename:
    """Store proxy that kills the driver before its ``n``-th rename of a ``.parquet`` file."""

    def __init__(self, inner: Store, n: int) -> None:
        self._inner, self._n, self._seen = inner, n, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def rename(self, src: str, dst: str, **kw: Any) -> RenameResult:
        if dst.endswith(".parquet"):
            self._seen += 1
            if self._seen >= self._n:
                kill_driver()
        return await self._inner.rename(src, dst, **kw)

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """A batch (local files) is cut just before its request that is the ``n``-th rename
        of a ``.parquet`` file: the requests before it are renamed, then the driver dies."""
        inner = batch_renamer(self._inner)
        assert inner is not None, "rename_batch of a store without batches"
        for i, r in enumerate(requests):
            if r.dst.endswith(".parquet"):
                self._seen += 1
                if self._seen >= self._n:
                    if i:
                        await inner.rename_batch(requests[:i])
                    kill_driver()
        return await inner.rename_batch(requests)


def kill_in_renames(store: Store, batch: int) -> Store:
    """``store`` wrapped to die mid renames if ``in_renames`` is armed for ``batch``."""
    if fault_at("in_renames", batch) is None:
        return store
    return cast(Store, _KillOnRename(store, 2))
