"""Parent side of the crash tests: run :mod:`tests.crash.child` with a spec and report
whether it was killed (see the child's docstring for the spec)."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.forkrun import run_module

REPO = Path(__file__).parents[2]


@dataclass
class ChildResult:
    killed: bool
    result: dict[str, Any] | None
    """The child's JSON line when it finished (``None`` when killed)."""
    stderr: str


def run_child(spec: dict[str, Any], *, timeout: float = 120.0) -> ChildResult:
    """Run one crash child to its end (killed by its rule, or finished). A child that died
    any other way (traceback, other signal) fails the calling test with its stderr."""
    # forked from the fork server of tests/forkrun.py (amcommit imported as in this process)
    proc = run_module("tests.crash.child", [json.dumps(spec)], timeout=timeout)
    if proc.returncode == -signal.SIGKILL:
        return ChildResult(True, None, proc.stderr)
    if proc.returncode != 0:
        raise AssertionError(f"crash child failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    return ChildResult(False, json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr)


def kill_child(spec: dict[str, Any], *, timeout: float = 120.0) -> None:
    """Run a crash child that must be killed by its rule (AssertionError otherwise)."""
    res = run_child(spec, timeout=timeout)
    assert res.killed, f"the child was not killed: {res.result} {res.stderr[-2000:]}"
