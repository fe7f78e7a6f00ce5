"""LocalStore's recursive delete against a writer racing it (a late task attempt still
writing while its job is aborted)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from amcommit.errors import PreconditionFailed
from amcommit.store import local
from amcommit.store.local import LocalStore


async def test_recursive_delete_survives_a_racing_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    await store.put("job/_job.json", b"{}")
    await store.put("job/tasks/a/part-0", b"x")
    real = shutil.rmtree
    calls = 0

    def racing_rmtree(p: str, *a: Any, **kw: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:  # a late writer adds a file; rmtree fails on its parent and stops
            os.makedirs(tmp_path / "job/tasks/b", exist_ok=True)
            (tmp_path / "job/tasks/b/late").write_bytes(b"late")
            raise OSError(errno.ENOTEMPTY, "Directory not empty", str(tmp_path / "job/tasks"))
        real(p, *a, **kw)

    monkeypatch.setattr(local.shutil, "rmtree", racing_rmtree)
    assert await store.delete("job", recursive=True)
    assert calls == 2 and not (tmp_path / "job").exists()


async def test_recursive_delete_gives_up_on_a_writer_that_never_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    await store.put("job/x", b"x")

    def always(p: str, *a: Any, **kw: Any) -> None:
        raise OSError(errno.ENOTEMPTY, "Directory not empty", p)

    monkeypatch.setattr(local.shutil, "rmtree", always)
    with pytest.raises(PreconditionFailed, match="directory not empty"):
        await store.delete("job", recursive=True)


async def test_a_tree_of_empty_directories_is_removed_by_rmdir_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task attempt directories after a job's renames: ``rmdir`` only, no rmtree."""
    store = LocalStore(str(tmp_path), fsync=False)
    for t in range(3):
        for d in ("day=0", "day=1/hour=2"):
            (tmp_path / "tasks" / f"attempt_{t}" / d).mkdir(parents=True)

    def no_rmtree(p: str, *a: Any, **kw: Any) -> None:
        raise AssertionError("rmtree called")

    monkeypatch.setattr(local.shutil, "rmtree", no_rmtree)
    assert await store.delete("tasks", recursive=True)
    assert not (tmp_path / "tasks").exists()


async def test_files_and_links_below_are_left_to_rmtree_and_links_are_not_followed(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    outside = tmp_path / "outside"
    (outside / "empty" / "deeper").mkdir(parents=True)
    (tmp_path / "tasks" / "a" / "day=0").mkdir(parents=True)
    (tmp_path / "tasks" / "a" / "day=1").mkdir(parents=True)
    (tmp_path / "tasks" / "a" / "day=1" / "stray.bin").write_bytes(b"x")
    (tmp_path / "tasks" / "b").mkdir()
    os.symlink(outside, tmp_path / "tasks" / "b" / "link")
    # rmdir only: the empty directory goes, the one with a file and the link stay
    assert not local._remove_dirs_only(str(tmp_path / "tasks"))
    assert not (tmp_path / "tasks" / "a" / "day=0").exists()
    assert (tmp_path / "tasks" / "a" / "day=1" / "stray.bin").exists()
    assert (tmp_path / "tasks" / "b" / "link").is_symlink()
    assert await store.delete("tasks", recursive=True)  # the rest the general way
    assert not (tmp_path / "tasks").exists()
    assert (outside / "empty" / "deeper").is_dir()  # never followed
