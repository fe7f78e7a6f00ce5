"""The adaptive limiter's throttling control, on a simulated clock.

Two kinds of service are simulated window by window: one that refuses a fixed share of
requests whatever our rate (a fault, a hot partition), and one with a capacity that
refuses what is sent above it. The limiter must back off from the second and not from
the first.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import anyio
import pytest

from amcommit.errors import ConfigError
from amcommit.store.limits import Limiter


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def feed(lim: Limiter, clock: Clock, ok: int, thr: int, seconds: float = 1.0) -> None:
    """``ok`` successes and ``thr`` throttling answers, evenly spread over ``seconds``."""
    n = ok + thr
    if n == 0:
        clock.t += seconds
        return
    acc = 0.0
    for _ in range(n):  # interleaved evenly (Bresenham)
        clock.t += seconds / n
        acc += thr / n
        if acc >= 1.0:
            acc -= 1.0
            lim.throttled()
        else:
            lim.succeeded()


def sending_rate(lim: Limiter, demand: float) -> float:
    return demand if lim.rate is None else min(demand, lim.rate)


def run(
    lim: Limiter, clock: Clock, demand: float, refused: Callable[[float], float], seconds: int
) -> list[float]:
    """Send at ``demand`` or the limiter's rate, in 0.1 s slices; the service refuses
    ``refused(rate)`` of them per second. Returns the mean sending rate of each second."""
    out = []
    for _ in range(seconds):
        total = 0.0
        for _ in range(10):
            r = sending_rate(lim, demand)
            thr = refused(r)
            feed(lim, clock, ok=round((r - thr) / 10), thr=round(thr / 10), seconds=0.1)
            total += r / 10
        out.append(total)
    return out


def test_a_fixed_share_of_refusals_does_not_collapse_the_rate() -> None:
    clock = Clock()
    lim = Limiter(max_concurrency=None, clock=clock)
    demand = 800.0  # what the job would send unthrottled
    # one minute with 10% of all answers throttled whatever we send
    rates = run(lim, clock, demand, lambda r: 0.1 * r, 60)
    assert lim.rate_decreases >= 1 and lim.rate_restores == lim.rate_decreases
    # holds double (5, 10, 20, 40 s): a handful of two-second probes in a minute
    assert lim.rate_decreases <= 5
    assert sum(rates) / len(rates) >= 0.85 * demand
    assert min(rates) >= 0.4 * demand


def test_throttling_caused_by_our_load_is_backed_off_and_held() -> None:
    clock = Clock()
    lim = Limiter(max_concurrency=None, clock=clock)
    demand, capacity = 2000.0, 300.0
    sent = run(lim, clock, demand, lambda r: max(0.0, r - capacity), 60)
    assert lim.rate_restores == 0 and lim.rate_decreases >= 2
    late = sent[20:]
    # AIMD around the capacity: never far above it, and not starved
    assert max(late) <= 2 * capacity
    assert sum(late) / len(late) >= 0.5 * capacity


def run_random(
    seed: int, demand: float, refused_share: Callable[[float], float], seconds: int
) -> list[float]:
    """Like :func:`run`, each answer refused at random with ``refused_share(rate)``."""
    rng, clock = random.Random(seed), Clock()
    lim = Limiter(max_concurrency=None, clock=clock)
    out = []
    for _ in range(seconds):
        total = 0.0
        for _ in range(10):
            r = sending_rate(lim, demand)
            n, p = max(1, round(r / 10)), refused_share(r)
            for _ in range(n):
                clock.t += 0.1 / n
                if rng.random() < p:
                    lim.throttled()
                else:
                    lim.succeeded()
            total += r / 10
        out.append(total)
    return out


@pytest.mark.parametrize("demand", [60.0, 200.0, 1000.0])
def test_random_refusals_at_a_fixed_share_keep_the_rate_for_every_seed(demand: float) -> None:
    for seed in range(10):
        sent = run_random(seed, demand, lambda r: 0.1, 120)
        assert sum(sent) / len(sent) >= 0.85 * demand, seed


def test_random_refusals_above_a_capacity_are_backed_off_for_every_seed() -> None:
    capacity = 300.0
    for seed in range(5):
        sent = run_random(seed, 2000.0, lambda r: max(0.0, 1 - capacity / r), 60)
        late = sent[20:]
        assert sum(late) / len(late) <= 1.5 * capacity, seed
        assert sum(late) / len(late) >= 0.4 * capacity, seed


def test_rate_recovers_after_quiet_windows_up_to_the_configured_rate() -> None:
    clock = Clock()
    lim = Limiter(max_concurrency=None, rate=1000.0, clock=clock)
    feed(lim, clock, ok=0, thr=200, seconds=0.1)  # refusals at 2,000/s: cut from 1,000 to 500
    assert lim.rate == 500.0
    feed(lim, clock, ok=400, thr=0)  # the probe settles ...
    feed(lim, clock, ok=400, thr=0)  # ... and sees the throttling stopped: the cut is kept
    assert lim.rate == 500.0 and lim.rate_restores == 0
    for _ in range(20):
        feed(lim, clock, ok=400, thr=0)
    assert lim.rate == 1000.0  # back to the configured rate, not beyond


def test_unlimited_rate_is_lifted_again_after_recovery() -> None:
    clock = Clock()
    lim = Limiter(max_concurrency=None, unlimited_above=2000.0, clock=clock)
    feed(lim, clock, ok=1000, thr=0)
    feed(lim, clock, ok=0, thr=50, seconds=0.05)
    assert lim.rate is not None
    for _ in range(40):
        feed(lim, clock, ok=round(lim.rate or 1000), thr=0)
    assert lim.rate is None


def test_rare_refusals_below_the_tolerance_change_nothing() -> None:
    clock = Clock()
    lim = Limiter(max_concurrency=None, rate=1000.0, clock=clock)
    for _ in range(10):
        feed(lim, clock, ok=995, thr=5)  # 0.5%
    assert lim.rate == 1000.0 and lim.rate_decreases == 0 and lim.throttle_events == 50


async def test_retry_after_pauses_all_only_while_most_answers_are_refused() -> None:
    clock = Clock()
    lim = Limiter(max_concurrency=None, rate=None, clock=clock)
    feed(lim, clock, ok=100, thr=0)
    lim.throttled(retry_after=30.0)  # 1 in 101: only that request waits (in its retry)
    assert lim._paused_until <= clock.t
    for _ in range(200):
        lim.throttled(retry_after=30.0)
    assert lim._paused_until >= clock.t + 29  # now the service refuses nearly everything


def test_bad_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="tolerance"):
        Limiter(tolerance=1.5)
    with pytest.raises(ConfigError, match="window"):
        Limiter(window=0)
    with pytest.raises(ConfigError, match="pause_fraction"):
        Limiter(pause_fraction=0)


async def test_slot_bounds_concurrency() -> None:
    lim = Limiter(max_concurrency=2)
    active = peak = 0

    async def op() -> None:
        nonlocal active, peak
        async with lim.slot():
            active += 1
            peak = max(peak, active)
            await anyio.sleep(0.005)
            active -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(op)
    assert peak == 2
