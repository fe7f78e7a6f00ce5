"""A stream as fast as it goes, into a table on a GCS double that enforces GCS's per-object
limit (about one write per second to one object name, issue 23 item 12).

Each micro-batch of the default trigger starts as soon as the one before ended (here about
every 2 s): its instant's heartbeat, owner file and journal, the query's lease and the
table's commit lock are written by the driver, by every task and by the commit. 12 batches
(about 25 s of streaming) are enough: a name rewritten faster than the limit allows is
refused within the first few batches (the double allows bursts of 4, then one change per
second), and the pace of the last batches is compared with the first ones. A 60 s run shows
the same, only longer.
"""

from __future__ import annotations

import json
import statistics
import uuid
from pathlib import Path
from typing import Any

import pytest

from amcommit.committer.lock import lock_path
from amcommit.table.format.naming import STAGING_DIR
from amcommit.testing.gcs_double import OBJECT_RATE, GcsDouble
from tests.spark.test_stream import drop

pytestmark = pytest.mark.spark

BATCHES = 12
FILES_PER_BATCH = 2  # two tasks per batch: the lease and the owner file are asked for by both


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stream_as_fast_as_it_goes_under_the_gcs_limit(spark: Any, tmp_path: Path) -> None:
    with GcsDouble(object_rate=OBJECT_RATE) as d:
        bucket = f"amc-rate-{uuid.uuid4().hex[:10]}"
        d.create_bucket(bucket)
        url = f"gs://{bucket}/warehouse/t"
        src = tmp_path / "in"
        ids = drop(src, 0, BATCHES * FILES_PER_BATCH)
        query = (
            spark.readStream.schema("id LONG, day STRING, v STRING")
            .option("maxFilesPerTrigger", str(FILES_PER_BATCH))
            .json(str(src))
            .writeStream.format("amcommit")
            .option("endpoint", d.url)
            .option("partitionBy", "day")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start(url)
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        assert len(batches) == BATCHES, [p["batchId"] for p in batches]
        got = spark.read.format("amcommit").option("endpoint", d.url).load(url).select("id").collect()
        assert sorted(r.id for r in got) == sorted(ids)
        objects = d.buckets[bucket].objects
        prefix = "warehouse/t/.hoodie/"
        labels = [
            json.loads(o.data)["extraMetadata"]["amcommit.label"]
            for name, o in sorted(objects.items())
            if name.startswith(prefix) and name.count("/") == 3 and name.endswith(".commit")
        ]
        app = labels[0].rsplit(":", 1)[0]
        assert labels == [f"{app}:{b}" for b in range(BATCHES)], labels
        left = [
            n for n in objects if n.startswith((prefix + ".temp/", prefix + ".aux/", prefix + ".heartbeat/"))
        ]
        assert not left, left
        # only the commit lock, created and deleted by every batch, may be refused: every
        # other name a batch writes is written once, or within its burst
        assert set(d.rate_limited) <= {f"{bucket}/{lock_path('warehouse/t', staging=STAGING_DIR)}"}, (
            d.rate_limited
        )
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in batches]
    first, last = statistics.median(seconds[1:5]), statistics.median(seconds[-4:])
    print(f"\n{BATCHES} micro-batches, seconds each: {seconds}")
    assert last <= 1.5 * first + 1.0, seconds  # no growing delay
