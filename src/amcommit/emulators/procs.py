"""Small helpers for the local servers the tests and benchmarks start."""

from __future__ import annotations

import socket
import subprocess


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


__all__ = ["free_port", "stop_process"]
