"""A zombie task attempt in a process of its own (no JVM), for
``test_zombie_attempts.py``: runs :func:`amcommit.spark.task.run_task` for the pickled
write plan ``PLAN`` (partition 0, attempt 0) on batches of ``id`` / ``cat``: first 50 rows
of ``cat=b``, then it creates the file ``WROTE`` and waits (at most 60 s) for the file
``ABORTED`` (the test aborts the job meanwhile), then 50 rows of ``cat=d`` (a new file
after the abort), then creates the file ``REACHED`` and sleeps: the test kills it with
SIGKILL there, as Spark kills a task of a failed stage. An attempt that finds out its job is
over raises before ``REACHED`` (exit status 1, its error on stderr).

    python -m tests.spark.zombie_child PLAN WROTE ABORTED REACHED
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Iterator

import pyarrow as pa

from amcommit.spark.task import run_task


def batch(start: int, cat: str) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(range(start, start + 50), pa.int64()), "cat": pa.array([cat] * 50)}
    )


def main(plan_path: str, wrote: str, aborted: str, reached: str) -> None:
    with open(plan_path, "rb") as f:
        plan = pickle.load(f)

    def batches() -> Iterator[pa.RecordBatch]:
        yield batch(0, "b")
        yield batch(50, "b")  # the first file is written (row groups of 10 rows)
        with open(wrote, "w"):
            pass
        deadline = time.monotonic() + 60
        while not os.path.exists(aborted):
            if time.monotonic() > deadline:
                raise SystemExit("the test never aborted the job")
            time.sleep(0.02)
        yield batch(100, "d")  # a new file, after the abort
        yield batch(150, "d")
        with open(reached, "w"):
            pass
        time.sleep(60)  # killed here

    run_task(plan, batches(), partition=0, attempt=0)


if __name__ == "__main__":
    main(*sys.argv[1:5])
