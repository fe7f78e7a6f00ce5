"""Two table writers and a lost lock (NOTES-38: "possible data-safety problem"): writer A's
process freezes while it commits or aborts, holding the table's lock; its lock runs out,
writer B takes the lock over, finishes what A left (completes A's commit past its point of
no return, else rolls A's write back) and commits its own replacecommit; then A wakes up.

A freezes for real: its event loop is blocked (a paused process: no heartbeat, no renewal)
until B's commit returned, never for a set time, so the interleaving is the same on a busy
machine. Two kinds of freeze: *between* requests (at a stage boundary: A's next write must
meet the fence, :class:`~amcommit.coord.lease.FencedStore`), and *during* a request (the
fence was passed, the request lands only after B's commit: the window no fence closes).

What must hold, exactly (the matrix's table oracle: every object and its bytes, the SDK's
listing, hudi-rs on local files): after A's failure and A's ``abort-job``, the table is the
old one plus A (when B completed it) plus B, in that order; no committed file of either
writer is lost, and nothing is left of A's write (staging, markers, lock, heartbeat).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import msgspec
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.committer.lock import LockBody, lock_path
from amcommit.committer.report import JobReport, Progress
from amcommit.errors import LockLost, PermissionDenied
from amcommit.store.base import PutMode, Store
from amcommit.table.format.naming import STAGING_DIR
from amcommit.testing.faults import FaultRule, FaultyStore
from tests.matrix import table_oracle as to
from tests.matrix.runner import Cell
from tests.matrix.scenarios import T_B, TABLE_JOBS, Scenario
from tests.matrix.stores import open_store
from tests.matrix.table_runner import OLD, Write, begin, check_table, config, setup_table

T = TypeVar("T")
A_TTL = 1.0
"""A's lock_ttl and writer_ttl: B takes A's lock over once unrenewed for 1 s on B's clock."""
FREEZE_BOUND = 60.0
"""The longest A stays frozen (B's commit returns long before: a bound, never a wait)."""

PLAN = "{dest}/.hoodie/.aux/amcommit/*/commit-plan.json"
JOURNAL = "{dest}/.hoodie/.aux/amcommit/2*/journal.json"
LOSER = "{dest}/p=*/*_0-0-9_*.parquet"
PUBLISHED = "{dest}/.hoodie/2*.commit"
A_FILE = "{dest}/p=*/00000100-*"

# (id, A's action, where A freezes, A past its point of no return when B takes over)
POINTS = [
    ("commit-between-check-order-and-plan", "commit", ("progress", "plan_commit", "start"), False),
    ("commit-plan-put-in-flight", "commit", ("request", "put", PLAN), False),
    ("commit-journal-put-in-flight", "commit", ("request", "put", JOURNAL), False),
    ("commit-between-journal-and-reconcile", "commit", ("progress", "reconcile", "start"), True),
    ("commit-loser-delete-in-flight", "commit", ("request", "delete", LOSER), True),
    ("commit-publish-in-flight", "commit", ("request", "put|rename", PUBLISHED), True),
    ("abort-file-delete-in-flight", "abort", ("request", "delete", A_FILE), False),
]


class Freezer(FaultyStore):
    """A's store: the first call matching ``rule`` blocks A's thread (its whole event loop)
    until ``thawed`` is set, then runs (it lands late); ``frozen`` is set when it blocks."""

    def __init__(self, inner: Store, rule: FaultRule | None) -> None:
        super().__init__(inner, seed=1)
        self.rule = rule
        self.frozen, self.thawed = threading.Event(), threading.Event()

    def freeze(self) -> None:
        if not self.frozen.is_set():
            self.frozen.set()
            assert self.thawed.wait(FREEZE_BOUND), "B never finished"

    def _selects(self, op: str, paths: tuple[str, ...]) -> bool:
        return (self.rule is not None and self.rule.selects(op, paths)) or super()._selects(op, paths)

    async def _call(self, op: str, paths: tuple[str, ...], fn: Callable[[], Awaitable[T]]) -> T:
        if self.rule is not None and self.rule.check(op, paths):
            self.freeze()  # blocks the loop: no renewal, no heartbeat, nothing
        return await super()._call(op, paths, fn)


def _freezer(cell: Cell, where: tuple[str, str, str]) -> tuple[Freezer, Callable[[Progress], None] | None]:
    kind, a, b = where
    if kind == "request":
        rule = FaultRule("latency", frozenset(a.split("|")), cell.path(b), count=1)
        return Freezer(cell.store, rule), None
    freezer = Freezer(cell.store, None)

    def progress(p: Progress) -> None:
        if p.stage == a and p.phase == b:
            freezer.freeze()

    return freezer, progress


def _writer_b(cell: Cell, b: Write, freezer: Freezer, out: dict[str, Any]) -> None:
    """Writer B, in its own thread, loop and store: once A froze, commit B (it waits for A's
    lock to run out, takes it over, finishes A), then thaw A."""

    async def commit_b() -> None:
        store = open_store(cell.info)
        async with store:
            cfg = config(lock_ttl=60.0, lock_wait=60.0, writer_ttl=A_TTL)
            out["report"] = await commit_job(store, cell.dest, b.instant, config=cfg)

    try:
        while not freezer.frozen.wait(0.05):
            if freezer.thawed.is_set():
                return  # A finished (or failed) without freezing: the test says so
        anyio.run(commit_b)
    except BaseException as e:
        out["error"] = e
    finally:
        freezer.thawed.set()


async def _a_side(
    cell: Cell, action: str, where: tuple[str, str, str]
) -> tuple[Write, Write, dict[str, Any]]:
    await setup_table(cell)
    a = await begin(cell, TABLE_JOBS["append"], writer_ttl=A_TTL)
    b = await begin(cell, T_B, 2)
    fast = config(lock_ttl=A_TTL, writer_ttl=A_TTL, io_threads=1, load_threads=1)
    if action == "abort":
        # A's commit fails for good before its journal (saving the plan is denied); its
        # abort then rolls its write back, holding the lock, and freezes there
        denied = FaultyStore(cell.store)
        denied.add(FaultRule("error", frozenset({"put"}), cell.path(PLAN), error=PermissionDenied))
        with pytest.raises(PermissionDenied):
            await commit_job(denied, cell.dest, a.instant, config=fast)
        # ... and its process died holding the lock (as a SIGKILL leaves it; a commit that
        # fails releases it, and an abort without journal or lock runs unlocked): A's abort
        # takes its own job's lock back at once
        stale = LockBody(owner=a.instant, token="f" * 32, ttl=A_TTL)
        path = lock_path(cell.dest, staging=STAGING_DIR)
        await cell.store.put(path, msgspec.json.encode(stale), mode=PutMode.CREATE)
    freezer, progress = _freezer(cell, where)
    out: dict[str, Any] = {}
    thread = threading.Thread(target=_writer_b, args=(cell, b, freezer, out), daemon=True)
    thread.start()
    try:
        call = commit_job if action == "commit" else abort_job
        with pytest.raises(LockLost):
            await call(freezer, cell.dest, a.instant, config=fast, progress=progress)
    finally:
        freezer.thawed.set()
        await anyio.to_thread.run_sync(thread.join, FREEZE_BOUND)
    assert freezer.frozen.is_set(), "A never reached its freeze point"
    assert "error" not in out, f"writer B failed: {out.get('error')!r}"
    return a, b, out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["local", "blob"])
@pytest.mark.parametrize(("action", "where", "past"), [p[1:] for p in POINTS], ids=[p[0] for p in POINTS])
def test_frozen_writer_loses_nothing_of_the_writer_that_took_its_lock(
    backend: str, action: str, where: tuple[str, str, str], past: bool, request: pytest.FixtureRequest
) -> None:
    """A freezes at ``where`` holding the lock; B takes it over, finishes A, commits; A
    wakes and fails (LockLost) doing nothing more; A's ``abort-job`` then finds nothing of
    its own to undo. Exactly: old + A (if past its point of no return) + B."""
    info = request.getfixturevalue("matrix_" + backend)
    sdk_list = request.getfixturevalue("matrix_sdk_list")(backend, info)
    sc = Scenario("lock-lost-two-writers", "", {}, (), tables=(TABLE_JOBS["append"], T_B))

    async def go() -> None:
        store = open_store(info)
        async with store:
            cell = Cell(sc, backend, info, store, sdk_list)
            a, b, out = await _a_side(cell, action, where)
            report: JobReport = out["report"]
            assert report.success and report.instant == b.instant  # type: ignore[attr-defined]
            await abort_job(store, cell.dest, a.instant, config=config())
            committed = [a, b] if past else [b]
            rows = to.OLD_ROWS
            for w in committed:
                rows = to.rows_after(w.job, rows)
            await check_table(cell, OLD, committed, rows, hudi=backend == "local")

    anyio.run(go)
