"""Local durability (issue 23 item 13, issue 35 item 4): with ``fsync`` on, every rename is
made durable before the journal records it, as :func:`~amcommit.store.local.dir_sync_rule`
says for the file system: both directories of every rename fsynced (``each``), the
destination directories only (``dest``: journaling file systems), one ``syncfs``
(``syncfs``: ext4 without a journal), nothing (``none``: tmpfs); with ``fsync`` off nothing
is fsynced.

The system calls are observed from the test by wrapping ``renameat2`` (every rename of the
local store), ``os.fsync``, ``syncfs`` and ``os.replace`` (the journal's whole-file write
lands with it), in the order they happen, across the store's worker threads. The rule is
forced per test (the store's choice of what to sync is tested on any file system); the
detection itself is compared with ``/proc/mounts``.
"""

from __future__ import annotations

import ctypes
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
    is_dir)``, ``("syncfs", path)``, ``("journal", state)``."""

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

    real_syncfs = getattr(local_mod, "_syncfs", None)

    def syncfs(fd: int) -> None:
        assert real_syncfs is not None
        real_syncfs(fd)
        rec.add("syncfs", os.readlink(f"/proc/self/fd/{fd}"))

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
    if real_syncfs is not None:
        monkeypatch.setattr(local_mod, "_syncfs", syncfs)
    return rec


def _force_rule(monkeypatch: pytest.MonkeyPatch, rule: str) -> None:
    """Make the store treat every file system as ``rule`` says."""
    monkeypatch.setattr(local_mod, "dir_sync_rule", lambda path: rule, raising=False)


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


def _renames_before(events: list[tuple[Any, ...]], journal_state: str) -> tuple[int, dict[str, int]]:
    """The index of the journal write of ``journal_state`` and the index of the last rename
    into each destination directory before it."""
    at = events.index(("journal", journal_state))
    last_into: dict[str, int] = {}
    for i, e in enumerate(events[:at]):
        if e[0] == "rename":
            last_into[e[2]] = i
    assert last_into, "no rename before the journal write"
    return at, last_into


def _expected_files() -> list[str]:
    return sorted(f"p={p}/part-{n}-{k}.bin" for n in range(2) for p in range(2) for k in range(3))


@pytest.mark.parametrize("batch", [256, 1], ids=["rename-batches", "rename-one-by-one"])
async def test_renames_fsync_their_directories_before_the_journal(
    tmp_path: Path, calls: Calls, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _force_rule(monkeypatch, "each")
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


@pytest.mark.parametrize("batch", [256, 1], ids=["rename-batches", "rename-one-by-one"])
async def test_journaling_file_system_lets_the_journal_puts_fsync_commit_the_renames(
    tmp_path: Path, calls: Calls, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dest`` (ext4 with its journal, xfs), renames followed by a put on the same file
    system (the journal record): no directory is fsynced; the put's own file, created
    after the last rename, is fsynced before the journal records the renames (that fsync
    commits the file system's journal past every rename before it)."""
    _force_rule(monkeypatch, "dest")
    files = await _commit(tmp_path, fsync=True, batch=batch, calls=calls)
    assert sorted(files) == _expected_files()
    assert files["p=0/part-0-0.bin"] == b"000"
    events = calls.events
    at, last_into = _renames_before(events, "renamed")
    last_rename = max(last_into.values())
    file_syncs = [j for j in range(last_rename + 1, at) if events[j][0] == "fsync" and not events[j][2]]
    assert file_syncs, "no file was fsynced between the last rename and the journal write"
    root = str(tmp_path)
    assert {f"{root}/dest/p=0", f"{root}/dest/p=1"} <= set(last_into)
    assert not [e for e in events if e[0] == "fsync" and e[2]], "a directory was fsynced"
    assert not [e for e in events if e[0] == "syncfs"]


async def test_journaling_file_system_fsyncs_destination_directories_when_no_put_follows(
    tmp_path: Path, calls: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dest`` with nothing recorded after the renames (an explicit ``sync()``, or a put
    on another file system): every directory a rename went into is fsynced, each once;
    no directory that only lost files."""
    _force_rule(monkeypatch, "dest")
    store = LocalStore(str(tmp_path), fsync=True)
    async with store:
        for p in range(2):
            for k in range(3):
                await store.put(f"src/s{p}/f{k}", b"x")
        calls.events.clear()
        for p in range(2):
            for k in range(3):
                await store.rename(f"src/s{p}/f{k}", f"dst/d{k % 2}/f{p}{k}")
        await store.sync()
    root = str(tmp_path)
    dir_syncs = [e[1] for e in calls.events if e[0] == "fsync" and e[2]]
    assert sorted(dir_syncs) == [f"{root}/dst/d0", f"{root}/dst/d1"]


async def test_ext4_without_journal_syncs_the_file_system_once(
    tmp_path: Path, calls: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``syncfs`` (ext4 without a journal): one ``syncfs`` after the last rename and before
    the journal records the renames, no directory fsynced one by one; below
    :data:`~amcommit.store.local.SYNCFS_MIN_DIRS` directories, each is fsynced instead."""
    if not hasattr(ctypes.CDLL(None), "syncfs"):
        pytest.skip("no syncfs in this libc")
    _force_rule(monkeypatch, "syncfs")
    monkeypatch.setattr(local_mod, "SYNCFS_MIN_DIRS", 1, raising=False)
    files = await _commit(tmp_path, fsync=True, batch=256, calls=calls)
    assert sorted(files) == _expected_files()
    events = calls.events
    at, last_into = _renames_before(events, "renamed")
    last = max(last_into.values())
    assert [e for e in events[last + 1 : at] if e[0] == "syncfs"], (
        "no syncfs between the renames and the journal"
    )
    assert not [e for e in events[:at] if e[0] == "fsync" and e[2]]
    # few directories: fsynced one by one, as under "each"
    calls.events.clear()
    monkeypatch.setattr(local_mod, "SYNCFS_MIN_DIRS", 10_000)
    await _commit(tmp_path / "small", fsync=True, batch=256, calls=calls)
    assert not [e for e in calls.events if e[0] == "syncfs"]
    _check_order(calls.events, "renamed")


async def test_memory_file_system_syncs_no_directory(
    tmp_path: Path, calls: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``none`` (tmpfs, ramfs): no directory fsync, no ``syncfs``; files are still fsynced
    before they are published (the journal's)."""
    _force_rule(monkeypatch, "none")
    files = await _commit(tmp_path, fsync=True, batch=256, calls=calls)
    assert sorted(files) == _expected_files()
    assert [e for e in calls.events if e[0] == "rename"]
    assert not [e for e in calls.events if (e[0] == "fsync" and e[2]) or e[0] == "syncfs"]
    assert [e for e in calls.events if e[0] == "fsync" and not e[2]]


def _mount_of(path: str) -> tuple[str, str]:
    """The file system type and device of the mount holding ``path``, from ``/proc/mounts``
    (the longest mount point above it; the last one mounted there)."""
    real = os.path.realpath(path)
    best: tuple[int, str, str] = (-1, "", "")
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            mnt = mnt.replace("\\040", " ")
            if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= best[0]:
                best = (len(mnt), fstype, dev)
    return best[1], best[2]


def test_dir_sync_rule_follows_the_file_system(tmp_path: Path) -> None:
    """The rule detected by ``statfs`` agrees with ``/proc/mounts``'s file system type (and,
    for ext4, with whether the kernel lists its jbd2 journal)."""
    if not os.path.exists("/proc/mounts"):
        pytest.skip("no /proc/mounts")
    checked = 0
    for path in (str(tmp_path), "/dev/shm"):
        if not os.path.isdir(path):
            continue
        fstype, dev = _mount_of(path)
        if fstype in ("tmpfs", "ramfs"):
            want = "none"
        elif fstype == "xfs":
            want = "dest"
        elif fstype in ("ext4", "ext3", "ext2"):
            name = os.path.basename(os.path.realpath(dev))
            want = "dest" if os.path.isdir(f"/proc/fs/jbd2/{name}-8") else "each"
        elif fstype in ("btrfs", "nfs", "nfs4", "overlay", "f2fs", "zfs"):
            want = "each"
        else:
            continue
        assert local_mod.dir_sync_rule(path) == want, (path, fstype, dev)
        assert local_mod.dir_sync_rule(os.fsencode(path)) == want
        checked += 1
    assert checked, "no file system of a known type to check"
    assert local_mod.dir_sync_rule("/no/such/dir") == "each"  # unknown: the safe rule


async def test_without_fsync_nothing_is_fsynced(tmp_path: Path, calls: Calls) -> None:
    await _commit(tmp_path, fsync=False, batch=256, calls=calls)
    assert [e for e in calls.events if e[0] == "rename"]
    assert not [e for e in calls.events if e[0] in ("fsync", "syncfs")]
