"""Instants complete in allocation order (pitfall 8); dead writers are rolled back; first writers race."""

from __future__ import annotations

import anyio
import pytest

from amcommit.api import commit_job
from amcommit.errors import CommitError, ConflictError
from amcommit.paths import join
from amcommit.table.commit.rollback import rollback_instant
from amcommit.table.commit.table_commit import plan_order
from amcommit.table.format.model import Instant, Operation, State
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants
from amcommit.table.write.task import TableSpec, begin_write
from tests.backends import StoreUnderTest
from tests.table.writehelpers import begin, listing, rows, write, write_tasks

FAST = TableConfig(lock_ttl=5.0, lock_wait=20.0, writer_ttl=3.0)


def test_plan_order_pure() -> None:
    c = lambda t: Instant(t, "commit", State.COMPLETED)  # noqa: E731
    i = lambda t: Instant(t, "commit", State.INFLIGHT)  # noqa: E731
    mine = "20260101000000500"
    assert plan_order(mine, [c("20260101000000600")], set(), {}, 0, 10).later_completed == "20260101000000600"
    now = 1767225600.0 + 1  # 2026-01-01T00:00:01Z
    p = plan_order(
        mine, [i("20260101000000100"), i("20260101000000200")], set(), {"20260101000000100": now}, now, 10
    )
    assert p.wait_for == "20260101000000100" and p.dead == []
    p = plan_order(mine, [i("20260101000000100")], set(), {"20260101000000100": now - 60}, now, 10)
    assert p.dead == ["20260101000000100"] and p.wait_for is None
    # staged only (no .requested yet), never heartbeated, old: dead
    p = plan_order(mine, [], {"20260101000000100"}, {}, now + 3600, 10)
    assert p.dead == ["20260101000000100"]
    # clean instants and completed ones are not pending
    p = plan_order(
        mine,
        [c("20260101000000100"), Instant("20260101000000200", "clean", State.INFLIGHT)],
        set(),
        {},
        now,
        10,
    )
    assert p == plan_order(mine, [], set(), {}, now, 10)


async def test_waits_for_live_earlier_writer_rolls_back_dead_one(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    await write(store, dest, rows(0, 2), config=FAST)
    early = await begin(store, dest, config=FAST)
    await write_tasks(store, early, rows(10, 2))
    late = await begin(store, dest, config=FAST)
    await write_tasks(store, late, rows(20, 2))
    before_late = await listing(store, dest)
    # late must wait for early (alive): with a short wait it fails naming it, changing nothing
    with pytest.raises(ConflictError, match=early.instant):
        await commit_job(store, dest, late.instant, config=FAST.with_options(lock_wait=0.5))
    assert await listing(store, dest) == before_late
    # the early writer commits first: then the late one goes through
    await commit_job(store, dest, early.instant, config=FAST)
    await commit_job(store, dest, late.instant, config=FAST)
    a = await begin(store, dest, config=FAST)
    await write_tasks(store, a, rows(30, 2))
    b = await begin(store, dest, config=FAST)
    await write_tasks(store, b, rows(40, 2))
    # b completes out of order only if a is judged dead: make a look dead, b rolls a back
    await anyio.sleep(FAST.writer_ttl + 0.5)
    rb = await commit_job(store, dest, b.instant, config=FAST)
    assert rb.success
    names = await listing(store, dest)
    assert not any(a.instant in n for n in names), "the dead writer's instant was rolled back"
    # a's writer comes back: its staging is gone, so its commit fails and changes nothing
    with pytest.raises(CommitError):
        await commit_job(store, dest, a.instant, config=FAST)
    assert await listing(store, dest) == names


async def test_out_of_order_commit_rolls_back(backend_local: StoreUnderTest) -> None:
    """An instant allocated before a completed later one cannot complete: one line, rolled back."""
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    await write(store, dest, rows(0, 2), config=FAST)
    a = await begin(store, dest, config=FAST)
    await write_tasks(store, a, rows(10, 2))
    b = await begin(store, dest, config=FAST)
    await write_tasks(store, b, rows(20, 2))
    # hide a's instant files and staging marker while b commits, then put them back: a is
    # now an inflight instant earlier than a completed one (what pitfall 8 forbids)
    hoodie = join(dest, ".hoodie")
    saved = {
        n: await store.get(join(hoodie, n))
        for n in (f"{a.instant}.commit.requested", f"{a.instant}.inflight")
    }
    staging = join(dest, ".hoodie/.aux/amcommit", a.instant)
    moved = join(dest, "_moved_staging")
    await store.rename(join(staging, "_job.json"), join(moved, "_job.json"))
    for n in saved:
        await store.delete(join(hoodie, n))
    await commit_job(store, dest, b.instant, config=FAST)
    for n, data in saved.items():
        await store.put(join(hoodie, n), data)
    await store.rename(join(moved, "_job.json"), join(staging, "_job.json"))
    await store.delete(moved, recursive=True)
    before = [n for n in await listing(store, dest) if a.instant not in n]
    with pytest.raises(CommitError, match=f"later instant {b.instant} completed first.*run it again"):
        await commit_job(store, dest, a.instant, config=FAST)
    assert await listing(store, dest) == before


async def test_concurrent_first_writers(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    got: list[str] = []

    async def one(n: int) -> None:
        w, _r = await write(store, dest, rows(n * 10, 3), config=FAST)
        got.append(w.instant)

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(one, n)
    assert len(set(got)) == 3
    instants = [i for i in await list_instants(store, dest) if i.completed]
    assert sorted(i.time for i in instants) == sorted(got)
    # an incompatible concurrent first writer: one clear error
    other = join(backend_local.base, "tbl2")

    async def first(spec: TableSpec) -> str:
        try:
            await begin_write(store, other, operation=Operation.INSERT, spec=spec)
            return "ok"
        except Exception as e:
            return f"{type(e).__name__}: {e}"

    res: list[str] = []

    async def run(spec: TableSpec) -> None:
        res.append(await first(spec))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, TableSpec("t", ("p",)))
        tg.start_soon(run, TableSpec("t", ("q",)))
    assert sorted(r.split(":")[0] for r in res) == ["ConfigError", "ok"]


async def test_rollback_instant_of_dead_writer(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    await write(store, dest, rows(0, 2), config=FAST)
    before = await listing(store, dest)
    w = await begin(store, dest, config=FAST)
    await write_tasks(store, w, rows(10, 2))
    quick = FAST.with_options(writer_ttl=0.5)
    await anyio.sleep(0.8)  # its writer is gone: no heartbeat for longer than writer_ttl
    report = await rollback_instant(store, dest, w.instant, config=quick)
    assert report.rolled_back
    assert await listing(store, dest) == before


async def test_cli_rollback(backend_local: StoreUnderTest, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from amcommit.cli import main

    store, dest = backend_local.store, join(backend_local.base, "tbl")
    w0, _ = await write(store, dest, rows(0, 2), config=FAST)
    before = await listing(store, dest)
    w = await begin(store, dest, config=FAST)
    await write_tasks(store, w, rows(10, 2))
    path = os.path.join(store.root, dest)  # type: ignore[attr-defined]
    during = await listing(store, dest)
    # the writer is alive (fresh heartbeat): refused in one line, nothing changed
    assert await anyio.to_thread.run_sync(main, ["rollback", path, "--instant", w.instant]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "live writer" in err[0] and "--force" in err[0], err
    assert await listing(store, dest) == during
    # --force rolls it back all the same
    assert await anyio.to_thread.run_sync(main, ["rollback", path, "--instant", w.instant, "--force"]) == 0
    assert await listing(store, dest) == before
    assert await anyio.to_thread.run_sync(main, ["rollback", path, "--instant", w0.instant]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is completed" in err[0]


async def test_later_commit_waits_for_live_earlier_then_completes_after_it(
    backend_local: StoreUnderTest,
) -> None:
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    await write(store, dest, rows(0, 2), config=FAST)
    early = await begin(store, dest, config=FAST)
    await write_tasks(store, early, rows(10, 2))
    late = await begin(store, dest, config=FAST)
    await write_tasks(store, late, rows(20, 2))
    order: list[str] = []

    async def commit(instant: str, delay: float) -> None:
        await anyio.sleep(delay)
        await commit_job(store, dest, instant, config=FAST)
        order.append(instant)

    async with anyio.create_task_group() as tg:
        tg.start_soon(commit, late.instant, 0.0)  # starts first, must wait (early is alive)
        tg.start_soon(commit, early.instant, 1.0)
    assert order == [early.instant, late.instant]
    done = [i.time for i in await list_instants(store, dest) if i.completed]
    assert done[-2:] == [early.instant, late.instant]
