"""Planning an upsert or delete (pure): the batch reduced by its precombine field, the
candidate files of its keys, which file groups are rewritten, and where inserts go (Hudi's
small-file handling)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amcommit.table.file_group.model import FileVersion
from amcommit.table.format.bloom import (
    FooterIndex,
    beyond_bmp,
)

if TYPE_CHECKING:
    pass


# -- pure planning ----------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """The incoming rows reduced to one per (partition path, key): ``rows`` indexes into the
    input table, in input order of the winners."""

    keys: list[str]
    partitions: list[str]
    rows: list[int]
    dropped: int


def precombine_key(value: Any) -> Any:
    """A precombine value as it orders (pure): itself, except a float, which orders as
    Java's ``Double.compareTo`` orders it (Hudi compares precombine values with
    ``compareTo``): NaN above every value (+inf included), ``-0.0`` below ``0.0``."""
    if isinstance(value, float):
        if math.isnan(value):
            return (1, 0.0, 0.0)
        return (0, value, math.copysign(1.0, value))
    return value


def reduce_batch(keys: Sequence[str], partitions: Sequence[str], order: Sequence[Any] | None) -> Batch:
    """One row per (partition, key): the greatest ``order`` (precombine) value wins, the
    later row on a tie; without ``order`` the later row wins. Floats order as
    :func:`precombine_key` says (NaN greatest, ``-0.0 < 0.0``). Pure."""
    best: dict[tuple[str, str], int] = {}
    key = None if order is None else [precombine_key(v) for v in order]
    for i, k in enumerate(keys):
        pk = (partitions[i], k)
        j = best.get(pk)
        if j is None or key is None or not key[j] > key[i]:
            best[pk] = i
    rows = sorted(best.values())
    return Batch([keys[i] for i in rows], [partitions[i] for i in rows], rows, len(keys) - len(rows))


def reduce_batch_columns(keys: Sequence[str], partitions: Sequence[str], order: Any | None) -> Batch:
    """:func:`reduce_batch` with the precombine column ``order`` as an Arrow array, by one
    vectorised sort (partition, key, order, row) instead of a loop over the rows: the last
    row of each (partition, key) wins. Floats order as :func:`precombine_key` says (NaN
    greatest, ``-0.0 < 0.0``). Types Arrow cannot sort are reduced by :func:`reduce_batch`.
    Same result as :func:`reduce_batch`. Pure."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(keys)
    if n == 0:
        return Batch([], [], [], 0)
    cols: dict[str, Any] = {"p": pa.array(partitions, pa.string()), "k": pa.array(keys, pa.string())}
    if order is not None:
        o = order.combine_chunks() if isinstance(order, pa.ChunkedArray) else pa.array(order)
        if pa.types.is_floating(o.type):
            x = pc.cast(o, pa.float64())
            nan = pc.is_nan(x)
            value = pc.if_else(nan, 0.0, x)
            cols["o_nan"] = nan
            cols["o_value"] = value
            cols["o_positive"] = pc.greater(pc.divide(1.0, value), 0.0)  # -0.0 before 0.0
        else:
            cols["o"] = o
    order_keys = [c for c in cols if c not in ("p", "k")]
    cols["i"] = pa.array(np.arange(n, dtype=np.int64))
    t = pa.table(cols)
    try:
        if order_keys:  # rows by (order, row): the last of a (partition, key) is its winner
            t = t.take(pc.sort_indices(t, sort_keys=[(c, "ascending") for c in [*order_keys, "i"]]))
        won = t.group_by(["p", "k"], use_threads=False).aggregate([("i", "last")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid):
        return reduce_batch(keys, partitions, None if order is None else order.to_pylist())
    rows = np.sort(won.column("i_last").to_numpy()).tolist()
    return Batch([keys[r] for r in rows], [partitions[r] for r in rows], rows, n - len(rows))


def plan_candidates(
    wanted: Mapping[str, Sequence[str]], files: Sequence[tuple[FileVersion, FooterIndex]]
) -> dict[str, list[str]]:
    """Per file path, the incoming keys of its partition its footer cannot rule out (key
    range, then bloom filter); files without any are left out. Pure."""
    ordered = {p: sorted(ks) for p, ks in wanted.items()}
    odd = {p: beyond_bmp(ks) for p, ks in ordered.items()}
    out: dict[str, list[str]] = {}
    for f, idx in files:
        keys = ordered.get(f.partition)
        if not keys:
            continue
        maybe = idx.may_hold_sorted(keys, odd[f.partition])
        if maybe:
            out[f.path] = maybe
    return out


@dataclass
class FileRewrite:
    """A file group to rewrite: its current version and what changes in it."""

    version: FileVersion
    updates: dict[str, int] = field(default_factory=dict)
    """Key -> row of the input table."""
    deletes: set[str] = field(default_factory=set)
    inserts: list[int] = field(default_factory=list)
    """Rows of the input table inserted into this (small) file group."""


@dataclass
class MutationPlan:
    rewrites: dict[str, FileRewrite] = field(default_factory=dict)
    """By the current version's path."""
    inserts: dict[str, list[int]] = field(default_factory=dict)
    """Partition -> rows of the input table to insert as new file groups."""
    absent_deletes: int = 0


def plan_mutation(
    batch: Batch, located: Mapping[tuple[str, str], Sequence[FileVersion]], *, delete: bool
) -> MutationPlan:
    """Which file groups to rewrite and what to insert, from the reduced ``batch`` and the
    files that hold each of its (partition, key)s (``located``). A key held by several files
    of its partition (plain inserts of one key twice) is updated, or deleted, in each. Pure."""
    plan = MutationPlan()
    for key, part, row in zip(batch.keys, batch.partitions, batch.rows, strict=True):
        held = located.get((part, key))
        if not held:
            if delete:
                plan.absent_deletes += 1
            else:
                plan.inserts.setdefault(part, []).append(row)
            continue
        for f in held:
            rw = plan.rewrites.get(f.path)
            if rw is None:
                rw = plan.rewrites[f.path] = FileRewrite(f)
            if delete:
                rw.deletes.add(key)
            else:
                rw.updates[key] = row
    return plan


SMALL_FILE_LIMIT = 104_857_600
"""Hudi's ``hoodie.parquet.small.file.limit`` (100 MiB): base files below it take inserts."""
MAX_FILE_SIZE = 125_829_120
"""Hudi's ``hoodie.parquet.max.file.size`` (120 MiB): how far a small file is filled."""
RECORD_SIZE_ESTIMATE = 1024
"""Hudi's ``hoodie.copyonwrite.record.size.estimate``: bytes per record without better data."""


def assign_inserts(
    plan: MutationPlan,
    files: Sequence[FileVersion],
    *,
    small_file_limit: int = SMALL_FILE_LIMIT,
    max_file_size: int = MAX_FILE_SIZE,
) -> None:
    """Hudi's small-file handling (``UpsertPartitioner.assignInserts``), in ``plan``: each
    partition's inserts go first into its file groups smaller than ``small_file_limit``
    (smallest first), each up to ``max_file_size`` at the partition's average record size
    (bytes / rows of its files; ``RECORD_SIZE_ESTIMATE`` without rows); the rest stay
    inserts into new file groups. ``small_file_limit`` 0 turns it off. Pure."""
    if small_file_limit <= 0:
        return
    by_part: dict[str, list[FileVersion]] = {}
    for f in files:
        by_part.setdefault(f.partition, []).append(f)
    for part in sorted(plan.inserts):
        rows = plan.inserts[part]
        mine = by_part.get(part, [])
        total_rows = sum(f.rows for f in mine)
        avg = max(1, sum(f.size for f in mine) // total_rows) if total_rows else RECORD_SIZE_ESTIMATE
        for f in sorted(mine, key=lambda f: (f.size, f.path)):
            if not rows:
                break
            if f.size >= small_file_limit:
                continue
            room = (max_file_size - f.size) // avg
            if room <= 0:
                continue
            take, rows = rows[:room], rows[room:]
            rw = plan.rewrites.get(f.path)
            if rw is None:
                rw = plan.rewrites[f.path] = FileRewrite(f)
            rw.inserts.extend(take)
        if rows:
            plan.inserts[part] = rows
        else:
            del plan.inserts[part]


# -- planning by partition, vectorised (the engine's pipeline) ---------------------------


@dataclass(frozen=True)
class PartitionBatch:
    """The reduced batch's records of one partition path: ``keys`` and their ``rows`` (of
    the input table) in batch order; ``sorted_keys`` in code point order (for the key range
    bisection) and ``odd``, those holding characters beyond U+FFFF (:func:`beyond_bmp`)."""

    partition: str
    keys: list[str]
    rows: list[int]
    sorted_keys: list[str]
    odd: list[str]


def partition_batches(batch: Batch) -> dict[str, PartitionBatch]:
    """``batch`` split by partition path (each partition's records in batch order). Pure."""
    keys: dict[str, list[str]] = {}
    rows: dict[str, list[int]] = {}
    for k, p, r in zip(batch.keys, batch.partitions, batch.rows, strict=True):
        ks = keys.get(p)
        if ks is None:
            ks = keys[p] = []
            rows[p] = []
        ks.append(k)
        rows[p].append(r)
    out = {}
    for p, ks in keys.items():
        ordered = sorted(ks)
        out[p] = PartitionBatch(p, ks, rows[p], ordered, beyond_bmp(ordered))
    return out


PROBE_DENSITY = 16
"""A base file's bloom filter is not probed (:func:`file_candidates` given the file's
``rows``) when the batch's keys within its key range number at least 1/``PROBE_DENSITY`` of
its rows: they are all asked, and the file's key column, read and joined anyway, says which
it holds (the same keys as after a probe: the filter never rules a held key out). Probing
costs ~6x more a key than decoding the key column costs a row, and with that many keys in
range the file almost surely holds one (a probe would rule nothing out); if it holds none,
its key column read costs at most ~3x the probe saved."""


def file_candidates(part: PartitionBatch, index: FooterIndex, *, rows: int | None = None) -> list[str]:
    """The keys of ``part`` a base file of that partition may hold by its footer (key range,
    then bloom filter; sorted), as :func:`plan_candidates` finds them for one file. With
    ``rows`` (the file's row count: its key column will be read if any key is asked), the
    filter is skipped for keys in range at least ``rows / PROBE_DENSITY``
    (:data:`PROBE_DENSITY`): those are all returned. Pure (CPU work: the filter's hashes,
    vectorised with numpy)."""
    cand = index.in_range_sorted(part.sorted_keys, part.odd)
    if rows is not None and len(cand) * PROBE_DENSITY >= rows:
        return cand
    return index.probe(cand)


def confirm_keys(asked: Sequence[str], held: Any) -> Any:
    """The keys of ``asked`` that ``held`` (a file's ``_hoodie_record_key`` column, an Arrow
    array) holds, as an Arrow string array in ``asked``'s order: one vectorised hash join
    (``pyarrow.compute.is_in``). Pure."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = pa.array(asked, pa.string())
    return arr.filter(pc.is_in(arr, value_set=held))


def plan_partition(
    part: PartitionBatch,
    found: Sequence[tuple[FileVersion, Any]],
    files: Sequence[FileVersion],
    *,
    delete: bool,
    small_file_limit: int = SMALL_FILE_LIMIT,
    max_file_size: int = MAX_FILE_SIZE,
    fill_small_files: bool = True,
) -> MutationPlan:
    """The plan of one partition, as :func:`plan_mutation` then :func:`assign_inserts`
    (``fill_small_files``) make it for the partition's records: ``found`` holds, per base
    file, the keys of ``part`` it holds (:func:`confirm_keys`), ``files`` every base file of
    the partition. Each file's updates (or deletes) in batch order; keys no file holds are
    inserts (or absent deletes), in batch order. Vectorised: one ``index_in`` per file and a
    mask of the keys held anywhere, no loop over the batch's records in Python. Pure."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    plan = MutationPlan()
    n = len(part.keys)
    keys = pa.array(part.keys, pa.string())
    rows = np.asarray(part.rows, dtype=np.int64)
    held = np.zeros(n, dtype=bool)
    for f, ks in sorted(found, key=lambda x: x[0].path):
        if not len(ks):
            continue
        # the keys of a partition are unique (the batch is reduced): one position each
        pos = np.sort(pc.index_in(ks, value_set=keys).to_numpy(zero_copy_only=False).astype(np.int64))
        held[pos] = True
        rw = plan.rewrites.get(f.path)
        if rw is None:
            rw = plan.rewrites[f.path] = FileRewrite(f)
        mine = [part.keys[i] for i in pos.tolist()]
        if delete:
            rw.deletes.update(mine)
        else:
            rw.updates.update(zip(mine, rows[pos].tolist(), strict=True))
    rest = rows[~held]
    if delete:
        plan.absent_deletes = len(rest)
    elif len(rest):
        plan.inserts[part.partition] = rest.tolist()
        if fill_small_files:
            assign_inserts(plan, files, small_file_limit=small_file_limit, max_file_size=max_file_size)
    return plan


def seq_bases(
    parts: Mapping[str, PartitionBatch], files: Mapping[str, Sequence[FileVersion]]
) -> dict[str, int]:
    """The first commit seqno of each partition's records (partitions in sorted order), so
    that every partition can be written as soon as it is planned, before the others are
    (:func:`plan_partition`). A partition's range holds the most records it can write: each
    of its keys updated in every file of it (a key held twice) and inserted once,
    ``len(keys) * (files + 1)``. Seqnos are unique within the write, not contiguous across
    partitions (Hudi's are not either: they count per write handle). Pure."""
    out, seq = {}, 0
    for p in sorted(parts):
        out[p] = seq
        seq += len(parts[p].keys) * (len(files.get(p, ())) + 1)
    return out
