"""Start and stop Azurite (the Blob service only) on a free loopback port.

The executable comes from ``$AMCOMMIT_AZURITE`` (``./run test`` sets it), else from
``tools/node/node_modules/.bin/`` of the source checkout, else from ``PATH``. Azurite is
started with ``--silent --inMemoryPersistence --disableTelemetry`` (the access log costs
15-30% of its CPU; nothing is written to disk) and bound to 127.0.0.1 only::

    with Azurite() as az:
        store = BlobStore("c1", **az.store_options())

Azurite's in-memory Delete Blob gets slower with every blob it holds: use a fresh
container per test (or a fresh instance per benchmark run).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from amcommit.emulators.procs import dies_with_parent, free_port
from amcommit.store.azure.auth import AZURITE_ACCOUNT, AZURITE_KEY

_CANDIDATES = ("azurite-blob", "azurite")


def find_azurite() -> str | None:
    """Path of the Azurite executable, or None."""
    env = os.environ.get("AMCOMMIT_AZURITE")
    if env:
        p = Path(env)
        if p.is_file():
            if p.name == "azurite":  # prefer the blob-only launcher next to it
                blob = p.with_name("azurite-blob")
                if blob.is_file():
                    return str(blob)
            return str(p)
    here = Path(__file__).resolve()
    for up in here.parents:
        d = up / "tools" / "node" / "node_modules" / ".bin"
        for name in _CANDIDATES:
            if (d / name).is_file():
                return str(d / name)
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class AzuriteError(RuntimeError):
    """Azurite is missing or did not start."""


class Azurite:
    """An Azurite Blob service process on ``127.0.0.1:port`` (context manager)."""

    account = AZURITE_ACCOUNT
    account_key = AZURITE_KEY

    def __init__(
        self,
        executable: str | None = None,
        *,
        port: int | None = None,
        extra_args: list[str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        exe = executable or find_azurite()
        if exe is None:
            raise AzuriteError(
                "Azurite not found: set AMCOMMIT_AZURITE or run `./run test` (installs tools/node)"
            )
        self.executable = exe
        self.port = port
        self.extra_args = list(extra_args or [])
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._log: Any = None

    @property
    def endpoint(self) -> str:
        """The account endpoint (path style): ``http://127.0.0.1:PORT/devstoreaccount1``."""
        return f"http://127.0.0.1:{self.port}/{self.account}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.account_key};"
            f"BlobEndpoint={self.endpoint};"
        )

    def store_options(self) -> dict[str, Any]:
        """Keyword arguments for :class:`~amcommit.store.azure.BlobStore` / ``open_store``."""
        return {"endpoint": self.endpoint, "account_key": self.account_key, "account": self.account}

    def start(self) -> Azurite:
        if self._proc is not None:
            return self
        self._workdir = tempfile.TemporaryDirectory(prefix="amcommit-azurite-")
        last: Exception | None = None
        tail = ""
        fixed = self.port
        for _ in range(1 if fixed else 3):
            port = fixed or free_port()
            blob = Path(self.executable).name != "azurite"
            args = [
                self.executable,
                "--silent",
                "--inMemoryPersistence",
                "--disableTelemetry",
                *(["--blobHost", "127.0.0.1", "--blobPort", str(port)]),
                *self.extra_args,
            ]
            if not blob:
                args += ["--queuePort", str(free_port()), "--tablePort", str(free_port())]
            self._log = open(os.path.join(self._workdir.name, "azurite.log"), "wb")
            self._proc = subprocess.Popen(
                dies_with_parent(args),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self._workdir.name,
            )
            self.port = port
            try:
                self._wait_ready()
                return self
            except AzuriteError as e:
                last = e
                tail = self.log_tail()
                self._kill()
                self.port = fixed
        raise AzuriteError(f"Azurite did not start: {last}; log: {tail}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = f"http://127.0.0.1:{self.port}/{self.account}?comp=list"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise AzuriteError(f"exited with status {self._proc.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=1.0):
                    return
            except urllib.error.HTTPError:
                return  # any HTTP answer (403: no credentials) means it is serving
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise AzuriteError(f"no answer on port {self.port} within {self.startup_timeout}s")

    def log_tail(self, n: int = 2000) -> str:
        if self._workdir is None:
            return ""
        try:
            with open(os.path.join(self._workdir.name, "azurite.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """Stop the process (and its children) and remove the work directory. Idempotent."""
        self._kill()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Azurite(port={self.port}, running={self.running})"


__all__ = ["Azurite", "AzuriteError", "find_azurite", "free_port"]
