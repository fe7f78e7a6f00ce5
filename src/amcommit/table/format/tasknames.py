"""Task commit of a table write: the name each written file is published under (pure).

Rules (the contract of issue 13):

- a file keeps its folder (the partition path, relative to the task attempt directory);
- a file already named ``<fileId>_<token>_<instant>.parquet`` with this write's instant keeps
  its name (the Spark writer names files so, to put the name in ``_hoodie_file_name``);
- any other ``*.parquet`` name gets a base file name: a new file id, the task attempt's
  write token (its id, with characters other than letters, digits, ``.`` and ``-`` as ``-``)
  and the instant;
- anything else (other extensions, a base file stamped with another instant, hidden or
  ``_``-prefixed names or folders) is refused with one line naming it.

Row counts: ``extra_data["hudi.rows"]`` (a JSON object: path relative to the attempt directory
-> rows) is re-keyed by the published path relative to the table; a file without a count is
reported in ``missing`` (the task commit then reads its Parquet footer).
"""

from __future__ import annotations

import json
import re
import zlib

from amcommit.errors import CommitError
from amcommit.table.format.naming import (
    BASE_FILE_EXTENSION,
    base_file_name,
    new_file_id,
    parse_base_file_name,
)

__all__ = ["ROWS_KEY", "plan_names", "task_write_token"]

ROWS_KEY = "hudi.rows"


def task_write_token(task_attempt_id: str) -> str:
    """A write token for files a task attempt did not name itself (no ``_``; <= 64 chars)."""
    t = re.sub(r"[^A-Za-z0-9.\-]", "-", task_attempt_id).strip("-.") or "task"
    if len(t) > 55:
        t = f"{t[:46].rstrip('-.')}-{zlib.crc32(task_attempt_id.encode()):08x}"
    return t


def _rows_of(extra_data: dict[str, str] | None) -> dict[str, int]:
    raw = (extra_data or {}).get(ROWS_KEY)
    if raw is None:
        return {}
    try:
        rows = json.loads(raw)
    except ValueError:
        raise CommitError(f"extra_data[{ROWS_KEY!r}] is not JSON", stage="commit_task") from None
    if not isinstance(rows, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in rows.items()
    ):
        raise CommitError(
            f"extra_data[{ROWS_KEY!r}] must be a JSON object of relative path -> row count (>= 0)",
            stage="commit_task",
        )
    return rows


def plan_names(
    rel_paths: list[str], instant: str, task_attempt_id: str, extra_data: dict[str, str] | None
) -> tuple[dict[str, str], dict[str, int], list[str]]:
    """``(published relative path by attempt-relative path, rows by published path, attempt-
    relative paths without a row count)``. CommitError naming a refused file."""
    rows_in = _rows_of(extra_data)
    token = task_write_token(task_attempt_id)
    names: dict[str, str] = {}
    rows: dict[str, int] = {}
    missing: list[str] = []
    for rel in rel_paths:
        folder, _, name = rel.rpartition("/")
        for seg in [*(folder.split("/") if folder else []), name]:
            if seg.startswith((".", "_")):
                raise CommitError(
                    f"{rel!r} in the task attempt directory: hidden or '_' names cannot be "
                    "published into a Hudi table",
                    stage="commit_task",
                )
        if not name.endswith(BASE_FILE_EXTENSION):
            raise CommitError(
                f"{rel!r} in the task attempt directory is not a Parquet file: a Hudi table holds "
                "only *.parquet base files",
                stage="commit_task",
            )
        parsed = parse_base_file_name(name)
        if parsed is not None:
            if parsed.instant != instant:
                raise CommitError(
                    f"{rel!r} is stamped with instant {parsed.instant}, not this write's {instant}",
                    stage="commit_task",
                )
            final = name
        else:
            final = base_file_name(new_file_id(), token, instant)
        out = f"{folder}/{final}" if folder else final
        names[rel] = out
        if rel in rows_in:
            rows[out] = rows_in[rel]
        else:
            missing.append(rel)
    return names, rows, missing
