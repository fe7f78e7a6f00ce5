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

from amcommit.liveness import (
    ProcessId,
    local_process,
    pid_exists,
    process_gone,
    process_id,
    proven_dead,
    this_process,
)

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


def test_probes_send_no_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a pid exists is asked without ``kill`` (no signal, not even 0): with every
    way to signal a process made to fail, a live child, a zombie and a reaped child are
    told apart by :func:`pid_exists`, :func:`proven_dead` and the table keep-alive's
    :func:`process_gone` (also for a record without the /proc fields, as on a system
    without /proc: there a zombie cannot be told from a live process)."""
    me = this_process()
    assert me is not None
    live, zombie, reaped = _child(), _child(), _child()
    ids = {c: local_process(c.pid) for c in (live, zombie, reaped)}
    for c in (zombie, reaped):
        c.kill()
    reaped.wait()
    deadline = time.monotonic() + 10  # the zombie: killed, not yet reaped
    while time.monotonic() < deadline and (st := _state(zombie.pid)) not in ("Z", "X", None):
        time.sleep(0.01)

    def refuse(*_args: object) -> None:
        raise AssertionError("a liveness probe sent a signal")

    try:
        with monkeypatch.context() as m:
            for name in ("kill", "killpg"):
                m.setattr(os, name, refuse)
            m.setattr(signal, "pthread_kill", refuse)
            assert pid_exists(live.pid) is True and pid_exists(zombie.pid) is True
            assert pid_exists(reaped.pid) is False
            assert pid_exists(0) is None and pid_exists(-1) is None
            assert not proven_dead(ids[live]) and proven_dead(ids[zombie]) and proven_dead(ids[reaped])
            pid_only = {c: ProcessId(host=me.host, pid=c.pid) for c in (live, zombie, reaped)}
            assert not process_gone(pid_only[live]) and not process_gone(pid_only[zombie])
            assert process_gone(pid_only[reaped])
            assert local_process(live.pid) == ids[live]
            assert not process_gone(local_process(live.pid))
            assert process_gone(ids[zombie]) and process_gone(ids[reaped])
    finally:
        live.kill()
        for c in (live, zombie):
            c.wait()
    assert st in ("Z", "X", None)


def _state(pid: int) -> str | None:
    from amcommit.liveness import proc_stat

    st = proc_stat(pid)
    return None if st is None else st[1]


def test_a_driver_key_is_a_process_id_and_judged_by_liveness() -> None:
    """A streaming write's driver key (``driver_id``) is a :class:`ProcessId` as text: it
    parses back to the same process; a real child killed with SIGKILL is gone by its key,
    a live one is not; a key of another host or PID namespace, or no key, is never gone."""
    from amcommit.liveness import driver_gone, driver_id, write_processes

    me = this_process()
    assert me is not None
    key = driver_id(local_process(os.getpid()))
    assert ProcessId.from_key(key, boot=me.boot) == me
    assert ProcessId.from_key("garbage") is None and ProcessId.from_key("h/ns/x/1") is None
    assert driver_id() == driver_id(write_processes()[0])  # the default: the write's process
    assert not driver_gone(key)
    child = _child()
    try:
        child_key = driver_id(local_process(child.pid))
        assert not driver_gone(child_key)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert driver_gone(child_key)
        host, ns, pid, start = child_key.split("/")
        assert not driver_gone(f"another-host/{ns}/{pid}/{start}")
        assert not driver_gone(f"{host}/pid:[1]/{pid}/{start}")  # another PID namespace
        assert not driver_gone("garbage") and not driver_gone(f"{host}/{ns}/x/y")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
