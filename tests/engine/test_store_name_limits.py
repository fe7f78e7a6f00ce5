"""Names the store cannot hold (issue 23, item 2).

Each backend has its own limit (local files: 255 bytes per path component; Azure Blob and
ADLS Gen2: 1,024 characters per blob name; GCS: 1,024 bytes of UTF-8 per object name). A
manifest naming a destination over the limit is refused while the manifests load, in one line
naming it and the limit, with nothing published; ``abort-job`` then ends the job (destination
exactly as before, lock released, job directory gone) and the next job commits. A name at the
limit commits (the check is not stricter than the store). And if such a name slips past the
check, the commit fails with a typed error and ``abort-job`` still ends the job: local files map
``ENAMETOOLONG`` ("File name too long", which made every abort fail before), the HTTP stores
never send such a name (reads: not found; writes: refused).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import TEMP_DIR_NAME
from amcommit.committer.stages import load_manifests
from amcommit.errors import InvalidInput, ManifestError, NotFound, StoreError
from amcommit.manifest import TaskManifest, encode_json
from amcommit.paths import join
from amcommit.store.base import PutMode, Store
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task
from tests.engine.test_hostile_input import BEFORE, JOB, listing, prepared

CFG = CommitterConfig(io_threads=1, lock_wait=5.0)  # renames in manifest order: the bad entry last


def _tail(dest_uri: str) -> str:
    return dest_uri[: -len("p=2/y.txt")]


def _local_over(dest_uri: str, dest: str) -> str:
    # 129 characters, 256 bytes: over the limit in bytes, not in characters
    return _tail(dest_uri) + "p=2/" + "é" * 127 + "ab"


def _local_at(dest_uri: str, dest: str) -> str:
    return _tail(dest_uri) + "p=2/" + "é" * 126 + "abc"  # 255 bytes


def _azure_name(total: int) -> Callable[[str, str], str]:
    """A destination whose blob name (the store path) has ``total`` characters."""

    def make(dest_uri: str, dest: str) -> str:
        head = join(dest, "p=2") + "/"
        return _tail(dest_uri) + "p=2/" + "y" * (total - len(head))

    return make


def _gcs_name(total_bytes: int) -> Callable[[str, str], str]:
    """A destination whose object name has ``total_bytes`` UTF-8 bytes (under 1,024
    characters: bytes count), in components of at most 200 bytes (fake-gcs-server keeps
    objects as files)."""

    def make(dest_uri: str, dest: str) -> str:
        head = join(dest, "p=2") + "/"
        left = total_bytes - len(head.encode())
        parts = []
        while left > 201:
            parts.append("é" * 100)  # 200 bytes
            left -= 201  # and a "/"
        parts.append("z" * left)
        return _tail(dest_uri) + "p=2/" + "/".join(parts)

    return make


OVER: dict[str, tuple[Callable[[str, str], str], str]] = {
    "backend_local": (_local_over, "local files allow at most 255 bytes per path component"),
    "backend_blob_azurite": (_azure_name(1025), "Azure storage allow at most 1,024 per name"),
    "backend_dfs_server": (_azure_name(1025), "Azure storage allow at most 1,024 per name"),
    "backend_gcs_fake": (_gcs_name(1025), "Google Cloud Storage allow at most 1,024"),
}
AT: dict[str, Callable[[str, str], str]] = {
    "backend_local": _local_at,
    "backend_blob_azurite": _azure_name(1024),
    "backend_dfs_server": _azure_name(1024),
    "backend_gcs_fake": _gcs_name(1024),
}


@pytest.fixture
def limit_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def _params(table: dict[str, object]) -> list[object]:
    return [
        pytest.param(b, b, id=b.removeprefix("backend_"))  # (fixture, spoiler key)
        for b in table
    ]


async def _spoiled(s: Store, dest: str, spoil: Callable[[str, str], str]) -> TaskManifest:
    layout, m = await prepared(s, dest)
    m.files[-1].dest = spoil(m.files[-1].dest, dest)
    await s.put(layout.manifest_path(m.task_id), encode_json(m), mode=PutMode.OVERWRITE)
    return m


async def _job_gone(s: Store, dest: str) -> None:
    """The destination is exactly BEFORE, no lock and no job directory are left, and the
    next job into it commits."""
    assert await listing(s, dest) == BEFORE
    assert [i.path async for i in s.list(join(dest, TEMP_DIR_NAME), recursive=True)] == []
    from amcommit.api import setup_job

    layout = await setup_job(s, dest, "202611220011_0002")
    await run_task(s, layout, 0, {"next.txt": b"n"})
    report = await commit_job(s, dest, "202611220011_0002", config=CFG)
    assert report.success and (await listing(s, dest))["next.txt"] == b"n"


@pytest.mark.parametrize(("limit_sut", "backend"), _params(OVER), indirect=["limit_sut"])
async def test_name_over_store_limit_refused_while_loading(limit_sut: StoreUnderTest, backend: str) -> None:
    s, dest = limit_sut.store, join(limit_sut.base, "dest")
    spoil, limit = OVER[backend]
    await _spoiled(s, dest, spoil)
    with pytest.raises(ManifestError) as ei:
        await commit_job(s, dest, JOB, config=CFG)
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 400, msg
    assert "cannot be stored" in msg and limit in msg and "-manifest.json" in msg, msg
    assert await listing(s, dest) == BEFORE  # nothing published
    report = await abort_job(s, dest, JOB, config=CFG)
    assert not report.success
    await _job_gone(s, dest)


@pytest.mark.parametrize(("limit_sut", "backend"), _params(AT), indirect=["limit_sut"])
async def test_name_at_store_limit_commits(limit_sut: StoreUnderTest, backend: str) -> None:
    s, dest = limit_sut.store, join(limit_sut.base, "dest")
    await _spoiled(s, dest, AT[backend])
    report = await commit_job(s, dest, JOB, config=CFG)
    assert report.success and report.files == 5
    got = await listing(s, dest)
    assert len(got) == len(BEFORE) + 6  # 5 files and _SUCCESS
    assert [v for k, v in got.items() if k.startswith("p=2/") and k != "p=2/x.txt"] == [b"y"]


@pytest.mark.parametrize(("limit_sut", "backend"), _params(OVER), indirect=["limit_sut"])
async def test_name_past_the_check_fails_typed_and_abort_ends_the_job(
    limit_sut: StoreUnderTest, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the load-time check the rename of the bad name fails after the others were
    published (typed, one line); abort-job rolls them back and ends the job."""
    monkeypatch.setattr(load_manifests, "_check_names", lambda *a: None, raising=False)
    s, dest = limit_sut.store, join(limit_sut.base, "dest")
    await _spoiled(s, dest, OVER[backend][0])
    with pytest.raises(StoreError) as ei:
        await commit_job(s, dest, JOB, config=CFG)
    assert isinstance(ei.value, (InvalidInput, NotFound)), repr(ei.value)
    assert "\n" not in str(ei.value) and len(str(ei.value)) < 600
    assert len(await listing(s, dest)) > len(BEFORE)  # the files before it were published
    await abort_job(s, dest, JOB, config=CFG)
    await _job_gone(s, dest)


@pytest.mark.parametrize("limit_sut", list(OVER), indirect=True)
async def test_store_answers_typed_for_a_name_it_cannot_hold(limit_sut: StoreUnderTest) -> None:
    """Reads of an over-limit name find nothing, writes are refused with InvalidInput
    (HTTP stores without sending a request; local files by the file system's answer)."""
    s = limit_sut.store
    limits = s.capabilities.name_limits
    assert limits is not None
    long = join(limit_sut.base, "é" * 600 if limits.segment_bytes else "y" * 1100)
    assert limits.problem(long) is not None
    await s.put(join(limit_sut.base, "src"), b"s")
    with pytest.raises(NotFound):
        await s.stat(long)
    with pytest.raises(NotFound):
        await s.get(long)
    assert await s.delete(long) is False
    assert [i async for i in s.list(long)] == []
    with pytest.raises(InvalidInput, match="too long"):
        await s.put(long, b"x")
    with pytest.raises(InvalidInput, match="too long"):
        await s.rename(join(limit_sut.base, "src"), long)
    assert await s.get(join(limit_sut.base, "src")) == b"s"
