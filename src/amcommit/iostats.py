"""IO statistics: per-operation counts, failures and durations, in Hadoop's JSON shape.

A snapshot serialises exactly like Hadoop's ``IOStatisticsSnapshot``::

    {"counters": {"op_rename": 3, "op_rename.failures": 0},
     "gauges": {},
     "minimums": {"op_rename.min": 1}, "maximums": {"op_rename.max": 5},
     "meanstatistics": {"op_rename.mean": {"samples": 3, "sum": 9}}}

Durations are whole milliseconds (as Hadoop records them). :class:`IOStatistics` is the
live, mutable collector; it is not thread-safe and is meant for one event loop.
"""

from __future__ import annotations

import time

import msgspec


class MeanStatistic(msgspec.Struct, omit_defaults=False):
    """A mean as Hadoop keeps it: number of samples and their sum."""

    samples: int = 0
    sum: int = 0

    @property
    def mean(self) -> float:
        return self.sum / self.samples if self.samples else 0.0


class IOStatisticsSnapshot(msgspec.Struct):
    """Serialisable statistics (Hadoop ``IOStatisticsSnapshot`` JSON shape)."""

    counters: dict[str, int] = msgspec.field(default_factory=dict)
    gauges: dict[str, int] = msgspec.field(default_factory=dict)
    minimums: dict[str, int] = msgspec.field(default_factory=dict)
    maximums: dict[str, int] = msgspec.field(default_factory=dict)
    meanstatistics: dict[str, MeanStatistic] = msgspec.field(default_factory=dict)

    def merge(self, other: IOStatisticsSnapshot) -> None:
        """Aggregate ``other`` into this snapshot (sum counters and means, min/max)."""
        for k, v in other.counters.items():
            self.counters[k] = self.counters.get(k, 0) + v
        for k, v in other.gauges.items():
            self.gauges[k] = self.gauges.get(k, 0) + v
        for k, v in other.minimums.items():
            # Hadoop uses -1 for "no sample"; ignore those.
            if v < 0:
                continue
            cur = self.minimums.get(k)
            self.minimums[k] = v if cur is None or cur < 0 else min(cur, v)
        for k, v in other.maximums.items():
            cur = self.maximums.get(k)
            self.maximums[k] = v if cur is None else max(cur, v)
        for k, m in other.meanstatistics.items():
            cur_m = self.meanstatistics.get(k)
            if cur_m is None:
                self.meanstatistics[k] = MeanStatistic(m.samples, m.sum)
            else:
                cur_m.samples += m.samples
                cur_m.sum += m.sum


class _OpStats:
    __slots__ = ("count", "fail_count", "fail_max", "fail_min", "fail_sum", "max", "min", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.min = float("inf")
        self.max = 0.0
        self.fail_count = 0
        self.fail_sum = 0.0
        self.fail_min = float("inf")
        self.fail_max = 0.0


class _Timer:
    __slots__ = ("_op", "_stats", "_t0")

    def __init__(self, stats: IOStatistics, op: str) -> None:
        self._stats = stats
        self._op = op
        self._t0 = 0.0

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._stats.record(self._op, time.perf_counter() - self._t0, failed=exc_type is not None)


class IOStatistics:
    """Live collector of operation durations and counters."""

    def __init__(self) -> None:
        self._ops: dict[str, _OpStats] = {}
        self.counters: dict[str, int] = {}

    def record(self, op: str, seconds: float, *, failed: bool = False) -> None:
        """Record one operation of ``seconds`` duration (successful unless ``failed``)."""
        st = self._ops.get(op)
        if st is None:
            st = self._ops[op] = _OpStats()
        ms = seconds * 1000.0
        if failed:
            st.fail_count += 1
            st.fail_sum += ms
            if ms < st.fail_min:
                st.fail_min = ms
            if ms > st.fail_max:
                st.fail_max = ms
        else:
            st.count += 1
            st.sum += ms
            if ms < st.min:
                st.min = ms
            if ms > st.max:
                st.max = ms

    def record_many(self, op: str, n: int, seconds: float, *, failed: int = 0) -> None:
        """Record ``n`` operations that took ``seconds`` together (a batch), ``failed``
        of them failures: each counts with the batch's mean duration."""
        if n <= 0:
            return
        mean = seconds / n
        for _ in range(failed):
            self.record(op, mean, failed=True)
        ok = n - failed
        if ok <= 0:
            return
        st = self._ops.get(op)
        if st is None:
            st = self._ops[op] = _OpStats()
        ms = mean * 1000.0
        st.count += ok
        st.sum += ms * ok
        if ms < st.min:
            st.min = ms
        if ms > st.max:
            st.max = ms

    def incr(self, counter: str, n: int = 1) -> None:
        self.counters[counter] = self.counters.get(counter, 0) + n

    def time(self, op: str) -> _Timer:
        """``with stats.time(op):`` time the block as operation ``op``; an exception
        records a failure. (A plain class, not a generator: this runs once per call.)"""
        return _Timer(self, op)

    def count(self, op: str) -> int:
        st = self._ops.get(op)
        return st.count if st else 0

    def failures(self, op: str) -> int:
        st = self._ops.get(op)
        return st.fail_count if st else 0

    def mean_ms(self, op: str) -> float:
        st = self._ops.get(op)
        return st.sum / st.count if st and st.count else 0.0

    def snapshot(self, prefix: str = "op_") -> IOStatisticsSnapshot:
        """A Hadoop-shaped snapshot; operation names are prefixed with ``prefix``."""
        snap = IOStatisticsSnapshot(counters=dict(self.counters))
        for op, st in sorted(self._ops.items()):
            name = f"{prefix}{op}"
            snap.counters[name] = st.count
            snap.counters[f"{name}.failures"] = st.fail_count
            if st.count:
                snap.minimums[f"{name}.min"] = int(st.min)
                snap.maximums[f"{name}.max"] = int(st.max)
                snap.meanstatistics[f"{name}.mean"] = MeanStatistic(st.count, int(st.sum))
            if st.fail_count:
                snap.minimums[f"{name}.failures.min"] = int(st.fail_min)
                snap.maximums[f"{name}.failures.max"] = int(st.fail_max)
                snap.meanstatistics[f"{name}.failures.mean"] = MeanStatistic(st.fail_count, int(st.fail_sum))
        return snap
