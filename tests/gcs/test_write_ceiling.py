"""A job commit on a cold bucket: the renames in flight are bounded by the bucket's write
rate (issue 35 item 3), on fake-gcs-server with a real write gate.

With the store's adaptive in-flight limit and ``io_threads`` at its default, the renames
follow the limit (never fewer than 128 at once) -- unless the store's write gate binds:
then more renames in flight only queue at the gate, and
:class:`~amcommit.committer.stages.rename_files.FollowGate` admits about 1.5 x those that
are not waiting there. Here the gate takes 100 writes/s (a rename is 2 writes), so the
gate binds from the first renames on; the bound is measured, not configured.
"""

from __future__ import annotations

from amcommit.api import commit_job, setup_job
from amcommit.committer.config import CommitterConfig
from amcommit.store.adaptive import AdaptiveLimit
from amcommit.store.base import RenameResult, Store
from amcommit.store.limits import DEFAULT_ADAPTIVE, Limiter
from amcommit.testing.faults import FaultyStore
from tests.engine.helpers import run_task, snapshot
from tests.gcs.conftest import GcsEnv

JOB = "202612010001_0001"
FILES = 300
TASKS = 3


class CountingStore(FaultyStore):
    """Records how many renames are in flight when each rename of a file into ``dest/p=*``
    starts (itself included; the commit's other renames are counted in flight too)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.now = 0
        self.at_start: list[int] = []

    async def rename(self, src: str, dst: str, **kw: object) -> RenameResult:
        self.now += 1
        if dst.startswith("dest/p="):
            self.at_start.append(self.now)
        try:
            return await super().rename(src, dst, **kw)  # type: ignore[arg-type]
        finally:
            self.now -= 1


async def test_renames_in_flight_follow_the_cold_buckets_write_rate(fake_env: GcsEnv) -> None:
    setup_store = fake_env.store()  # no write gate: the tasks' uploads are not measured
    layout = await setup_job(setup_store, "dest", JOB)
    per = FILES // TASKS
    expected: dict[str, bytes] = {}
    for n in range(TASKS):
        files = {f"p={n}/f-{k:04d}.bin": f"{n}-{k}".encode() for k in range(per)}
        await run_task(setup_store, layout, n, files)
        expected.update(files)

    cold = fake_env.store(
        limiter=Limiter(max_concurrency=None, adaptive=AdaptiveLimit(**DEFAULT_ADAPTIVE)),
        write_limiter=Limiter(max_concurrency=None, rate=100.0, burst=10.0),
    )
    store = CountingStore(cold)
    report = await commit_job(store, "dest", JOB, config=CommitterConfig(rename_batch_size=1))
    assert report.success and report.files == FILES
    assert await snapshot(setup_store, "dest") == expected
    assert [i.path async for i in setup_store.list("dest/_temporary", recursive=True)] == []

    starts = store.at_start
    assert len(starts) == FILES
    # before the first window is judged: up to the default's 128 at once (the adaptive
    # limit, 64, is lower), more than the bound below: that comes from the measurement
    assert 64 < max(starts[:128]) <= 128
    # once judged (32 renames ended, at least a quarter of a second: before the 160th
    # start), far fewer: the write gate's 50 renames/s need ~1.5 x 50/s x the time a
    # rename takes without waiting at it (64 only if that were 0.85 s)
    assert max(starts[200:]) <= 64
