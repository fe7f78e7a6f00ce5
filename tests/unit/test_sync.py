"""``run_blocking``: the blocking facade, from plain threads and from inside a running loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from amcommit.committer.sync import BlockingCommitter
from amcommit.errors import NotFound
from amcommit.loop import run_blocking


async def _where() -> tuple[int, str]:
    await asyncio.sleep(0)
    return threading.get_ident(), threading.current_thread().name


async def _missing() -> None:
    raise NotFound("no such thing", path="a/b")


def test_without_a_loop_runs_here() -> None:
    assert run_blocking(_where)[0] == threading.get_ident()
    with pytest.raises(NotFound, match="no such thing"):
        run_blocking(_missing)


def test_inside_a_running_loop_runs_elsewhere_and_keeps_errors() -> None:
    async def caller() -> tuple[int, int]:
        ident, _ = run_blocking(_where)  # a blocking call made from async code
        with pytest.raises(NotFound, match="no such thing"):
            run_blocking(_missing)
        return ident, threading.get_ident()

    other, mine = asyncio.run(caller())
    assert other != mine
    assert not [t for t in threading.enumerate() if t.ident == other]  # the portal thread is gone


def test_blocking_committer_inside_a_loop(tmp_path: Path) -> None:
    """The committer's blocking methods work from async code (and close their stores)."""
    dest = tmp_path / "out"

    async def caller() -> int:
        c = BlockingCommitter(str(dest), "job_1")
        c.setup_job()
        work = c.setup_task("attempt_job_1_m_000000_0")
        (Path("/") / work / "a.txt").write_bytes(b"a")
        c.commit_task("task_job_1_m_000000", "attempt_job_1_m_000000_0")
        return c.commit_job().files

    assert asyncio.run(caller()) == 1
    assert (dest / "a.txt").read_bytes() == b"a"
