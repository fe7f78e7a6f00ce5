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
