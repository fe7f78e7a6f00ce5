"""Hostile input (issue 11, items 8 and 9): links in task directories and manifests that
look valid but are not. Every case is refused with one line naming the bad thing, and the
destination (listing and bytes) is exactly what it was before the commit."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from amcommit.api import commit_job, setup_job
from amcommit.cli import main
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import TEMP_DIR_NAME, JobLayout
from amcommit.committer.stages import load_manifests
from amcommit.committer.task import commit_task, setup_task
from amcommit.errors import CommitError, ManifestError, PreconditionFailed
from amcommit.manifest import TaskManifest, decode_manifest, decode_success, encode_json
from amcommit.paths import join, relative_to
from amcommit.store.base import PutMode, Store
from amcommit.store.local import LocalStore
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task, task_ids

JOB = "202611220011_0001"
BEFORE = {"existing.txt": b"old", "p=1/old.bin": b"old partition"}
CFG = CommitterConfig(io_threads=1)  # renames in manifest order: the bad entry comes last


async def listing(store: Store, dest: str) -> dict[str, bytes]:
    """Everything in ``dest`` but the job's temporary directory (``_SUCCESS`` included)."""
    out = {}
    async for info in store.list(dest, recursive=True):
        rel = relative_to(info.path, dest)
        if rel != TEMP_DIR_NAME and not rel.startswith(TEMP_DIR_NAME + "/"):
            out[rel] = await store.get(info.path)
    return out


async def prepared(store: Store, dest: str) -> tuple[JobLayout, TaskManifest]:
    """A destination holding BEFORE, a job with two committed tasks; returns task 1's
    manifest (its last file entry is the one the cases spoil)."""
    for rel, data in BEFORE.items():
        await store.put(join(dest, rel), data)
    layout = await setup_job(store, dest, JOB)
    await run_task(store, layout, 0, {"a.txt": b"a", "b.txt": b"b", "c.txt": b"c"})
    m = await run_task(store, layout, 1, {"p=2/y.txt": b"y", "p=2/x.txt": b"x"})
    assert m is not None and m.files[-1].dest.endswith("p=2/y.txt")
    return layout, m


def _dest_tail(new: str) -> Callable[[TaskManifest], None]:
    def spoil(m: TaskManifest) -> None:
        m.files[-1].dest = m.files[-1].dest[: -len("p=2/y.txt")] + new

    return spoil


def _set_size(size: int) -> Callable[[TaskManifest], None]:
    def spoil(m: TaskManifest) -> None:
        m.files[-1].size = size

    return spoil


def _nul_source(m: TaskManifest) -> None:
    m.files[-1].source = m.files[-1].source.replace("y.txt", "y%00.txt")


def _dir_source(m: TaskManifest) -> None:
    m.files[-1].source = m.files[-1].source.rsplit("/", 1)[0]  # the attempt's p=2 directory


def _dir_source_no_etag(m: TaskManifest) -> None:
    _dir_source(m)
    m.files[-1].etag = None


def _other_attempt_source(m: TaskManifest) -> None:
    m.files[-1].source = m.files[-1].source.replace("_m_000001_0/", "_m_000000_0/")


def _stats_overflow(m: TaskManifest) -> None:
    m.iostatistics.counters["committer_task_file_count"] = 10**30


def _file_dir_clash(m: TaskManifest) -> None:
    _dest_tail("p=2")(m)  # a file p=2 while p=2/x.txt needs a directory p=2


MANIFEST_CASES: dict[str, Callable[[TaskManifest], None]] = {
    "nul_raw": _dest_tail("p=2/y\x00.txt"),
    "nul_percent": _dest_tail("p=2/y%00.txt"),
    "nul_in_source": _nul_source,
    "newline_percent": _dest_tail("p=2/y%0A.txt"),
    "del_raw": _dest_tail("p=2/y\x7f.txt"),
    "trailing_slash": _dest_tail("p=2/"),
    "trailing_slash_percent": _dest_tail("p=2%2F"),
    "size_10e30": _set_size(10**30),
    "size_2_63": _set_size(2**63),
    "stats_overflow": _stats_overflow,
    "file_dir_clash": _file_dir_clash,
    "component_256_bytes": _dest_tail("p=2/" + "é" * 127 + "ab"),  # issue 23: local files hold 255
    # refused before this change too (regression guards)
    "dotdot_percent": _dest_tail("p=2/%2E%2E/y.txt"),
    "empty_segment": _dest_tail("p=2//y.txt"),
    "source_of_other_attempt": _other_attempt_source,
    "dir_source": _dir_source,
    "dir_source_no_etag": _dir_source_no_etag,
}
RAW_CASES = {"nesting_200000": b'{"x":' + b"[" * 200_000 + b"]" * 200_000 + b"}"}
EVERYWHERE = {"nul_raw", "nul_percent", "dir_source", "dir_source_no_etag"}
"""Cases also run on the ADLS test server and on Azurite (Blob)."""

PARAMS = [
    pytest.param(backend, case, id=f"{case}-{backend.removeprefix('backend_')}")
    for case in [*MANIFEST_CASES, *RAW_CASES]
    for backend in ("backend_local", "backend_dfs_server", "backend_blob_azurite")
    if backend == "backend_local" or case in EVERYWHERE
]


@pytest.fixture
def hostile_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("hostile_sut", "case"), PARAMS, indirect=["hostile_sut"])
async def test_hostile_manifest_refused_and_destination_untouched(
    hostile_sut: StoreUnderTest, case: str
) -> None:
    sut = hostile_sut
    s, dest = sut.store, join(sut.base, "dest")
    layout, m = await prepared(s, dest)
    if case in RAW_CASES:
        data = RAW_CASES[case]
    else:
        MANIFEST_CASES[case](m)
        data = encode_json(m)
    await s.put(layout.manifest_path(m.task_id), data, mode=PutMode.OVERWRITE)
    before = await listing(s, dest)
    assert before == BEFORE
    with pytest.raises((ManifestError, CommitError)) as ei:
        await commit_job(s, dest, JOB, config=CFG)
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 600, msg
    if case.startswith("dir_source") and sut.name != "local":
        # no cheap check before the renames there: the rename refuses (or misses) the
        # directory and the automatic rollback restores the destination
        assert isinstance(ei.value, CommitError), msg
    else:
        assert isinstance(ei.value, ManifestError), msg
        assert "manifest" in msg, msg
    assert await listing(s, dest) == before, case


async def test_dir_source_refused_by_local_rename_and_rolled_back(
    backend_local: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the pre-rename check, LocalStore.rename itself refuses a directory declared
    as a file, after other files were renamed; the rollback restores the destination."""

    def no_check(ctx: object) -> None:
        return None

    monkeypatch.setattr(load_manifests, "_local_sources", no_check)
    s, dest = backend_local.store, join(backend_local.base, "dest")
    for spoil in (_dir_source, _dir_source_no_etag):
        layout, m = await prepared(s, dest)
        spoil(m)
        await s.put(layout.manifest_path(m.task_id), encode_json(m), mode=PutMode.OVERWRITE)
        with pytest.raises(CommitError, match="directory") as ei:
            await commit_job(s, dest, JOB, config=CFG)
        assert "\n" not in str(ei.value)
        assert await listing(s, dest) == BEFORE
        await s.delete(dest, recursive=True)


@pytest.mark.parametrize("kind", ["dir", "file"])
async def test_local_rename_of_declared_file_refuses_dirs_and_links(tmp_path: Path, kind: str) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    await store.put("outside/f", b"secret")
    os.mkdir(tmp_path / "src")
    target = tmp_path / "outside" if kind == "dir" else tmp_path / "outside" / "f"
    os.symlink(target, tmp_path / "src" / "link")
    for src in ("src/link", "src", "outside"):
        with pytest.raises(PreconditionFailed):
            await store.rename(src, "moved", rename_id="r")
    etag = (await store.stat("outside/f")).etag
    with pytest.raises(PreconditionFailed, match="symbolic link"):
        await store.rename("src/link", "moved", src_etag=etag)
    assert not (tmp_path / "moved").exists() and (tmp_path / "outside" / "f").read_bytes() == b"secret"
    # without a declared file, directories and links still move (moving old data aside)
    await store.rename("src/link", "moved")
    assert (tmp_path / "moved").is_symlink()


# -- symbolic links in task attempt directories (local) ---------------------------------


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "sub").mkdir(parents=True)
    (out / "secret.txt").write_bytes(b"secret")
    (out / "sub" / "deep.txt").write_bytes(b"deep")
    return out


def _tree(p: Path) -> dict[str, bytes]:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


LINKS: dict[str, Callable[[Path, Path], Path]] = {
    "to_outside_dir": lambda work, out: out,
    "to_outside_file": lambda work, out: out / "secret.txt",
    "to_inside_file": lambda work, out: work / "real.txt",
    "dangling": lambda work, out: out / "nothing-here",
}


@pytest.mark.parametrize("link", list(LINKS))
async def test_symlink_in_attempt_dir_fails_task_commit(tmp_path: Path, link: str) -> None:
    out = _outside(tmp_path)
    outside_before = _tree(out)
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "dest"
    await store.put(join(dest, "existing.txt"), b"old")
    layout = await setup_job(store, dest, JOB)
    task, attempt = task_ids(JOB, 0)
    work = await setup_task(store, layout, attempt)
    await store.put(join(work, "real.txt"), b"real")
    await store.put(join(work, "p=1/ok.txt"), b"ok")
    os_work = Path(store.os_path(work))
    os.symlink(LINKS[link](os_work, out), os_work / "p=1" / "ln")
    with pytest.raises(CommitError) as ei:
        await commit_task(store, layout, task, attempt)
    msg = str(ei.value)
    assert "'p=1/ln'" in msg and "symbolic link" in msg and "\n" not in msg
    assert [i async for i in store.list(layout.manifests_dir)] == []  # nothing published
    assert await listing(store, dest) == {"existing.txt": b"old"}
    assert _tree(out) == outside_before


async def test_local_list_never_follows_links(tmp_path: Path) -> None:
    out = _outside(tmp_path)
    store = LocalStore(str(tmp_path), fsync=False)
    await store.put("d/f", b"f")
    os.symlink(out, tmp_path / "d" / "ln")
    got = {i.path: i.special async for i in store.list("d", recursive=True)}
    assert got == {"d/f": None, "d/ln": "symlink"}


@pytest.mark.parametrize("via", ["symlinked_dir", "symlink_source"])
async def test_manifest_source_through_a_link_refused_before_renames(tmp_path: Path, via: str) -> None:
    """A manifest written (or edited) after its task's scan may point through a link: the
    job commit refuses it before any rename and the outside stays where it is."""
    out = _outside(tmp_path)
    outside_before = _tree(out)
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "dest"
    for rel, data in BEFORE.items():
        await store.put(join(dest, rel), data)
    layout = await setup_job(store, dest, JOB)
    await run_task(store, layout, 0, {"a.txt": b"a"})
    m = await run_task(store, layout, 1, {"sub/deep.txt": b"mine"})
    assert m is not None
    os_work = Path(store.os_path(layout.task_attempt_dir(task_ids(JOB, 1)[1])))
    if via == "symlinked_dir":
        (os_work / "sub" / "deep.txt").unlink()
        (os_work / "sub").rmdir()
        os.symlink(out / "sub", os_work / "sub")  # sources "sub/deep.txt" now lie outside
        m.files[0].etag = None
    else:
        (os_work / "sub" / "deep.txt").unlink()
        os.symlink(out / "secret.txt", os_work / "sub" / "deep.txt")
    await store.put(layout.manifest_path(m.task_id), encode_json(m), mode=PutMode.OVERWRITE)
    with pytest.raises(ManifestError, match="symbolic link") as ei:
        await commit_job(store, dest, JOB, config=CFG)
    assert "\n" not in str(ei.value)
    assert await listing(store, dest) == BEFORE
    assert _tree(out) == outside_before


# -- the command line: one line, no traceback --------------------------------------------


def _cli_job(tmp_path: Path, spoil: Callable[[TaskManifest], None] | bytes) -> Path:
    dest = tmp_path / "out"

    async def go() -> None:
        store = LocalStore("/")
        _layout, m = await prepared(store, str(dest).lstrip("/"))
        data = spoil if isinstance(spoil, bytes) else None
        if data is None:
            assert callable(spoil)
            spoil(m)
            data = encode_json(m)
        await store.put(_layout.manifest_path(m.task_id), data, mode=PutMode.OVERWRITE)

    anyio.run(go)
    return dest


@pytest.mark.parametrize(
    "case",
    ["nul_percent", "trailing_slash", "size_10e30", "dir_source", "nesting_200000", "component_256_bytes"],
)
def test_cli_commit_job_one_line(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    dest = _cli_job(tmp_path, RAW_CASES[case] if case in RAW_CASES else MANIFEST_CASES[case])
    before = _tree(dest)
    assert main(["commit-job", str(dest), "--job-id", JOB, "-q"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("amcommit: error:") and "\n" not in err and "Traceback" not in err, err
    assert _tree(dest) == before


def test_cli_manifest_and_success_deep_nesting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = RAW_CASES["nesting_200000"]
    with pytest.raises(ManifestError, match="nested too deeply"):
        decode_manifest(deep, name="m")
    with pytest.raises(ManifestError, match="nested too deeply"):
        decode_success(deep, name="s")
    (tmp_path / "m.json").write_bytes(deep)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "_SUCCESS").write_bytes(deep)
    for argv in (["manifest", str(tmp_path / "m.json")], ["success", str(tmp_path / "d")]):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert "nested too deeply" in err and "\n" not in err and "Traceback" not in err, err
