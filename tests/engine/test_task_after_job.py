"""A task commit of a job that is over (committed or aborted: its marker ``_job.json`` is
gone) is refused in one typed line and publishes nothing: no manifest, and the zombie
attempt's files are removed. Also when the job ends while the attempt publishes (the
manifest is taken back). On local files and Azure Blob (Azurite)."""

from __future__ import annotations

from typing import Any

import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.committer.task import commit_task, setup_task
from amcommit.errors import CommitError
from amcommit.paths import join
from amcommit.store.base import RenameResult, Store
from tests.backends import StoreUnderTest
from tests.engine.helpers import run_task, snapshot, task_ids, temp_files

JOB = "202611290001_0040"
OLD = {"p=1/old.bin": b"old 1"}
NEW = {"p=0/a.bin": b"new a", "p=1/b.bin": b"new b"}
ZOMBIE = {"p=0/zombie.bin": b"zombie"}


@pytest.fixture(params=["backend_local", "backend_blob_azurite"])
def sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


async def prepare(store: Store, dest: str) -> tuple[JobLayout, str]:
    """The old file, a job with one committed task, and a second attempt (the zombie) set
    up with one file; returns the layout and the zombie's working directory."""
    for rel, data in OLD.items():
        await store.put(join(dest, rel), data)
    layout = await setup_job(store, dest, JOB)
    await run_task(store, layout, 0, NEW)
    work = await setup_task(store, layout, task_ids(JOB, 1)[1])
    await store.put(join(work, "p=0/early.bin"), b"early")
    return layout, work


@pytest.mark.parametrize("end", ["commit", "abort"])
async def test_task_commit_after_the_job_is_refused(sut: StoreUnderTest, end: str) -> None:
    store, dest = sut.store, join(sut.base, "d")
    layout, work = await prepare(store, dest)
    if end == "commit":
        assert (await commit_job(store, dest, JOB)).success
        after = OLD | NEW
    else:
        await abort_job(store, dest, JOB)
        after = OLD
    assert await snapshot(store, dest) == after
    # the zombie goes on writing (recreating its directory) and commits
    for rel, data in ZOMBIE.items():
        await store.put(join(work, rel), data)
    task, attempt = task_ids(JOB, 1)
    with pytest.raises(CommitError) as ei:
        await commit_task(store, layout, task, attempt)
    msg = str(ei.value)
    assert msg == (
        f"commit_task: job {JOB} is not active (already committed or aborted): task attempt {attempt} "
        "is a leftover and publishes nothing"
    )
    assert "\n" not in msg
    assert await snapshot(store, dest) == after
    assert [p for p in await temp_files(store, dest) if not await _is_dir(store, p)] == []


async def _is_dir(store: Store, path: str) -> bool:
    """An empty directory the zombie's put created on local files (no file in it)."""
    return (await store.stat(path)).is_dir


class EndsJobAtPublish:
    """A store whose rename of the task's manifest into place first aborts the job (the
    job ends while the attempt publishes); everything else passes through."""

    def __init__(self, inner: Store, dest: str, manifest: str) -> None:
        self.inner, self.dest, self.manifest, self.fired = inner, dest, manifest, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def rename(self, src: str, dst: str, **kw: Any) -> RenameResult:
        if dst == self.manifest and not self.fired:
            self.fired = True
            await abort_job(self.inner, self.dest, JOB)
        return await self.inner.rename(src, dst, **kw)


async def test_job_ended_while_publishing_takes_the_manifest_back(sut: StoreUnderTest) -> None:
    store, dest = sut.store, join(sut.base, "d")
    layout, _ = await prepare(store, dest)
    task, attempt = task_ids(JOB, 1)
    racing = EndsJobAtPublish(store, dest, layout.manifest_path(task))
    with pytest.raises(CommitError, match="is a leftover and publishes nothing"):
        await commit_task(racing, layout, task, attempt, config=CommitterConfig())  # type: ignore[arg-type]
    assert racing.fired
    assert await snapshot(store, dest) == OLD
    assert [p for p in await temp_files(store, dest) if not await _is_dir(store, p)] == []
