"""A streaming driver run as a separate process by the streaming tests (and the benchmark).

    python -m tests.spark.stream_child SPEC_JSON

SPEC: ``src`` (folder of JSON files), ``dest`` (URL), ``checkpoint``, ``options`` (sink
options), ``sink`` (``amcommit`` | ``foreach`` | ``parquet``), ``max_files`` (files per
micro-batch), ``stop_mid_batch`` (a graceful ``query.stop()`` once a slowed task signals
it is mid batch, see :mod:`amcommit.testing.spark`), ``output_mode``. The kill points are armed through the environment,
read once at the start of this process and of Spark's Python processes (:mod:`amcommit.testing.spark`). Prints ``done`` when the query processed all input.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from amcommit.spark.session import local_builder
from amcommit.testing.spark import configure

SCHEMA = "id LONG, day STRING, v STRING"


def main(spec: dict[str, Any]) -> None:
    os.environ["AMCOMMIT_TESTING_STREAM_PGID"] = str(os.getpgrp())  # the kill hooks' target
    spark = (
        configure(local_builder("local[2]", "amcommit-stream-child"))
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    src = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", str(spec.get("max_files", 1)))
        .json(spec["src"])
    )
    sink = spec.get("sink", "amcommit")
    options: dict[str, str] = spec.get("options", {})
    if sink == "foreach":
        from amcommit.spark import write_batch

        def each(df: Any, batch_id: int) -> None:
            write_batch(df, batch_id, spec["dest"], **options)

        w = src.writeStream.foreachBatch(each)
    else:
        w = src.writeStream.format(sink)
        for k, v in options.items():
            w = w.option(k, v)
        if sink == "parquet":
            w = w.option("path", spec["dest"])
    w = w.option("checkpointLocation", spec["checkpoint"]).outputMode(spec.get("output_mode", "append"))
    w = w.trigger(availableNow=True)
    query = w.start() if sink in ("foreach", "parquet") else w.start(spec["dest"])
    flag = os.environ.get("AMCOMMIT_TESTING_STREAM_SIGNAL")
    if spec.get("stop_mid_batch") and flag:

        def stop_when_signalled() -> None:
            while not os.path.exists(flag):
                time.sleep(0.1)
            query.stop()

        threading.Thread(target=stop_when_signalled, daemon=True).start()
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
