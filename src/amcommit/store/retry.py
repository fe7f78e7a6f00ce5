"""THE retry layer: decorrelated-jitter backoff, retry policies, and the retrying calls
(:func:`retry_call`, :func:`retry_list`) shared by every backend, the engine, the lock,
tasks, tables and Spark. Nobody else retries.

Only errors whose ``retryable`` flag is set (:class:`~amcommit.errors.Throttled`,
:class:`~amcommit.errors.Transient`) are retried. A throttling error feeds the limiter and
its Retry-After hint is honoured (the sleep is at least that long).

**One retry layer per request.** Stores that talk HTTP (Blob, ADLS Gen2, GCS) retry their
own requests (``Capabilities.retries``); :func:`retry_call` (the engine's
:meth:`~amcommit.committer.context.JobContext.call`) retries operations of stores that do
not (local files, and :class:`~amcommit.testing.faults.FaultyStore`, whose faults are
injected *above* whatever the wrapped store retries). Nested loops cannot multiply: when
a loop gives up on a retryable error (its attempts are spent) it marks the error
``retries_spent``, and every outer loop raises such an error at once. A retryable error
that a store *declined* to repeat (a request it cannot prove idempotent, e.g. GCS
``put(OVERWRITE)`` after a 503) is not marked; an outer layer that knows its operation
is safe to repeat retries it. A throttling answer is reported to one limiter only
(``throttle_reported``): the one of the layer that saw it first.

**Which layer retries.** Every store operation of a job commit, an abort and a task
commit goes through :meth:`~amcommit.committer.context.JobContext.call` (single operations) or
:meth:`~amcommit.committer.context.JobContext.list` (listings): the journal, manifest and victim listings and reads,
victim chunks, mkdirs, renames, deletes, ``_SUCCESS``, cleanup and the summary report.
Exactly one layer retries each request:

* stores with ``Capabilities.retries`` (the HTTP stores: Blob, ADLS Gen2, GCS) retry
  their requests themselves, through their own limiter; what they give up on is marked
  ``retries_spent`` and is final here. The engine makes one call per operation, and
  retries only a retryable error the store *declined* to repeat (a request it could not
  prove idempotent, e.g. GCS ``put(OVERWRITE)`` after a 503): every operation the engine
  makes is safe to repeat (whole-object puts of its own files, idempotent deletes, renames
  whose repetition is recognised by etag or rename id);
* for other stores (local files; :class:`~amcommit.testing.faults.FaultyStore`, whose faults
  are injected above whatever the wrapped store retries) :func:`retry_call` / :func:`retry_list` are the retry layer,
  with the job's :class:`RetryPolicy` (``rename_attempts``,
  ``retry_base_delay``, ``retry_max_delay``).

So an operation costs at most ``rename_attempts`` requests per layer that retries it,
never their product. Each attempt here takes one slot/token of the job's limiter
(``io_rate``); a throttling answer is reported to the limiter of the layer that retried it,
once (the store's for HTTP stores, the job's otherwise).

Bookkeeping after the point of no return (the journal's ``renamed`` and ``committed``
writes, ``_SUCCESS``) uses the *patient* policy (:func:`policies_of`, :attr:`~amcommit.committer.context.JobContext.patient_retry`: four
times the attempts, six times the maximum delay: about 3 minutes of throttling storm with
the defaults), so a commit whose renames are all done does not fail on a transient error.

:class:`~amcommit.errors.ObjectRateLimited` (one object changed too often, e.g. GCS's
about one write per second per object name) is retried after its ``retry_after`` (with
jitter: writers refused together do not come back together) and reported to no limiter:
it is about one name, not the store's load, so the other requests keep their pace.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

import anyio

from amcommit.errors import ConfigError, ObjectRateLimited, StoreError, Throttled
from amcommit.iostats import IOStatistics
from amcommit.store.base import ObjectInfo, Store
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


class Backoff:
    """The failure handling of one retried operation (shared by :func:`call_with_retries`
    and by loops that cannot be written as one call, such as restartable listings).

    :meth:`after` takes the error of attempt ``attempt``; it returns the seconds to sleep
    before the next attempt, or re-raises the error when it is final (not retryable,
    refused by ``retry_if``, already spent by an inner layer, or this policy is exhausted:
    then it is marked ``retries_spent``).
    """

    __slots__ = ("_delays", "limiter", "policy", "retry_if", "stats")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        limiter: Limiter | None = None,
        stats: IOStatistics | None = None,
        retry_if: Callable[[StoreError], bool] | None = None,
    ) -> None:
        self.policy = policy
        self.limiter = limiter
        self.stats = stats
        self.retry_if = retry_if
        self._delays: Iterator[float] | None = None  # created on the first failure only

    def after(self, e: StoreError, attempt: int) -> float:
        if e.retries_spent:
            raise e  # an inner layer retried this request already
        e.attempts = attempt
        if isinstance(e, Throttled) and not e.throttle_reported:
            e.throttle_reported = True
            if isinstance(e, ObjectRateLimited):
                if self.stats is not None:  # one object changed too often: not our load
                    self.stats.incr("store_io_object_rate_limited")
            else:
                if self.limiter is not None:
                    self.limiter.throttled(e.retry_after)
                if self.stats is not None:
                    self.stats.incr("store_io_throttled")
        if not e.retryable or (self.retry_if is not None and not self.retry_if(e)):
            raise e
        if self._delays is None:
            self._delays = self.policy.delays()
        delay = next(self._delays, None)
        if delay is None:
            e.retries_spent = True
            raise e
        if isinstance(e, Throttled) and e.retry_after:
            wait = e.retry_after
            if isinstance(e, ObjectRateLimited):
                # writers of one object that were refused together do not retry together
                wait *= random.uniform(1.0, 1.25)
            delay = max(delay, min(wait, self.policy.max_delay * 4))
        if self.stats is not None:
            self.stats.incr("store_io_retry")
        return delay


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
    ``attempts`` attribute set; when this loop's attempts are exhausted it is also marked
    ``retries_spent``. An error already marked so by an inner loop is raised at once
    (see the module docstring: one retry layer per request).
    """
    try:
        return await fn(1)  # the common case: no failure handling is built at all
    except StoreError as e:
        backoff = Backoff(policy, limiter=limiter, stats=stats, retry_if=retry_if)
        delay = backoff.after(e, 1)
    attempt = 1
    while True:
        await anyio.sleep(delay)
        attempt += 1
        try:
            return await fn(attempt)
        except StoreError as e:
            delay = backoff.after(e, attempt)


class RetrySettings(Protocol):
    """The retry settings of a configuration (what :func:`policies_of` reads)."""

    @property
    def rename_attempts(self) -> int: ...
    @property
    def retry_base_delay(self) -> float: ...
    @property
    def retry_max_delay(self) -> float: ...


def policies_of(config: RetrySettings) -> tuple[RetryPolicy, RetryPolicy]:
    """``(normal, patient)`` retry policies of a configuration (a
    :class:`~amcommit.committer.config.CommitterConfig`; see the module docstring)."""
    normal = RetryPolicy(config.rename_attempts, config.retry_base_delay, config.retry_max_delay)
    patient = RetryPolicy(
        max(4 * config.rename_attempts, 8), config.retry_base_delay, 6 * config.retry_max_delay
    )
    return normal, patient


async def retry_call(
    fn: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    limiter: Limiter | None = None,
    stats: IOStatistics | None = None,
) -> T:
    """One store operation through the retry layer (see the module docstring):
    each attempt takes a slot of ``limiter``; answers that are not refusals are reported
    to it; errors an inner layer already retried (``retries_spent``) are raised at once."""

    async def once(_attempt: int) -> T:
        if limiter is None:
            return await fn()
        async with limiter.slot():
            try:
                result = await fn()
            except StoreError as e:
                if not e.retryable and not isinstance(e, Throttled):
                    limiter.succeeded()  # an answer (not found, exists, ...), not a refusal
                raise
        limiter.succeeded()
        return result

    return await call_with_retries(once, policy=policy, limiter=limiter, stats=stats)


async def retry_list(
    store: Store,
    prefix: str,
    *,
    recursive: bool = True,
    policy: RetryPolicy,
    limiter: Limiter | None = None,
    stats: IOStatistics | None = None,
) -> AsyncIterator[ObjectInfo]:
    """See :meth:`~amcommit.committer.context.JobContext.list`. Each (re)start of the listing counts as one attempt
    of ``policy``; the entries of one successful listing are yielded once each."""
    seen: set[str] = set()
    backoff = Backoff(policy, limiter=limiter, stats=stats)
    attempt = 0
    while True:
        attempt += 1
        try:
            if limiter is not None:
                async with limiter.slot():
                    pass
            async for info in store.list(prefix, recursive=recursive):
                if info.path not in seen:
                    seen.add(info.path)
                    yield info
            if limiter is not None:
                limiter.succeeded()
            return
        except StoreError as e:
            delay = backoff.after(e, attempt)
            if stats is not None:
                stats.incr("committer_listing_restarted")
        await anyio.sleep(delay)
