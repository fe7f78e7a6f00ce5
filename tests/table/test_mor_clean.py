"""Clean of a Merge-on-Read table (KEEP_LATEST_COMMITS): a file slice (base file and its log
files) is one unit. A slice superseded by a newer slice (here a compaction written by hand as
Hudi records it: a base file at ``Tc`` and ``Tc.commit`` with ``compacted: true``) is cleaned
whole, its log files included; the latest slice never; the plan and the metadata name every
deleted file."""

from __future__ import annotations

import os
from typing import Any

import pyarrow.compute as pc

from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table import read
from amcommit.table.commit.clean import clean
from amcommit.table.file_group.merge import parquet_with_index, set_file_name
from amcommit.table.format import avro_meta
from amcommit.table.format.model import CommitMetadata, WriteStat, encode_commit_metadata
from amcommit.table.format.naming import parse_base_file_name, parse_log_file_name
from amcommit.table.mutate import engine as mutate
from amcommit.table.timeline.reader import table_uri
from tests.backends import StoreUnderTest
from tests.table.test_mor_write import MOR, hudi_read_optimized
from tests.table.test_mutate import _t, hudi_snapshot, model_upsert, rows_of

FIRST = [{"id": i, "p": "ab"[i % 2], "v": "0", "ts": 1} for i in range(8)]
U1 = [{"id": 0, "p": "a", "v": "1", "ts": 2}, {"id": 1, "p": "b", "v": "1", "ts": 2}]
U2 = [{"id": 2, "p": "a", "v": "2", "ts": 3}, {"id": 3, "p": "b", "v": "2", "ts": 3}]


async def _data(store: Any, dest: str) -> list[str]:
    out = []
    async for i in store.list(dest, recursive=True):
        rel = i.path[len(dest) + 1 :]
        name = rel.rpartition("/")[2]
        if not i.is_dir and (parse_base_file_name(name) or parse_log_file_name(name)):
            out.append(rel)
    return sorted(out)


async def _compact_by_hand(store: LocalStore, dest: str, rel_base: str, tc: str) -> str:
    """Compact the file group of base file ``rel_base`` as Hudi records a compaction: the
    group's snapshot records (commit times kept) in a new base file named with ``tc``, and
    ``tc.commit`` (``compacted: true``). Returns the new base file (table-relative)."""
    parsed = parse_base_file_name(rel_base.rpartition("/")[2])
    assert parsed is not None
    part = rel_base.rpartition("/")[0]
    snap = read(os.path.join(store.root, dest))
    rows = snap.filter(pc.equal(snap["_hoodie_partition_path"], part))  # one group per partition here
    name = f"{parsed.file_id}_0-0-0_{tc}.parquet"
    data = parquet_with_index(set_file_name(rows, name))
    rel = f"{part}/{name}"
    await store.put(join(dest, rel), data)
    stat = WriteStat(
        file_id=parsed.file_id,
        path=rel,
        prev_commit=parsed.instant,
        num_writes=rows.num_rows,
        total_write_bytes=len(data),
        partition_path=part,
        file_size_in_bytes=len(data),
    )
    meta = CommitMetadata(partition_to_write_stats={part: [stat]}, compacted=True, operation_type="UNKNOWN")
    await store.put(join(dest, ".hoodie", f"{tc}.commit"), encode_commit_metadata(meta))
    return rel


async def test_clean_deletes_a_superseded_slice_whole(backend_local: StoreUnderTest) -> None:
    """insert (one group per partition) -> deltacommit (logs in p=a and p=b) -> compaction of
    p=a's group -> deltacommit (a log against the new slice in p=a, one more log of the old
    slice in p=b) -> clean, retaining the last commit: exactly p=a's first slice (its base
    file and its log file) is deleted; the plan and the metadata name both; p=a's new slice
    and p=b's only slice (base and two logs) stay; hudi-rs and amcommit read the model."""
    store = backend_local.store
    assert isinstance(store, LocalStore)
    dest = join(backend_local.base, "mc")
    kw = MOR | {"small_file_limit": 0}
    await mutate.upsert(store, dest, _t(FIRST), precombine_field="ts", **kw)
    r1 = await mutate.upsert(store, dest, _t(U1), precombine_field="ts", **kw)
    files = await _data(store, dest)
    base_a = next(f for f in files if f.startswith("p=a/") and parse_base_file_name(f.rpartition("/")[2]))
    log_a = next(f for f in files if f.startswith("p=a/") and parse_log_file_name(f.rpartition("/")[2]))
    tc = str(int(r1.instant) + 1)
    new_base_a = await _compact_by_hand(store, dest, base_a, tc)
    await mutate.upsert(store, dest, _t(U2), precombine_field="ts", **kw)
    before = await _data(store, dest)
    new_log_a = [
        f
        for f in before
        if f.startswith("p=a/") and (p := parse_log_file_name(f.rpartition("/")[2])) and p.base_instant == tc
    ]
    assert len(new_log_a) == 1  # U2's update of p=a went to the new slice
    rep = await clean(store, dest, retain_commits=1, config=MOR["config"])
    assert sorted(rep.files) == sorted([base_a, log_a])
    after = await _data(store, dest)
    assert after == sorted(set(before) - {base_a, log_a})
    assert new_base_a in after
    assert len([f for f in after if f.startswith("p=b/") and ".log." in f]) == 2  # the live slice, whole
    assert rep.instant is not None
    hoodie = join(dest, ".hoodie")
    meta = avro_meta.decode_clean_metadata(await store.get(join(hoodie, f"{rep.instant}.clean")))
    named = {(p.partition, n) for p in meta.partitions for n in p.deleted}
    assert named == {("p=a", base_a.rpartition("/")[2]), ("p=a", log_a.rpartition("/")[2])}
    plan = avro_meta.decode_cleaner_plan(
        await store.get(join(hoodie, f"{rep.instant}.clean.requested")), root_uri=table_uri(store, dest)
    )
    assert sorted(plan.files["p=a"]) == sorted([base_a, log_a])
    m = model_upsert(model_upsert(model_upsert({}, FIRST), U1), U2)
    uri = os.path.join(store.root, dest)
    assert hudi_snapshot(uri) == rows_of(m)
    ours = read(uri)
    assert sorted(zip(*(ours[c].to_pylist() for c in ("id", "p", "v", "ts")), strict=True)) == rows_of(m)
    # read-optimized: p=a's compacted base file (FIRST + U1 in p=a), p=b's first base file
    ro = model_upsert({}, FIRST) | {k: v for k, v in model_upsert({}, U1).items() if k[0] == "a"}
    assert hudi_read_optimized(uri) == rows_of(ro)
