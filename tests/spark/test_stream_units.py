"""Units of the streaming sink without Spark: owner files and the owner recorded with an
instant's claim, dead-run instants, the instants a driver process allocated, the per-query
lease (two runs of one query at once: the second fails with one line; a dead run's lease
is taken over, after its ttl, or at once when its driver is provably dead on this host;
two runs that find one stale lease at once: exactly one takes it, with real processes on
local files, Azurite and fake-gcs), option splitting and the kill-point parser."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from amcommit.errors import ConfigError, ConflictError
from amcommit.liveness import ProcessId, local_process, proc_stat
from amcommit.spark.stream import _stream_options, driver_gone, driver_id
from amcommit.spark.stream_state import (
    Lease,
    Owner,
    acquire_lease,
    checkpoint_app,
    dead_instants,
    driver_instants,
    lease_path,
    merge_owner,
    owner_fields,
    read_owners,
    write_owner,
)
from amcommit.store.local import LocalStore
from amcommit.table.format.model import Operation
from amcommit.table.write.task import TableSpec, begin_write
from amcommit.testing.spark import fault_at
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake, matrix_local  # noqa: F401 (fixtures)


def test_dead_instants_same_query_earlier_only() -> None:
    owners = {
        "20261101000000000": Owner("q1", "r1"),
        "20261101000001000": Owner("q2", "r9"),  # another query: never touched
        "20261101000002000": Owner(None, None, "ck1"),  # killed before any task: checkpoint key
        "20261101000004000": Owner("q1", "r2"),  # later than mine
    }
    mine = "20261101000003000"
    assert dead_instants(mine, owners, "q1", "ck1") == ["20261101000000000", "20261101000002000"]
    assert dead_instants(mine, owners, "q1", None) == ["20261101000000000"]
    assert dead_instants(mine, owners, "q3", None) == []
    assert checkpoint_app("/cp/x/") == checkpoint_app("/cp/x") != checkpoint_app("/cp/y")


def test_dead_instants_of_a_gone_driver_and_a_drivers_own_instants() -> None:
    owners = {
        "20261101000000000": Owner(checkpoint="ck9", driver="h/1/a"),  # another query, driver gone
        "20261101000001000": Owner(checkpoint="ck9", driver="h/2/b"),  # another query, driver alive
        "20261101000002000": Owner("q1", "r1", "ck1", "h/2/b"),
        "20261101000004000": Owner(checkpoint="ck1", driver="h/1/a"),  # later than mine
    }
    mine = "20261101000003000"
    gone = frozenset({"h/1/a"})
    assert dead_instants(mine, owners, "q7", None, gone) == ["20261101000000000"]
    assert dead_instants(mine, owners, "q1", None, gone) == ["20261101000000000", "20261101000002000"]
    assert driver_instants(owners, "h/2/b", "ck1") == ["20261101000002000"]
    assert driver_instants(owners, "h/2/b", None) == []
    assert driver_instants(owners, "h/1/a", "ck1") == ["20261101000004000"]


def test_merge_owner() -> None:
    claimed = {"checkpoint": "ck", "driver": "h/1/a", "other": "x", "app": 5}
    assert merge_owner(None, claimed) == Owner(checkpoint="ck", driver="h/1/a")
    assert merge_owner(Owner("q", "r", None), claimed) == Owner("q", "r", "ck", "h/1/a")
    assert merge_owner(None, None) is None and merge_owner(None, {}) is None
    assert owner_fields(Owner(checkpoint="ck", driver="d")) == {"checkpoint": "ck", "driver": "d"}


def test_driver_gone() -> None:
    assert not driver_gone(driver_id(local_process(os.getpid())))
    done = subprocess.Popen(["true"])
    done.wait()
    assert driver_gone(driver_id(ProcessId(pid=done.pid)))
    host, ns, pid, start = driver_id(ProcessId(pid=done.pid)).split("/")
    assert not driver_gone(f"another-host/{ns}/{pid}/{start}")
    assert not driver_gone(f"{host}/pid:[1]/{pid}/{start}")  # another pid namespace (a container)
    assert not driver_gone("garbage") and not driver_gone(f"{host}/{ns}/x/y")


def test_zombie_driver_is_gone() -> None:
    """Issue 32 item 11: a driver killed and not reaped (a zombie, as under a PID 1 that
    does not reap) is gone: its instants are a dead run's."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        driver = driver_id(local_process(child.pid))
        assert driver.split("/")[3] and not driver_gone(driver)
        os.kill(child.pid, signal.SIGKILL)  # not reaped until the end: a zombie meanwhile
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not driver_gone(driver):
            time.sleep(0.02)
        assert driver_gone(driver)
        st = proc_stat(child.pid)
        assert st is not None and st[1] == "Z"
    finally:
        child.kill()
        child.wait()


def test_owner_files_round_trip(tmp_path: Path) -> None:
    async def main() -> dict[str, Owner]:
        store = LocalStore(str(tmp_path))
        async with store:
            await write_owner(store, "t", "20261101000000000", Owner("q", "r", None))
            await store.put("t/.hoodie/.aux/amcommit/notaninstant/_stream.json", b"{}")
            return await read_owners(store, "t")

    assert anyio.run(main) == {"20261101000000000": Owner("q", "r", None)}


def test_owner_recorded_with_the_claim(tmp_path: Path) -> None:
    """The driver's part of the owner is in the write's marker from its claim on: read
    with no owner file, merged with one, and ``below`` skips later instants."""
    owner = Owner(checkpoint="ck", driver="h/1/a")

    async def main() -> tuple[dict[str, Owner], dict[str, Owner], dict[str, Owner]]:
        store = LocalStore(str(tmp_path))
        async with store:
            w = await begin_write(
                store, "t", operation=Operation.INSERT, spec=TableSpec("t"), owner=owner_fields(owner)
            )
            await begin_write(store, "t", operation=Operation.INSERT)  # no owner: not listed
            first = await read_owners(store, "t")
            await write_owner(store, "t", w.instant, Owner("q", "r", "ck"))
            return first, await read_owners(store, "t"), await read_owners(store, "t", below=w.instant)

    first, merged, below = anyio.run(main)
    (t,) = first
    assert first == {t: owner}
    assert merged == {t: Owner("q", "r", "ck", "h/1/a")}
    assert below == {}


def test_second_run_of_a_query_fails_while_the_first_renews(tmp_path: Path) -> None:
    ttl = 1.0

    async def main() -> str:
        store = LocalStore(str(tmp_path))
        async with store:
            assert await acquire_lease(store, "t", "q", "run-a", ttl) is False

            async def renew() -> None:
                for _ in range(12):
                    await anyio.sleep(ttl / 4)
                    await acquire_lease(store, "t", "q", "run-a", ttl)

            async with anyio.create_task_group() as tg:
                tg.start_soon(renew)
                try:
                    await acquire_lease(store, "t", "q", "run-b", ttl)
                except ConflictError as e:
                    tg.cancel_scope.cancel()
                    return str(e)
            return "not refused"

    msg = anyio.run(main)
    assert "already running in another run (run-a" in msg and "\n" not in msg


def test_dead_run_lease_taken_over_after_ttl(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A lease whose driver is unknown (no proof of death) is taken over once not renewed
    for its ttl; the restart says once, in one line, that it waits and for how long."""
    ttl = 0.6
    caplog.set_level(logging.WARNING, logger="amcommit.spark.stream")

    async def main() -> tuple[bool, float]:
        store = LocalStore(str(tmp_path))
        async with store:
            await acquire_lease(store, "t", "q", "dead-run", ttl)
            t0 = time.monotonic()
            took = await acquire_lease(store, "t", "q", "restart", ttl)
            return took, time.monotonic() - t0

    took, waited = anyio.run(main)
    assert took and waited < 3 * 0.6 + 1.5
    said = [r.getMessage() for r in caplog.records if r.name == "amcommit.spark.stream"]
    assert len(said) == 1 and "\n" not in said[0], said
    assert said[0].startswith("streaming query q: run restart waits for the lease of run dead-run")
    assert "at most 1.6 s" in said[0]


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
def test_a_runs_recorded_times_never_count(tmp_path: Path, skew: float) -> None:
    """The lease is judged by its etag on the newcomer's monotonic clock, never by the time
    written in it. Run a's clock is off by an hour: it keeps renewing its lease (each beat
    an hour behind: it looks long stale) and a second run still fails in one line; then run
    a dies (its beat an hour ahead: it looks fresh for an hour) and a restart takes the
    lease over once unchanged for leaseTtl. (Judged by the beat, the second run took the
    lease of a live run, and the restart waited in vain.)"""
    ttl = 1.0

    async def main() -> tuple[str, bool, float]:
        store = LocalStore(str(tmp_path))
        async with store:
            path = lease_path("t", "q")

            async def beat() -> None:  # what run a's tasks write, by their clock
                await store.put(path, msgspec.json.encode(Lease("q", "run-a", time.time() + skew)))

            await beat()

            async def renew() -> None:
                while True:
                    await anyio.sleep(ttl / 4)
                    await beat()

            refused = "not refused"
            async with anyio.create_task_group() as tg:
                tg.start_soon(renew)
                try:
                    await acquire_lease(store, "t", "q", "run-b", ttl)
                except ConflictError as e:
                    refused = str(e)
                tg.cancel_scope.cancel()
            t0 = time.monotonic()
            took = await acquire_lease(store, "t", "q", "restart", ttl)
            return refused, took, time.monotonic() - t0

    refused, took, waited = anyio.run(main)
    assert "already running in another run (run-a" in refused and "\n" not in refused
    # a lease unchanged for ttl on the restart's own clock (plus a loaded machine's delay);
    # never the hour its recorded time says
    assert took and ttl <= waited < ttl + 5.0, waited


REPO = str(Path(__file__).resolve().parents[2])
LEASE_BACKENDS = ["local", "blob", "gcs-fake"]


def lease_run(info: dict[str, Any], dest: str, run: str, ttl: float, **more: Any) -> subprocess.Popen[str]:
    spec = {"backend": info, "dest": dest, "app": "q", "run": run, "ttl": ttl, "start_at": 0.0, "hold_for": 0}
    spec |= more
    argv = [sys.executable, "-m", "tests.spark.lease_child", "--spec", json.dumps(spec)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, *sys.path]))
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", LEASE_BACKENDS)
def test_two_runs_find_one_stale_lease_at_once(backend: str, request: pytest.FixtureRequest) -> None:
    """Two restarted runs (real processes) start at the same moment against one stale lease,
    and each put of the lease is held back 1 s so that both have read the stale lease
    before either writes: exactly one takes it and runs (renewing it for 2 s); the other
    fails in one line, without ever running. (With an unconditional takeover both ran.)"""
    from tests.matrix.stores import open_store

    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    ttl, dest = 2.0, "t"

    async def stale() -> None:
        async with open_store(info) as store:
            old = Lease("q", "dead-run", time.time() - 100)
            await store.put(lease_path(dest, "q"), msgspec.json.encode(old))

    anyio.run(stale)
    start = time.time() + 4.0  # both children are up by then
    runs = [lease_run(info, dest, f"run-{n}", ttl, start_at=start, delay=1.0, hold_for=2.0) for n in (1, 2)]
    outs = [p.communicate(timeout=90) for p in runs]
    codes = [p.returncode for p in runs]
    assert sorted(codes) == [0, 1], (codes, outs)
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    assert json.loads(outs[winner][0]) == {"running": f"run-{winner + 1}", "took": True}
    assert outs[loser][0] == ""  # it never ran
    *waits, err = outs[loser][1].strip().splitlines()  # (a late start logs that it waits)
    assert err.startswith("amcommit: error: streaming query q is already running")
    assert f"another run (run-{winner + 1}," in err
    assert all(w.startswith(f"streaming query q: run run-{loser + 1} waits for the lease") for w in waits)

    async def holder() -> str:
        async with open_store(info) as store:
            return msgspec.json.decode(await store.get(lease_path(dest, "q")), type=Lease).run

    assert anyio.run(holder) == f"run-{winner + 1}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["this host", "another host"])
@pytest.mark.parametrize("backend", LEASE_BACKENDS)
def test_lease_of_a_killed_driver(backend: str, where: str, request: pytest.FixtureRequest) -> None:
    """A run renewing the query's lease (a real process, recorded as the run's driver) is
    SIGKILLed; a restart takes the lease over at once on this host (leaseTtl 30 s), and once
    it is stale when the lease names a driver on another host (leaseTtl 1.5 s)."""
    from amcommit.liveness import ProcessId
    from tests.matrix.stores import open_store

    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    ttl = 30.0 if where == "this host" else 1.5
    dest = "t"
    first = lease_run(info, dest, "run-1", ttl, driver="self", hold_for=-1)
    try:
        assert first.stdout is not None
        assert json.loads(first.stdout.readline())["running"] == "run-1"
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)

    async def restart() -> tuple[bool, float]:
        async with open_store(info) as store:
            path = lease_path(dest, "q")
            lease = msgspec.json.decode(await store.get(path), type=Lease)
            assert lease.run == "run-1" and lease.driver is not None and lease.driver.pid == first.pid
            if where == "another host":
                moved = msgspec.structs.replace(lease.driver, host="another-host.example")
                await store.put(path, msgspec.json.encode(msgspec.structs.replace(lease, driver=moved)))
            t0 = time.monotonic()
            took = await acquire_lease(store, dest, "q", "run-2", ttl, driver=ProcessId())
            return took, time.monotonic() - t0

    took, waited = anyio.run(restart)
    assert took
    if where == "this host":
        assert waited < 5, waited  # not leaseTtl (30 s)
    else:
        assert waited >= 1.0, waited  # the ttl rule: it waited for the lease to go stale


def test_stream_options_split() -> None:
    rest, ck, ttl = _stream_options({"checkpointLocation": "/cp", "leaseTtl": "4", "partitionBy": "day"})
    assert (ck, ttl) == ("/cp", 4.0) and rest == {"partitionBy": "day", "tableFormat": "hudi"}
    with pytest.raises(ConfigError, match="leaseTtl"):
        _stream_options({"leaseTtl": "soon"})


def test_fault_points() -> None:
    assert fault_at("slow_task@2=1.5", "slow_task", 2) == 1.5
    assert fault_at("slow_task@2=1.5", "slow_task", 1) is None
    assert fault_at("slow_task@2=1.5", "task_write", 2) is None
    assert fault_at("", "slow_task", 2) is None


def test_abort_without_reports_rolls_back_the_batch_and_late_tasks_leave_nothing(tmp_path: Path) -> None:
    """Issue 23 item 7 without Spark: the sink's two writers of a micro-batch as Spark makes
    them (the tasks' one, pickled: it allocates the instant; the commit side's one). An
    ``abort()`` that no task reported to (a ``stop()`` mid batch) rolls the batch's instant
    back; a task of that batch starting late writes nothing that stays; another query's
    instant in the table is left alone."""
    import pickle

    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from amcommit.errors import AmcommitError
    from amcommit.spark.source import AmcommitDataSource
    from tests.spark.helpers import unfinished

    schema = StructType([StructField("id", LongType()), StructField("day", StringType())])
    dest = tmp_path / "table"

    def left() -> set[str]:
        return {n.rsplit("/", 1)[-1].split(".")[0] for n in unfinished(dest)}

    def writer(checkpoint: str) -> Any:
        opts = {"path": str(dest), "checkpointLocation": checkpoint, "partitionBy": "day", "writer_ttl": "2"}
        return AmcommitDataSource(opts).streamWriter(schema, False)

    other = pickle.loads(pickle.dumps(writer(str(tmp_path / "cp-other"))))  # another query's batch
    tasks = pickle.loads(pickle.dumps(writer(str(tmp_path / "cp"))))  # allocates the instant
    mine, theirs = tasks.plan.job_id, other.plan.job_id
    assert left() == {mine, theirs}
    writer(str(tmp_path / "cp")).abort([None, None], 3)
    assert left() == {theirs}
    rows = pa.RecordBatch.from_pylist(
        [{"id": 1, "day": "d"}], schema=pa.schema([("id", pa.int64()), ("day", pa.string())])
    )
    with pytest.raises(AmcommitError, match="not active"):
        tasks.write(iter([rows]))
    assert left() == {theirs}
    assert not (dest / ".hoodie" / ".aux" / "amcommit" / mine).exists()
    writer(str(tmp_path / "cp-other")).abort([None], 0)
    assert unfinished(dest) == []


def test_settle_gc_freezes_once_in_a_spark_daemon_worker_only() -> None:
    """``settle_gc`` (called at the end of the sink's planner, task and commit calls):
    in a process whose main module is Spark's daemon (a forked, reused Python worker) it
    collects once and freezes what is alive, once per process (a second call freezes
    nothing more); in any other process (a user's driver) it does nothing."""
    code = (
        "import gc, importlib.util, json, sys\n"
        "from amcommit.spark.stream import settle_gc\n"
        "as_daemon = sys.argv[1] == 'daemon'\n"
        "if as_daemon:\n"
        "    sys.modules['__main__'].__spec__ = importlib.util.find_spec('pyspark.daemon')\n"
        "settle_gc()\n"
        "first = gc.get_freeze_count()\n"
        "keep = [[i] for i in range(1000)]\n"
        "settle_gc()\n"
        "print(json.dumps([first, gc.get_freeze_count()]))\n"
    )
    got = {}
    for mode in ("daemon", "driver"):
        r = subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=60, check=True
        )
        got[mode] = json.loads(r.stdout.strip().splitlines()[-1])
    first, second = got["daemon"]
    assert first > 10_000 and second == first  # the imports frozen, once
    assert got["driver"] == [0, 0]
