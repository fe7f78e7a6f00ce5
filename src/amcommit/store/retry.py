"""Retry with decorrelated-jitter backoff, shared by every backend and by the engine.

Only errors whose ``retryable`` flag is set (:class:`~amcommit.errors.Throttled`,
:class:`~amcommit.errors.Transient`) are retried. A throttling error feeds the limiter and
its Retry-After hint is honoured (the sleep is at least that long).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import anyio

from amcommit.errors import ConfigError, StoreError, Throttled
from amcommit.iostats import IOStatistics
from amcommit.store.limits import Limiter

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry.

    ``max_attempts`` counts the first try. Delays follow "decorrelated jitter"
    (``sleep = min(max_delay, uniform(base_delay, 3 * previous))``), which spreads retries
    of many concurrent callers better than plain exponential backoff.
    """

    max_attempts: int = 8
    base_delay: float = 0.05
    max_delay: float = 8.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ConfigError("need 0 <= base_delay <= max_delay")

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The sleeps between attempts (``max_attempts - 1`` of them)."""
        r = rng or random
        prev = self.base_delay
        for _ in range(self.max_attempts - 1):
            prev = min(self.max_delay, r.uniform(self.base_delay, prev * 3))
            yield prev


NO_RETRY = RetryPolicy(max_attempts=1)


async def call_with_retries(
    fn: Callable[[int], Awaitable[T]],
    *,
    policy: RetryPolicy,
    limiter: Limiter | None = None,
    stats: IOStatistics | None = None,
    retry_if: Callable[[StoreError], bool] | None = None,
) -> T:
    """Call ``fn(attempt)`` (attempt counts from 1) until it succeeds or fails finally.

    Retries retryable :class:`~amcommit.errors.StoreError`\\ s (and only those for which
    ``retry_if`` returns True, when given). The final error is raised with an
    ``attempts`` attribute set.
    """
    delays: Iterator[float] | None = None  # created on the first failure only
    attempt = 0
    while True:
        attempt += 1
        try:
            return await fn(attempt)
        except StoreError as e:
            e.attempts = attempt
            if isinstance(e, Throttled):
                if limiter is not None:
                    limiter.throttled(e.retry_after)
                if stats is not None:
                    stats.incr("store_io_throttled")
            if not e.retryable or (retry_if is not None and not retry_if(e)):
                raise
            if delays is None:
                delays = policy.delays()
            delay = next(delays, None)
            if delay is None:
                raise
            if isinstance(e, Throttled) and e.retry_after:
                delay = max(delay, min(e.retry_after, policy.max_delay * 4))
            if stats is not None:
                stats.incr("store_io_retry")
            await anyio.sleep(delay)
