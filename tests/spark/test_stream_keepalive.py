"""A stream's kept keep-alive process (issue 35 item 6): one process beats every
micro-batch's instant of a Spark driver (:mod:`amcommit.table.timeline.beater`,
``start(spare=True)``), so a batch starts no process. Killed with SIGKILL mid batch, the
query goes on (the next batch gets a fresh one) and commits exactly its input; the driver
killed mid batch: the kept process stops beating the dead driver's instant and exits, and
the restart rolls that instant back and commits exactly the input once. The sink's
reused Python workers freeze their imports once (``settle_gc``).

The kept processes of this test's drivers are told from any other on the host by a marker
in their environment (inherited from the driver): only they are signalled.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import unfinished
from tests.spark.test_stream import Target, check, drop, finish, labels, query_spec, start

pytestmark = pytest.mark.spark

pytest.importorskip("hudi")

MARK = "AMCOMMIT_TEST_KEEPALIVE_MARK"


def kept_processes(mark: str) -> list[int]:
    """Pids of the kept keep-alive processes (``beater --serve``) whose environment holds
    ``MARK=mark`` (one scan of ``/proc``); zombies excluded."""
    found = []
    want = f"{MARK}={mark}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            if b"amcommit.table.timeline.beater" not in cmd or b"--serve" not in cmd:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


def wait_for(what: str, cond: Any, seconds: float, p: Any = None) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if p is not None and p.poll() is not None:
            raise AssertionError(f"driver ended while waiting for {what}: {finish(p)[1]}")
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.1)


@pytest.mark.timeout(600)
def test_kept_keepalive_killed_mid_batch_or_with_its_driver(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK, mark)  # the drivers' environment, and so their keep-alives'
    src, dest = tmp_path / "in", tmp_path / "table"
    t = Target(str(dest), {}, dest, tmp_path)
    spec = query_spec(tmp_path, t)
    ids = drop(src, 0, 3)  # batches 0, 1, 2

    # 1. the kept process SIGKILLed in the middle of batch 1 (a task slowed until released)
    flag, release = tmp_path / "mid-1", tmp_path / "go-1"
    timings = tmp_path / "timings.jsonl"
    p = start(
        {**spec, "signal": str(flag), "release": str(release), "timings": str(timings)}, "slow_task@1=300"
    )
    try:
        wait_for("batch 1 mid-write", flag.exists, 300, p)
        kept = kept_processes(mark)
        assert len(kept) == 1, kept  # one process beats the driver's batches
        os.kill(kept[0], signal.SIGKILL)
        wait_for("the kept process gone", lambda: kept[0] not in kept_processes(mark), 30)
        release.touch()
        rc, log = finish(p)
    finally:
        release.touch()
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert rc == 0, log
    # batch 1 committed; batch 2 with a fresh keep-alive (the readers check once, at the end)
    assert [g.rsplit(":", 1)[1] for g in labels(dest)] == ["0", "1", "2"], log
    # the commit worker, reused batch after batch, froze its imports (settle_gc)
    commits = [json.loads(line) for line in timings.read_text().splitlines()]
    assert [c["batch"] for c in commits] == [0, 1, 2] and all(c["frozen"] > 10_000 for c in commits), commits
    assert unfinished(dest) == [], log
    # the fresh one exits once its driver is gone: nothing beats any more
    wait_for("no kept process left", lambda: not kept_processes(mark), 60)

    # 2. the driver (its JVM, Python workers) SIGKILLed in the middle of batch 3
    ids += drop(src, 100, 1)
    flag, release = tmp_path / "mid-3", tmp_path / "go-3"
    p = start({**spec, "signal": str(flag), "release": str(release)}, "slow_task@3=300")
    try:
        wait_for("batch 3 mid-write", flag.exists, 300, p)
        kept = kept_processes(mark)
        assert len(kept) == 1, kept
        os.killpg(p.pid, signal.SIGKILL)
        finish(p)
    finally:
        release.touch()
    # its kept process stops beating the dead driver's instant and exits (it watched the JVM)
    wait_for("the dead driver's kept process gone", lambda: not kept_processes(mark), 60)
    left = unfinished(dest)
    staged = [n.split("/")[2] for n in left if n.startswith(".aux/amcommit/")]
    assert len(staged) == 1 and f"{staged[0]}.inflight" in left, left
    beat = dest / ".hoodie" / ".heartbeat" / staged[0]
    if beat.exists():  # no beat comes any more
        seen = beat.stat().st_mtime_ns
        time.sleep(1.0)
        assert beat.stat().st_mtime_ns == seen

    # 3. restarted: the dead run's instant is rolled back, batch 3 committed once
    rc, log = finish(start(spec))
    assert rc == 0, log
    check(spark, t, ids, exact=True)
    assert unfinished(dest) == [], log
    got = labels(dest)
    assert len(got) == 4 and [g.rsplit(":", 1)[1] for g in got] == ["0", "1", "2", "3"], got
    wait_for("no kept process left", lambda: not kept_processes(mark), 60)
