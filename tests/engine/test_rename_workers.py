"""Renames in flight follow the store's limiter (issue 35 item 3): with ``io_threads`` at its
default, a job commit renames as many files at once as the store limiter's in-flight limit
allows now, plus a headroom (:class:`~amcommit.committer.stages.rename_files.FollowGate`),
never more than its ceiling (not a fixed 128); an ``io_threads`` set to anything else
bounds them.

Real parts: a local store under a limiter with an in-flight limit, wrapped in the
:class:`~amcommit.testing.FaultyStore` of the test kit, whose latency rule holds each rename
for a moment (a remote store's round trip); the renames in flight are counted around it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from amcommit.api import commit_job, setup_job
from amcommit.committer.config import DEFAULT_IO_THREADS, CommitterConfig
from amcommit.committer.stages.rename_files import HEADROOM_MIN
from amcommit.store.adaptive import AdaptiveLimit
from amcommit.store.base import RenameResult, Store
from amcommit.store.limits import Limiter
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import run_task, snapshot

JOB = "202611290001_0001"
FILES = 300


class CountingStore(FaultyStore):
    """A FaultyStore that counts the renames in flight (the most at once in ``peak``)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.now = self.peak = 0

    async def rename(self, src: str, dst: str, **kw: object) -> RenameResult:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await super().rename(src, dst, **kw)  # type: ignore[arg-type]
        finally:
            self.now -= 1


async def _commit(root: Path, limiter: Limiter, config: CommitterConfig) -> int:
    """Commit FILES files (3 tasks) through a CountingStore whose renames take 0.2 s each;
    returns the most renames that were in flight at once."""
    inner = LocalStore(str(root), fsync=False, limiter=limiter)
    layout = await setup_job(inner, "dest", JOB)
    per = FILES // 3
    for n in range(3):
        await run_task(inner, layout, n, {f"p={n}/f-{k:04d}.bin": f"{n}-{k}".encode() for k in range(per)})
    store = CountingStore(inner)
    store.latency(0.2, "rename")
    report = await commit_job(store, "dest", JOB, config=config)
    assert report.success and report.files == FILES
    files = await snapshot(inner, "dest")
    assert files == {f"p={n}/f-{k:04d}.bin": f"{n}-{k}".encode() for n in range(3) for k in range(per)}
    return store.peak


@pytest.mark.parametrize("ceiling", [256, 200])
async def test_renames_in_flight_follow_the_store_ceiling(tmp_path: Path, ceiling: int) -> None:
    """Default ``io_threads``: with the adaptive limit at its ceiling (pinned there: floor =
    ceiling), as many renames at once as the ceiling, more than the default's 128, never
    more (the headroom stops at the ceiling)."""
    limiter = Limiter(
        max_concurrency=None, adaptive=AdaptiveLimit(initial=ceiling, floor=ceiling, ceiling=ceiling)
    )
    peak = await _commit(tmp_path, limiter, CommitterConfig(rename_batch_size=1))
    assert peak == ceiling > DEFAULT_IO_THREADS


async def test_renames_in_flight_follow_the_adaptive_limit_now(tmp_path: Path) -> None:
    """An adaptive limit at 200 (its floor; the local store's round trips never reach it,
    so it does not grow) with a ceiling of 512: 200 renames plus the headroom (a quarter,
    at least 8) at once, not the ceiling's 512 (nor the old fixed 128). A limit at 40: the
    default's 128 (never fewer)."""
    limiter = Limiter(max_concurrency=None, adaptive=AdaptiveLimit(initial=200, floor=200, ceiling=512))
    peak = await _commit(tmp_path / "a", limiter, CommitterConfig(rename_batch_size=1))
    assert peak == 200 + max(HEADROOM_MIN, 200 // 4) == 250
    limiter = Limiter(max_concurrency=None, adaptive=AdaptiveLimit(initial=40, floor=40, ceiling=512))
    assert await _commit(tmp_path / "b", limiter, CommitterConfig(rename_batch_size=1)) == DEFAULT_IO_THREADS


async def test_fixed_store_limit_and_explicit_io_threads_bound_the_renames(tmp_path: Path) -> None:
    """A fixed ``max_concurrency`` is the store's ceiling; an ``io_threads`` given by the
    caller bounds the renames whatever the store allows; a ceiling below the default
    leaves the default."""
    assert (
        await _commit(tmp_path / "a", Limiter(max_concurrency=150), CommitterConfig(rename_batch_size=1))
        == 150
    )
    explicit = CommitterConfig(rename_batch_size=1, io_threads=8)
    assert await _commit(tmp_path / "b", Limiter(max_concurrency=1000), explicit) == 8
    low = await _commit(tmp_path / "c", Limiter(max_concurrency=16), CommitterConfig(rename_batch_size=1))
    assert low == DEFAULT_IO_THREADS  # workers wait in the store's limiter, not in the rename
