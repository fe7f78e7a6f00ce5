"""PySpark adapter: ``df.write.format("amcommit")`` (PySpark 4 Python Data Source API).

Writes Parquet with pyarrow into task attempt directories, commits each task by publishing
its manifest, and commits the job on the driver with amcommit's asynchronous engine::

    df.write.format("amcommit").mode("overwrite") \\
        .option("partitionBy", "day") \\
        .option("partitionOverwriteMode", "dynamic") \\
        .save("gs://bucket/warehouse/events")

The source is registered automatically (module ``pyspark_amcommit``); call
:func:`register` to also take ``spark.amcommit.*`` settings from the session conf. See
:mod:`amcommit.spark.source` for where each step runs and what is atomic.

Its names load lazily (PEP 562): Spark starts a Python process of its own to look the source
up, to plan each query's writer, to run each task and each streaming commit, and every one
of them imports ``amcommit.spark.<module>``; importing this package must not load all of
them (the engine, pyarrow.compute, the upsert planner) in each.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amcommit.spark.foreach import write_batch
    from amcommit.spark.mutate import delete, upsert
    from amcommit.spark.options import SOURCE_NAME, WritePlan, build_plan
    from amcommit.spark.source import AmcommitCommitMessage, AmcommitDataSource, AmcommitWriter, register

    DefaultSource = AmcommitDataSource

_WHERE = {
    "write_batch": "amcommit.spark.foreach",
    "delete": "amcommit.spark.mutate",
    "upsert": "amcommit.spark.mutate",
    "SOURCE_NAME": "amcommit.spark.options",
    "WritePlan": "amcommit.spark.options",
    "build_plan": "amcommit.spark.options",
    "AmcommitCommitMessage": "amcommit.spark.source",
    "AmcommitDataSource": "amcommit.spark.source",
    "AmcommitWriter": "amcommit.spark.source",
    "register": "amcommit.spark.source",
}

__all__ = [
    "SOURCE_NAME",
    "AmcommitCommitMessage",
    "AmcommitDataSource",
    "AmcommitWriter",
    "DefaultSource",
    "WritePlan",
    "build_plan",
    "delete",
    "register",
    "upsert",
    "write_batch",
]


def __getattr__(name: str) -> Any:
    """The public name ``name``, imported from its module on first use."""
    if name == "DefaultSource":
        name = "AmcommitDataSource"
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'amcommit.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
