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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, Self, TypeVar

import anyio

from amcommit.errors import ConfigError, ObjectRateLimited, StoreError, Throttled
from amcommit.iostats import IOStatistics
from amcommit.store.base import (
    Capabilities,
    ObjectInfo,
    PutMode,
    RenameRequest,
    RenameResult,
    Store,
    StoreRecipe,
    UpdateIf,
    WriteMode,
    batch_deleter,
    batch_renamer,
    read_range,
    store_recipe,
)
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


class RetryingStore:
    """A :class:`~amcommit.store.base.Store` handle that retries its operations with one
    :class:`RetryPolicy` (the ``normal`` policy of :func:`policies_of`, what the table's
    callers used before they held this handle). Each retried operation goes through
    :func:`retry_call` (listings through :func:`retry_list`), so the rules of the module
    docstring hold unchanged: only retryable errors are retried, an error an inner layer
    gave up on (``retries_spent``) is raised at once, and an error this handle gives up on
    is marked so (an outer loop does not multiply the attempts). No limiter: each attempt
    is one request of the wrapped store, which throttles its own.

    Retried, and why each is safe to repeat:

    * ``stat``, ``get``, ``get_range`` (a ranged read, :func:`~amcommit.store.base.read_range`),
      ``list``: reads. A listing is restarted from its beginning; an entry of an earlier,
      failed attempt is not yielded twice (entries are not a snapshot: see the store
      protocol).
    * ``mkdirs``: idempotent (a directory already there is success).
    * ``delete`` (a file, or a tree with ``recursive=True``): idempotent. The answer
      "was it there" is the *last* attempt's: after a lost answer the retry answers False
      although the first attempt deleted it (callers that count deletions count it
      "already gone", as they did when they retried it themselves).
    * ``delete_batch`` (stores that have one), as one call: its paths are files and a path
      already gone is no failure, so repeating the whole call is safe; failures of single
      paths are returned, not retried (as the store protocol says).
    * ``put`` with ``PutMode.OVERWRITE``: a whole-object write of the same bytes; a
      repetition leaves the same content (a new etag: callers that must know the etag take
      the returned one, the last attempt's).
    * ``put`` with ``PutMode.CREATE``: repeating cannot overwrite; after a lost answer the
      retry raises :class:`~amcommit.errors.AlreadyExists` for the object this very call
      created. That is **not** proof of ownership: every caller decides what an existing
      object means (reads it back and compares, or treats "exists" as "an earlier run's
      or ours", as the table's markers, instant files and job markers do).

    Not retried (one attempt, passed through), and why:

    * ``put`` with :class:`~amcommit.store.base.UpdateIf`: after a lost answer a repetition
      fails with :class:`~amcommit.errors.PreconditionFailed` (the etag moved, by our own
      write) and nothing here can tell ours from another writer's; the caller re-reads.
    * ``rename`` and ``rename_batch``: not idempotent (a repeated rename finds no source).
      A rename is proven by the engine's rename stage (etag kept on rename, the
      ``rename_id`` provenance mark, :func:`~amcommit.store.proof.judge_rename`), which
      retries with that proof itself; this handle never repeats one blindly.

    ``capabilities`` are the wrapped store's (``batch_rename`` and ``delete_batch_max`` only
    where the wrapped store has the method), ``retries`` included: the wrapped store's own
    retry layer stays what it is. The handle owns nothing: :meth:`aclose` closes the
    wrapped store (as every wrapper of the project does); holders that borrow a store do
    not close it. Nothing here is atomic beyond what the wrapped operation is.
    """

    def __init__(self, inner: Store, policy: RetryPolicy) -> None:
        self.inner = inner
        self.policy = policy
        self._caps: tuple[Capabilities, Capabilities] | None = None

    @classmethod
    def of(cls, store: Store, config: RetrySettings) -> RetryingStore:
        """``store`` behind a handle with ``config``'s normal policy (:func:`policies_of`).
        A :class:`RetryingStore` with that policy is returned as it is (handles do not
        nest); one with another policy is replaced by one over its wrapped store."""
        policy = policies_of(config)[0]
        if isinstance(store, RetryingStore):
            if store.policy == policy:
                return store
            store = store.inner
        return cls(store, policy)

    # -- what the wrapped store is ----------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        inner = self.inner.capabilities
        cached = self._caps
        if cached is None or cached[0] is not inner:  # the inner store's may change (GCS move)
            batches = inner.batch_rename and batch_renamer(self.inner) is not None
            deletes = inner.delete_batch_max if batch_deleter(self.inner) is not None else 0
            cached = self._caps = (inner, replace(inner, batch_rename=batches, delete_batch_max=deletes))
        return cached[1]

    @capabilities.setter
    def capabilities(self, value: Capabilities) -> None:
        """Set on the wrapped store (the handle has none of its own)."""
        self.inner.capabilities = value

    @property
    def iostats(self) -> IOStatistics:
        return self.inner.iostats

    @iostats.setter
    def iostats(self, value: IOStatistics) -> None:
        self.inner.iostats = value

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    @property
    def recipe(self) -> StoreRecipe | None:
        """The wrapped store's recipe (another process opens the store itself, without
        this handle)."""
        return store_recipe(self.inner)

    def __repr__(self) -> str:
        return f"RetryingStore({self.inner!r}, attempts={self.policy.max_attempts})"

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        return await retry_call(fn, policy=self.policy)

    # -- retried -------------------------------------------------------------------------
    async def stat(self, path: str) -> ObjectInfo:
        return await self._call(lambda: self.inner.stat(path))

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        return retry_list(self.inner, prefix, recursive=recursive, policy=self.policy)

    async def get(self, path: str) -> bytes:
        return await self._call(lambda: self.inner.get(path))

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        """:func:`~amcommit.store.base.read_range` of the wrapped store, retried."""
        return await self._call(lambda: read_range(self.inner, path, start, length))

    async def mkdirs(self, path: str) -> None:
        await self._call(lambda: self.inner.mkdirs(path))

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        return await self._call(lambda: self.inner.delete(path, recursive=recursive))

    async def delete_batch(self, paths: Sequence[str]) -> dict[int, StoreError]:
        """The wrapped store's ``delete_batch``, the whole call retried (see the class doc)."""
        inner = batch_deleter(self.inner)
        if inner is None:
            raise TypeError(f"{self.inner!r} has no delete_batch")
        return await self._call(lambda: inner.delete_batch(paths))

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        if isinstance(mode, UpdateIf):
            return await self.inner.put(path, data, mode=mode)  # not retried: class doc
        return await self._call(lambda: self.inner.put(path, data, mode=mode))

    # -- passed through once -------------------------------------------------------------
    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        """The wrapped store's ``rename``, once (never retried: see the class doc)."""
        return await self.inner.rename(src, dst, src_etag=src_etag, rename_id=rename_id, src_meta=src_meta)

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """The wrapped store's ``rename_batch``, once (never retried: see the class doc)."""
        inner = batch_renamer(self.inner)
        if inner is None:
            raise TypeError(f"{self.inner!r} has no rename_batch")
        return await inner.rename_batch(requests)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
