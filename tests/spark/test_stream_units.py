"""Units of the streaming sink without Spark: owner files, dead-run instants, the per-query
lease (two runs of one query at once: the second fails with one line; a dead run's lease
is taken over), option splitting and the kill-point parser."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from amcommit.errors import ConfigError, ConflictError
from amcommit.spark.stream import _stream_options
from amcommit.spark.stream_hooks import ENV, fault_at
from amcommit.spark.stream_state import (
    Lease,
    Owner,
    acquire_lease,
    checkpoint_app,
    dead_instants,
    judge_lease,
    read_owners,
    write_owner,
)
from amcommit.store.local import LocalStore


def test_dead_instants_same_query_earlier_only() -> None:
    owners = {
        "20261101000000000": Owner("q1", "r1"),
        "20261101000001000": Owner("q2", "r9"),  # another query: never touched
        "20261101000002000": Owner(None, None, "ck1"),  # killed before any task: checkpoint key
        "20261101000004000": Owner("q1", "r2"),  # later than mine
    }
    mine = "20261101000003000"
    assert dead_instants(mine, owners, "q1", "ck1") == ["20261101000000000", "20261101000002000"]
    assert dead_instants(mine, owners, "q1", None) == ["20261101000000000"]
    assert dead_instants(mine, owners, "q3", None) == []
    assert checkpoint_app("/cp/x/") == checkpoint_app("/cp/x") != checkpoint_app("/cp/y")


def test_judge_lease() -> None:
    assert judge_lease(None, "r", 100.0, 10.0) == "take"
    assert judge_lease(Lease("q", "r", 99.0), "r", 100.0, 10.0) == "take"
    assert judge_lease(Lease("q", "other", 95.0), "r", 100.0, 10.0) == "wait"
    assert judge_lease(Lease("q", "other", 80.0), "r", 100.0, 10.0) == "take"


def test_owner_files_round_trip(tmp_path: Path) -> None:
    async def main() -> dict[str, Owner]:
        store = LocalStore(str(tmp_path))
        async with store:
            await write_owner(store, "t", "20261101000000000", Owner("q", "r", None))
            await store.put("t/.hoodie/.temp/notaninstant/_stream.json", b"{}")
            return await read_owners(store, "t")

    assert anyio.run(main) == {"20261101000000000": Owner("q", "r", None)}


def test_second_run_of_a_query_fails_while_the_first_renews(tmp_path: Path) -> None:
    ttl = 1.0

    async def main() -> str:
        store = LocalStore(str(tmp_path))
        async with store:
            assert await acquire_lease(store, "t", "q", "run-a", ttl) is False

            async def renew() -> None:
                for _ in range(12):
                    await anyio.sleep(ttl / 4)
                    await acquire_lease(store, "t", "q", "run-a", ttl)

            async with anyio.create_task_group() as tg:
                tg.start_soon(renew)
                try:
                    await acquire_lease(store, "t", "q", "run-b", ttl)
                except ConflictError as e:
                    tg.cancel_scope.cancel()
                    return str(e)
            return "not refused"

    msg = anyio.run(main)
    assert "already running in another run (run-a" in msg and "\n" not in msg


def test_dead_run_lease_taken_over_after_ttl(tmp_path: Path) -> None:
    ttl = 0.6

    async def main() -> tuple[bool, float]:
        store = LocalStore(str(tmp_path))
        async with store:
            await acquire_lease(store, "t", "q", "dead-run", ttl)
            t0 = time.monotonic()
            took = await acquire_lease(store, "t", "q", "restart", ttl)
            return took, time.monotonic() - t0

    took, waited = anyio.run(main)
    assert took and waited < 3 * 0.6 + 1.5


def test_stream_options_split() -> None:
    rest, ck, ttl = _stream_options({"checkpointLocation": "/cp", "leaseTtl": "4", "partitionBy": "day"})
    assert (ck, ttl) == ("/cp", 4.0) and rest == {"partitionBy": "day", "tableFormat": "hudi"}
    with pytest.raises(ConfigError, match="leaseTtl"):
        _stream_options({"leaseTtl": "soon"})


def test_fault_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "slow_task@2=1.5")
    assert fault_at("slow_task", 2) == 1.5
    assert fault_at("slow_task", 1) is None and fault_at("task_write", 2) is None
    monkeypatch.delenv(ENV)
    assert fault_at("slow_task", 2) is None
