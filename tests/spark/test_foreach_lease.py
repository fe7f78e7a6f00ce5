"""``write_batch(..., operation="upsert")`` keeps the streaming query's lease while the
batch's Spark jobs run (issue 32 item 9).

The batch's rows pass a Python UDF that holds every task once a gate file exists (test code
in the DataFrame, as a slow upstream computation would be), until a release file exists. The
test opens the gate once the batch has claimed the lease, and releases the tasks after it has
seen the lease renewed twice (or after 5 lease ttls without renewal: the test then fails).
The ttl is short (2 s, renewals every 0.5 s), the wait bounded; no clock is faked."""

from __future__ import annotations

import json
import os
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import amcommit.spark as amspark
from amcommit.spark.stream import QUERY_ID_KEY, RUN_ID_KEY
from amcommit.spark.stream_state import lease_path
from tests.spark.test_mutate import _df
from tests.table.test_mutate import hudi_snapshot

TTL = 2.0
ROWS = [{"id": i, "p": "ab"[i % 2], "v": f"v{i}", "ts": 1} for i in range(8)]


def _beat(path: Path) -> float | None:
    try:
        return float(json.loads(path.read_bytes())["beat"])
    except (OSError, ValueError, KeyError):
        return None  # absent, or caught mid-write


def test_write_batch_upsert_renews_the_lease_while_its_tasks_run(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    dest = tmp_path / "t"
    gate, release = str(tmp_path / "gate"), str(tmp_path / "release")

    def hold(v: str) -> str:  # runs in Spark's Python workers
        if os.path.exists(gate):
            end = time.monotonic() + 60
            while not os.path.exists(release) and time.monotonic() < end:
                time.sleep(0.02)
        return v

    df = _df(spark, ROWS).withColumn("v", F.udf(hold, "string")("v"))
    lease = dest / lease_path("", "q-lease").lstrip("/")
    t0 = time.time()
    seen: list[float] = []  # the lease's beats seen while the tasks were held (claim first)

    def watch() -> None:
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # the batch claims the lease (after its checks)
                b = _beat(lease)
                if b is not None and b >= t0:
                    seen.append(b)
                    break
                time.sleep(0.01)
            else:
                return
            Path(gate).touch()  # from now on the batch's tasks are held
            deadline = time.monotonic() + 5 * TTL
            while time.monotonic() < deadline and len(seen) < 3:
                b = _beat(lease)
                if b is not None and b != seen[-1]:
                    seen.append(b)
                time.sleep(0.01)
        finally:
            Path(release).touch()

    sc = spark.sparkContext
    sc.setLocalProperty(QUERY_ID_KEY, "q-lease")
    sc.setLocalProperty(RUN_ID_KEY, "run-1")
    watcher = threading.Thread(target=watch, name="lease-watch", daemon=True)
    watcher.start()
    try:
        # in Spark tasks (a batch this small otherwise runs on the driver, no task to hold)
        opts = {
            "recordKey": "id",
            "partitionBy": "p",
            "precombineField": "ts",
            "leaseTtl": str(TTL),
            "driverBatchRows": "0",
        }
        rep = amspark.write_batch(df, 0, str(dest), operation="upsert", **opts)
    finally:
        sc.setLocalProperty(QUERY_ID_KEY, None)
        sc.setLocalProperty(RUN_ID_KEY, None)
        Path(release).touch()
        watcher.join(30)
    assert rep.success and not getattr(rep, "skipped_label", None)
    assert os.path.exists(gate), "the batch never claimed the lease"
    # claimed, then renewed at least twice while the tasks were held
    assert len(seen) >= 3, f"lease not renewed while the upsert's tasks ran: beats {seen}"
    assert all(b - a >= TTL / 8 for a, b in pairwise(seen)), seen
    assert hudi_snapshot(str(dest)) == sorted((r["id"], r["p"], r["v"], r["ts"]) for r in ROWS)
