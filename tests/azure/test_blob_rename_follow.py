"""A job commit on Blob (Copy Blob per file, the sources' deletes in one Blob Batch per
manifest) copies as many files at once as the store's adaptive in-flight limit allows, not
two manifests' worth (issue 35 item 3: with a task's 20-file manifest the batch path never
had more than 40 copies in flight, whatever the limit, so at 50 ms per request the commit
could not follow the limit on Blob as it does on GCS).

Real parts: Azurite, the real BlobStore and job commit; the store's requests are counted
and each Copy Blob is held for a moment first (a remote store's round trip), so the copies
in flight overlap whatever the machine's load.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.stages.rename_files import HEADROOM_MIN
from amcommit.store.adaptive import AdaptiveLimit
from amcommit.store.limits import Limiter
from tests.azure.conftest import BlobEnv
from tests.engine.helpers import run_task

JOB = "202611300001_0001"
TASKS, PER_TASK = 60, 5
HOLD = 0.5


async def _commit(
    env: BlobEnv,
    monkeypatch: pytest.MonkeyPatch,
    config: CommitterConfig,
    limit: int = 160,
    ceiling: int = 160,
) -> int:
    """Commit TASKS x PER_TASK files with the adaptive limit pinned at ``limit``; returns the
    most Copy Blob requests in flight at once. Checks the exact output and that no source
    is left."""
    limiter = Limiter(
        max_concurrency=None, adaptive=AdaptiveLimit(initial=limit, floor=limit, ceiling=ceiling)
    )
    store = env.store(limiter=limiter)
    dest = "out/follow"
    layout = await setup_job(store, dest, JOB)
    want: dict[str, bytes] = {}
    for n in range(TASKS):
        files = {
            f"p={n % 3}/part-{n:03d}-{k}.bin": f"task {n} file {k} ".encode() * (k + 1)
            for k in range(PER_TASK)
        }
        await run_task(store, layout, n, files)
        want.update(files)
    now = peak = 0
    inner = store.request

    async def counted(op: str, method: str, *a: Any, **kw: Any) -> Any:
        nonlocal now, peak
        if op != "rename" or method != "PUT":
            return await inner(op, method, *a, **kw)
        now += 1
        peak = max(peak, now)
        try:
            await anyio.sleep(HOLD)
            return await inner(op, method, *a, **kw)
        finally:
            now -= 1

    monkeypatch.setattr(store, "request", counted)
    report = await commit_job(store, dest, JOB, config=config)
    assert report.success and report.files == TASKS * PER_TASK
    got = {}
    for b in env.sdk.list_blobs(name_starts_with=dest + "/"):
        rel = b.name[len(dest) + 1 :]
        if rel != "_SUCCESS":
            got[rel] = env.sdk.download_blob(b.name).readall()
    assert got == want  # exactly the tasks' files, nothing of _temporary left
    return peak


async def test_blob_copies_in_flight_follow_the_adaptive_limit(
    blob_env: BlobEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default ``io_threads``, limit pinned at 160: batches of 5 are admitted while their
    copies fit under it, so up to 160 copies run at once (at least 100 even if the machine
    stalls while they start), never more; before, two batches: 10."""
    peak = await _commit(blob_env, monkeypatch, CommitterConfig())
    assert 100 <= peak <= 160


async def test_blob_batches_get_no_floor_of_128(blob_env: BlobEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit at 32 (Azurite's floor when its own CPU binds), ceiling 1,024: batches are
    admitted while their copies fit under 32 + 8, so 8 batches of 5 (40 copies at most, at
    least 3 batches' worth even if the machine stalls), not the 128 single renames get."""
    peak = await _commit(blob_env, monkeypatch, CommitterConfig(), limit=32, ceiling=1024)
    assert 3 * PER_TASK <= peak <= 32 + HEADROOM_MIN


async def test_explicit_io_threads_keeps_two_batches(
    blob_env: BlobEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``io_threads`` given by the caller bounds the renames as before: two batches of a
    manifest each (5 files) in progress."""
    peak = await _commit(blob_env, monkeypatch, CommitterConfig(io_threads=64))
    assert peak == 2 * PER_TASK
