"""Apache Hudi Copy-on-Write tables (table version 6, timeline layout 1) written by amcommit.

A *table* destination keeps a timeline in ``$dest/.hoodie/``: every job commit into it is an
instant (``<time>.commit.requested`` -> ``.inflight`` -> completed ``.commit`` or
``.replacecommit``), published last and only after every file is in place, so Hudi's readers
(hudi-rs, Spark with the Hudi bundle, Trino) see a write whole or not at all.

The face: the names below are the public import path (``from amcommit.table import upsert,
Timeline``); each is loaded from its module on first use, so importing this package loads
none of them. Where a module lives inside ``table/`` may change (issue 33); these names stay.
What each call makes atomic is stated in its own module's docstring.

Modules:

- :mod:`amcommit.table.naming` -- instant times, base file names, meta column names, paths
  inside ``.hoodie`` (pure, no I/O).
- :mod:`amcommit.table.model` -- msgspec models of instants and commit metadata (pure).
- :mod:`amcommit.table.timeline` -- snapshot / time travel / incremental planning over loaded
  instants (pure), and loading a timeline from a store.
- :mod:`amcommit.table.mutate` -- upsert and delete by record key (engine API, no Spark).
- :mod:`amcommit.table.bloom` -- Hudi's footer index: key range and bloom filter (pure).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amcommit.table import mutate as mutate
    from amcommit.table.bloom import BloomSettings as BloomSettings
    from amcommit.table.clean import CleanReport as CleanReport
    from amcommit.table.errors import CleanedPast as CleanedPast
    from amcommit.table.errors import NotATable as NotATable
    from amcommit.table.errors import SchemaMismatch as SchemaMismatch
    from amcommit.table.errors import WriteConflict as WriteConflict
    from amcommit.table.labelmeta import Label as Label
    from amcommit.table.labelmeta import last_committed as last_committed
    from amcommit.table.labels import recover as recover
    from amcommit.table.model import Operation as Operation
    from amcommit.table.mutate import MutateReport as MutateReport
    from amcommit.table.mutate import Payload as Payload
    from amcommit.table.mutate import delete as delete
    from amcommit.table.mutate import delete_blocking as delete_blocking
    from amcommit.table.mutate import upsert as upsert
    from amcommit.table.mutate import upsert_blocking as upsert_blocking
    from amcommit.table.reader import Timeline as Timeline
    from amcommit.table.reader import open_timeline as open_timeline
    from amcommit.table.report import TableReport as TableReport
    from amcommit.table.report import table_report as table_report
    from amcommit.table.schema import avro_schema as avro_schema
    from amcommit.table.settings import TableConfig as TableConfig
    from amcommit.table.write import TableSpec as TableSpec
    from amcommit.table.write import TableTask as TableTask
    from amcommit.table.write import TableWrite as TableWrite
    from amcommit.table.write import begin_write as begin_write
    from amcommit.table.write import setup_table_task as setup_table_task

_FACE: dict[str, str] = {
    "BloomSettings": "amcommit.table.bloom",
    "CleanReport": "amcommit.table.clean",
    "CleanedPast": "amcommit.table.errors",
    "NotATable": "amcommit.table.errors",
    "SchemaMismatch": "amcommit.table.errors",
    "WriteConflict": "amcommit.table.errors",
    "Label": "amcommit.table.labelmeta",
    "last_committed": "amcommit.table.labelmeta",
    "recover": "amcommit.table.labels",
    "Operation": "amcommit.table.model",
    "MutateReport": "amcommit.table.mutate",
    "Payload": "amcommit.table.mutate",
    "delete": "amcommit.table.mutate",
    "delete_blocking": "amcommit.table.mutate",
    "upsert": "amcommit.table.mutate",
    "upsert_blocking": "amcommit.table.mutate",
    "Timeline": "amcommit.table.reader",
    "open_timeline": "amcommit.table.reader",
    "TableReport": "amcommit.table.report",
    "table_report": "amcommit.table.report",
    "avro_schema": "amcommit.table.schema",
    "TableConfig": "amcommit.table.settings",
    "TableSpec": "amcommit.table.write",
    "TableTask": "amcommit.table.write",
    "TableWrite": "amcommit.table.write",
    "begin_write": "amcommit.table.write",
    "setup_table_task": "amcommit.table.write",
}
"""Each public name and the module that defines it today (loaded on first use). ``clean``
is not here: it is also a submodule's name (``amcommit.table.clean.clean``; ``amcommit clean``)."""

__all__ = sorted([*_FACE, "mutate"])


def __getattr__(name: str) -> object:
    """The face's names, imported from their modules on first use (see ``_FACE``)."""
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
