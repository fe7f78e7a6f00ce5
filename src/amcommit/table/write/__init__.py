"""Writing into a table: :func:`begin_write` (the requested instant), staging, the task writer
(:class:`TableTask`) with its placement of files (staged or direct), and markers.

``amcommit.table.write`` was one module before issue 33; the names it exported are still
importable from here (loaded on first use).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amcommit.table.write.task import (
        MutationFields,
        TableSpec,
        TableTask,
        TableWrite,
        WriteMarker,
        begin_write,
        committed_schema,
        inflight_instant,
        is_table,
        latest_write,
        read_marker,
        read_properties,
        setup_table_task,
    )

__all__ = [
    "MutationFields",
    "TableSpec",
    "TableTask",
    "TableWrite",
    "WriteMarker",
    "begin_write",
    "committed_schema",
    "inflight_instant",
    "is_table",
    "latest_write",
    "read_marker",
    "read_properties",
    "setup_table_task",
]


def __getattr__(name: str) -> Any:
    task = importlib.import_module("amcommit.table.write.task")
    if name in task.__all__:
        return getattr(task, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
