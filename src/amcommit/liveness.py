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

This module is the one home of a process's identity: the :class:`ProcessId` itself, this
process's (:func:`this_process`), the processes a write runs in (:func:`write_processes`,
watched by a table write's keep-alive and named as a stream's driver), and the driver key
a streaming write records as text (:func:`driver_id`, :meth:`ProcessId.key`; judged by
:func:`driver_gone`).
"""

from __future__ import annotations

import functools
import os
import socket
import sys

import msgspec

__all__ = [
    "ProcessId",
    "driver_gone",
    "driver_id",
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
    "write_processes",
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

    def key(self) -> str:
        """``host/pid namespace/pid/start time``: the process as one string (a streaming
        write's driver, recorded in its owner file; :meth:`from_key`). No boot id: a key is
        judged on this boot only (:func:`driver_gone`). Pure."""
        return f"{self.host}/{self.pidns}/{self.pid}/{self.start}"

    @classmethod
    def from_key(cls, key: str, *, boot: str = "") -> ProcessId | None:
        """The process a :meth:`key` names (``boot``: the boot id to assume, a key has
        none); None if ``key`` is not one. Pure."""
        parts = key.rsplit("/", 3)
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        return cls(host=parts[0], boot=boot, pidns=parts[1], pid=int(parts[2]), start=parts[3])


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


def write_processes() -> tuple[ProcessId, ...]:
    """The processes that run a write begun in this process, for the keep-alive to watch
    (the first is the write's keeper; :mod:`amcommit.table.timeline.beater`) and to name a
    stream's driver (:func:`driver_id`). In a Python worker of Spark (a data source's
    ``writer()``, a streaming sink's): the nearest ``java`` ancestor, the driver's JVM.
    Anywhere else this process itself (a Python driver: ``amcommit.spark.upsert``,
    ``foreachBatch`` with ``write_batch``, an engine user's), with its JVM children
    (PySpark starts the driver's JVM as its child): never the parent or an ancestor of a
    driver, which may outlive it (the shell or IDE that started ``python job.py``).

    A Python worker is a process with a ``java`` ancestor and no SparkContext of its own
    (a Python driver has one once it runs Spark, also one started by ``spark-submit``)."""
    if not _spark_driver():
        jvm = java_ancestor()
        if jvm is not None:
            return (jvm,)
    return (local_process(os.getpid()), *java_children())


def _spark_driver() -> bool:
    """Whether this process runs an active SparkContext (a PySpark driver); pyspark is not
    imported for the question."""
    pyspark = sys.modules.get("pyspark")
    context = getattr(pyspark, "SparkContext", None)
    return getattr(context, "_active_spark_context", None) is not None


def driver_id(process: ProcessId | None = None) -> str:
    """The :meth:`~ProcessId.key` of a driver process of this host (default: the process
    that runs the write, :func:`write_processes`: the Spark driver's JVM as seen from a
    Python worker on the driver host), named with this host's name and PID namespace."""
    p = process if process is not None else write_processes()[0]
    return ProcessId(host=socket.gethostname(), pidns=pid_namespace(), pid=p.pid, start=p.start).key()


def driver_gone(driver: str) -> bool:
    """True only if ``driver`` (:func:`driver_id`) ran on this host, in this pid namespace,
    and is no longer running (its pid gone, taken by a process with another start time, or
    a zombie: :func:`process_gone`). False on doubt, and for a string that is no key."""
    me = local_process(os.getpid())
    # the key names no boot: this boot's (a process of an earlier boot with the same pid
    # and start time would count as running: the safe side)
    p = ProcessId.from_key(driver, boot=me.boot)
    if p is None or (p.host, p.pidns) != (socket.gethostname(), pid_namespace()):
        return False
    return process_gone(p)
