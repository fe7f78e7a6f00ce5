"""Kill rules: where a process SIGKILLs itself, given as JSON so a runner can pass any rule
to a child process.

Rule kinds (``nth`` counts matches from 1; default 1):

* ``{"type": "progress", "stage": S, "phase": "start"|"end"|"progress", "at": N}``: at a
  progress event of the job commit/abort (for ``progress``, once ``done >= at``);
* ``{"type": "store", "op": OP, "path": GLOB, "nth": N}``: right after the N-th store call
  ``OP`` whose path (for ``rename``: source or destination) matches GLOB has returned: the
  operation happened, the engine did not see the answer (``OP`` ``"mutating"``: any put,
  rename, delete or mkdirs; a batch counts each of its requests; GLOB may be a list: any
  of them);
* ``{"type": "http", "method": M, "url": GLOB, "header": H, "nth": N}``: right after the
  answer of the N-th HTTP request with method M whose percent-decoded URL matches GLOB (and
  which carries request header H, if given) has arrived: between the requests of one store
  operation, e.g. after the copy of a copy+delete rename and before its delete. Installed
  through ``tests.crash.kill.install_request_killer``.

:func:`arm` installs a rule in the current process and returns the store to use and the
progress callback to pass to commit_job / abort_job.
"""

from __future__ import annotations

import fnmatch
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from amcommit.committer import Progress
from amcommit.store.base import Store
from amcommit.testing.faults import FaultyStore
from tests.crash.kill import install_request_killer

T = TypeVar("T")
KillRule = dict[str, Any]


MUTATING = frozenset({"put", "rename", "delete", "mkdirs"})


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _KillAfterStore(FaultyStore):
    """Passes every call through; SIGKILLs the process after the rule's N-th match."""

    def __init__(self, inner: Store, rule: KillRule) -> None:
        super().__init__(inner)
        self._rule = rule
        self._seen = 0

    def _matches(self, op: str, paths: tuple[str, ...]) -> bool:
        r = self._rule
        ok = op in MUTATING if r["op"] == "mutating" else op == r["op"]
        globs = r.get("path", "*")
        globs = [globs] if isinstance(globs, str) else globs
        return ok and any(fnmatch.fnmatchcase(p, g) for p in paths for g in globs)

    def _selects(self, op: str, paths: tuple[str, ...]) -> bool:
        # a batch of renames sends the renames the rule counts through _call one by one
        return self._matches(op, paths) or super()._selects(op, paths)

    async def _call(self, op: str, paths: tuple[str, ...], fn: Callable[[], Awaitable[T]]) -> T:
        result = await super()._call(op, paths, fn)
        if self._matches(op, paths):
            self._seen += 1
            if self._seen >= self._rule.get("nth", 1):
                die()
        return result


def _install_http(rule: KillRule) -> None:
    """Through the suite's one HTTP kill mechanism, :mod:`tests.crash.kill` (a regex on the
    decoded URL; the matrix's rules use globs)."""
    crash_rule: dict[str, Any] = {
        "method": rule["method"],
        "url": fnmatch.translate(rule["url"]),
        "nth": rule.get("nth", 1),
    }
    if rule.get("header"):
        crash_rule["header"] = rule["header"]
    install_request_killer([crash_rule])


def arm(
    rule: KillRule | None, store_factory: Callable[[], Store]
) -> tuple[Store, Callable[[Progress], None]]:
    """Install ``rule`` in this process (before the store's session exists)."""
    kind = None if rule is None else rule["type"]
    if kind == "http":
        assert rule is not None
        _install_http(rule)
    store = store_factory()
    if kind == "store":
        assert rule is not None
        store = _KillAfterStore(store, rule)

    def progress(p: Progress) -> None:
        if kind != "progress":
            return
        assert rule is not None
        if p.stage == rule["stage"] and p.phase == rule["phase"]:
            if p.phase != "progress" or p.done >= rule.get("at", 0):
                die()

    return store, progress


def progress_rule(point: str) -> KillRule:
    """``"stage:phase[:at]"`` as a progress rule."""
    stage, phase, *rest = point.split(":")
    return {"type": "progress", "stage": stage, "phase": phase, "at": int(rest[0]) if rest else 0}
