"""Issue 36 item 4: a restart of a streaming query in the same driver process (the same
Spark application) takes the ended run's lease at once instead of waiting ``leaseTtl``;
a late task or commit of the replaced run cannot take it back."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from amcommit.errors import ConflictError
from amcommit.liveness import local_process
from amcommit.spark.stream_state import acquire_lease
from amcommit.store.local import LocalStore

TTL = 60.0
"""leaseTtl of these tests: a wait for it would be obvious."""


def test_same_driver_restart_takes_the_lease_at_once(tmp_path: Path) -> None:
    """Run a's lease (driver: this process) is taken by run b of the same driver without
    waiting; run a then fails in one line; run c of another driver (a pid that is alive:
    pid 1) waits for b's lease and, b renewing, is refused."""
    me = local_process(os.getpid())
    other = local_process(1)

    async def main() -> tuple[float, str, str]:
        store = LocalStore(str(tmp_path))
        async with store:
            assert await acquire_lease(store, "t", "q", "run-a", TTL, driver=me) is False
            t0 = time.monotonic()
            await acquire_lease(store, "t", "q", "run-b", TTL, driver=me)
            took = time.monotonic() - t0
            with pytest.raises(ConflictError) as late:
                await acquire_lease(store, "t", "q", "run-a", TTL, driver=me)
            # b renews (its own lease, replaced list kept): a is still refused afterwards
            await anyio.sleep(0.05)
            assert await acquire_lease(store, "t", "q", "run-b", 0.1, driver=me) is False
            with pytest.raises(ConflictError):
                await acquire_lease(store, "t", "q", "run-a", TTL, driver=me)

            async def renew() -> None:
                for _ in range(40):
                    await anyio.sleep(0.1)
                    await acquire_lease(store, "t", "q", "run-b", 0.2, driver=me)

            other_msg = "not refused"
            async with anyio.create_task_group() as tg:
                tg.start_soon(renew)
                try:
                    await acquire_lease(store, "t", "q", "run-c", 0.8, driver=other)
                except ConflictError as e:
                    other_msg = str(e)
                tg.cancel_scope.cancel()
            return took, str(late.value), other_msg

    took, late, other_msg = anyio.run(main)
    assert took < 5.0, took  # TTL is 60 s
    assert late == (
        "streaming query q: run run-a has stopped: run run-b of the same driver took its lease "
        "over (a restart); this late task or commit of the stopped run does nothing"
    )
    assert "already running in another run (run-b" in other_msg, other_msg
    lease = json.loads(next((tmp_path / "t" / ".hoodie" / ".amcommit" / "streams").iterdir()).read_text())
    assert lease["run"] == "run-b" and lease["replaced"] == ["run-a"], lease


SCHEMA = "id LONG, day STRING, v STRING"


def _drop(src: Path, n: int, first: int) -> list[int]:
    src.mkdir(exist_ok=True)
    ids = list(range(first, first + 3))
    (src / f"batch-{n:03d}.json").write_text(
        "".join(json.dumps({"id": i, "day": "2026-11-0" + str(1 + i % 2), "v": f"v{i}"}) + "\n" for i in ids)
    )
    return ids


@pytest.mark.timeout(300)
def test_available_now_restart_in_the_same_process_does_not_wait(spark: Any, tmp_path: Path) -> None:
    """An ``availableNow`` run of a query ends normally; a restart of it (same checkpoint)
    in the same SparkSession, with leaseTtl 60 s, processes its new input well within
    leaseTtl (it used to wait ~61 s for the ended run's lease), and the table holds every
    row once."""
    src, dest, cp = tmp_path / "in", tmp_path / "table", tmp_path / "cp"

    def run_once() -> float:
        q = (
            spark.readStream.schema(SCHEMA)
            .option("maxFilesPerTrigger", "1")
            .json(str(src))
            .writeStream.format("amcommit")
            .option("partitionBy", "day")
            .option("leaseTtl", str(int(TTL)))
            .option("checkpointLocation", str(cp))
            .trigger(availableNow=True)
        )
        t0 = time.monotonic()
        query = q.start(str(dest))
        assert query.awaitTermination(240) is not False, "query did not end"
        assert query.exception() is None, query.exception()
        return time.monotonic() - t0

    ids = _drop(src, 0, 0)
    run_once()
    ids += _drop(src, 1, 100)
    second = run_once()
    assert second < TTL / 2, f"the restart took {second:.1f} s (leaseTtl {TTL:g} s)"
    got = sorted(r["id"] for r in spark.read.parquet(str(dest)).select("id").collect())
    assert got == sorted(ids)
