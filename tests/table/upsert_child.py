"""Child process of test_mutate_concurrent: a writer that upserts ``rounds`` batches into a
table, each a random subset of the table's keys with the value ``"<writer>:<round>"``, and
retries a batch that fails with :class:`~amcommit.table.errors.WriteConflict` (what a user
does). Each batch is prepared (files written, instant known) and then committed, so every
attempt's instant is known. Prints one JSON line per attempt:
``{"round", "attempt", "instant", "outcome": "committed" | "conflict", "keys"}``.

    python -m tests.table.upsert_child '{"backend": INFO, "dest": D, "writer": "A", "rounds": 20,
                                         "keys": 24, "per_round": 8, "seed": 1}'
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa

from amcommit.table.errors import WriteConflict
from amcommit.table.mutate import engine as mutate
from amcommit.table.settings import TableConfig

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string()), ("ts", pa.int64())])
KW: dict[str, Any] = {"record_key": "id", "partition_by": "p", "precombine_field": "ts"}
CFG = TableConfig(io_threads=4, retry_base_delay=0.005, retry_max_delay=0.1)


def batch(writer: str, rnd: int, keys: list[int]) -> list[dict[str, Any]]:
    return [{"id": k, "p": "ab"[k % 2], "v": f"{writer}:{rnd}", "ts": rnd} for k in keys]


def _meet(folder: Path, me: str) -> None:
    """Wait (at most 60 s) until every writer of the test prepared its first batch: both
    then commit batches prepared from the same table version, so the writers overlap
    however busy the machine is (the second commit to a shared file group conflicts).
    Run in a worker thread: the writer's event loop keeps its heartbeat going."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"ready-{me}").touch()
    deadline = time.monotonic() + 60
    while len(list(folder.glob("ready-*"))) < 2:
        if time.monotonic() > deadline:
            raise SystemExit("the other writer never prepared its first batch")
        time.sleep(0.02)


def main() -> None:
    from tests.matrix.stores import open_store

    spec = json.loads(sys.argv[1])
    rng = random.Random(spec["seed"])

    async def run() -> None:
        store = open_store(spec["backend"])
        async with store:
            for rnd in range(spec["rounds"]):
                keys = sorted(rng.sample(range(spec["keys"]), spec["per_round"]))
                rows = pa.Table.from_pylist(batch(spec["writer"], rnd, keys), schema=SCHEMA)
                for attempt in range(200):
                    prepared = await mutate.prepare(
                        store, spec["dest"], rows, operation="UPSERT", config=CFG, **KW
                    )
                    out = {"round": rnd, "attempt": attempt, "instant": prepared.report.instant, "keys": keys}
                    if rnd == 0 and attempt == 0 and spec.get("barrier"):
                        await anyio.to_thread.run_sync(_meet, Path(spec["barrier"]), spec["writer"])
                    try:
                        await prepared.commit()
                    except WriteConflict:
                        print(json.dumps(out | {"outcome": "conflict"}), flush=True)
                        continue
                    print(json.dumps(out | {"outcome": "committed"}), flush=True)
                    break
                else:
                    raise SystemExit(f"round {rnd}: no commit in 200 attempts")

    anyio.run(run)


if __name__ == "__main__":
    main()
