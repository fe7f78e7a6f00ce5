"""``LocalStore.find_non_file`` lists directories holding several of the paths instead of an
``lstat`` per path: the listing must let nothing through that the per-path check refuses
(a directory, a symbolic link, a FIFO, a file behind a symlinked directory), in directories
big enough to be listed (>= 4 paths) and small ones alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amcommit.store.local import LocalStore

BELOW = "job/tasks"


def make(tmp_path: Path, per_dir: int) -> list[str]:
    """Files ``job/tasks/a<k>/d<j>/f<i>`` (2 attempts x 2 dirs x ``per_dir``)."""
    paths = []
    for k in range(2):
        for j in range(2):
            d = tmp_path / BELOW / f"a{k}" / f"d{j}"
            d.mkdir(parents=True)
            for i in range(per_dir):
                (d / f"f{i}").write_bytes(b"x")
                paths.append(f"{BELOW}/a{k}/d{j}/f{i}")
    return paths


@pytest.mark.parametrize("per_dir", [1, 3, 4, 10])
async def test_all_regular_files_pass_and_missing_ones_are_skipped(tmp_path: Path, per_dir: int) -> None:
    paths = make(tmp_path, per_dir)
    store = LocalStore(str(tmp_path))
    assert await store.find_non_file(paths, BELOW) is None
    os.remove(tmp_path / paths[-1])  # renamed already by an earlier run
    assert await store.find_non_file([*paths, f"{BELOW}/a9/gone/f"], BELOW) is None


@pytest.mark.parametrize("per_dir", [1, 4, 10])
@pytest.mark.parametrize("kind", ["dir", "symlink", "fifo", "dangling"])
async def test_last_path_not_a_regular_file_is_found(tmp_path: Path, per_dir: int, kind: str) -> None:
    paths = make(tmp_path, per_dir)
    bad = tmp_path / paths[-1]
    bad.unlink()
    if kind == "dir":
        bad.mkdir()
    elif kind == "symlink":
        bad.symlink_to(tmp_path / paths[0])
    elif kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to(tmp_path / "nowhere")
    got = await LocalStore(str(tmp_path)).find_non_file(paths, BELOW)
    assert got is not None and got[0] == paths[-1]
    assert {"dir": "a directory", "symlink": "symbolic link", "fifo": "FIFO", "dangling": "symbolic link"}[
        kind
    ] in got[1]


@pytest.mark.parametrize("per_dir", [1, 4, 10])
@pytest.mark.parametrize("level", ["attempt", "dir"])
async def test_file_behind_a_symlinked_directory_is_found(tmp_path: Path, per_dir: int, level: str) -> None:
    paths = make(tmp_path, per_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(per_dir):
        (outside / f"f{i}").write_bytes(b"secret")
    link = tmp_path / BELOW / "a1" / "d1" if level == "dir" else tmp_path / BELOW / "a1"
    target = outside
    if level == "attempt":  # a1 -> outside, which holds d1/f*
        (outside / "d0").mkdir()
        (outside / "d1").mkdir()
        for i in range(per_dir):
            for d in ("d0", "d1"):
                (outside / d / f"f{i}").write_bytes(b"secret")
    for p in sorted(link.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    link.rmdir()
    link.symlink_to(target)
    got = await LocalStore(str(tmp_path)).find_non_file(paths, BELOW)
    assert got is not None and "symbolic link" in got[1]
    assert got[0].startswith(f"{BELOW}/a1/")


async def test_path_not_below_is_refused(tmp_path: Path) -> None:
    paths = make(tmp_path, 4)
    got = await LocalStore(str(tmp_path)).find_non_file([*paths, "job/other/f"], BELOW)
    assert got == ("job/other/f", f"it is not below {BELOW!r}")


@pytest.mark.parametrize("bad_at", [0, 7, 19])
async def test_load_stage_checks_sources_in_batches_and_names_the_manifest(
    tmp_path: Path, bad_at: int
) -> None:
    """The load stage's check of local sources (batches checked while loading goes on)
    finds a bad source in any batch and names the manifest that declared it."""
    import anyio

    from amcommit.committer.stages.load_manifests import _LocalSources

    paths = make(tmp_path, 5)  # 20 paths, 4 "manifests" of 5
    bad = tmp_path / paths[bad_at]
    bad.unlink()
    bad.mkdir()
    sources = _LocalSources(LocalStore(str(tmp_path)), BELOW, batch=3)
    async with anyio.create_task_group() as tg:
        for k in range(4):
            sources.add(paths[k * 5 : k * 5 + 5], f"m{k}")
            if sources.full():
                await sources.start(tg)
        await sources.start(tg)
    assert sources.bad == (paths[bad_at], "it is a directory, not a file", f"m{bad_at // 5}")
    assert not sources.srcs


async def test_load_stage_source_check_passes_good_sources(tmp_path: Path) -> None:
    import anyio

    from amcommit.committer.stages.load_manifests import _LocalSources

    paths = make(tmp_path, 5)
    sources = _LocalSources(LocalStore(str(tmp_path)), BELOW, batch=4)
    async with anyio.create_task_group() as tg:
        for k in range(4):
            sources.add(paths[k * 5 : k * 5 + 5], f"m{k}")
            await sources.start(tg)
    assert sources.bad is None
