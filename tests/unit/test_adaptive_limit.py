"""The adaptive in-flight limit (issue 27 item 1): the pure controller on synthetic latency
curves, then its plumbing in the limiter (the gate, the throttling cut and its undo).

The simulated service answers every request in flight after ``rtt(in_flight)`` seconds;
the client keeps ``min(limit, demand)`` requests in flight (``demand``: how many the job
has ready). Each round trip, every request in flight is one sample.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from amcommit.errors import ConfigError
from amcommit.store.adaptive import AdaptiveLimit
from amcommit.store.limits import Limiter
from tests.unit.test_limiter import Clock, feed


def simulate(
    ctl: AdaptiveLimit, rtt: Callable[[int], float], demand: int, seconds: float, t0: float = 0.0
) -> tuple[list[tuple[float, int]], float]:
    """Run the closed loop for ``seconds``; returns ([(time, limit)], end time)."""
    now, out = t0, []
    while now < t0 + seconds:
        sent_at = ctl.limit
        n = min(sent_at, demand)
        r = rtt(n)
        busy = demand >= sent_at
        for _ in range(n):
            now += r / n
            # as the limiter reports it: the limit was reached when the request was sent,
            # and that limit still holds (not a lower one since raised)
            ctl.sample(r, now, busy and sent_at >= ctl.limit)
        out.append((now, ctl.limit))
    return out, now


def flat(seconds: float) -> Callable[[int], float]:
    return lambda n: seconds


def knee(base: float, capacity: int) -> Callable[[int], float]:
    """A service that answers in ``base`` seconds up to ``capacity`` requests in flight
    and queues beyond (throughput capacity ÷ base per second: latency grows with load)."""
    return lambda n: base * max(1.0, n / capacity)


def throughput(limits: list[tuple[float, int]], rtt: Callable[[int], float], demand: int) -> float:
    """Mean requests per second over the samples' round trips (Little's law)."""
    vals = [min(lim, demand) / rtt(min(lim, demand)) for _, lim in limits]
    return sum(vals) / len(vals)


def test_grows_under_constant_latency_up_to_the_ceiling() -> None:
    ctl = AdaptiveLimit(initial=64, floor=32, ceiling=1024)
    out, _ = simulate(ctl, flat(0.05), demand=5000, seconds=3.0)
    assert ctl.limit == 1024
    # slow start: doubling per window (two round trips): the ceiling within a second
    assert min(t for t, lim in out if lim == 1024) < 1.0
    assert ctl.decreases == 0


def test_does_not_grow_past_what_is_asked() -> None:
    ctl = AdaptiveLimit(initial=64, floor=32, ceiling=1024)
    simulate(ctl, flat(0.05), demand=100, seconds=5.0)
    assert 100 <= ctl.limit <= 200  # one step past the demand, then nothing reaches it


def test_stops_growing_when_latency_rises_with_load() -> None:
    capacity = 200  # 4,000 requests/s at 50 ms: beyond 200 in flight only queues
    rtt = knee(0.05, capacity)
    ctl = AdaptiveLimit(initial=64, floor=32, ceiling=1024)
    out, _ = simulate(ctl, rtt, demand=5000, seconds=20.0)
    late = [lim for t, lim in out if t > 5.0]
    assert min(late) >= capacity  # the service's capacity is used ...
    assert max(late) <= 2 * capacity  # ... with latency at most twice its own
    assert throughput(out[len(out) // 2 :], rtt, 5000) >= 0.99 * capacity / 0.05
    assert ctl.decreases >= 1


def test_halves_on_throttling_and_recovers() -> None:
    ctl = AdaptiveLimit(initial=512, floor=32, ceiling=512)
    _, now = simulate(ctl, flat(0.05), demand=5000, seconds=0.5)
    assert ctl.limit == 512
    assert ctl.throttled() == 256 and not ctl.slow_start
    assert ctl.throttled() == 128
    out, _ = simulate(ctl, flat(0.05), demand=5000, seconds=10.0, t0=now)
    assert ctl.limit == 512  # recovers while latency holds ...
    first = min(t for t, lim in out if lim == 512) - now
    assert 1.0 < first < 10.0  # ... additively (sqrt(limit) per window), not at once


def test_restore_undoes_a_cut() -> None:
    ctl = AdaptiveLimit(initial=300, floor=32, ceiling=1024)
    ctl.throttled()
    assert ctl.limit == 150
    assert ctl.restore(300) == 300


def test_floor_and_ceiling_hold() -> None:
    ctl = AdaptiveLimit(initial=64, floor=16, ceiling=128)
    for _ in range(10):
        ctl.throttled()
    assert ctl.limit == 16
    simulate(ctl, flat(0.05), demand=1000, seconds=5.0)
    assert ctl.limit == 128
    # latency rising steeply whatever the load: shrinks, never below the floor
    now, rtt = 10.0, 0.05
    seen = []
    for _ in range(2000):
        now += 0.002
        rtt *= 1.002
        seen.append(ctl.sample(rtt, now))
    assert min(seen) == 16 and seen[-1] == 16
    assert AdaptiveLimit(initial=5000, ceiling=128).limit == 128
    assert AdaptiveLimit(initial=1, floor=8).limit == 8


def test_baseline_follows_a_lasting_change_of_the_path() -> None:
    """Latency doubles for good (a slower network path, not our load): the limit shrinks,
    then grows back once the old baseline is older than the horizon."""
    ctl = AdaptiveLimit(initial=256, floor=32, ceiling=256, horizon=5.0)
    _, now = simulate(ctl, flat(0.05), demand=5000, seconds=1.0)
    out, _ = simulate(ctl, flat(0.15), demand=5000, seconds=20.0, t0=now)
    assert min(lim for _, lim in out) < 256
    assert out[-1][1] == 256


def test_bad_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="floor"):
        AdaptiveLimit(floor=0)
    with pytest.raises(ConfigError, match="ceiling"):
        AdaptiveLimit(floor=64, ceiling=32)
    with pytest.raises(ConfigError, match="grow_below"):
        AdaptiveLimit(grow_below=3.0, tolerance=2.0)
    with pytest.raises(ConfigError, match="not both"):
        Limiter(max_concurrency=8, adaptive=AdaptiveLimit())


# -- the plumbing ----------------------------------------------------------------------


async def test_the_gate_follows_the_controller() -> None:
    """Real slots, real sleeps: constant latency lets more requests in flight than the
    initial limit, never more than the ceiling."""
    lim = Limiter(
        max_concurrency=None,
        adaptive=AdaptiveLimit(initial=4, floor=2, ceiling=48, window=0.01, min_samples=4),
    )
    active = peak = 0

    async def op() -> None:
        nonlocal active, peak
        for _ in range(12):
            async with lim.slot():
                active += 1
                peak = max(peak, active)
                await anyio.sleep(0.02)
                active -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(100):
            tg.start_soon(op)
    assert lim.adaptive is not None
    assert 8 < peak <= 48 and lim.adaptive.increases >= 2
    assert lim.in_flight == 0 and not lim._waiters


async def test_a_lowered_limit_holds_new_requests_back_and_cancelled_waiters_leave() -> None:
    lim = Limiter(max_concurrency=None, adaptive=AdaptiveLimit(initial=4, floor=1, ceiling=4))
    release = anyio.Event()
    entered = 0

    async def hold() -> None:
        nonlocal entered
        async with lim.slot():
            entered += 1
            await release.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(hold)
        await anyio.wait_all_tasks_blocked()
        assert entered == 4 and lim.in_flight == 4
        lim._set_limit(2)
        with anyio.move_on_after(0.05):
            async with lim.slot():
                pytest.fail("a slot beyond the lowered limit")
        assert len(lim._waiters) == 0  # the cancelled waiter left the line
        release.set()
    assert lim.in_flight == 0


def test_a_throttling_cut_halves_the_limit_and_a_cut_that_did_not_help_is_undone() -> None:
    """10% of answers refused whatever we send (not our load): the rate cut is a probe,
    undone when the share does not fall, and the in-flight limit comes back with it."""
    clock = Clock()
    ctl = AdaptiveLimit(initial=400, floor=32, ceiling=400)
    lim = Limiter(max_concurrency=None, adaptive=ctl, clock=clock)
    feed(lim, clock, ok=900, thr=100)
    assert lim.rate_decreases == 1 and lim.concurrency_limit == 200
    for _ in range(4):
        feed(lim, clock, ok=900, thr=100)
    assert lim.rate_restores == 1 and lim.concurrency_limit == 400


def test_throttling_caused_by_our_load_keeps_the_cut() -> None:
    clock = Clock()
    ctl = AdaptiveLimit(initial=400, floor=32, ceiling=400)
    lim = Limiter(max_concurrency=None, adaptive=ctl, clock=clock)
    feed(lim, clock, ok=0, thr=200, seconds=0.1)
    assert lim.concurrency_limit == 200
    feed(lim, clock, ok=400, thr=0)  # the probe settles ...
    feed(lim, clock, ok=400, thr=0)  # ... and sees the throttling stopped: the cut is kept
    assert lim.rate_restores == 0 and lim.concurrency_limit == 200


def test_a_fixed_limit_does_not_adapt() -> None:
    lim = Limiter(max_concurrency=16)
    assert lim.adaptive is None and lim.concurrency_limit == 16 and lim.concurrency_ceiling == 16
    for _ in range(100):
        lim.throttled()
    assert lim.concurrency_limit == 16
