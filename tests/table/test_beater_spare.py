"""A spare keep-alive process for writes begun one after another (a stream's micro-batches,
issue 35 item 6): the next write's keep-alive is already started and imported when the
write begins, it beats that write exactly as a fresh one would, and a spare left unused
(its starter gone) exits having written nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio

from amcommit.liveness import local_process
from amcommit.store.schemes import open_location
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import heartbeat_path
from amcommit.table.timeline import beater
from amcommit.table.write import TableSpec, begin_write

REPO = str(Path(__file__).resolve().parents[2])


def _begin(url: str) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        store, dest = open_location(url)
        try:
            w = await begin_write(store, dest, operation=Operation.INSERT, spec=TableSpec("t"))
            return w.instant, w.layout.job_marker
        finally:
            await store.aclose()

    return anyio.run(go)


def _wait_exit(proc: subprocess.Popen[bytes] | int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if isinstance(proc, int):
            if not Path(f"/proc/{proc}").exists():
                return
            with open(f"/proc/{proc}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        elif proc.poll() is not None:
            return
        time.sleep(0.05)
    raise AssertionError(f"{proc} still running after {seconds} s")


def test_the_next_write_is_kept_alive_by_the_spare(tmp_path: Path) -> None:
    """Two writes begun one after the other with ``spare=True``: the second's keep-alive is
    the spare the first start left (same process), it beats the second write, and both
    stop once their writes are over (markers gone); a start without ``spare`` leaves none."""
    url = str(tmp_path / "t")
    me = local_process(os.getpid())
    i1, m1 = _begin(url)
    p1 = beater.start(url, {}, i1, 0.4, watch=me, spare=True)
    assert beater._spare is not None and beater._spare[0] == os.getpid()
    spare = beater._spare[1]
    assert spare.poll() is None and spare.pid != p1.pid
    i2, m2 = _begin(url)
    beat2 = tmp_path / "t" / heartbeat_path(i2)
    p2 = beater.start(url, {}, i2, 0.4, watch=me)  # no further spare asked for
    assert p2 is spare and beater._spare is None
    first = beat2.stat().st_mtime_ns
    time.sleep(0.5)
    assert beat2.stat().st_mtime_ns > first and p2.poll() is None  # it beats write 2
    for proc, marker, instant in ((p1, m1, i1), (p2, m2, i2)):
        os.unlink("/" + marker.lstrip("/"))
        _wait_exit(proc)
        assert not (tmp_path / "t" / heartbeat_path(instant)).exists()


def test_a_spare_that_died_or_is_another_process_s_is_not_used(tmp_path: Path) -> None:
    """A spare killed meanwhile: the write gets a fresh keep-alive (no error). A spare left
    by the process this one was forked from: never used (its pipe is shared)."""
    url = str(tmp_path / "t")
    me = local_process(os.getpid())
    i1, m1 = _begin(url)
    p1 = beater.start(url, {}, i1, 5.0, watch=me, spare=True)
    assert beater._spare is not None
    dead = beater._spare[1]
    dead.kill()
    dead.wait()
    i2, m2 = _begin(url)
    p2 = beater.start(url, {}, i2, 5.0, watch=me, spare=True)
    assert p2 is not dead and p2.poll() is None
    assert (tmp_path / "t" / heartbeat_path(i2)).exists()
    assert beater._spare is not None
    theirs = beater._spare[1]
    beater._spare = (os.getpid() + 1, theirs)  # as a forked child sees its parent's spare
    i3, m3 = _begin(url)
    p3 = beater.start(url, {}, i3, 5.0, watch=me)
    assert p3 is not theirs and theirs.poll() is None
    assert theirs.stdin is not None
    theirs.stdin.close()  # its starter gone: it exits having written nothing
    _wait_exit(theirs)
    for proc, marker in ((p1, m1), (p2, m2), (p3, m3)):
        os.unlink("/" + marker.lstrip("/"))
        _wait_exit(proc)


def test_a_spare_whose_starter_is_killed_exits_having_written_nothing(tmp_path: Path) -> None:
    """A driver process begins a write with ``spare=True`` and is SIGKILLed: its spare
    (which never got a job) exits by itself, and the table holds nothing it wrote."""
    url = str(tmp_path / "t")
    instant, marker = _begin(url)
    code = (
        "import json, os, signal, sys\n"
        "from amcommit.table import beater\n"
        f"p = beater.start({url!r}, {{}}, {instant!r}, 2.0, spare=True)\n"
        "print(json.dumps([p.pid, beater._spare[1].pid]), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == -9, r.stderr[-2000:]
    kept, spare = json.loads(r.stdout.strip().splitlines()[-1])
    before = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "t").rglob("*"))
    _wait_exit(spare)
    os.unlink("/" + marker.lstrip("/"))  # the write is over: its keep-alive stops too
    _wait_exit(kept)
    after = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "t").rglob("*"))
    gone = {
        str(Path("t") / heartbeat_path(instant)),
        str(Path("/" + marker.lstrip("/")).relative_to(tmp_path)),
    }
    assert gone <= set(before)
    assert after == [p for p in before if p not in gone]  # nothing written by the spare
