"""Who holds a lock, a lease or a heartbeat, and whether that process is provably gone.

A destination lock (:mod:`amcommit.committer.lock`), a table writer's heartbeat
(:mod:`amcommit.table.timeline.heartbeat`) and a streaming query's lease
(:mod:`amcommit.spark.stream_state`) name the process that holds them with a
:class:`ProcessId`: host name, boot id (``/proc/sys/kernel/random/boot_id``), PID
namespace (``/proc/self/ns/pid``), pid, and the process's start time (field 22 of
``/proc/<pid>/stat``, clock ticks since boot: a pid reused by a later process has another
start time).

:func:`proven_dead` is True only when this process can *prove* the holder gone: it runs on
the same host (same host name, boot id and PID namespace: then the pid means the same
process here) and no process has that pid, or the one that has it started at another time
(the pid was reused), or it is a zombie (killed, not yet reaped). Anything else is *not
proven*: another host (or a container sharing the host name but not the PID namespace), no
``/proc`` (not Linux), a record without these fields (an older amcommit), a process we may
not inspect. Callers then keep their ttl rule (the holder counts as dead only once it has
not renewed for a whole ttl). Never signals a process: it reads ``/proc`` and asks whether a
pid exists with :func:`pid_exists` (``getpgid``, see there).
"""

from __future__ import annotations

import functools
import os
import socket

import msgspec

__all__ = [
    "ProcessId",
    "java_ancestor",
    "java_children",
    "local_process",
    "pid_exists",
    "pid_namespace",
    "proc_stat",
    "process_gone",
    "process_id",
    "proven_dead",
    "this_process",
]


class ProcessId(msgspec.Struct, frozen=True, kw_only=True):
    """A process, named so that another process on the same host can tell if it is gone."""

    host: str = ""
    boot: str = ""
    """The kernel's boot id: a reboot (or another machine with the same name) differs."""
    pidns: str = ""
    """The PID namespace (``pid:[4026531836]``): pids mean the same only within one."""
    pid: int = 0
    start: str = ""
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""

    def text(self) -> str:
        """``pid 123 on host h`` (for messages)."""
        return f"pid {self.pid} on host {self.host or '?'}"


def _read(path: str) -> str:
    try:
        with open(path, encoding="latin-1") as f:
            return f.read().strip()
    except OSError:
        return ""


@functools.cache
def _boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def pid_namespace() -> str:
    """This process's PID namespace (``pid:[4026531836]``; "" where ``/proc`` cannot tell):
    containers sharing a host name but not their processes are told apart by it."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def proc_stat(pid: int) -> tuple[str, str, int, str] | None:
    """(command name, state, parent pid, start time) of ``pid`` from ``/proc``; None if
    there is no such entry (or no ``/proc``)."""
    data = _read(f"/proc/{pid}/stat")
    if not data or "(" not in data:
        return None
    name = data[data.index("(") + 1 : data.rindex(")")]
    rest = data[data.rindex(")") + 2 :].split()
    if len(rest) < 20:
        return None
    return name, rest[0], int(rest[1]), rest[19]


def process_id(pid: int) -> ProcessId | None:
    """The :class:`ProcessId` of process ``pid`` of this host, None where ``/proc`` cannot
    tell (not Linux, no such process)."""
    boot, ns, st = _boot_id(), pid_namespace(), proc_stat(pid)
    if not boot or not ns or st is None:
        return None
    return ProcessId(host=socket.gethostname(), boot=boot, pidns=ns, pid=pid, start=st[3])


_mine: dict[int, ProcessId | None] = {}


def this_process() -> ProcessId | None:
    """This process's :class:`ProcessId` (computed once per process; a forked child gets
    its own)."""
    pid = os.getpid()
    if pid not in _mine:
        _mine.clear()
        _mine[pid] = process_id(pid)
    return _mine[pid]


def java_ancestor() -> ProcessId | None:
    """The nearest ``java`` ancestor of this process (a Spark driver's JVM, seen from one of
    its Python workers); None if there is none or ``/proc`` cannot tell."""
    pid = os.getppid()
    for _ in range(16):
        if pid <= 1:
            return None
        st = proc_stat(pid)
        if st is None:
            return None
        if st[0] == "java":
            return process_id(pid)
        pid = st[2]
    return None


def java_children() -> tuple[ProcessId, ...]:
    """The ``java`` child processes of this process (a Python driver's JVM: PySpark
    launches it as its child), from one scan of ``/proc/<pid>/stat`` (a few ms for a few
    hundred processes); empty where ``/proc`` cannot tell."""
    me = os.getpid()
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return ()
    out = []
    for pid in sorted(pids):
        st = proc_stat(pid)
        if st is not None and st[2] == me and st[0] == "java" and (p := process_id(pid)) is not None:
            out.append(p)
    return tuple(out)


def local_process(pid: int) -> ProcessId:
    """Process ``pid`` of this host, to be watched from this host (:func:`process_gone`):
    its :class:`ProcessId`, else (no ``/proc``: macOS, the BSDs) a record of the pid and
    host name alone."""
    found = process_id(pid)
    return found if found is not None else ProcessId(host=socket.gethostname(), pid=pid)


def process_gone(process: ProcessId) -> bool:
    """Whether ``process``, a process of *this* host (:func:`local_process`: a watcher
    that named the process itself), has ended: :func:`proven_dead` for a record with the
    ``/proc`` fields (gone, its pid reused, or a zombie: killed and not reaped, as under a
    PID 1 that does not reap); for a record without them (no ``/proc``) no process has its
    pid any more (:func:`pid_exists`: a zombie cannot be told there and counts as running).
    False on doubt. Sends no signal."""
    if process.host and process.boot and process.pidns and process.start:
        return proven_dead(process)
    return pid_exists(process.pid) is False


def pid_exists(pid: int) -> bool | None:
    """True if a process has ``pid`` (in this PID namespace; a zombie counts), False if none
    has, None if that cannot be told here.

    Sends no signal: it asks the kernel for the process's group (``getpgid``), which fails
    with ``ESRCH`` only when no process has the pid. A refusal (``EPERM``: some systems
    refuse it for a process of another session; a security module may) means one has. This
    also holds where ``/proc`` hides other users' processes (``hidepid=invisible``), where a
    missing ``/proc/<pid>`` would make a live holder look gone. Linux, macOS and the BSDs
    have ``getpgid``; elsewhere (Windows) the answer is None and callers keep their
    fallbacks (:func:`proven_dead`: not proven, the ttl rule applies)."""
    if pid <= 0:
        return None  # getpgid(0) is this process's own group
    getpgid = getattr(os, "getpgid", None)
    if getpgid is None:
        return None
    try:
        getpgid(pid)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    return True


def proven_dead(holder: ProcessId | None) -> bool:
    """Whether ``holder`` is provably gone (module doc); False when not proven."""
    if (
        holder is None
        or holder.pid <= 0
        or not (holder.host and holder.boot and holder.pidns and holder.start)
    ):
        return False
    me = this_process()
    if me is None or (me.host, me.boot, me.pidns) != (holder.host, holder.boot, holder.pidns):
        return False  # another host, container or boot: its pids mean nothing here
    if holder.pid == me.pid:
        return holder.start != me.start
    exists = pid_exists(holder.pid)
    if exists is None:
        return False
    if not exists:
        return True
    st = proc_stat(holder.pid)
    if st is None:  # exited between the two looks, or hidden from us (hidepid)
        return pid_exists(holder.pid) is False
    _name, state, _ppid, start = st
    return start != holder.start or state in ("Z", "X")
