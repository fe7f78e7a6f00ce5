"""Issue 32 items 8 and 11: the keep-alive of a write begun in a Python driver watches the
driver, not the driver's parent. A real parent process outlives the driver (a shell that
started ``python job.py`` and reaps it; or a parent that never reaps it, as a PID 1 without
an init, leaving a zombie); the driver, which began a table write and started its
keep-alive process as the Spark writer does (:func:`amcommit.spark.driver.keep_write_alive`),
is SIGKILLed. The keep-alive stops beating within one beat interval (``writer_ttl / 4``),
and the next writer rolls the write back: at once on this host (the driver, the write's
recorded keeper, is provably dead: zombie or reaped); from another host (the keeper record
rewritten so) once the last beat is older than ``writer_ttl``. Before, the keep-alive
watched the shell and beat for ever: the write stayed alive and the next writer waited."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from amcommit.liveness import ProcessId, local_process, proc_stat, process_gone, this_process
from amcommit.store.local import LocalStore
from amcommit.table.format.naming import heartbeat_path
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.heartbeat import judge_writers
from amcommit.table.timeline.instants import list_instants
from tests.table.test_heartbeats import move_keeper_to_another_host
from tests.table.writehelpers import listing, rows, write

T = TypeVar("T")
ROOT = str(Path(__file__).resolve().parents[2])

pytestmark = pytest.mark.skipif(this_process() is None, reason="needs Linux /proc")


def _data(names: list[str]) -> set[str]:
    return {n for n in names if not n.startswith(".hoodie/")}


def _state(pid: int) -> str | None:
    st = proc_stat(pid)
    return None if st is None else st[1]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("parent", "where"),
    [("shell", "this host"), ("shell", "another host"), ("no reaper", "this host")],
)
def test_killed_python_driver_write_is_rolled_back(tmp_path: Path, parent: str, where: str) -> None:
    ttl = 6.0 if where == "another host" else 24.0  # beats every ttl/4: 1.5 s, 6 s
    cfg = TableConfig(lock_ttl=10.0, lock_wait=60.0, writer_ttl=ttl)

    def on_store(fn: Callable[[LocalStore], Awaitable[T]]) -> T:
        async def go() -> T:
            async with LocalStore(str(tmp_path)) as store:
                return await fn(store)

        return anyio.run(go)

    def judged(instant: str) -> tuple[float, float]:
        beats, now = on_store(lambda s: judge_writers(s, "tbl", [instant]))
        return beats[instant], now

    on_store(lambda s: write(s, "tbl", rows(0, 2), config=cfg))
    before = on_store(lambda s: listing(s, "tbl"))
    driver_argv = [sys.executable, "-m", "tests.table.driver_child", str(tmp_path), "tbl", str(ttl)]
    if parent == "shell":  # "python job.py" from a shell, which outlives it and reaps it
        argv = ["/bin/sh", "-c", '"$@"; exec sleep 600', "sh", *driver_argv]
    else:  # this test process: it does not reap the driver until the end (a zombie meanwhile)
        argv = driver_argv
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ})
    watched: list[ProcessId] = []  # the driver and its keep-alive, ended in any case
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert len(line) == 3, "the driver did not start its write"
        dead, driver_pid, keeper_pid = line[0], int(line[1]), int(line[2])
        driver, keeper = local_process(driver_pid), local_process(keeper_pid)
        watched += [driver, keeper]
        driver_st = proc_stat(driver_pid)
        assert driver_st is not None and driver_st[2] == (proc.pid if parent == "shell" else os.getpid())
        assert not process_gone(keeper)
        last, now = judged(dead)
        assert last != float("-inf") and now - last <= ttl  # alive
        os.kill(driver_pid, signal.SIGKILL)
        killed = time.monotonic()
        want = "Z" if parent == "no reaper" else None  # a zombie; else reaped by the shell
        while _state(driver_pid) != want and time.monotonic() - killed < 10:
            time.sleep(0.02)
        assert _state(driver_pid) == want  # and its parent lives on
        assert proc.poll() is None if parent == "shell" else proc_stat(os.getpid()) is not None
        # the keep-alive stops at its next beat (writer_ttl / 4); generous margin
        while not process_gone(keeper) and time.monotonic() - killed < ttl / 4 + 20:
            time.sleep(0.05)
        assert process_gone(keeper), "the keep-alive outlived its driver"
        beat = tmp_path / "tbl" / heartbeat_path(dead)
        last_beat = beat.stat().st_mtime
        if where == "another host":
            on_store(lambda s: move_keeper_to_another_host(s, "tbl", dead))
        else:
            assert judged(dead)[0] == float("-inf")  # its keeper, the driver, is provably dead
        t0 = time.monotonic()
        w, report = on_store(lambda s: write(s, "tbl", rows(20, 2), config=cfg))
        waited, done = time.monotonic() - t0, time.time()
        if where == "another host":  # rolled back once the last beat was older than writer_ttl
            assert done - last_beat > ttl and waited < ttl + 30, (done - last_beat, waited)
        else:
            assert waited < ttl / 2, waited  # at once, not after writer_ttl
        assert report.success and report.job_stats.counters.get("table_dead_writers_rolled_back") == 1
        after = on_store(lambda s: listing(s, "tbl"))
        assert not [n for n in after if dead in n]
        new = {n for n in _data(after) if w.instant in n}
        assert new and _data(after) - new == _data(before)
        assert dead not in [i.time for i in on_store(lambda s: list_instants(s, "tbl"))]
        assert not beat.exists()
    finally:
        for p in watched:
            if not process_gone(p):
                os.kill(p.pid, signal.SIGKILL)
        proc.kill()  # the shell, or the driver (this test reaps it)
        proc.wait()
