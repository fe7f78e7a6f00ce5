"""Apache Hudi tables (table version 6, timeline layout 1) written by amcommit.

A *table* destination keeps a timeline in ``$dest/.hoodie/``: every job commit into it is an
instant (``<time>.commit.requested`` -> ``.inflight`` -> completed ``.commit`` or
``.replacecommit``), published last and only after every file is in place, so Hudi's readers
(hudi-rs, Spark with the Hudi bundle, Trino) see a write whole or not at all.

This module is the table's face: the names below are what users import; they are loaded on
first use (importing :mod:`amcommit.table` costs nothing). The layout underneath, lowest first
(a folder imports only from folders before it; ``tests/unit/test_layering.py`` checks it):

- :mod:`amcommit.table.format` -- Hudi v6 bytes and names, pure (no store);
- :mod:`amcommit.table.file_group` -- file groups and file slices, the footer index, the
  merge of records;
- :mod:`amcommit.table.timeline` -- the timeline: listing, loading, the reader handle, views;
- :mod:`amcommit.table.query` -- reading rows: snapshot (base files merged with their log
  blocks), read-optimized, time travel, incremental (:func:`read`, :func:`read_async`);
- :mod:`amcommit.table.write` -- begin a write, staging, the task writer, markers;
- :mod:`amcommit.table.commit` -- the table kind's job commit, rollback, clean, labels,
  compaction of Merge-on-Read tables (:func:`compact`, :func:`compact_async`);
- :mod:`amcommit.table.mutate` -- upsert and delete by record key.

Beside them: :mod:`.errors`, :mod:`.settings` (``TableConfig``) and :mod:`.report`.

Module paths that existed before this layout (``amcommit.table.labels``, ``.reader``,
``.model`` and the other flat modules) still import, with a :class:`DeprecationWarning`, for
one release.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amcommit.table.commit.clean import CleanReport
    from amcommit.table.commit.compaction import CompactionReport, compact, compact_async
    from amcommit.table.commit.labels import Label, last_committed, recover
    from amcommit.table.errors import (
        CleanedPast,
        MutationError,
        NotATable,
        RangeReversed,
        SchemaMismatch,
        UnknownInstant,
        WriteConflict,
    )
    from amcommit.table.file_group.merge import Payload
    from amcommit.table.format.bloom import BloomSettings
    from amcommit.table.format.model import Operation
    from amcommit.table.format.schema import avro_schema
    from amcommit.table.mutate.engine import (
        MutateReport,
        delete,
        delete_blocking,
        upsert,
        upsert_blocking,
    )
    from amcommit.table.query.read import UnknownQueryType, read, read_async
    from amcommit.table.report import TableReport, table_report
    from amcommit.table.settings import TableConfig
    from amcommit.table.timeline.reader import BlockingTimeline, Timeline, open_timeline
    from amcommit.table.write.task import TableSpec, TableTask, TableWrite, begin_write, setup_table_task

_FACE: dict[str, str] = {
    "BloomSettings": "amcommit.table.format.bloom",
    "CleanReport": "amcommit.table.commit.clean",
    "CompactionReport": "amcommit.table.commit.compaction",
    "compact": "amcommit.table.commit.compaction",
    "compact_async": "amcommit.table.commit.compaction",
    "Payload": "amcommit.table.file_group.merge",
    "TableWrite": "amcommit.table.write.task",
    "Label": "amcommit.table.commit.labels",
    "last_committed": "amcommit.table.commit.labels",
    "recover": "amcommit.table.commit.labels",
    "CleanedPast": "amcommit.table.errors",
    "NotATable": "amcommit.table.errors",
    "RangeReversed": "amcommit.table.errors",
    "SchemaMismatch": "amcommit.table.errors",
    "UnknownInstant": "amcommit.table.errors",
    "WriteConflict": "amcommit.table.errors",
    "Operation": "amcommit.table.format.model",
    "avro_schema": "amcommit.table.format.schema",
    "MutateReport": "amcommit.table.mutate.engine",
    "MutationError": "amcommit.table.errors",
    "delete": "amcommit.table.mutate.engine",
    "delete_blocking": "amcommit.table.mutate.engine",
    "upsert": "amcommit.table.mutate.engine",
    "upsert_blocking": "amcommit.table.mutate.engine",
    "UnknownQueryType": "amcommit.table.query.read",
    "read": "amcommit.table.query.read",
    "read_async": "amcommit.table.query.read",
    "TableReport": "amcommit.table.report",
    "table_report": "amcommit.table.report",
    "TableConfig": "amcommit.table.settings",
    "BlockingTimeline": "amcommit.table.timeline.reader",
    "Timeline": "amcommit.table.timeline.reader",
    "open_timeline": "amcommit.table.timeline.reader",
    "TableSpec": "amcommit.table.write.task",
    "TableTask": "amcommit.table.write.task",
    "begin_write": "amcommit.table.write.task",
    "setup_table_task": "amcommit.table.write.task",
}

__all__ = [
    "BlockingTimeline",
    "BloomSettings",
    "CleanReport",
    "CleanedPast",
    "CompactionReport",
    "Label",
    "MutateReport",
    "MutationError",
    "NotATable",
    "Operation",
    "Payload",
    "RangeReversed",
    "SchemaMismatch",
    "TableConfig",
    "TableReport",
    "TableSpec",
    "TableTask",
    "TableWrite",
    "Timeline",
    "UnknownInstant",
    "UnknownQueryType",
    "WriteConflict",
    "avro_schema",
    "begin_write",
    "compact",
    "compact_async",
    "delete",
    "delete_blocking",
    "last_committed",
    "open_timeline",
    "read",
    "read_async",
    "recover",
    "setup_table_task",
    "table_report",
    "upsert",
    "upsert_blocking",
]

MOVED: dict[str, str] = {
    "avro_meta": "amcommit.table.format.avro_meta",
    "beater": "amcommit.table.timeline.beater",
    "bloom": "amcommit.table.format.bloom",
    "clean": "amcommit.table.commit.clean",
    "direct": "amcommit.table.write.direct",
    "heartbeat": "amcommit.table.timeline.heartbeat",
    "hudi_names": "amcommit.table.format.hudi_names",
    "jobs": "amcommit.table.commit.jobs",
    "keys": "amcommit.table.format.keys",
    "kind": "amcommit.table.commit.kind",
    "labelmeta": "amcommit.table.timeline.labelmeta",
    "labels": "amcommit.table.commit.labels",
    "model": "amcommit.table.format.model",
    "naming": "amcommit.table.format.naming",
    "orphans": "amcommit.table.commit.orphans",
    "properties": "amcommit.table.format.properties",
    "reader": "amcommit.table.timeline.reader",
    "rollback": "amcommit.table.commit.rollback",
    "schema": "amcommit.table.format.schema",
    "staging": "amcommit.table.write.staging",
    "tasknames": "amcommit.table.format.tasknames",
    "undo": "amcommit.table.commit.undo",
    "writestats": "amcommit.table.format.writestats",
}
"""Flat module names of the layout before issue 33 -> where they live now."""


def __getattr__(name: str) -> Any:
    target = _FACE.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(target), name)


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``amcommit.table.<old>`` as the module it became (a DeprecationWarning)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, leaf = fullname.rpartition(".")
        if prefix != __name__ or leaf not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        new = MOVED[module.__name__.rpartition(".")[2]]
        warnings.warn(
            f"{module.__name__} moved to {new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        real = importlib.import_module(new)
        module.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})
        # The import statement returns what sys.modules holds: the module itself, so old and
        # new paths share one module object (monkeypatching either patches both).
        sys.modules[module.__name__] = real


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
