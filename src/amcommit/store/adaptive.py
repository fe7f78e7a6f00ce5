"""The adaptive in-flight limit: a pure controller fed with request latencies and
throttling decisions, returning how many requests may be in flight.

No I/O and no clock of its own: :class:`~amcommit.store.limits.Limiter` (the plumbing: the
gate that holds requests back) feeds it every answered request's round-trip time with the
time of the answer, and tells it when the service's throttling calls for a cut. Tests feed
it synthetic latency curves.

The rule, in the spirit of TCP Vegas and Netflix's concurrency-limits (Vegas / Gradient2):
a service that is not overloaded answers in about the same time whatever the number of
requests in flight, so while latency holds, more requests in flight means more throughput
(Little's law: throughput = in flight ÷ latency); once the service (or the client's own
CPU) is saturated, more in flight only queues, and latency rises in proportion.

* Answers are judged in **windows** of at least ``window`` seconds, two baseline round
  trips and ``min_samples`` answers (a window then holds answers to requests sent after
  the previous change). A window's latency is the mean round trip of its answers.
* The **baseline** is the lowest window latency seen over the last ``horizon`` seconds
  (the service's latency without our queueing; it follows a lasting change of the network
  path within ``horizon``).
* **Grow** while latency holds (window latency ≤ ``grow_below`` × baseline) and the
  limit was reached in the window (in-flight requests at the limit, or requests waiting:
  growing a limit nobody reaches would let a later burst through unmeasured): doubling
  per window at first (slow start), after the first cut by ``sqrt(limit)`` per window.
* **Shrink** when latency rises (window latency > ``tolerance`` × baseline): to
  ``limit × tolerance × baseline ÷ latency`` (the limit at which the latency would
  hold), at most halved per window; slow start ends.
* Between the two: hold.
* **Throttling** (:meth:`AdaptiveLimit.throttled`): halve at once; slow start ends. The
  limiter calls this only when it decides that the service's refusals are caused by our
  load (see :class:`~amcommit.store.limits.Limiter`: a share of throttling answers over
  its tolerance, judged by a probe), and :meth:`AdaptiveLimit.restore` when the probe
  finds they were not (a fixed share of refusals, a hot object): the cut is undone.
* Never below ``floor``, never above ``ceiling``.

Not thread-safe (one event loop, like the limiter).
"""

from __future__ import annotations

import math
from collections import deque

from amcommit.errors import ConfigError


class AdaptiveLimit:
    """The in-flight limit controller. See the module docstring.

    Args:
        initial: the limit before any answer (clamped to ``floor``..``ceiling``).
        floor / ceiling: the limit's bounds.
        tolerance: a window latency above ``tolerance`` × baseline shrinks the limit.
        grow_below: a window latency at most ``grow_below`` × baseline lets it grow.
        window: the shortest window, in seconds.
        min_samples: the fewest answers that close a window.
        horizon: how long (seconds) a window's latency may serve as the baseline.
    """

    __slots__ = (
        "_baselines",
        "_busy",
        "_n",
        "_start",
        "_sum",
        "ceiling",
        "decreases",
        "floor",
        "grow_below",
        "horizon",
        "increases",
        "limit",
        "min_samples",
        "slow_start",
        "tolerance",
        "window",
    )

    def __init__(
        self,
        *,
        initial: int = 64,
        floor: int = 32,
        ceiling: int = 1024,
        tolerance: float = 2.0,
        grow_below: float = 1.5,
        window: float = 0.05,
        min_samples: int = 8,
        horizon: float = 30.0,
    ) -> None:
        if floor < 1:
            raise ConfigError(f"the in-flight floor must be >= 1, got {floor}")
        if ceiling < floor:
            raise ConfigError(f"the in-flight ceiling ({ceiling}) must be >= the floor ({floor})")
        if not 1.0 <= grow_below <= tolerance:
            raise ConfigError(f"need 1 <= grow_below <= tolerance, got {grow_below} and {tolerance}")
        if window <= 0 or horizon <= 0:
            raise ConfigError("window and horizon must be > 0 seconds")
        self.floor = floor
        self.ceiling = ceiling
        self.tolerance = tolerance
        self.grow_below = grow_below
        self.window = window
        self.min_samples = max(1, min_samples)
        self.horizon = horizon
        self.limit = min(ceiling, max(floor, initial))
        self.slow_start = True
        self.increases = 0
        self.decreases = 0
        # (time, latency) of windows, latencies increasing: the front is the baseline
        self._baselines: deque[tuple[float, float]] = deque()
        self._start: float | None = None
        self._n = 0
        self._sum = 0.0
        self._busy = False

    @property
    def baseline(self) -> float | None:
        """The lowest window latency of the last ``horizon`` seconds (None: no window yet)."""
        return self._baselines[0][1] if self._baselines else None

    def sample(self, rtt: float, now: float, busy: bool = True) -> int:
        """One answered request: its round trip ``rtt`` (seconds), answered at ``now``;
        ``busy``: the limit was reached when it was sent (it waited for a slot, or took the
        last one). Returns the limit."""
        if self._start is None:
            self._start = now
        self._n += 1
        self._sum += rtt
        if busy:
            self._busy = True
        if self._n >= self.min_samples:
            base = self.baseline
            span = self.window if base is None else max(self.window, 2.0 * base)
            if now - self._start >= span:
                self._close(now)
        return self.limit

    def throttled(self) -> int:
        """The service refuses requests because of our load: halve the limit. Returns it."""
        self._set(self.limit // 2)
        self.slow_start = False
        self.decreases += 1
        self._reset()
        return self.limit

    def restore(self, limit: int) -> int:
        """Undo a cut (the refusals were not caused by our load): back to ``limit``."""
        self._set(limit)
        self._reset()
        return self.limit

    def _close(self, now: float) -> None:
        rtt = self._sum / self._n
        busy = self._busy
        self._reset()
        self._start = now
        b = self._baselines
        while b and b[-1][1] >= rtt:
            b.pop()
        b.append((now, rtt))
        while b[0][0] < now - self.horizon:
            b.popleft()
        base = b[0][1]
        if base <= 0:
            return
        ratio = rtt / base
        if ratio > self.tolerance:
            self._set(math.floor(self.limit * max(0.5, self.tolerance / ratio)))
            self.slow_start = False
            self.decreases += 1
        elif ratio <= self.grow_below and busy and self.limit < self.ceiling:
            step = self.limit if self.slow_start else max(1, math.isqrt(self.limit))
            self._set(self.limit + step)
            self.increases += 1

    def _set(self, limit: int) -> None:
        self.limit = min(self.ceiling, max(self.floor, limit))

    def _reset(self) -> None:
        self._start = None
        self._n = 0
        self._sum = 0.0
        self._busy = False

    def describe(self) -> dict[str, float | int | None]:
        base = self.baseline
        return {
            "limit": self.limit,
            "floor": self.floor,
            "ceiling": self.ceiling,
            "baseline_ms": None if base is None else round(base * 1000, 2),
            "increases": self.increases,
            "decreases": self.decreases,
        }
