"""The event loop amcommit starts (:mod:`amcommit.loop`): uvloop where installed, asyncio's
with ``AMCOMMIT_UVLOOP=0`` / ``amcommit --no-uvloop``; the blocking facade, the Spark task
portal and a whole job commit on it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import pytest

from amcommit import loop
from amcommit.cli import main as cli_main
from amcommit.committer.sync import BlockingCommitter
from amcommit.errors import ConfigError
from amcommit.loop import run_blocking
from amcommit.store.local import LocalStore

if sys.platform == "win32":  # pragma: no cover - uvloop does not exist there
    pytest.skip("uvloop is not available on Windows", allow_module_level=True)
# Not importorskip: the test extra installs uvloop, so its absence is a broken setup.
import uvloop


def _kind(lp: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: the module that implements the loop object."""
    return "uvloop" if isinstance(lp, uvloop.Loop) else type(lp).__module__.split(".")[0]


async def _running() -> tuple[str, int]:
    await asyncio.sleep(0)
    return _kind(asyncio.get_running_loop()), threading.get_ident()


@pytest.fixture
def auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loop.ENV_VAR, raising=False)


@pytest.fixture
def off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop.ENV_VAR, "0")


def test_uvloop_when_installed_and_not_turned_off(auto: None) -> None:
    assert loop.uvloop_available()
    assert loop.choice() == "uvloop"
    assert loop.describe() == f"uvloop {uvloop.__version__}"
    assert loop.run(_running)[0] == "uvloop"
    assert run_blocking(_running)[0] == "uvloop"


@pytest.mark.parametrize("value", ["0", "false", "No", " off "])
def test_env_var_turns_it_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(loop.ENV_VAR, value)
    assert loop.choice() == "asyncio"
    assert loop.backend_options() == {}
    assert loop.run(_running)[0] == "asyncio"
    assert run_blocking(_running)[0] == "asyncio"


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "auto", ""])
def test_env_var_on_or_auto_is_uvloop(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(loop.ENV_VAR, value)
    assert loop.choice() == "uvloop"
    assert loop.run(_running)[0] == "uvloop"


def test_required_but_missing_is_one_line_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "_uvloop", lambda: None)  # as if not installed
    monkeypatch.delenv(loop.ENV_VAR, raising=False)
    assert loop.choice() == "asyncio"  # auto: falls back quietly
    assert loop.run(_running)[0] == "asyncio"
    monkeypatch.setenv(loop.ENV_VAR, "1")
    with pytest.raises(ConfigError, match=r"AMCOMMIT_UVLOOP=1 requires uvloop") as e:
        run_blocking(_running)
    assert "\n" not in str(e.value)


def test_unknown_value_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(loop.ENV_VAR, "fast")
    with pytest.raises(ConfigError, match="AMCOMMIT_UVLOOP='fast': expected"):
        loop.run(_running)


def test_run_blocking_from_plain_threads_on_uvloop(auto: None) -> None:
    """Eight threads at once, each with its own uvloop loop in its own thread."""
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: (run_blocking(_running), threading.get_ident()), range(16)))
    assert all(kind == "uvloop" for (kind, _), _ in results)
    assert all(ran == caller for (_, ran), caller in results)  # no loop running: in the caller


def test_run_blocking_inside_a_running_loop_on_uvloop(auto: None) -> None:
    """Called from async code running on uvloop: a fresh uvloop loop on a portal thread."""

    async def caller() -> tuple[str, str, int, int]:
        outer = _kind(asyncio.get_running_loop())
        inner, ident = run_blocking(_running)
        return outer, inner, ident, threading.get_ident()

    outer, inner, other, mine = loop.run(caller)
    assert (outer, inner) == ("uvloop", "uvloop")
    assert other != mine


def test_blocking_portal_follows_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Spark task side's portal (amcommit.spark.task) uses loop.blocking_portal."""
    monkeypatch.delenv(loop.ENV_VAR, raising=False)
    with loop.blocking_portal() as portal:
        assert portal.call(_running)[0] == "uvloop"
    monkeypatch.setenv(loop.ENV_VAR, "0")
    with loop.blocking_portal() as portal:
        assert portal.call(_running)[0] == "asyncio"


class _Recording(LocalStore):
    """A LocalStore noting the loop each rename and put ran on."""

    loops: ClassVar[set[str]] = set()

    async def put(self, *a, **kw):  # type: ignore[no-untyped-def]
        self.loops.add(_kind(asyncio.get_running_loop()))
        return await super().put(*a, **kw)

    async def rename(self, *a, **kw):  # type: ignore[no-untyped-def]
        self.loops.add(_kind(asyncio.get_running_loop()))
        return await super().rename(*a, **kw)


@pytest.mark.parametrize("setting", ["auto", "off"])
def test_job_commit_on_local_store(tmp_path: Path, request: pytest.FixtureRequest, setting: str) -> None:
    """A real job commit through the blocking facade (as the Spark driver and tasks run
    it): 3 tasks x 20 files, the same output on either loop, on the loop chosen."""
    request.getfixturevalue(setting)
    root = tmp_path / "root"
    root.mkdir()
    _Recording.loops = set()
    c = BlockingCommitter("dest", "job_7", store_factory=lambda: (_Recording(str(root), fsync=False), "dest"))
    c.setup_job(expected_tasks=3)
    manifests = []
    for t in range(3):
        attempt = f"attempt_job_7_m_{t:06d}_0"
        work = root / c.setup_task(attempt)
        for i in range(20):
            (work / f"day={i % 4}").mkdir(parents=True, exist_ok=True)
            (work / f"day={i % 4}" / f"part-{t}-{i}.bin").write_bytes(b"%d-%d" % (t, i))
        manifests.append(c.commit_task(f"task_job_7_m_{t:06d}", attempt))
    report = c.commit_job(manifests)
    assert report.files == 60
    out = {p.relative_to(root / "dest").as_posix(): p.read_bytes() for p in (root / "dest").rglob("*.bin")}
    assert out == {f"day={i % 4}/part-{t}-{i}.bin": b"%d-%d" % (t, i) for t in range(3) for i in range(20)}
    assert (root / "dest" / "_SUCCESS").exists() and not (root / "dest" / "_temporary").exists()
    assert _Recording.loops == {"uvloop" if setting == "auto" else "asyncio"}


async def test_async_tests_run_on_the_chosen_loop() -> None:
    """tests/conftest.py hands pytest-asyncio amcommit's own choice, so the whole async
    suite runs on uvloop unless AMCOMMIT_UVLOOP=0."""
    assert _kind(asyncio.get_running_loop()) == loop.choice()


def test_cli_no_uvloop_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``amcommit --no-uvloop`` runs the command on asyncio and passes the setting on."""
    monkeypatch.delenv(loop.ENV_VAR, raising=False)
    seen: list[str] = []
    real = loop.run

    def spy(fn, *args):  # type: ignore[no-untyped-def]
        seen.append(loop.choice())
        return real(fn, *args)

    monkeypatch.setattr(loop, "run", spy)
    (tmp_path / "d").mkdir()
    assert cli_main(["jobs", str(tmp_path / "d")]) == 0
    assert cli_main(["--no-uvloop", "jobs", str(tmp_path / "d")]) == 0
    assert seen == ["uvloop", "asyncio"]
    assert os.environ[loop.ENV_VAR] == "0"  # inherited by the processes it starts


def test_cli_bad_setting_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "amcommit.cli", "jobs", str(tmp_path)],
        env={**os.environ, loop.ENV_VAR: "maybe"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "amcommit: error: AMCOMMIT_UVLOOP='maybe': expected 0/1, true/false, yes/no, on/off or auto"
    ]
