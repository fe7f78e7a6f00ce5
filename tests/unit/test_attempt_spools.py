"""Issue 32 item 10: the local spool folders of task attempts (``amcommit-attempt_*`` in the
temp directory) left by killed attempts are removed when a task starts, once their owner
is provably dead (SIGKILLed and reaped, or a zombie); folders of live owners, of owners
that cannot be proven dead (another host), without an owner record, or not ours are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from amcommit.committer.spool import (
    SPOOL_OWNER_FILE,
    attempt_spool_dir,
    remove_stale_spools,
)
from amcommit.liveness import proc_stat, this_process

pytestmark = pytest.mark.skipif(this_process() is None, reason="needs Linux /proc")

ROOT = str(Path(__file__).resolve().parents[2])

_CHILD = """
import os, sys, time
from amcommit.committer.spool import attempt_spool_dir
path = attempt_spool_dir(sys.argv[1], sys.argv[2])
with open(os.path.join(path, "part-0.parquet"), "wb") as f:
    f.write(b"x" * 1000)
print(os.path.basename(path), flush=True)
time.sleep(600)
"""


def _attempt(n: int) -> str:
    return f"attempt_20261129020000000_m_{n:06d}_0"


def _spooling_child(tmp: Path, n: int) -> tuple[subprocess.Popen[str], str]:
    """A process that created attempt ``n``'s spool folder in ``tmp`` (with a file in it)
    and lives on until killed."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, _attempt(n), str(tmp)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert child.stdout is not None
    name = child.stdout.readline().strip()
    assert name.startswith(f"amcommit-{_attempt(n)}-"), name
    return child, name


def _listing(tmp: Path) -> set[str]:
    return {str(p.relative_to(tmp)) for p in tmp.rglob("*")}


def test_stale_spools_removed_live_ones_kept(tmp_path: Path) -> None:
    killed, killed_name = _spooling_child(tmp_path, 1)
    zombie, zombie_name = _spooling_child(tmp_path, 2)
    live, live_name = _spooling_child(tmp_path, 3)
    mine = os.path.basename(attempt_spool_dir(_attempt(4), str(tmp_path)))
    # another host's dead-looking owner (a shared temp dir): cannot be proven dead
    elsewhere = os.path.basename(attempt_spool_dir(_attempt(5), str(tmp_path)))
    me = this_process()
    assert me is not None
    (tmp_path / elsewhere / SPOOL_OWNER_FILE).write_bytes(
        msgspec.json.encode(msgspec.structs.replace(me, host="another-host.example", start="1"))
    )
    (tmp_path / "amcommit-attempt_old-version").mkdir()  # no owner record: kept
    (tmp_path / "amcommit-attempt_old-version" / "f").write_bytes(b"y")
    (tmp_path / "amcommit-spool-other").mkdir()  # not an attempt's folder
    try:
        before = _listing(tmp_path)
        assert f"{killed_name}/{SPOOL_OWNER_FILE}" in before and f"{killed_name}/part-0.parquet" in before
        assert remove_stale_spools(str(tmp_path)) == []  # every owner alive
        assert _listing(tmp_path) == before
        killed.kill()
        killed.wait()
        zombie.kill()  # not reaped: a zombie
        deadline = time.monotonic() + 10
        while (st := proc_stat(zombie.pid)) is not None and st[1] != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        st = proc_stat(zombie.pid)
        assert st is not None and st[1] == "Z"
        removed = remove_stale_spools(str(tmp_path))
        assert sorted(removed) == sorted(str(tmp_path / n) for n in (killed_name, zombie_name))
        assert _listing(tmp_path) == {n for n in before if n.split("/")[0] not in (killed_name, zombie_name)}
        assert {n.split("/")[0] for n in _listing(tmp_path)} == {
            live_name,
            mine,
            elsewhere,
            "amcommit-attempt_old-version",
            "amcommit-spool-other",
        }
    finally:
        for c in (killed, zombie, live):
            c.kill()
            c.wait()


def test_a_task_start_removes_stale_spools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_task`` (a Spark task attempt) removes a killed attempt's folder from the temp
    directory when it starts, and leaves a live one's."""
    from tests.spark.test_units import _drive_task, job

    spools = tmp_path / "tmp"
    spools.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spools))
    killed, killed_name = _spooling_child(spools, 1)
    live, live_name = _spooling_child(spools, 2)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        before = _listing(spools)
        assert {n.split("/")[0] for n in before} == {killed_name, live_name}
        result = _drive_task(job(tmp_path), 0, 0)
        assert result.rows == 3000
        assert _listing(spools) == {n for n in before if not n.startswith(killed_name)}
    finally:
        for c in (killed, live):
            c.kill()
            c.wait()
