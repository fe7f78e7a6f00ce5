"""Base files sized to their data: each file's bloom filter sized to its keys
(:attr:`amcommit.table.format.bloom.BloomSettings.sized`), in Hudi's ``DYNAMIC_V0`` format, and the
upsert index reading such footers (and the fixed-size ones of tables written before)."""

from __future__ import annotations

import math
import os
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table.file_group import merge
from amcommit.table.format import bloom
from amcommit.table.format.bloom import BloomFilter, BloomSettings, build_footer, parse_footer
from amcommit.table.mutate import engine as mutate
from amcommit.table.timeline.instants import load_timeline, snapshot
from tests.backends import StoreUnderTest
from tests.table.test_mutate import (
    KW,
    NEW,
    _Counting,
    _t,
    amcommit_snapshot,
    hudi_snapshot,
    model_upsert,
    rows_of,
)

FIXED = BloomSettings(sized=False)
"""The filter every file carried before: 60,000 entries at fpp 1e-9 (Hudi's writers')."""


def _absent(n: int) -> list[str]:
    return [f"absent-{i}" for i in range(n)]


def test_filter_sized_to_keys_finds_every_key_and_refuses_absent_at_fpp() -> None:
    s = BloomSettings(fpp=0.01)
    absent = _absent(200_000)
    for n in (1, 50, 5000):
        keys = [f"key-{i}" for i in range(n)]
        f = BloomFilter.parse(BloomFilter.build(keys, s).serialize(), "DYNAMIC_V0")
        bits = math.ceil(n * -math.log(0.01) / math.log(2) ** 2)
        assert (f.vector_size, f.nr, f.current, len(f.rows)) == (bits, n, n, 1)
        assert f.might_contain(keys).all()
        rate = float(f.might_contain(absent).mean())
        assert rate <= 1.25 * 0.01, (n, rate)
        if n == 5000:  # sized, not oversized: the rate is the configured one
            assert rate >= 0.75 * 0.01, rate
    # at the default fpp (1e-9): no false positive among 200,000 absent keys
    for n in (1, 5000):
        keys = [f"key-{i}" for i in range(n)]
        f = BloomFilter.build(keys)
        assert f.might_contain(keys).all() and not f.might_contain(absent).any()
        assert len(f.to_bytes()) < 5.5 * n + 60


def test_beyond_num_entries_the_filter_grows_as_hudis() -> None:
    """More keys than ``num_entries``: rows of ``num_entries`` growing to ``max_entries``,
    then round robin, identical to the fixed-size filter; a file without keys gets the
    smallest filter (Hudi refuses 0 entries)."""
    s = BloomSettings(num_entries=10, fpp=0.01, max_entries=25)
    for n in (10, 11, 25, 45):
        keys = [f"key-{i}" for i in range(n)]
        sized, fixed = (
            BloomFilter.build(keys, s),
            BloomFilter.build(keys, BloomSettings(10, 0.01, 25, sized=False)),
        )
        assert sized.to_bytes() == fixed.to_bytes() and sized.might_contain(keys).all()
    assert len(BloomFilter.build([f"k{i}" for i in range(45)], s).rows) == 3
    empty = BloomFilter.build([], s)
    assert (empty.nr, empty.current, len(empty.rows), empty.vector_size) == (1, 0, 1, 10)
    simple = parse_footer(build_footer(["b", "a"], BloomSettings(type_code="SIMPLE"))).bloom
    assert simple is not None and simple.vector_size == math.ceil(2 * -math.log(1e-9) / math.log(2) ** 2)


def _file(n: int, bloom_settings: BloomSettings) -> bytes:
    rnd = random.Random(n)
    rows = [{"id": 1_000_000 + i, "p": "a", "v": rnd.randbytes(8).hex(), "ts": i} for i in range(n)]
    keys = [str(r["id"]) for r in rows]
    t = merge.with_meta(_t(rows), keys, "20260101000000000", 0, 0, "p=a", "f")
    return merge.parquet_with_index(t, bloom_settings)


def test_file_sizes_of_1_and_5000_rows() -> None:
    """A 1-row file was ~434 KB and a 5,000-row file ~519 KB, almost all of it the filter;
    sized, each is its rows plus ~5.4 bytes a key."""
    one, one_fixed = _file(1, BloomSettings()), _file(1, FIXED)
    five, five_fixed = _file(5000, BloomSettings()), _file(5000, FIXED)
    assert len(one_fixed) > 430_000 and len(five_fixed) > 430_000
    assert len(one) < 8_000, len(one)
    assert len(five_fixed) - len(five) > 390_000, (len(five), len(five_fixed))
    for body, n in ((one, 1), (five, 5000)):
        md = pq.read_metadata(pa.BufferReader(body)).metadata
        idx = parse_footer(md)
        assert idx.bloom is not None and idx.bloom.nr == n
        keys = [str(1_000_000 + i) for i in range(n)]
        assert idx.may_hold(keys) == [True] * n
        assert not idx.bloom.might_contain(_absent(50_000)).any()
        assert md[bloom.TYPE_CODE_KEY.encode()] == b"DYNAMIC_V0"
        # Base64 of the 13+12-byte headers, one row's header and ceil(bits / 8) bytes
        bits = math.ceil(n * -math.log(1e-9) / math.log(2) ** 2)
        assert len(md[bloom.BLOOM_FILTER_KEY.encode()]) == 4 * math.ceil((38 + (bits + 7) // 8) / 3)


async def _nr_of(store: Any, dest: str) -> dict[str, int]:
    """Each file of the snapshot: its filter's entries per row (``nr``)."""
    _, commits = await load_timeline(store, dest)
    out = {}
    for f in snapshot(commits):
        body = await store.get(join(dest, f.path))
        b = parse_footer(pq.read_metadata(pa.BufferReader(body)).metadata).bloom
        assert b is not None
        out[f.path] = b.nr
    return out


async def _mixed(store: Any, dest: str) -> tuple[list[tuple[Any, ...]], mutate.MutateReport]:
    """A table written before filters were sized (fixed 60,000 entries), then upserts with
    sized filters: new file groups and new versions of old ones side by side. Returns the
    model's rows and the last upsert's report (through a byte-counting store)."""
    old = [{"id": i, "p": "ab"[i % 2], "v": f"o{i}", "ts": 1} for i in range(300)]
    await mutate.upsert(store, dest, _t(old[:150]), precombine_field="ts", bloom=FIXED, **NEW)
    await mutate.upsert(store, dest, _t(old[150:]), precombine_field="ts", bloom=FIXED, **NEW)
    m = model_upsert({}, old)
    assert set((await _nr_of(store, dest)).values()) == {60_000}
    new = [{"id": 1000 + i, "p": "ab"[i % 2], "v": f"n{i}", "ts": 1} for i in range(40)]
    await mutate.upsert(store, dest, _t(new), precombine_field="ts", **NEW)
    m = model_upsert(m, new)
    nrs = await _nr_of(store, dest)
    assert sorted(nrs.values()) == [20, 20, 60_000, 60_000, 60_000, 60_000], nrs
    # updates in old files and new files, an insert
    batch = [
        {"id": 7, "p": "b", "v": "u7", "ts": 2},
        {"id": 290, "p": "a", "v": "u290", "ts": 2},
        {"id": 1003, "p": "b", "v": "u1003", "ts": 2},
        {"id": 1004, "p": "a", "v": "u1004", "ts": 2},
        {"id": 5000, "p": "a", "v": "ins", "ts": 1},
    ]
    counted = _Counting(store)
    rep = await mutate.upsert(counted, dest, _t(batch), precombine_field="ts", **KW)  # type: ignore[arg-type]
    assert (rep.updated, rep.inserted, rep.footers_read) == (4, 1, 6)
    m = model_upsert(m, batch)
    assert await amcommit_snapshot(store, dest) == rows_of(m)
    nrs = await _nr_of(store, dest)
    # the old files rewritten (7 in b's first file, 290 in a's second) are sized now; the
    # insert went to the smallest file of a
    assert sorted(nrs.values()) == [20, 21, 75, 75, 60_000, 60_000], nrs
    return rows_of(m), rep


async def test_table_of_fixed_filters_upserts_correctly_with_sized_ones(
    backend_local: StoreUnderTest,
) -> None:
    store, dest = backend_local.store, join(backend_local.base, "mx")
    assert isinstance(store, LocalStore)
    rows, _ = await _mixed(store, dest)
    assert hudi_snapshot(os.path.join(store.root, dest)) == rows


async def test_mixed_filter_sizes_on_fake_gcs_read_small_footers_in_one_small_read(
    backend_gcs_fake: StoreUnderTest,
) -> None:
    """On an object store the index reads each footer from the file's end: 64 KB first (a
    sized footer fits), a longer (fixed-size) footer by one more read of exactly it; the
    table reads the same through hudi-rs."""
    store, dest = backend_gcs_fake.store, join(backend_gcs_fake.base, "mx")
    rows, rep = await _mixed(store, dest)
    srv: Any = backend_gcs_fake.extras["server"]
    opts = {"google_base_url": srv.url, "google_skip_signature": "true", "allow_http": "true"}
    uri = f"gs://{backend_gcs_fake.extras['bucket']}/{dest}"
    assert hudi_snapshot(uri, storage=opts) == rows
    # 6 footers: 4 fixed (~432 KB each) and 2 sized (~1 KB); key columns of 4 candidates
    assert rep.index_bytes_read < 4 * (432_000 + 64 * 1024) + 2 * 64 * 1024 + 100_000
    assert rep.index_bytes_read > 4 * 432_000


async def test_sized_footers_are_read_without_reading_files_whole(backend_gcs_fake: StoreUnderTest) -> None:
    """Files of ~600 KB with sized filters: a footer read costs at most 64 KB (it was 576 KB,
    most of such a file)."""
    store, dest = backend_gcs_fake.store, join(backend_gcs_fake.base, "big")
    rnd = random.Random(5)
    for g in range(3):
        rows = [{"id": g * 10_000 + i, "p": "a", "v": rnd.randbytes(150).hex(), "ts": 1} for i in range(2000)]
        await mutate.upsert(store, dest, _t(rows), precombine_field="ts", **NEW)
    _, commits = await load_timeline(store, dest)
    files = snapshot(commits)
    assert len(files) == 3 and min(f.size for f in files) > 500_000
    rep = await mutate.upsert(
        store, dest, _t([{"id": 10_005, "p": "a", "v": "new", "ts": 2}]), precombine_field="ts", **KW
    )
    assert (rep.footers_read, rep.key_columns_read, rep.updated) == (3, 1, 1)
    key_chunk = 2000 * 16  # one candidate's key column (dictionary-free strings, snappy) at most
    assert rep.index_bytes_read <= 3 * 64 * 1024 + key_chunk, rep.index_bytes_read


class _Calls:
    """The store, recording the ranged reads it serves: (path, length returned)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != "get_range":
            return attr

        async def get_range(path: str, start: int, length: int) -> bytes:
            data: bytes = await attr(path, start, length)
            self.reads.append((path, len(data)))
            return data

        return get_range


async def test_a_long_footer_raises_the_tail_read_for_the_next_files(
    backend_gcs_fake: StoreUnderTest,
) -> None:
    """A fixed-size (~432 KB) footer costs a second read, of exactly it, once: the files read
    after it are read with a tail that long (one read each)."""
    store, dest = backend_gcs_fake.store, join(backend_gcs_fake.base, "tg")
    await _mixed(store, dest)
    _, commits = await load_timeline(store, dest)
    lengths = {}
    for f in snapshot(commits):
        body = await store.get(join(dest, f.path))
        lengths[f.path] = (int.from_bytes(body[-8:-4], "little") + 8, f.size)
    order = sorted(lengths, key=lambda p: -lengths[p][0])  # the longest footer first
    calls = _Calls(store)
    reader = mutate.IndexReader(calls, dest, KW["config"])  # type: ignore[arg-type]
    for rel in order:
        idx = await reader.footer(rel, lengths[rel][1])
        assert idx.bloom is not None
    longest = lengths[order[0]][0]
    assert longest > 430_000 and reader.tail_guess == longest
    want = [(order[0], 64 * 1024), (order[0], longest)]
    want += [(p, min(lengths[p][1], longest)) for p in order[1:]]
    assert [(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1], n) for p, n in calls.reads] == want
