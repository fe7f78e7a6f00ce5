"""Run a test child's ``main()`` as ``python -m MODULE ARGS`` would, in a process forked from
a fork server that has the children's imports preloaded.

A new interpreter per kill point costs ~0.5 s of CPU (1-3 s of wall time on a loaded 2-core
machine) before the child does anything; a fork of the server a few ms. The child is still
a separate process with its own event loop, store sessions and file descriptors, and is
still SIGKILLed by its own kill rule: the crash-safety claims of the kill tests stand as
with ``python -m``. Its stdout and stderr go to files and come back as text, as
:func:`subprocess.run` with ``capture_output=True`` gives them.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import multiprocessing.forkserver
import os
import subprocess
import sys
import tempfile
import threading
from typing import Any

PRELOAD = [
    "tests.crash.child",
    "tests.engine.kill_child",
    "tests.table.kill_child",
    "tests.table.directhelpers",
    "tests.matrix.kill_child",
    "tests.matrix.table_runner",
    # imported lazily by every child otherwise (seconds on a loaded machine)
    "anyio._backends._asyncio",
    "anyio.to_thread",
    "amcommit.api",
    "amcommit.store.azure",
    "amcommit.store.gcs",
    "amcommit.store.local",
]
"""Modules the fork server imports once (the children's, and through them amcommit's)."""

_FORKS = multiprocessing.get_context("forkserver")


def warm() -> None:
    """Start the fork server now, in a background thread (called by ``tests/conftest.py``
    once collection is over, in the pytest process only; never at import: the fork server
    itself imports the kill children, which import this module, and a start at import
    there forked a server from the server, recursively, until the machine ran out of
    memory — 258 servers, 24 GiB, seen in this suite's run): its start imports everything in :data:`PRELOAD`, 20-30 s
    on a loaded 2-core machine, which otherwise fell into the first kill test's timeout (a
    ``pytest-timeout`` of that cell once). A child started meanwhile waits for it."""
    _FORKS.set_forkserver_preload(PRELOAD)
    threading.Thread(
        target=multiprocessing.forkserver.ensure_running, name="forkserver-warm", daemon=True
    ).start()


def _main(module: str, argv: list[str], out: str, err: str) -> None:
    """In the forked child: stdout/stderr to the files, ``sys.argv`` as ``python -m`` sets
    it, then ``module.main()`` (an exception: a traceback on stderr, exit status 1)."""
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    sys.argv = [module, *argv]
    importlib.import_module(module).main()


def run_module(module: str, argv: list[str], *, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m module *argv`` in a forked child; its exit status (``-9``: SIGKILLed),
    stdout and stderr. A child still running after ``timeout`` s is killed and fails the
    calling test."""
    # set before every start: other test modules set their own lists; the first start of
    # the server uses the list set last (a module not preloaded is imported by the child)
    _FORKS.set_forkserver_preload(PRELOAD)
    with tempfile.TemporaryDirectory(prefix="forkrun-") as d:
        out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        for p in (out, err):
            open(p, "w").close()
        proc = _FORKS.Process(target=_main, args=(module, argv, out, err), name=module)
        proc.start()
        proc.join(timeout)
        timed_out = proc.exitcode is None
        if timed_out:
            proc.kill()
            proc.join()
        with open(out) as o, open(err) as e:
            stdout, stderr = o.read(), e.read()
    if timed_out:
        raise AssertionError(f"{module} {argv}: still running after {timeout} s\n{stderr[-2000:]}")
    return subprocess.CompletedProcess([module, *argv], proc.exitcode or 0, stdout, stderr)


def start_module(module: str, argv: list[str]) -> tuple[Any, str, str]:
    """Start ``python -m module *argv`` in a forked child without waiting: (process, stdout
    file, stderr file); the caller joins it and removes the files' directory (:func:`finish`)."""
    _FORKS.set_forkserver_preload(PRELOAD)
    d = tempfile.mkdtemp(prefix="forkrun-")
    out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
    for p in (out, err):
        open(p, "w").close()
    proc = _FORKS.Process(target=_main, args=(module, argv, out, err), name=module)
    proc.start()
    return proc, out, err


def finish(proc: Any, out: str, err: str) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of a child :func:`start_module` started (it must
    have exited), and its files removed."""
    with open(out) as o, open(err) as e:
        stdout, stderr = o.read(), e.read()
    for p in (out, err):
        with contextlib.suppress(OSError):
            os.remove(p)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(out))
    return proc.exitcode, stdout, stderr
