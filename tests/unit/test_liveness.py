"""amcommit.liveness: a holder is proven dead only on this host, with real processes (a
child killed with SIGKILL, reaped or left a zombie; a pid whose start time differs), and
never proven for another host, boot or PID namespace, or a record without the fields."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import msgspec
import pytest

from amcommit.liveness import ProcessId, process_id, proven_dead, this_process

pytestmark = pytest.mark.skipif(this_process() is None, reason="needs Linux /proc")


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_this_process_and_a_live_child_are_alive() -> None:
    me = this_process()
    assert me is not None and me.pid == os.getpid() and me.start and me.boot and me.pidns
    assert not proven_dead(me)
    child = _child()
    try:
        pid = process_id(child.pid)
        assert pid is not None and not proven_dead(pid)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("reaped", [True, False])
def test_a_child_killed_with_sigkill_is_dead(reaped: bool) -> None:
    child = _child()
    pid = process_id(child.pid)
    assert pid is not None and not proven_dead(pid)
    os.kill(child.pid, signal.SIGKILL)
    if reaped:
        child.wait()
    else:  # a zombie until reaped: still a pid, but the process is gone
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not proven_dead(pid):
            time.sleep(0.01)
    try:
        assert proven_dead(pid)
    finally:
        child.wait()


def test_a_reused_pid_is_not_the_holder() -> None:
    """A live process with the holder's pid but another start time: the holder is gone."""
    me = this_process()
    assert me is not None
    assert proven_dead(msgspec.structs.replace(me, start=str(int(me.start) + 1)))
    child = _child()
    try:
        pid = process_id(child.pid)
        assert pid is not None
        assert proven_dead(msgspec.structs.replace(pid, start="1"))
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(
    "change",
    [
        {"host": "another-host.example"},
        {"boot": "00000000-0000-0000-0000-000000000000"},
        {"pidns": "pid:[1]"},
        {"start": ""},
        {"boot": ""},
        {"pid": 0},
    ],
)
def test_not_proven_elsewhere_or_without_the_fields(change: dict[str, object]) -> None:
    """A dead pid of this host is proven dead; the same record from another host, boot or
    PID namespace, or missing a field, is not."""
    child = _child()
    pid = process_id(child.pid)
    child.kill()
    child.wait()
    assert pid is not None and proven_dead(pid)
    assert not proven_dead(msgspec.structs.replace(pid, **change))  # type: ignore[arg-type]
    assert not proven_dead(None)
    assert not proven_dead(ProcessId())
