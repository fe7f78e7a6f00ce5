"""A store wrapper that injects failures: for tests, benchmarks and chaos drills.

Rules select operations by name (``stat``, ``list``, ``get``, ``put``, ``rename``,
``delete``, ``mkdirs``, ``delete_batch``: a whole batch call, see :meth:`FaultyStore.delete_batch`), by path glob (``fnmatch``; for ``rename`` the source *or* the
destination may match), by probability and by count (``after`` matches are let through
first, then at most ``count`` are hit). Kinds of fault:

* ``error``: raise a :class:`~amcommit.errors.StoreError` subclass *instead of* the call;
* ``throttle``: raise :class:`~amcommit.errors.Throttled` with ``retry_after``;
* ``latency``: sleep ``seconds`` before the call (which then runs normally);
* ``lost_response``: run the call, then raise :class:`~amcommit.errors.Transient`, as if
  the answer had been lost on the way back: the effect happened, the caller cannot know.

Everything else passes through to the wrapped store unchanged. Rules are checked in the
order added; the first error-type rule that fires wins (latency rules always add up).
"""

from __future__ import annotations

import fnmatch
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Self, TypeVar

import anyio

from amcommit.errors import StoreError, Throttled, Transient
from amcommit.iostats import IOStatistics
from amcommit.store.base import (
    BatchFailures,
    Capabilities,
    ObjectInfo,
    PutMode,
    RenameRequest,
    RenameResult,
    Store,
    WriteMode,
    batch_deleter,
    batch_renamer,
    read_range,
    recovered_in,
)

T = TypeVar("T")

FaultKind = Literal["error", "throttle", "latency", "lost_response"]
OPS = frozenset({"stat", "list", "get", "put", "rename", "delete", "mkdirs", "delete_batch"})


class RuleMatcher:
    """When a fault rule fires: the one matcher of the fault injectors (:class:`FaultyStore`,
    the driver fault hooks, and the tests' GCS double and ADLS Gen2 server).

    A rule selects calls by operation name (``ops``; None: any) and by an fnmatch glob on
    the call's paths (``path``; None: any; one of the paths, e.g. a rename's source or
    destination, is enough). Of the selected calls it lets the first ``after`` through,
    then fires at most ``count`` times (None: every time), each time with ``probability``.
    ``matched`` and ``fired`` count selected calls and faults. Not atomic: callers that
    share a rule between threads hold their own lock around :meth:`check`.
    """

    ops: frozenset[str] | None
    path: str | None
    after: int
    count: int | None
    matched: int
    fired: int
    probability: float = 1.0

    def selects(self, op: str, paths: tuple[str, ...]) -> bool:
        """Whether the call ``op`` on ``paths`` is one this rule is about (pure)."""
        if self.ops is not None and op not in self.ops:
            return False
        return self.path is None or any(fnmatch.fnmatchcase(p, self.path) for p in paths)

    def fire(self, rng: random.Random | None = None) -> bool:
        """Count one selected call; True when the fault happens to it."""
        self.matched += 1
        if self.matched <= self.after:
            return False
        if self.count is not None and self.fired >= self.count:
            return False
        if self.probability < 1.0 and (rng or random).random() >= self.probability:
            return False
        self.fired += 1
        return True

    def check(self, op: str, paths: tuple[str, ...], rng: random.Random | None = None) -> bool:
        """:meth:`selects` and, if so, :meth:`fire`."""
        return self.selects(op, paths) and self.fire(rng)


@dataclass
class FaultRule(RuleMatcher):
    """One injection rule of :class:`FaultyStore`. See the module docstring."""

    kind: FaultKind
    ops: frozenset[str] | None = None
    path: str | None = None
    probability: float = 1.0
    count: int | None = None
    after: int = 0
    error: type[StoreError] = Transient
    retry_after: float | None = None
    seconds: float = 0.0
    matched: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.ops is not None:
            unknown = set(self.ops) - OPS
            if unknown:
                raise ValueError(f"unknown operation(s) {sorted(unknown)}; known: {sorted(OPS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {self.probability}")


def _ops(op: str | list[str] | tuple[str, ...] | None) -> frozenset[str] | None:
    if op is None:
        return None
    return frozenset([op]) if isinstance(op, str) else frozenset(op)


class FaultyStore:
    """Wraps any :class:`~amcommit.store.base.Store` and injects faults by rule."""

    def __init__(self, inner: Store, *, seed: int | None = 0) -> None:
        self.inner = inner
        self.rules: list[FaultRule] = []
        self.injected: Counter[str] = Counter()
        self.events: list[tuple[str, str, tuple[str, ...]]] = []
        """Every injected fault as ``(kind, op, paths)``, in order."""
        self._rng = random.Random(seed)
        self._caps: tuple[Capabilities, Capabilities] | None = None

    # -- rule builders -------------------------------------------------------------------
    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def fail(
        self,
        op: str | list[str] | tuple[str, ...] | None = None,
        *,
        error: type[StoreError] = Transient,
        path: str | None = None,
        probability: float = 1.0,
        count: int | None = None,
        after: int = 0,
    ) -> FaultRule:
        """Raise ``error`` instead of running matching operations."""
        return self.add(FaultRule("error", _ops(op), path, probability, count, after, error))

    def throttle(
        self,
        op: str | list[str] | tuple[str, ...] | None = None,
        *,
        retry_after: float | None = 0.05,
        path: str | None = None,
        probability: float = 1.0,
        count: int | None = None,
        after: int = 0,
    ) -> FaultRule:
        """Answer matching operations with :class:`Throttled` (``retry_after`` seconds)."""
        return self.add(
            FaultRule("throttle", _ops(op), path, probability, count, after, retry_after=retry_after)
        )

    def latency(
        self,
        seconds: float,
        op: str | list[str] | tuple[str, ...] | None = None,
        *,
        path: str | None = None,
        probability: float = 1.0,
        count: int | None = None,
        after: int = 0,
    ) -> FaultRule:
        """Delay matching operations by ``seconds``."""
        return self.add(FaultRule("latency", _ops(op), path, probability, count, after, seconds=seconds))

    def lose_response(
        self,
        op: str | list[str] | tuple[str, ...] | None = None,
        *,
        path: str | None = None,
        probability: float = 1.0,
        count: int | None = None,
        after: int = 0,
    ) -> FaultRule:
        """Run matching operations, then raise :class:`Transient` as if the reply was lost."""
        return self.add(FaultRule("lost_response", _ops(op), path, probability, count, after))

    def clear(self) -> None:
        self.rules.clear()

    # -- machinery -----------------------------------------------------------------------
    async def _call(self, op: str, paths: tuple[str, ...], fn: Callable[[], Awaitable[T]]) -> T:
        lost = False
        delay = 0.0
        raise_err: StoreError | None = None
        for rule in self.rules:
            if not rule.selects(op, paths):
                continue
            if rule.kind == "latency":
                if rule.fire(self._rng):
                    delay += rule.seconds
                continue
            if raise_err is not None or lost:
                continue
            if not rule.fire(self._rng):
                continue
            if rule.kind != "lost_response":
                self.injected[f"{rule.kind}:{op}"] += 1
                self.events.append((rule.kind, op, paths))
            if rule.kind == "error":
                raise_err = rule.error("injected fault", op=op, path=paths[0])
            elif rule.kind == "throttle":
                raise_err = Throttled(
                    "injected throttling", retry_after=rule.retry_after, op=op, path=paths[0]
                )
            else:
                lost = True
        if delay:
            await anyio.sleep(delay)
        if raise_err is not None:
            raise raise_err
        result = await fn()
        if lost:
            self.injected[f"lost_response:{op}"] += 1
            self.events.append(("lost_response", op, paths))
            raise Transient("injected lost response (the operation did happen)", op=op, path=paths[0])
        return result

    # -- Store protocol ------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """The wrapped store's, with ``retries=False``: faults are injected above whatever
        the wrapped store retries, so the engine must retry them (errors the wrapped store
        already retried carry ``retries_spent`` and are not retried again); and without
        ``local_root``, so no caller goes around the faults to the files."""
        inner = self.inner.capabilities
        cached = self._caps
        if cached is None or cached[0] is not inner:  # the inner store's may change (GCS move)
            batches = inner.batch_rename and batch_renamer(self.inner) is not None
            deletes = inner.delete_batch_max if batch_deleter(self.inner) is not None else 0
            cached = self._caps = (
                inner,
                replace(
                    inner, retries=False, local_root=None, batch_rename=batches, delete_batch_max=deletes
                ),
            )
        return cached[1]

    @property
    def iostats(self) -> IOStatistics:
        return self.inner.iostats

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r}, rules={len(self.rules)})"

    async def stat(self, path: str) -> ObjectInfo:
        return await self._call("stat", (path,), lambda: self.inner.stat(path))

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        async def start() -> AsyncIterator[ObjectInfo]:
            return self.inner.list(prefix, recursive=recursive)

        it = await self._call("list", (prefix,), start)
        async for info in it:
            yield info

    async def get(self, path: str) -> bytes:
        return await self._call("get", (path,), lambda: self.inner.get(path))

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        """A ranged read of the wrapped store (:func:`~amcommit.store.base.read_range`: one
        ranged request where it has them), with the faults of :meth:`get` (op ``get``)."""
        return await self._call("get", (path,), lambda: read_range(self.inner, path, start, length))

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        return await self._call("put", (path,), lambda: self.inner.put(path, data, mode=mode))

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        return await self._call(
            "rename",
            (src, dst),
            lambda: self.inner.rename(src, dst, src_etag=src_etag, rename_id=rename_id, src_meta=src_meta),
        )

    def _selects(self, op: str, paths: tuple[str, ...]) -> bool:
        """Whether any rule is about the call ``op`` on ``paths`` (pure; subclasses that
        act on calls add their own conditions)."""
        return any(rule.selects(op, paths) for rule in self.rules)

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """The wrapped store's batch, with the faults of :meth:`rename`: the requests no
        rule is about go to the wrapped store's ``rename_batch`` in runs, each request a
        rule is about goes through :meth:`rename` on its own (its fault, or lost answer,
        is its failure), in order."""
        inner = batch_renamer(self.inner)
        if inner is None:
            raise TypeError(f"{self.inner!r} has no rename_batch")
        failed = BatchFailures()
        start = 0  # first index of the current run of requests no rule is about

        async def flush(end: int) -> None:
            if end > start:
                answer = await inner.rename_batch(requests[start:end])
                for i, e in answer.items():
                    failed[start + i] = e
                failed.recovered.update(start + i for i in recovered_in(answer))

        for i, r in enumerate(requests):
            if not self._selects("rename", (r.src, r.dst)):
                continue
            await flush(i)
            start = i + 1
            try:
                await self.rename(
                    r.src, r.dst, src_etag=r.src_etag, rename_id=r.rename_id, src_meta=r.src_meta
                )
            except StoreError as e:
                failed[i] = e
        await flush(len(requests))
        return failed

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        return await self._call("delete", (path,), lambda: self.inner.delete(path, recursive=recursive))

    async def delete_batch(self, paths: Sequence[str]) -> dict[int, StoreError]:
        """The wrapped store's batch, with faults at two levels: rules on ``delete_batch``
        act on the whole call (selected when their glob matches any of the paths: an
        error instead of the call, or the call done and its answer lost); within it, the
        paths no ``delete`` rule is about go to the wrapped store's ``delete_batch`` in
        runs, and each path a rule is about goes through :meth:`delete` on its own (its
        fault, or lost answer, is its failure), in order."""
        inner = batch_deleter(self.inner)
        if inner is None:
            raise TypeError(f"{self.inner!r} has no delete_batch")

        async def run() -> dict[int, StoreError]:
            assert inner is not None
            failed: dict[int, StoreError] = {}
            start = 0  # first index of the current run of paths no rule is about

            async def flush(end: int) -> None:
                if end > start:
                    for i, e in (await inner.delete_batch(paths[start:end])).items():
                        failed[start + i] = e

            for i, p in enumerate(paths):
                if not self._selects("delete", (p,)):
                    continue
                await flush(i)
                start = i + 1
                try:
                    await self.delete(p)
                except StoreError as e:
                    failed[i] = e
            await flush(len(paths))
            return failed

        if not paths:
            return {}
        return await self._call("delete_batch", tuple(paths), run)

    async def mkdirs(self, path: str) -> None:
        await self._call("mkdirs", (path,), lambda: self.inner.mkdirs(path))

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
