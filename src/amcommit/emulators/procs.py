"""Small helpers for the local servers the tests and benchmarks start."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """Terminate ``proc`` if it still runs; kill it if it has not exited after ``timeout``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def dies_with_parent(args: list[str]) -> list[str]:
    """``args`` wrapped so that the server gets SIGTERM when the process that started it
    dies, even by SIGKILL (a test run killed mid-way leaves no emulator behind): Linux's
    parent-death signal, set by util-linux ``setpriv``, which then execs the server (same
    pid, same process group). The signal follows the *thread* that started the server:
    start servers from a thread that outlives them (the main thread, as the fixtures,
    benchmarks and CLI do). Unchanged where ``setpriv`` is missing: the server then
    outlives a killed parent."""
    if not sys.platform.startswith("linux"):
        return args
    setpriv = shutil.which("setpriv")
    return args if setpriv is None else [setpriv, "--pdeathsig", "TERM", "--", *args]


__all__ = ["dies_with_parent", "free_port", "stop_process"]
