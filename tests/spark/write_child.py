"""A Spark driver run as a separate process by test_local and test_tables (its own JVM,
whose stderr is the driver's log the test reads): writes ``n`` rows (``id`` from ``start``)
into DEST with ``df.write.format("amcommit")`` and prints ``done``.

    python -m tests.spark.write_child DEST N [START [OPTIONS]]

``OPTIONS`` (JSON): the writer's options, plus ``"sleep_ms"``: an upstream stage sleeps
that long before any write task runs (the write is begun by then: adaptive execution is
off), so another writer can run meanwhile. With ``partitionBy``, the rows get a column
``cat`` (``id % 3``) to partition by.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from amcommit.spark.session import local_builder


def main(dest: str, n: int, start: int = 0, options: dict[str, Any] | None = None) -> None:
    opts = dict(options or {})
    sleep_ms = int(opts.pop("sleep_ms", 0))
    spark = (
        local_builder("local[2]", "amcommit-write-child")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(start, start + n, numPartitions=2)
    if "partitionBy" in opts:
        df = df.selectExpr("id", "cast(id % 3 as string) as cat")
    if sleep_ms:
        sleep = f"java_method('java.lang.Thread', 'sleep', bigint({sleep_ms}))"
        df = df.selectExpr("*", f"if(id = {start}, {sleep}, '') as z").repartition(2).drop("z")
    df.write.format("amcommit").mode("append").options(**opts).save(dest)
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        args[0],
        int(args[1]),
        int(args[2]) if len(args) > 2 else 0,
        json.loads(args[3]) if len(args) > 3 else None,
    )
