"""Auto-registration of ``format("amcommit")``: PySpark imports every top-level module named
``pyspark_*`` and registers its ``DefaultSource`` (see :mod:`amcommit.spark`)."""

from amcommit.spark.source import AmcommitDataSource as DefaultSource

__all__ = ["DefaultSource"]
