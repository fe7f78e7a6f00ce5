"""The write-gate bound of :class:`~amcommit.committer.stages.rename_files.FollowGate`
(issue 35 item 3): renames in flight follow the store limiter's in-flight limit, and, while
the store's write gate (a cold GCS bucket's write rate) binds, at most
``WRITE_MARGIN`` x the renames that were in flight and not waiting at it.

A clock the test controls drives the gate's windows; the write gate is a real
:class:`~amcommit.store.limits.Limiter` whose ``waited_seconds`` (the statistic its waiters
add their sleeps to, what the gate reads) the test advances as waiting writes would. No
timed assertions: every figure follows from the clock and the counts.
"""

from __future__ import annotations

import math

import anyio
import pytest
from anyio.lowlevel import checkpoint

from amcommit.committer.config import DEFAULT_IO_THREADS
from amcommit.committer.stages.rename_files import (
    HEADROOM_MIN,
    WRITE_FLOOR,
    WRITE_MARGIN,
    WRITE_MIN_SAMPLES,
    WRITE_WINDOW,
    FollowGate,
    store_write_gate,
)
from amcommit.store.adaptive import AdaptiveLimit
from amcommit.store.gcs import GcsStore
from amcommit.store.limits import Limiter
from amcommit.testing.faults import FaultyStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _limiter(limit: int = 800, ceiling: int = 1024) -> Limiter:
    """An adaptive in-flight limit pinned at ``limit`` (floor = initial)."""
    return Limiter(max_concurrency=None, adaptive=AdaptiveLimit(initial=limit, floor=limit, ceiling=ceiling))


def _write_gate() -> Limiter:
    return Limiter(max_concurrency=None, rate=1000.0)


async def _enter(gate: FollowGate, n: int) -> None:
    for _ in range(n):
        await gate.__aenter__()


async def _leave(gate: FollowGate, n: int) -> None:
    for _ in range(n):
        await gate.__aexit__(None, None, None)


async def test_the_write_gate_bounds_the_renames_while_it_binds() -> None:
    """200 renames in flight for a window, half of them (on average) waiting at the write
    gate: the bound is 1.5 x the 100 that were not, 150, instead of the in-flight limit's
    1,000; a rename that arrives waits until fewer than 150 are renaming."""
    clock, wg = Clock(), _write_gate()
    gate = FollowGate(_limiter(), wg, clock=clock)
    assert gate.allowed() == 1000 and gate.write_cap is None
    await _enter(gate, 200)
    clock.now += 0.5
    wg.waited_seconds += 100 * 0.5  # 100 writes waiting on average over the 0.5 s
    await _leave(gate, WRITE_MIN_SAMPLES)
    assert gate.write_cap == math.ceil(WRITE_MARGIN * (200 - 100)) == 150
    assert gate.allowed() == 150
    assert gate.active == 200 - WRITE_MIN_SAMPLES == 168

    admitted = anyio.Event()

    async def one_more() -> None:
        await gate.__aenter__()
        admitted.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one_more)
        await _settle()
        await _leave(gate, 168 - 150)  # 150 renaming: still none free
        await _settle()
        assert not admitted.is_set() and gate.active == 150
        await _leave(gate, 1)
        await _settle()
        assert admitted.is_set() and gate.active == 150
    assert gate.peak == 200


async def test_the_bound_is_lifted_when_the_gate_stops_binding() -> None:
    """A window in which fewer than a tenth of the renames waited at the write gate (its
    rate raised, a bucket warmed up): no bound, the renames follow the limit again."""
    clock, wg = Clock(), _write_gate()
    gate = FollowGate(_limiter(), wg, clock=clock)
    await _enter(gate, 200)
    clock.now += 0.5
    wg.waited_seconds += 150 * 0.5
    await _leave(gate, WRITE_MIN_SAMPLES)
    assert gate.write_cap == math.ceil(WRITE_MARGIN * (200 - 150)) == 75
    # the next window: 168 renaming all along, 16 waiting on average (under a tenth)
    clock.now += 1.0
    wg.waited_seconds += 16 * 1.0
    await _leave(gate, WRITE_MIN_SAMPLES)
    assert gate.write_cap is None and gate.allowed() == 1000


async def test_the_bound_never_goes_below_its_floor_and_may_go_below_128() -> None:
    """Almost every rename waiting at the write gate: the floor; a bound of 45 is below
    the 128 the gate otherwise never goes under (the write rate is the ceiling)."""
    clock, wg = Clock(), _write_gate()
    gate = FollowGate(_limiter(limit=40), wg, clock=clock)
    assert gate.allowed() == DEFAULT_IO_THREADS
    await _enter(gate, 128)
    clock.now += 1.0
    wg.waited_seconds += 126 * 1.0
    await _leave(gate, WRITE_MIN_SAMPLES)
    assert gate.write_cap == WRITE_FLOOR and gate.allowed() == WRITE_FLOOR
    clock.now += 1.0
    wg.waited_seconds += 66 * 1.0  # 96 renaming, 66 waiting: 30 not
    await _leave(gate, WRITE_MIN_SAMPLES)
    assert gate.write_cap == 45 and gate.allowed() == 45 < DEFAULT_IO_THREADS


@pytest.mark.parametrize(("seconds", "ended"), [(WRITE_WINDOW / 2, 100), (1.0, WRITE_MIN_SAMPLES - 1)])
async def test_a_window_is_judged_only_when_long_enough_and_full(seconds: float, ended: int) -> None:
    """Too short a window, or too few renames ended in it: no judgement yet (the bound
    stays as it was), however long the write gate's queue."""
    clock, wg = Clock(), _write_gate()
    gate = FollowGate(_limiter(), wg, clock=clock)
    await _enter(gate, 200)
    clock.now += seconds
    wg.waited_seconds += 190 * seconds
    await _leave(gate, ended)
    assert gate.write_cap is None and gate.allowed() == 1000


async def test_the_in_flight_count_is_integrated_over_the_window() -> None:
    """The renames in flight are averaged over time, not counted at the end: 300 for the
    first half of the window, 100 for the second (200 on average), 50 waiting on average:
    1.5 x 150."""
    clock, wg = Clock(), _write_gate()
    gate = FollowGate(_limiter(), wg, clock=clock)
    await _enter(gate, 100)
    clock.now += 0.25
    await _enter(gate, 200)  # 300 renaming for the first half
    clock.now += 0.25
    await _leave(gate, 200)  # window closes at the 32nd of these ends, at 0.5 s
    assert gate.write_cap is None  # nothing waited at the write gate yet
    clock.now += 0.25
    await _enter(gate, 200)
    clock.now += 0.25
    wg.waited_seconds += 50 * 0.5
    await _leave(gate, WRITE_MIN_SAMPLES)
    assert gate.write_cap == math.ceil(WRITE_MARGIN * (200 - 50)) == 225


async def test_without_a_write_gate_the_renames_follow_the_limit() -> None:
    """No write gate (``bucket_warm=true``, Blob): nothing measured, no bound."""
    clock = Clock()
    gate = FollowGate(_limiter(), None, clock=clock)
    await _enter(gate, 500)
    clock.now += 5.0
    await _leave(gate, 400)
    assert gate.write_cap is None and gate.allowed() == 1000 and gate.peak == 500


def test_the_write_gate_is_found_through_wrappers() -> None:
    """A cold bucket's store has its write gate (found also through a wrapping store);
    ``bucket_warm=true`` has none."""
    cold = GcsStore("bucket-a", endpoint="http://127.0.0.1:9", write_rate=1000.0)
    warm = GcsStore("bucket-a", endpoint="http://127.0.0.1:9", bucket_warm=True)
    assert cold.write_limiter is not None
    assert store_write_gate(FaultyStore(cold)) is cold.write_limiter
    assert store_write_gate(warm) is None


async def _settle() -> None:
    for _ in range(5):
        await checkpoint()


async def test_a_batch_holds_as_many_turns_as_it_has_renames() -> None:
    """``hold(n)`` (the batch path: Blob's Copy Blob + Blob Batch) counts a batch as ``n``
    renames in flight: batches are admitted while their renames fit under the limit
    (200 + a quarter = 250 here), the next waits until one ends, and waiters are served in
    order (a small batch does not pass a large one waiting before it)."""
    gate = FollowGate(_limiter(200, 1024), None)
    assert gate.allowed() == 250
    order: list[str] = []

    async def batch(name: str, n: int, done: anyio.Event) -> None:
        async with gate.hold(n):
            order.append(name)
            await done.wait()

    ends = {k: anyio.Event() for k in "abcd"}
    async with anyio.create_task_group() as tg:
        tg.start_soon(batch, "a", 120, ends["a"])
        tg.start_soon(batch, "b", 120, ends["b"])
        await _settle()
        tg.start_soon(batch, "c", 100, ends["c"])  # 340 > 250: waits
        await _settle()
        tg.start_soon(batch, "d", 5, ends["d"])  # would fit, but c waits before it
        await _settle()
        assert order == ["a", "b"] and gate.active == 240 and gate.holders == 2
        ends["a"].set()
        await _settle()
        assert order == ["a", "b", "c", "d"] and gate.active == 225 and gate.peak == 240
        for ev in ends.values():
            ev.set()
    assert gate.active == 0 and gate.holders == 0


async def test_batches_larger_than_the_limit_still_run_min_holders_at_once() -> None:
    """A batch larger than the whole limit is not kept out for ever: while fewer than
    ``min_holders`` holds are in progress, one is admitted whatever its size (the batch
    path keeps its two batches going, as before it followed the limit)."""
    gate = FollowGate(_limiter(40, 1024), None)
    gate.min_holders, gate.floor = 2, 0
    assert gate.allowed() == 40 + max(HEADROOM_MIN, 40 // 4) == 50  # no floor of 128 for batches
    await gate._enter(256)
    await gate._enter(256)
    assert gate.active == 512 and gate.holders == 2
    with anyio.move_on_after(0.05) as scope:
        await gate._enter(1)  # a third waits
    assert scope.cancelled_caught and gate.holders == 2 and not gate._waiters
    gate._leave(256)
    await gate._enter(256)
    assert gate.holders == 2
