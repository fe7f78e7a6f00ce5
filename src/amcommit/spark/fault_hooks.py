"""Fault-injection hooks of the Spark adapter (production code: the driver and the tasks
parse them on every write; they do nothing unless asked for).

They are switched on per write through options under ``amcommit.testing.`` and let the
test suite and ``amcommit demo`` reproduce failures Spark cannot be asked for directly:

``amcommit.testing.fail_task`` (JSON object)
    Make task attempts fail after writing: ``{"partitions": [0, 2] | null (all),
    "attempts": [0] (default), "after_rows": 0, "how": "raise" | "exit"}``. ``raise``
    raises :class:`InjectedTaskFailure` inside ``write()`` once ``after_rows`` rows were
    seen (the attempt then cleans up after itself, as on any error); ``exit`` finishes the
    attempt's files and kills the Python worker with ``os._exit`` (no cleanup at all: a
    crashed executor). Either way Spark retries the task.

``amcommit.testing.driver_faults`` (JSON list)
    Fault rules for the store used by the driver-side ``commit()`` / ``abort()``:
    ``[{"phase": "commit" | "abort" | "both", "kind": "error" | "lost_response" |
    "throttle" | "latency", "op": "rename" | [...], "path": "*.parquet", "after": 0,
    "count": null, "error": "PermissionDenied", "seconds": 0.0}]``. The store is wrapped in
    :class:`~amcommit.testing.faults.FaultyStore` with these rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from amcommit import errors
from amcommit.errors import ConfigError
from amcommit.store.base import Store
from amcommit.testing.faults import FaultRule, FaultyStore


class InjectedTaskFailure(RuntimeError):
    """Raised by the ``fail_task`` test hook."""


@dataclass(frozen=True)
class TaskFailure:
    """A parsed ``fail_task`` hook."""

    partitions: frozenset[int] | None
    attempts: frozenset[int]
    after_rows: int
    how: str

    def applies(self, partition: int, attempt: int) -> bool:
        return (self.partitions is None or partition in self.partitions) and attempt in self.attempts


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigError(f"test hook amcommit.testing.{name} is not valid JSON: {e}") from None


def parse_task_failure(text: str | None) -> TaskFailure | None:
    if not text:
        return None
    spec = _json("fail_task", text)
    if not isinstance(spec, dict):
        raise ConfigError("test hook amcommit.testing.fail_task must be a JSON object")
    how = spec.get("how", "raise")
    if how not in ("raise", "exit"):
        raise ConfigError("test hook fail_task: 'how' must be 'raise' or 'exit'")
    parts = spec.get("partitions")
    return TaskFailure(
        partitions=None if parts is None else frozenset(int(p) for p in parts),
        attempts=frozenset(int(a) for a in spec.get("attempts", [0])),
        after_rows=int(spec.get("after_rows", 0)),
        how=how,
    )


def parse_driver_faults(text: str | None) -> list[dict[str, Any]]:
    if not text:
        return []
    spec = _json("driver_faults", text)
    if not isinstance(spec, list) or not all(isinstance(r, dict) for r in spec):
        raise ConfigError("test hook amcommit.testing.driver_faults must be a JSON list of objects")
    for r in spec:
        _rule(r)  # validate now, on the driver, before any task runs
    return spec


def _rule(r: dict[str, Any]) -> FaultRule:
    err_name = r.get("error", "Transient")
    err = getattr(errors, err_name, None)
    if not (isinstance(err, type) and issubclass(err, errors.StoreError)):
        raise ConfigError(f"test hook driver_faults: unknown store error {err_name!r}")
    op = r.get("op")
    ops = None if op is None else frozenset([op] if isinstance(op, str) else op)
    try:
        return FaultRule(
            kind=r.get("kind", "error"),
            ops=ops,
            path=r.get("path"),
            count=r.get("count"),
            after=int(r.get("after", 0)),
            error=err,
            seconds=float(r.get("seconds", 0.0)),
            retry_after=r.get("retry_after"),
        )
    except ValueError as e:
        raise ConfigError(f"test hook driver_faults: {e}") from None


def wrap_driver_store(store: Store, spec: list[dict[str, Any]], phase: str) -> Store:
    """``store`` wrapped in a FaultyStore with the rules of ``phase`` (or ``store`` itself)."""
    rules = [r for r in spec if r.get("phase", "commit") in (phase, "both")]
    if not rules:
        return store
    faulty = FaultyStore(store, seed=0)
    for r in rules:
        faulty.add(_rule(r))
    return cast(Store, faulty)


__all__ = [
    "InjectedTaskFailure",
    "TaskFailure",
    "parse_driver_faults",
    "parse_task_failure",
    "wrap_driver_store",
]
