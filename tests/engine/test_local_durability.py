"""Local durability (issue 23 item 13): with ``fsync`` on, the directories a rename changed
(its source's and its destination's parent) are fsynced before the journal records the
rename; with ``fsync`` off nothing is fsynced.

The system calls are observed from the test by wrapping ``renameat2`` (every rename of the
local store), ``os.fsync`` and ``os.replace`` (the journal's whole-file write lands with it),
in the order they happen, across the store's worker threads.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

import amcommit.store.local as local_mod
from amcommit.api import commit_job, setup_job
from amcommit.committer.config import CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.store.base import TMP_PREFIX
from amcommit.store.local import LocalStore
from tests.engine.helpers import run_task, snapshot

JOB = "202611270001_0001"


class Calls:
    """The recorded calls, in order: ``("rename", src dir, dst dir)``, ``("fsync", path,
    is_dir)``, ``("journal", state)``."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def add(self, *event: Any) -> None:
        with self._lock:
            self.events.append(event)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    rec = Calls()
    real_mv = local_mod._renameat2
    if real_mv is None:
        pytest.skip("no renameat2 on this system")
    real_fsync, real_replace = os.fsync, os.replace

    def mv(src: bytes, dst: bytes) -> int:
        rc = real_mv(src, dst)
        if rc == 0 and not os.path.basename(src).startswith(TMP_PREFIX.encode()):  # not a put's own
            rec.add("rename", os.path.dirname(src).decode(), os.path.dirname(dst).decode())
        return rc

    def fsync(fd: int) -> None:
        real_fsync(fd)
        rec.add("fsync", os.readlink(f"/proc/self/fd/{fd}"), stat.S_ISDIR(os.fstat(fd).st_mode))

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        state = None
        if str(dst).endswith("/journal.json"):
            state = json.loads(Path(src).read_bytes())["state"]
        real_replace(src, dst, **kw)
        if state is not None:
            rec.add("journal", state)

    monkeypatch.setattr(local_mod, "_renameat2", mv)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return rec


async def _commit(root: Path, *, fsync: bool, batch: int, calls: Calls) -> dict[str, bytes]:
    """Two tasks writing two partitions into a destination holding an older version of one
    of their files (``delete_target_files``: moved aside, then deleted); the calls recorded
    are the job commit's only."""
    store = LocalStore(str(root), fsync=fsync)
    async with store:
        await store.put("dest/p=0/part-0-0.bin", b"old")
        layout = await setup_job(store, "dest", JOB)
        for n in range(2):
            files = {f"p={p}/part-{n}-{k}.bin": f"{n}{p}{k}".encode() for p in range(2) for k in range(3)}
            await run_task(store, layout, n, files)
        await store.sync()
        calls.events.clear()
        config = CommitterConfig(delete_target_files=True, rename_batch_size=batch)
        report = await commit_job(store, "dest", JOB, config=config)
        assert report.success and report.files == 12
        return await snapshot(store, "dest")


def _check_order(events: list[tuple[Any, ...]], journal_state: str) -> set[str]:
    """Every directory a rename changed before the journal write of ``journal_state`` is
    fsynced after that rename and before the write; returns those directories."""
    at = events.index(("journal", journal_state))
    last_change: dict[str, int] = {}
    for i, e in enumerate(events[:at]):
        if e[0] == "rename":
            last_change[e[1]] = last_change[e[2]] = i
    assert last_change, "no rename before the journal write"
    for d, i in last_change.items():
        synced = [j for j, e in enumerate(events[:at]) if e[:3] == ("fsync", d, True) and j > i]
        assert synced, (
            f"directory {d} changed by a rename was not fsynced before the journal said {journal_state}"
        )
    return set(last_change)


@pytest.mark.parametrize("batch", [256, 1], ids=["rename-batches", "rename-one-by-one"])
async def test_renames_fsync_their_directories_before_the_journal(
    tmp_path: Path, calls: Calls, batch: int
) -> None:
    files = await _commit(tmp_path, fsync=True, batch=batch, calls=calls)
    assert sorted(files) == sorted(
        f"p={p}/part-{n}-{k}.bin" for n in range(2) for p in range(2) for k in range(3)
    )
    assert files["p=0/part-0-0.bin"] == b"000"  # the new version (the old one was moved aside)
    events = calls.events
    dirs = _check_order(events, "renamed")
    layout = JobLayout("dest", JOB)
    root = str(tmp_path)
    # the forward renames (task directories -> partitions) and the old file moved aside
    assert {f"{root}/dest/p=0", f"{root}/dest/p=1"} <= dirs
    assert any(d.startswith(f"{root}/{layout.trash_dir}") for d in dirs)
    assert any(d.startswith(f"{root}/{layout.job_dir}/00/tasks/") for d in dirs)
    # each directory once per batch of renames, not once per rename
    dir_syncs = [e for e in events if e[0] == "fsync" and e[2]]
    assert len(dir_syncs) == len({e[1] for e in dir_syncs}) <= len(dirs) + 2


async def test_without_fsync_nothing_is_fsynced(tmp_path: Path, calls: Calls) -> None:
    await _commit(tmp_path, fsync=False, batch=256, calls=calls)
    assert [e for e in calls.events if e[0] == "rename"]
    assert not [e for e in calls.events if e[0] == "fsync"]
