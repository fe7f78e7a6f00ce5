"""A Spark driver run as a separate process by test_local (its own JVM, whose stderr is the
driver's log the test reads): writes ``n`` rows (``id``) into DEST with
``df.write.format("amcommit")`` and prints ``done``.

    python -m tests.spark.write_child DEST N
"""

from __future__ import annotations

import sys

from amcommit.spark.session import local_builder


def main(dest: str, n: int) -> None:
    spark = (
        local_builder("local[2]", "amcommit-write-child")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(0, n, numPartitions=2).write.format("amcommit").mode("append").save(dest)
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
