"""An in-flight limit (fixed or adaptive) plus an adaptive token-bucket rate limit.

One :class:`Limiter` guards every request a store sends. Share one limiter between all the
jobs of a process that talk to the same account or bucket (:func:`shared_limiter`), so that
together they respect the service's limits.

Behaviour:

* at most ``max_concurrency`` operations in flight (a fixed limit); or, with
  ``adaptive`` (an :class:`~amcommit.store.adaptive.AdaptiveLimit`, what the HTTP stores
  use by default), a limit that the controller moves between its floor and ceiling: it
  grows while the answers' latency holds and the limit is reached, shrinks when latency
  rises, halves when the rate below is cut for throttling and is restored with it when
  the cut is undone (see :mod:`amcommit.store.adaptive`). ``max_concurrency=None`` without
  ``adaptive``: no limit. Every slot's round trip (from the slot taken to its release) is
  the controller's latency sample;
* at most ``rate`` operations started per second (token bucket, bursts of ``burst``);
  ``rate=None`` means no rate limit until the service throttles us;
* the request that was throttled waits for its own Retry-After (see
  :mod:`amcommit.store.retry`); the limiter pauses *every* new operation for the
  Retry-After only while most answers (``pause_fraction`` of at least ``min_samples``)
  are throttling answers;
* the share of throttling answers is measured over windows of ``window`` seconds. When
  it reaches ``tolerance`` (over at least ``min_samples`` answers), the rate drops to ``decrease`` times the current (or observed)
  rate, never below ``min_rate``, at most once per ``cooldown`` seconds;
* every decrease is a probe. After a settling window (it still holds answers to
  requests sent before the decrease), ``probe_samples`` answers (or five windows) are
  judged: if the slower rate did not reduce the share of throttling answers the way a
  throttle caused by our load would (a cut below the service's capacity stops it: the
  share must fall to a quarter; a cut still above it: at least half-way to what it would
  show; an accepted decrease is checked again over ten windows), the throttling is not
  caused by our load (a hot partition, a fault, a
  fixed share of refusals). The old rate is restored and no decrease happens for ``hold``
  seconds (doubling, up to 60 s, while it keeps happening). Without this, a fixed 10% of
  throttled answers would push the rate down to ``min_rate`` within seconds;
* ``ramp`` (seconds, with a ``rate``): a service that scales to the load it sees, at most
  doubling per period (a cold GCS bucket: 1,000 writes/s, doubling every 20 minutes).
  The configured rate doubles at the end of every ``ramp`` seconds in which at least
  half of it was used on average (a trickle does not warm the service);
* after ``recover_after`` seconds without a window at or above ``tolerance``, the rate
  grows by ``increase`` per window until it reaches ``rate`` again (or, if the
  configured rate was unlimited, until it passes ``unlimited_above``, when the limit is
  lifted).

A limiter belongs to one event loop (it is not thread-safe).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from amcommit.errors import ConfigError
from amcommit.store.adaptive import AdaptiveLimit

_MAX_HOLD = 60.0


@dataclass(slots=True)
class _Probe:
    """A decrease under test: undone (to ``restore_to``) if the share does not fall."""

    restore_to: float | None
    share_before: float
    started: float
    settling: bool = True
    conc_before: int | None = None


@dataclass(slots=True)
class _Check:
    """An accepted decrease, checked again over ten windows against ``limit``."""

    restore_to: float | None
    limit: float
    started: float
    ok: int = 0
    thr: int = 0
    conc_before: int | None = None


class Limiter:
    """Concurrency + adaptive rate limiter. See the module docstring."""

    def __init__(
        self,
        *,
        max_concurrency: int | None = 64,
        adaptive: AdaptiveLimit | None = None,
        rate: float | None = None,
        burst: float | None = None,
        min_rate: float = 5.0,
        decrease: float = 0.5,
        increase: float = 1.25,
        cooldown: float = 1.0,
        recover_after: float = 2.0,
        unlimited_above: float = 20_000.0,
        window: float = 1.0,
        tolerance: float = 0.02,
        pause_fraction: float = 0.5,
        hold: float = 5.0,
        min_samples: int = 20,
        probe_samples: int = 100,
        ramp: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_concurrency is not None and max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        if max_concurrency is not None and adaptive is not None:
            raise ConfigError("give max_concurrency (a fixed in-flight limit) or adaptive, not both")
        if rate is not None and rate <= 0:
            raise ConfigError(f"rate must be > 0 ops/s or None, got {rate}")
        if not 0 < decrease < 1:
            raise ConfigError(f"decrease must be in (0, 1), got {decrease}")
        if increase <= 1:
            raise ConfigError(f"increase must be > 1, got {increase}")
        if window <= 0:
            raise ConfigError(f"window must be > 0 seconds, got {window}")
        if not 0 <= tolerance < 1:
            raise ConfigError(f"tolerance must be in [0, 1), got {tolerance}")
        if not 0 < pause_fraction <= 1:
            raise ConfigError(f"pause_fraction must be in (0, 1], got {pause_fraction}")
        if ramp is not None and (ramp <= 0 or rate is None):
            raise ConfigError(f"ramp must be > 0 seconds, with a rate, got {ramp}")
        self.max_concurrency = max_concurrency
        self.adaptive = adaptive
        self.max_rate = rate
        self.rate: float | None = rate
        self._burst_cfg = burst
        self.min_rate = min_rate
        self.decrease = decrease
        self.increase = increase
        self.cooldown = cooldown
        self.recover_after = recover_after
        self.unlimited_above = unlimited_above
        self.window = window
        self.tolerance = tolerance
        self.pause_fraction = pause_fraction
        self.hold = hold
        self.min_samples = min_samples
        self.probe_samples = max(min_samples, probe_samples)
        self.ramp = ramp
        self._ramp_start: float | None = None  # the current ramp period began (first token)
        self._ramp_taken = 0  # tokens taken in it
        self.ramp_doublings = 0
        self._clock = clock
        # the gate: requests in flight, the limit, and the tasks waiting for a slot (FIFO)
        self._limit: int | None = adaptive.limit if adaptive is not None else max_concurrency
        self._in_flight = 0
        self._waiters: deque[anyio.Event] = deque()
        now = clock()
        self._tokens = self._burst()
        self._last_refill = now
        self._paused_until = 0.0
        self._epoch = 0  # bumped on every change of the rate
        self._prev_start = now
        self._last_throttle = -math.inf
        self._last_change = -math.inf  # the first throttling answer always counts
        self._last_bad = -math.inf  # end of the last window at or above the tolerance
        # answers in the current and the previous window
        self._win_start = now
        self._win_ok = 0
        self._win_thr = 0
        self._prev_ok = 0
        self._prev_thr = 0
        self._probe: _Probe | None = None
        self._check: _Check | None = None
        self._hold_until = -math.inf
        self._hold_next = hold
        # observed completion rate: EWMA of the interval between completions
        self._last_done = 0.0
        self._ewma_interval = 0.0
        # statistics
        self.throttle_events = 0
        self.rate_decreases = 0
        self.rate_restores = 0
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
        return 20.0 * (self._limit or 64)

    def _recent(self) -> tuple[int, int]:
        """(throttling answers, all answers) in the current and the previous window."""
        thr = self._win_thr + self._prev_thr
        return thr, thr + self._win_ok + self._prev_ok

    @property
    def throttled_share(self) -> float:
        """The share of throttling answers in the current and the previous window."""
        thr, n = self._recent()
        return thr / n if n else 0.0

    @property
    def in_flight(self) -> int:
        """Operations holding a slot now (0 without an in-flight limit)."""
        return self._in_flight

    @property
    def concurrency_limit(self) -> int | None:
        """The in-flight limit now (the adaptive one moves; None: no limit)."""
        return self._limit

    @property
    def concurrency_ceiling(self) -> int | None:
        """The most the in-flight limit can ever be (None: no limit): what a caller sizes
        its own workers by (more would only wait)."""
        return self.adaptive.ceiling if self.adaptive is not None else self.max_concurrency

    # -- the gate ----------------------------------------------------------------------

    async def _acquire(self) -> bool:
        """Take a slot, waiting in line if the limit is reached; True if the limit was
        reached (we waited, or took the last slot: the controller's "busy")."""
        limit = self._limit
        assert limit is not None
        if self._in_flight < limit and not self._waiters:
            self._in_flight += 1  # fast path: no scheduling round trip when a slot is free
            return self._in_flight >= limit
        ev = anyio.Event()
        self._waiters.append(ev)
        try:
            await ev.wait()
        except BaseException:
            if ev.is_set():
                self._release()  # handed a slot while being cancelled: pass it on
            else:
                self._waiters.remove(ev)
            raise
        return True

    def _release(self) -> None:
        self._in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        """Hand free slots to waiters, in order (the slot is counted for them here)."""
        limit = self._limit
        waiters = self._waiters
        while waiters and (limit is None or self._in_flight < limit):
            self._in_flight += 1
            waiters.popleft().set()

    def _set_limit(self, limit: int) -> None:
        if limit != self._limit:
            self._limit = limit
            self._wake()

    async def _take_token(self) -> None:
        while True:
            now = self._clock()
            if self._paused_until > now:
                wait = self._paused_until - now
                self.waited_seconds += wait
                await anyio.sleep(wait)
                continue
            rate = self.rate
            if rate is None:
                return
            if self.ramp is not None:
                self._ramp_step(now)
                rate = self.rate
                assert rate is not None
            self._tokens = min(self._burst(), self._tokens + (now - self._last_refill) * rate)
            self._last_refill = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return
            # reservation: sleep until our token has accrued, in short steps, so that a
            # change of the rate (a probe undone, a recovery) is seen by sleeping waiters
            wait = -self._tokens / rate
            epoch = self._epoch
            while wait > 0:
                step = min(wait, 0.1)
                self.waited_seconds += step
                await anyio.sleep(step)
                wait -= step
                if self._epoch != epoch:
                    break  # the rate changed and the debt was dropped: take a token anew
            else:
                return

    def _ramp_step(self, now: float) -> None:
        """Count a token for the ramp; at the end of each ``ramp`` period in which the
        configured rate was used (on average at least half of it), double it."""
        if self._ramp_start is None:
            self._ramp_start = now
        self._ramp_taken += 1
        elapsed = now - self._ramp_start
        if elapsed < self.ramp:  # type: ignore[operator]
            return
        cap = self.max_rate
        assert cap is not None
        if self._ramp_taken >= 0.5 * cap * elapsed:
            self.max_rate = cap * 2
            self.ramp_doublings += 1
            if self.rate == cap:  # not cut for throttling: the new rate at once
                self._set_rate(self.max_rate)
        self._ramp_start, self._ramp_taken = now, 0

    def slot(self) -> _Slot:
        """``async with limiter.slot():`` wait for a token and a concurrency slot; hold the
        slot for the block. (A plain class, not a generator: this runs once per request.)"""
        return _Slot(self)

    # -- feedback ----------------------------------------------------------------------

    def succeeded(self) -> None:
        """Report an answer that was not a refusal (a success, or an error such as "not
        found"): drives the observed rate, the share of refusals and the recovery."""
        now = self._clock()
        if self._last_done:
            gap = now - self._last_done
            self._ewma_interval = gap if not self._ewma_interval else 0.9 * self._ewma_interval + 0.1 * gap
        self._last_done = now
        self._win_ok += 1
        if now - self._win_start >= self.window:
            self._close_window(now)

    def throttled(self, retry_after: float | None = None) -> None:
        """Report a throttling answer: may slow the bucket (see the module docstring) and,
        while most answers are throttled, pause new operations for ``retry_after``."""
        now = self._clock()
        self.throttle_events += 1
        self._win_thr += 1
        self._last_throttle = now
        if now - self._win_start >= self.window:
            self._close_window(now)
        thr, n = self._recent()
        share = thr / n
        if n < self.min_samples:
            return  # too few answers to measure the share (the request waits its Retry-After)
        if retry_after is not None and retry_after > 0 and share >= self.pause_fraction:
            self._paused_until = max(self._paused_until, now + min(retry_after, 60.0))
        if share < self.tolerance or self._probe is not None or now < self._hold_until:
            return
        if self.rate is not None and now - self._last_change < self.cooldown:
            return
        # cut from what we really send (answers per second over the two windows, or the
        # recent completion rate if higher), so that the cut binds
        sending = n / max(now - self._prev_start, 1e-3)
        if self._ewma_interval:
            sending = max(sending, self.observed_rate)
        if self.rate is not None:
            base = min(self.rate, max(sending, self.min_rate))
        else:
            base = max(sending, self.min_rate / self.decrease)
        # a decrease during the check of an earlier one: if this one turns out not to
        # help, the earlier one is undone as well
        restore_to = self._check.restore_to if self._check is not None else self.rate
        conc_before = self._check.conc_before if self._check is not None else None
        if self.adaptive is not None:
            if conc_before is None:
                conc_before = self.adaptive.limit
            self._set_limit(self.adaptive.throttled())
        self._probe = _Probe(restore_to, share, now, conc_before=conc_before)
        self._check = None
        self._set_rate(max(self.min_rate, base * self.decrease))
        self._last_change = self._last_bad = now
        self.rate_decreases += 1
        # the probe measures the answers to requests sent at the new rate only
        self._win_start, self._win_ok, self._win_thr = now, 0, 0
        self._prev_ok = self._prev_thr = 0
        self._prev_start = now

    def _close_window(self, now: float) -> None:
        ok, thr = self._win_ok, self._win_thr
        n = ok + thr
        share = thr / n if n else 0.0
        probe = self._probe
        if probe is not None:
            if probe.settling:
                # the first window after a decrease still holds answers to requests sent
                # at the old rate: judge the next one
                probe.settling, probe.started = False, now
                self._roll(now, ok, thr)
                return
            if n < self.probe_samples and now - probe.started < 5 * self.window:
                return  # too few answers to judge yet: keep collecting
            self._probe = None
            before = probe.share_before
            # what a throttle caused by our load would show now: the service accepted
            # (1 - before) of the old rate, and we send ``decrease`` of it
            expected = max(0.0, 1.0 - (1.0 - before) / self.decrease)
            if expected > 0:
                limit = (before + expected) / 2
            else:  # a load-caused throttle would have stopped; allow for stragglers
                limit = max(self.tolerance, before / 4)
            if n >= self.min_samples and share > limit:
                # slowing down did not help: the throttling is not caused by our load
                self._undo(probe.restore_to, now, probe.conc_before)
            else:
                self._hold_next = self.hold
                self._check = _Check(probe.restore_to, limit, now, conc_before=probe.conc_before)
            self._last_change = now
        elif self._check is not None:
            # a probe judged on a few hundred answers can be fooled by chance: confirm it
            # over ten windows, or undo it
            c = self._check
            c.ok += ok
            c.thr += thr
            if now - c.started >= 10 * self.window:
                self._check = None
                total = c.ok + c.thr
                if total >= self.probe_samples and c.thr / total > c.limit:
                    self._undo(c.restore_to, now, c.conc_before)
                    self._last_change = now
        if share >= self.tolerance:
            self._last_bad = now
        elif (
            self.rate is not None
            and now - self._last_bad >= self.recover_after
            and now - self._last_change >= self.cooldown
        ):
            new = self.rate * self.increase
            if self.max_rate is not None and new >= self.max_rate:
                self._set_rate(self.max_rate)
            elif self.max_rate is None and new >= self.unlimited_above:
                self._set_rate(None)
            else:
                self._set_rate(new)
            self._last_change = now
        self._roll(now, ok, thr)

    def _roll(self, now: float, ok: int, thr: int) -> None:
        """The closing window (``ok``, ``thr``) becomes the previous one; a new one starts."""
        self._prev_ok, self._prev_thr = ok, thr
        self._prev_start = self._win_start
        self._win_start, self._win_ok, self._win_thr = now, 0, 0

    def _set_rate(self, rate: float | None) -> None:
        """A new rate: waiters re-take their tokens at it (the old debt is dropped)."""
        self.rate = rate
        self._tokens = min(max(self._tokens, 0.0), self._burst())
        self._last_refill = self._clock()
        self._epoch += 1

    def _undo(self, before_rate: float | None, now: float, conc_before: int | None = None) -> None:
        """Restore the rate (and the adaptive in-flight limit) before a decrease that did
        not help; hold off further ones."""
        self._set_rate(before_rate)
        if self.adaptive is not None and conc_before is not None:
            self._set_limit(self.adaptive.restore(max(conc_before, self.adaptive.limit)))
        self._hold_until = now + self._hold_next
        self._hold_next = min(_MAX_HOLD, self._hold_next * 2)
        self.rate_restores += 1

    def describe(self) -> dict[str, float | int | None]:
        d: dict[str, float | int | None] = {
            "max_concurrency": self.max_concurrency,
            "concurrency_limit": self._limit,
            "rate": self.rate,
            "max_rate": self.max_rate,
            "throttle_events": self.throttle_events,
            "rate_decreases": self.rate_decreases,
            "rate_restores": self.rate_restores,
            "ramp_doublings": self.ramp_doublings,
            "waited_seconds": round(self.waited_seconds, 3),
        }
        if self.adaptive is not None:
            d.update({f"adaptive_{k}": v for k, v in self.adaptive.describe().items()})
        return d


class _Slot:
    __slots__ = ("_busy", "_held", "_lim", "_sent_at", "_t0")

    def __init__(self, lim: Limiter) -> None:
        self._lim = lim
        self._held = False
        self._busy = False
        self._t0 = 0.0
        self._sent_at = 0

    async def __aenter__(self) -> None:
        lim = self._lim
        if lim.rate is not None or lim._paused_until:
            await lim._take_token()
        if lim._limit is not None:
            self._busy = await lim._acquire()
            self._held = True
            if lim.adaptive is not None:
                self._t0 = lim._clock()
                self._sent_at = lim._limit

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._held:
            self._held = False
            lim = self._lim
            lim._release()
            ctl = lim.adaptive
            # a round trip that ended in an answer or an error (a timeout is latency too);
            # not one cut short by a cancellation
            if ctl is not None and (exc_type is None or issubclass(exc_type, Exception)):
                now = lim._clock()
                before = ctl.limit
                # "the limit was reached" counts for the limit it was reached at: not for
                # a higher one set since (else one growth step would count twice)
                busy = self._busy and self._sent_at >= before
                if ctl.sample(now - self._t0, now, busy) != before:
                    lim._set_limit(ctl.limit)


_shared: dict[str, Limiter] = {}

DEFAULT_ADAPTIVE: dict[str, int] = {"initial": 64, "floor": 32, "ceiling": 1024}
"""The HTTP stores' default in-flight limit: adaptive from 64, between 32 and 1,024."""


def default_limiter(key: str, max_concurrency: int | None = None, rate: float | None = None) -> Limiter:
    """The limiter an HTTP store gets by default: :func:`shared_limiter` for ``key`` (one
    per account or bucket and settings), with the adaptive in-flight limit
    :data:`DEFAULT_ADAPTIVE`, or a fixed ``max_concurrency`` (adaptation off), and a rate
    of ``rate`` requests per second (None: none until the service throttles)."""
    if max_concurrency is not None:
        return shared_limiter(
            f"{key}|c={max_concurrency}|r={rate}", max_concurrency=max_concurrency, rate=rate
        )
    return shared_limiter(
        f"{key}|adaptive|r={rate}",
        max_concurrency=None,
        adaptive=AdaptiveLimit(**DEFAULT_ADAPTIVE),
        rate=rate,
    )


def shared_limiter(key: str, **options: object) -> Limiter:
    """The process-wide limiter for ``key`` (e.g. ``"gcs:bucket"``, ``"azure:account"``).

    Created with ``options`` on first use; later calls return the same limiter and ignore
    ``options``.
    """
    lim = _shared.get(key)
    if lim is None:
        lim = _shared[key] = Limiter(**options)  # type: ignore[arg-type]
    return lim
