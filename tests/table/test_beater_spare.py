"""The kept keep-alive process for writes begun one after another (``start(spare=True)``:
a stream's micro-batches, issue 35 item 6): one process per starter beats every write
exactly as a keep-alive of its own would (and stops each write's beats at its end), starts
a fresh one if it is gone, keeps beating what it was handed when its starter is killed, and
exits once it beats nothing and its starter is gone."""

from __future__ import annotations

import contextlib
import json
import os
import signal
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


def _beats(path: Path) -> bool:
    """Whether the heartbeat at ``path`` is rewritten within 1.5 s."""
    first = path.stat().st_mtime_ns
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if path.exists() and path.stat().st_mtime_ns != first:
            return True
    return False


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def test_writes_one_after_another_are_kept_alive_by_one_process(tmp_path: Path) -> None:
    """Two writes begun one after the other with ``spare=True``: one process beats both (no
    process started for the second), each write's beats stop at its end (marker gone: its
    heartbeat removed) while the other's go on; the process stays for the next write and
    exits once its starter closes its pipe (as when the starter is gone)."""
    url = str(tmp_path / "t")
    me = local_process(os.getpid())
    i1, m1 = _begin(url)
    p1 = beater.start(url, {}, i1, 0.4, watch=me, spare=True)
    i2, m2 = _begin(url)
    p2 = beater.start(url, {}, i2, 0.4, watch=me, spare=True)
    try:
        assert p2 is p1 and p1.poll() is None
        beat1, beat2 = (tmp_path / "t" / heartbeat_path(i) for i in (i1, i2))
        assert _beats(beat1) and _beats(beat2)
        os.unlink("/" + m1.lstrip("/"))  # write 1 over
        deadline = time.monotonic() + 10
        while beat1.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not beat1.exists() and _beats(beat2) and p1.poll() is None
        os.unlink("/" + m2.lstrip("/"))
        deadline = time.monotonic() + 10
        while beat2.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not beat2.exists() and p1.poll() is None  # kept for the next write
        assert p1.stdin is not None
        p1.stdin.close()
        _wait_exit(p1)
    finally:
        if p1.poll() is None:
            _kill(p1)
        beater._kept = None


def test_a_kept_process_killed_or_of_another_process_is_not_used(tmp_path: Path) -> None:
    """The kept process SIGKILLed between writes: the next write gets a fresh one (no
    error), which beats it. One kept by the process this one was forked from: never used
    (its pipe is shared); it beats on what it was handed."""
    url = str(tmp_path / "t")
    me = local_process(os.getpid())
    i1, _m1 = _begin(url)
    p1 = beater.start(url, {}, i1, 5.0, watch=me, spare=True)
    _kill(p1)
    i2, m2 = _begin(url)
    p2 = beater.start(url, {}, i2, 0.4, watch=me, spare=True)
    p3: subprocess.Popen[bytes] | None = None
    try:
        assert p2 is not p1 and p2.poll() is None
        assert _beats(tmp_path / "t" / heartbeat_path(i2))
        beater._kept = (os.getpid() + 1, p2)  # as a forked child sees its parent's
        i3, m3 = _begin(url)
        p3 = beater.start(url, {}, i3, 0.4, watch=me, spare=True)
        assert p3 is not p2 and p2.poll() is None and p3.poll() is None
        assert _beats(tmp_path / "t" / heartbeat_path(i2)) and _beats(tmp_path / "t" / heartbeat_path(i3))
        for proc, marker in ((p2, m2), (p3, m3)):
            os.unlink("/" + marker.lstrip("/"))
            assert proc.stdin is not None
            proc.stdin.close()
            _wait_exit(proc)
    finally:
        for proc in (p2, p3):
            if proc is not None and proc.poll() is None:
                _kill(proc)
        beater._kept = None


def test_a_kept_process_killed_mid_write_stops_its_beats_the_next_write_gets_a_fresh_one(
    tmp_path: Path,
) -> None:
    """SIGKILL of the kept process while it beats a write: that write is no longer beaten
    (judged by its beats' age, as a killed keep-alive of its own), nothing else changes on
    the table; the next write is beaten by a fresh process."""
    url = str(tmp_path / "t")
    me = local_process(os.getpid())
    i1, _m1 = _begin(url)
    p1 = beater.start(url, {}, i1, 0.4, watch=me, spare=True)
    beat1 = tmp_path / "t" / heartbeat_path(i1)
    assert _beats(beat1)
    _kill(p1)
    before = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "t").rglob("*"))
    assert not _beats(beat1)
    assert sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "t").rglob("*")) == before
    i2, m2 = _begin(url)
    p2 = beater.start(url, {}, i2, 0.4, watch=me, spare=True)
    try:
        assert p2 is not p1 and _beats(tmp_path / "t" / heartbeat_path(i2))
        os.unlink("/" + m2.lstrip("/"))
        assert p2.stdin is not None
        p2.stdin.close()
        _wait_exit(p2)
    finally:
        if p2.poll() is None:
            _kill(p2)
        beater._kept = None


def _child_starts(url: str, instant: str, watch_self: bool) -> int:
    """A child process starts the kept keep-alive of ``instant`` (watching itself if
    ``watch_self``: the driver) and is SIGKILLed; the kept process's pid."""
    code = (
        "import json, os, signal\n"
        "from amcommit.liveness import local_process\n"
        "from amcommit.table import beater\n"
        f"w = local_process(os.getpid()) if {watch_self!r} else ()\n"
        f"p = beater.start({url!r}, {{}}, {instant!r}, 0.4, watch=w, spare=True)\n"
        "print(json.dumps(p.pid), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == -9, r.stderr[-2000:]
    pid: int = json.loads(r.stdout.strip().splitlines()[-1])
    return pid


def test_starter_killed_the_kept_process_beats_the_write_to_its_end_then_exits(tmp_path: Path) -> None:
    """The process that handed the write over is SIGKILLed (it is not the write's driver):
    the kept process goes on beating the write, takes no new one, and exits once the write
    is over, its heartbeat removed: nothing of it is left on the table."""
    url = str(tmp_path / "t")
    instant, marker = _begin(url)
    kept = _child_starts(url, instant, watch_self=False)
    beat = tmp_path / "t" / heartbeat_path(instant)
    try:
        assert _beats(beat) and _beats(beat)
        before = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "t").rglob("*"))
        os.unlink("/" + marker.lstrip("/"))  # the write is over
        _wait_exit(kept)
        after = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "t").rglob("*"))
        gone = {
            str(Path("t") / heartbeat_path(instant)),
            str(Path("/" + marker.lstrip("/")).relative_to(tmp_path)),
        }
        assert gone <= set(before)
        assert after == [p for p in before if p not in gone]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(kept, signal.SIGKILL)


def test_driver_killed_the_write_is_no_longer_beaten_and_the_kept_process_exits(tmp_path: Path) -> None:
    """The driver (the watched process, which handed the write over) is SIGKILLed mid
    write: its write's beats stop (the heartbeat is left, to be judged dead) and the kept
    process exits: nothing beats a dead driver's write."""
    url = str(tmp_path / "t")
    instant, marker = _begin(url)
    kept = _child_starts(url, instant, watch_self=True)
    beat = tmp_path / "t" / heartbeat_path(instant)
    try:
        _wait_exit(kept)
        assert beat.exists() and Path("/" + marker.lstrip("/")).exists()
        assert not _beats(beat)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(kept, signal.SIGKILL)
