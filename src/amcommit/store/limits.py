"""Bounded concurrency plus an adaptive token-bucket rate limit.

One :class:`Limiter` guards every request a store sends. Share one limiter between all the
jobs of a process that talk to the same account or bucket (:func:`shared_limiter`), so that
together they respect the service's limits.

Behaviour:

* at most ``max_concurrency`` operations in flight;
* at most ``rate`` operations started per second (token bucket, bursts of ``burst``);
  ``rate=None`` means no rate limit until the service throttles us;
* on a throttling answer (:meth:`Limiter.throttled`) the rate drops to ``decrease`` times
  the current (or observed) rate, never below ``min_rate``, at most once per ``cooldown``
  seconds, and no new operation starts before the server's Retry-After has passed;
* after ``recover_after`` quiet seconds the rate grows by ``increase`` (multiplicative)
  each further quiet interval, until it reaches ``rate`` again (or, if the configured rate
  was unlimited, until it passes ``unlimited_above``, when the limit is lifted).

A limiter belongs to one event loop (it is not thread-safe).
"""

from __future__ import annotations

import math
import time

import anyio

from amcommit.errors import ConfigError


class Limiter:
    """Concurrency + adaptive rate limiter. See the module docstring."""

    def __init__(
        self,
        *,
        max_concurrency: int | None = 64,
        rate: float | None = None,
        burst: float | None = None,
        min_rate: float = 5.0,
        decrease: float = 0.5,
        increase: float = 1.25,
        cooldown: float = 1.0,
        recover_after: float = 2.0,
        unlimited_above: float = 20_000.0,
    ) -> None:
        if max_concurrency is not None and max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        if rate is not None and rate <= 0:
            raise ConfigError(f"rate must be > 0 ops/s or None, got {rate}")
        if not 0 < decrease < 1:
            raise ConfigError(f"decrease must be in (0, 1), got {decrease}")
        if increase <= 1:
            raise ConfigError(f"increase must be > 1, got {increase}")
        self.max_concurrency = max_concurrency
        self.max_rate = rate
        self.rate: float | None = rate
        self._burst_cfg = burst
        self.min_rate = min_rate
        self.decrease = decrease
        self.increase = increase
        self.cooldown = cooldown
        self.recover_after = recover_after
        self.unlimited_above = unlimited_above
        self._sem = anyio.Semaphore(max_concurrency) if max_concurrency is not None else None
        now = time.monotonic()
        self._tokens = self._burst()
        self._last_refill = now
        self._paused_until = 0.0
        self._last_throttle = -math.inf
        self._last_change = -math.inf  # the first throttling answer always counts
        # observed completion rate: EWMA of the interval between completions
        self._last_done = 0.0
        self._ewma_interval = 0.0
        # statistics
        self.throttle_events = 0
        self.rate_decreases = 0
        self.waited_seconds = 0.0

    def _burst(self) -> float:
        if self._burst_cfg is not None:
            return max(1.0, self._burst_cfg)
        if self.rate is None:
            return 1.0
        return max(1.0, self.rate / 10.0)

    @property
    def observed_rate(self) -> float:
        """Recent completions per second (EWMA); before any completion, a guess of
        20 operations/s per concurrency slot (50 ms per operation)."""
        if self._ewma_interval > 0:
            return 1.0 / self._ewma_interval
        return 20.0 * (self.max_concurrency or 64)

    @property
    def in_flight(self) -> int:
        if self._sem is None or self.max_concurrency is None:
            return 0
        return self.max_concurrency - int(self._sem.value)

    async def _take_token(self) -> None:
        while True:
            now = time.monotonic()
            if self._paused_until > now:
                wait = self._paused_until - now
                self.waited_seconds += wait
                await anyio.sleep(wait)
                continue
            rate = self.rate
            if rate is None:
                return
            self._tokens = min(self._burst(), self._tokens + (now - self._last_refill) * rate)
            self._last_refill = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return
            # reservation: sleep until our token has accrued
            wait = -self._tokens / rate
            self.waited_seconds += wait
            await anyio.sleep(wait)
            return

    def slot(self) -> _Slot:
        """``async with limiter.slot():`` wait for a token and a concurrency slot; hold the
        slot for the block. (A plain class, not a generator: this runs once per request.)"""
        return _Slot(self)

    def succeeded(self) -> None:
        """Report a completed operation (drives the observed rate and the recovery)."""
        now = time.monotonic()
        if self._last_done:
            gap = now - self._last_done
            self._ewma_interval = gap if not self._ewma_interval else 0.9 * self._ewma_interval + 0.1 * gap
        self._last_done = now
        if self.rate is None:
            return
        quiet = now - self._last_throttle
        if quiet >= self.recover_after and now - self._last_change >= self.cooldown:
            new = self.rate * self.increase
            if self.max_rate is not None and new >= self.max_rate:
                new = self.max_rate
            elif self.max_rate is None and new >= self.unlimited_above:
                self.rate = None
                self._last_change = now
                return
            self.rate = new
            self._last_change = now

    def throttled(self, retry_after: float | None = None) -> None:
        """Report a throttling answer; slows the bucket and honours ``retry_after``."""
        now = time.monotonic()
        self.throttle_events += 1
        if retry_after is not None and retry_after > 0:
            self._paused_until = max(self._paused_until, now + min(retry_after, 60.0))
        self._last_throttle = now
        if now - self._last_change < self.cooldown and self.rate is not None:
            return
        if self.rate is not None:
            base = self.rate
        else:
            base = max(self.observed_rate, self.min_rate / self.decrease)
        self.rate = max(self.min_rate, base * self.decrease)
        self._tokens = min(self._tokens, self._burst())
        self._last_change = now
        self.rate_decreases += 1

    def describe(self) -> dict[str, float | int | None]:
        return {
            "max_concurrency": self.max_concurrency,
            "rate": self.rate,
            "max_rate": self.max_rate,
            "throttle_events": self.throttle_events,
            "rate_decreases": self.rate_decreases,
            "waited_seconds": round(self.waited_seconds, 3),
        }


class _Slot:
    __slots__ = ("_held", "_lim")

    def __init__(self, lim: Limiter) -> None:
        self._lim = lim
        self._held = False

    async def __aenter__(self) -> None:
        lim = self._lim
        if lim.rate is not None or lim._paused_until:
            await lim._take_token()
        sem = lim._sem
        if sem is not None:
            try:
                sem.acquire_nowait()  # fast path: no scheduling round trip when a slot is free
            except anyio.WouldBlock:
                await sem.acquire()
            self._held = True

    async def __aexit__(self, *exc: object) -> None:
        if self._held and self._lim._sem is not None:
            self._lim._sem.release()
            self._held = False


_shared: dict[str, Limiter] = {}


def shared_limiter(key: str, **options: object) -> Limiter:
    """The process-wide limiter for ``key`` (e.g. ``"gcs:bucket"``, ``"azure:account"``).

    Created with ``options`` on first use; later calls return the same limiter and ignore
    ``options``.
    """
    lim = _shared.get(key)
    if lim is None:
        lim = _shared[key] = Limiter(**options)  # type: ignore[arg-type]
    return lim
