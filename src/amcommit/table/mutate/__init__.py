"""Upsert and delete by record key (engine API, no Spark): :func:`upsert`, :func:`delete` and
their blocking forms. Planning, the bloom-index lookup, the merge of records and the
orchestrator live in the modules of this folder; the names below are loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amcommit.table.mutate.engine import (
        FileRewrite,
        IndexReader,
        MutateReport,
        MutationError,
        MutationPlan,
        Payload,
        PreparedMutation,
        assign_inserts,
        delete,
        delete_blocking,
        merge_file,
        partition_paths,
        plan_candidates,
        plan_mutation,
        prepare,
        record_key_strings,
        reduce_batch,
        rewrite_group,
        set_file_name,
        upsert,
        upsert_blocking,
    )

__all__ = [
    "FileRewrite",
    "IndexReader",
    "MutateReport",
    "MutationError",
    "MutationPlan",
    "Payload",
    "PreparedMutation",
    "assign_inserts",
    "delete",
    "delete_blocking",
    "merge_file",
    "partition_paths",
    "plan_candidates",
    "plan_mutation",
    "prepare",
    "record_key_strings",
    "reduce_batch",
    "rewrite_group",
    "set_file_name",
    "upsert",
    "upsert_blocking",
]


def __getattr__(name: str) -> Any:
    engine = importlib.import_module("amcommit.table.mutate.engine")
    if name in engine.__all__:
        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
