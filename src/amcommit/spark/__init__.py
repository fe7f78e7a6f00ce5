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
"""

from amcommit.spark.foreach import write_batch
from amcommit.spark.mutate import delete, upsert
from amcommit.spark.options import SOURCE_NAME, WritePlan, build_plan
from amcommit.spark.source import AmcommitCommitMessage, AmcommitDataSource, AmcommitWriter, register

DefaultSource = AmcommitDataSource

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
