"""The new version of one file group of an upsert or delete: shared by the engine path
(:mod:`amcommit.table.mutate`) and Spark's (:mod:`amcommit.spark.mutate`, one task per file
group). Pure: bytes in memory, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from amcommit.table.bloom import DEFAULT_SETTINGS, BloomSettings
from amcommit.table.mutate import Payload, merge_file, parquet_with_index, set_file_name, with_meta
from amcommit.table.naming import base_file_name
from amcommit.table.timeline import FileVersion

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["rewrite_group"]


def rewrite_group(
    version: FileVersion,
    stored: pa.Table,
    updates: pa.Table,
    update_keys: Sequence[str],
    deletes: set[str],
    *,
    instant: str,
    task: int,
    first_seq: int,
    token: str,
    precombine_field: str | None,
    payload: Payload,
    inserts: pa.Table | None = None,
    insert_keys: Sequence[str] = (),
    bloom: BloomSettings = DEFAULT_SETTINGS,
) -> tuple[str, bytes, int, dict[str, int]]:
    """The new base file of the file group ``version`` (its current rows ``stored``):
    ``(file name, Parquet bytes with the footer index, rows, counts)``; the bytes are empty
    when nothing changes in it (no new version). ``updates``: the data columns of the
    incoming records of ``update_keys`` (in that order); ``deletes``: keys removed;
    ``inserts`` (``insert_keys``): new records put into this group. The new records' seqnos
    are ``<instant>_<task>_<first_seq + i>``; counts as :func:`merge_file`'s."""
    name = base_file_name(version.file_id, token, instant)
    incoming = with_meta(updates, update_keys, instant, task, first_seq, version.partition, name)
    appended = None
    if inserts is not None and inserts.num_rows:
        first = first_seq + len(update_keys)
        appended = with_meta(inserts, insert_keys, instant, task, first, version.partition, name)
    merged, counts = merge_file(
        stored,
        incoming,
        update_keys,
        deletes,
        precombine_field=precombine_field,
        payload=payload,
        appended=appended,
    )
    if not (counts["updated"] or counts["deleted"] or counts["inserted"]):
        return name, b"", 0, counts
    merged = set_file_name(merged, name)
    return name, parquet_with_index(merged, bloom), merged.num_rows, counts
