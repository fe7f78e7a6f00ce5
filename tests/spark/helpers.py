"""Helpers of the Spark tests: a DataFrame with many column types, writing through amcommit
and reading the destination back."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from amcommit.testing.spark import armed


def make_df(spark: Any, n: int = 20_000, start: int = 0, cats: str = "abc", parts: int = 4) -> Any:
    from pyspark.sql import functions as F

    k = len(cats)
    return (
        spark.range(start, start + n, numPartitions=parts)
        .withColumn("cat", F.substring(F.lit(cats), (F.col("id") % k + 1).cast("int"), 1))
        .withColumn("day", F.date_add(F.lit("2026-11-01").cast("date"), (F.col("id") % 2).cast("int")))
        .withColumn("amount", (F.col("id") * 1.5).cast("double"))
        .withColumn("price", (F.col("id") / 100).cast("decimal(12,2)"))
        .withColumn("flag", F.col("id") % 7 == 0)
        .withColumn("ts", F.timestamp_seconds(F.col("id") + 1_790_000_000))
        .withColumn("name", F.when(F.col("id") % 11 == 0, None).otherwise(F.concat(F.lit("n"), F.col("id"))))
        .withColumn("tags", F.array(F.col("cat"), F.lit("t")))
    )


def read(spark: Any, dest: Path, schema: Any) -> Any:
    """The destination read back with the written schema, columns in the written order
    (Spark puts partition columns last)."""
    return spark.read.schema(schema).parquet(str(dest)).select(*schema.fieldNames())


def success(dest: Path) -> dict[str, Any]:
    return dict(json.loads((dest / "_SUCCESS").read_text()))


def no_temporary(dest: Path) -> bool:
    return not (dest / "_temporary").exists()


class ArmedWriter:
    """A ``DataFrameWriter`` whose ``save()`` runs with test faults armed
    (:func:`amcommit.testing.spark.armed`): set up from test code, never by a job option."""

    def __init__(self, inner: Any, fail_task: Any, driver_faults: Any) -> None:
        self._inner, self._fail_task, self._driver_faults = inner, fail_task, driver_faults

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def save(self, *args: Any, **kw: Any) -> Any:
        with armed(fail_task=self._fail_task, driver_faults=self._driver_faults):
            return self._inner.save(*args, **kw)


def writer(
    df: Any, mode: str = "append", *, fail_task: Any = None, driver_faults: Any = None, **options: Any
) -> Any:
    """``df.write.format("amcommit")`` with ``options``; ``fail_task`` / ``driver_faults``
    arm test faults for its ``save()`` (see :mod:`amcommit.testing.spark`)."""
    w = df.write.format("amcommit").mode(mode)
    for k, v in options.items():
        w = w.option(k, v if isinstance(v, str) else json.dumps(v))
    if fail_task is None and driver_faults is None:
        return w
    return ArmedWriter(w, fail_task, driver_faults)


def data_files(dest: Path) -> dict[str, int]:
    """Visible files below ``dest`` (relative path -> size), ``_temporary`` included."""
    out = {}
    for root, _dirs, files in os.walk(dest):
        for f in files:
            full = os.path.join(root, f)
            out[os.path.relpath(full, dest)] = os.path.getsize(full)
    return out


def rows(df: Any, *cols: str) -> list[tuple[Any, ...]]:
    """Sorted rows of ``df`` (selected ``cols``) as tuples."""
    sel = df.select(*cols) if cols else df
    return sorted(tuple(r) for r in sel.collect())


def unfinished(files: Path) -> list[str]:
    """What unfinished writes left in a table folder: instant files of instants that never
    completed, staged instants (``.aux/amcommit/<instant>``) and heartbeats."""
    hoodie = files / ".hoodie"
    names = os.listdir(hoodie)
    done = {n.split(".")[0] for n in names if n.endswith((".commit", ".replacecommit"))}
    out = [n for n in names if n[0].isdigit() and n.split(".")[0] not in done]
    for sub in (".aux/amcommit", ".heartbeat"):
        d = hoodie / sub
        out += [f"{sub}/{n}" for n in (os.listdir(d) if d.exists() else []) if n[0].isdigit()]
    return sorted(out)


def stray_files(files: Path) -> list[str]:
    """Data files in a table folder that no completed instant's commit metadata names (a
    file of an aborted, skipped or rolled-back write left behind; with direct writes such a
    file sits in its partition, where plain Parquet readers and Hudi snapshot reads of a
    completed instant's stamp would see it)."""
    hoodie = files / ".hoodie"
    named: set[str] = set()
    for n in os.listdir(hoodie):
        if n.endswith((".commit", ".replacecommit")) and n.split(".")[0].isdigit():
            meta = json.loads((hoodie / n).read_text())
            for stats in meta["partitionToWriteStats"].values():
                named.update(s["path"] for s in stats)
    found = []
    for d, dirs, names in os.walk(files):
        dirs[:] = [x for x in dirs if x != ".hoodie"]
        found += [os.path.relpath(os.path.join(d, n), files) for n in names if n.endswith(".parquet")]
    return sorted(set(found) - named)
