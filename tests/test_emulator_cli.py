"""``amcommit emulator start gcs|azurite``: a real emulator process, used with what it prints,
stopped by Ctrl-C (SIGINT) or SIGTERM."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import pytest

from amcommit.cli import main
from amcommit.store.schemes import open_location

ROOT = Path(__file__).parents[1]


def _available(kind: str) -> bool:
    if kind == "gcs":
        from amcommit.emulators.fakegcs import find_binary

        try:
            return find_binary().exists()
        except Exception:
            return False
    from amcommit.emulators.azurite import find_azurite

    return find_azurite() is not None


KINDS = [
    pytest.param(k, marks=pytest.mark.skipif(not _available(k), reason=f"{k} not installed"))
    for k in ("gcs", "azurite")
]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_STORAGE", "STORAGE_EMULATOR"))}
    return {**env, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}


def _read_until(stream: IO[str], stop: str) -> list[str]:
    lines: list[str] = []
    for line in stream:
        lines.append(line.rstrip("\n"))
        if line.startswith(stop):
            return lines
    raise AssertionError("emulator command ended early: " + "\n".join(lines))


@pytest.fixture
def start() -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def run(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "amcommit.cli", "emulator", "start", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        procs.append(proc)
        return proc

    yield run
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _port_open(endpoint: str) -> bool:
    hostport = endpoint.split("//", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


async def _put_get(url: str, options: dict[str, Any]) -> bytes:
    store, path = open_location(url, **options)
    async with store:
        await store.put(path, b"hello emulator")
        return await store.get(path)


@pytest.mark.parametrize("kind", KINDS)
def test_json_options_work_and_ctrl_c_stops_it(kind: str, start: Any) -> None:
    proc = start(kind, "--bucket", "tryme", "--json")
    doc = json.loads("\n".join(_read_until(proc.stdout, "}")))
    assert doc["emulator"] == kind and doc["bucket"] == "tryme"
    assert doc["endpoint"].startswith("http://127.0.0.1:") and _port_open(doc["endpoint"])
    url = doc["url"] + "dir/file.txt"
    assert anyio.run(_put_get, url, doc["options"]) == b"hello emulator"  # the bucket exists

    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert f"{kind} emulator stopped" in proc.stderr.read()
    assert not _port_open(doc["endpoint"])  # the emulator process went with it


@pytest.mark.parametrize("kind", KINDS)
def test_printed_cli_line_works(kind: str, start: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """The text output's shell lines, run as printed (environment, then the command)."""
    proc = start(kind)
    lines = _read_until(proc.stdout, "running;")
    text = "\n".join(lines)
    assert "Spark:" in text and '.option("endpoint", "http://127.0.0.1:' in text and ".save(" in text
    for line in lines:
        if line.strip().startswith("export "):
            key, _, value = line.strip()[len("export ") :].partition("=")
            monkeypatch.setenv(key, shlex.split(value)[0])
    command = next(line.strip() for line in lines if line.strip().startswith("amcommit jobs "))
    assert main(shlex.split(command)[1:]) == 0, capsys.readouterr().err
    assert "jobs           none pending" in capsys.readouterr().out

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_unknown_port_in_use_is_one_line(start: Any) -> None:
    """A bad --port (privileged/occupied) or a missing emulator: one line, no traceback."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        kind = "gcs" if _available("gcs") else "azurite"
        proc = start(kind, "--port", str(port))
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"amcommit: error: could not start the {kind} emulator")
    assert "Traceback" not in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
@pytest.mark.parametrize("kind", KINDS)
def test_emulator_goes_when_its_starter_is_killed(kind: str, start: Any) -> None:
    """The process that started an emulator killed with SIGKILL (as a test run stopped
    mid-way is): the emulator process goes too, instead of holding its port forever."""
    proc = start(kind, "--json")
    doc = json.loads("\n".join(_read_until(proc.stdout, "}")))
    assert _port_open(doc["endpoint"])
    proc.kill()  # SIGKILL: no cleanup code of the starter runs
    proc.wait()
    deadline = time.monotonic() + 30
    while _port_open(doc["endpoint"]):
        assert time.monotonic() < deadline, f"{kind} emulator outlived its killed starter"
        time.sleep(0.2)


@pytest.mark.parametrize("kind", KINDS[:1])
def test_ctrl_c_right_after_the_description_still_stops_cleanly(
    kind: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The signal lands right after the description is printed (a script that read it
    signals at once, before this process runs again): the emulator is stopped and the
    command ends with 0, not with 'interrupted'."""
    import importlib

    cli = importlib.import_module("amcommit.cli.main")

    real_print = print
    endpoints: list[str] = []

    def print_then_ctrl_c(*a: Any, **kw: Any) -> None:
        real_print(*a, **kw)
        if kw.get("file") is None and a and str(a[0]).lstrip().startswith("{"):
            endpoints.append(json.loads(str(a[0]))["endpoint"])
            raise KeyboardInterrupt  # as the SIGINT handler does

    monkeypatch.setattr(cli, "print", print_then_ctrl_c, raising=False)
    assert cli.main(["emulator", "start", kind, "--json"]) == 0
    assert f"{kind} emulator stopped" in capsys.readouterr().err
    assert endpoints and not _port_open(endpoints[0])
