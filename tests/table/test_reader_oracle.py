"""amcommit's Timeline against hudi-rs (the oracle) on generated version-6 tables.

For every completed instant T: the snapshot as of T (file set, and rows from the write stats
vs the rows hudi-rs reads); for every pair (A, B] of instants (A may be the start): the
incremental file set. Local files always; Azurite and fake-gcs-server through hudi-rs's
object_store options (Azure: account, key, endpoint; GCS: a service-account key whose
``gcs_base_url`` points at the emulator and ``disable_oauth``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import hudi
import pytest

from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.table.errors import CleanedPast
from amcommit.table.format.model import Operation
from amcommit.table.timeline.reader import Timeline, open_timeline
from amcommit.testing.tablegen import GeneratedTable, Write, generate, write_local
from tests.backends import StoreUnderTest

WRITES = [
    Write(files={"a": 2, "b": 1}),
    Write(files={"a": 1, "b": 1}, label="batch-1"),
    Write(Operation.INSERT_OVERWRITE, files={"a": 1}),
    Write(files={"b": 2}, failed=True),
    Write(files={"c": 1}),
    Write(Operation.INSERT_OVERWRITE_TABLE, files={"b": 1, "d": 1}, rows=5),
    Write(files={"a": 1}),
]


def _slices(table: hudi.HudiTable, opts: hudi.HudiReadOptions) -> list[str]:
    return sorted(s.base_file_relative_path() for s in table.get_file_slices(opts))


def _rows(table: hudi.HudiTable, opts: hudi.HudiReadOptions) -> int:
    return sum(b.num_rows for b in table.read(opts))


def _incremental(since: str | None, until: str) -> hudi.HudiReadOptions:
    o = hudi.HudiReadOptions().with_query_type(hudi.HudiQueryType.Incremental).with_end_timestamp(until)
    return o.with_start_timestamp(since) if since else o


def compare_with_hudi(tl_snapshot: Any, tl_changes: Any, gen: GeneratedTable, table: hudi.HudiTable) -> int:
    """Assert amcommit == hudi-rs for every time travel and incremental pair; returns checks made."""
    checks = 0
    for t in gen.completed:
        opts = hudi.HudiReadOptions().with_as_of_timestamp(t)
        ours = tl_snapshot(t)
        assert [f.path for f in ours] == _slices(table, opts), t
        assert sum(f.rows for f in ours) == _rows(table, opts), t
        checks += 1
    for a, b in itertools.combinations([None, *gen.completed], 2):
        assert b is not None
        c = tl_changes(a, b)
        assert sorted(f.path for f in c.visible()) == _slices(table, _incremental(a, b)), (a, b)
        assert sum(f.rows for f in c.visible()) == _rows(table, _incremental(a, b)), (a, b)
        assert [i.time for i in c.instants] == [t for t in gen.completed if (a is None or t > a) and t <= b]
        checks += 1
    return checks


def test_local_reader_equals_hudi_rs(tmp_path: Path) -> None:
    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")
    tl = open_timeline(str(root))
    table = hudi.HudiTable(str(root))  # absolute path (pitfall 7)
    n = compare_with_hudi(tl.snapshot, tl.changes, gen, table)
    assert n == len(gen.completed) + len(gen.completed) * (len(gen.completed) + 1) // 2
    latest = tl.snapshot()
    assert [f.path for f in latest] == _slices(table, hudi.HudiReadOptions())
    infos = tl.instants()
    assert [i.time for i in infos] == gen.instants
    assert [i.state for i in infos] == ["completed"] * 3 + ["inflight"] + ["completed"] * 3
    assert infos[1].label == "batch-1" and infos[1].files == 2 and infos[1].rows == 6
    assert infos[5].replaced == 4 and infos[5].operation == "INSERT_OVERWRITE_TABLE"
    assert all(i.duration == 0.25 for i in infos if i.state == "completed")


def test_cleaned_table_reader_refuses_where_hudi_rs_silently_loses_rows(tmp_path: Path) -> None:
    import anyio

    from amcommit.store.schemes import open_location
    from amcommit.table.commit.clean import clean

    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")

    async def run_clean() -> str | None:
        store, dest = open_location(str(root))
        try:
            return (await clean(store, dest, retain_commits=2)).earliest_retained
        finally:
            await store.aclose()

    earliest = anyio.run(run_clean)
    assert earliest == gen.completed[-2]
    tl = open_timeline(str(root))
    table = hudi.HudiTable(str(root))
    kept = [t for t in gen.completed if t >= earliest]
    for t in kept:
        opts = hudi.HudiReadOptions().with_as_of_timestamp(t)
        assert [f.path for f in tl.snapshot(t)] == _slices(table, opts)
    for a, b in itertools.combinations(kept, 2):
        assert sorted(f.path for f in tl.changes(a, b).visible()) == _slices(table, _incremental(a, b))
    lost = 0
    for t in gen.completed:
        if t >= earliest:
            continue
        with pytest.raises(CleanedPast, match=f"earliest instant still readable is {earliest}"):
            tl.snapshot(t)
        with pytest.raises(CleanedPast):
            tl.changes(None, t)
        want = sum(gen.rows_by_instant[c] for c in gen.completed if c <= t) - sum(
            3 for c in gen.completed if c <= t for _ in gen.replaced_by_instant[c]
        )
        lost += want - _rows(table, hudi.HudiReadOptions().with_as_of_timestamp(t))
    assert lost > 0, "hudi-rs returns fewer rows before the clean (pitfall 6): what CleanedPast prevents"


async def _upload(store: Store, base: str, gen: GeneratedTable) -> None:
    for rel in sorted(gen.objects, key=lambda p: (p.startswith(".hoodie/"), p)):
        await store.put(join(base, rel), gen.objects[rel])


async def _check_remote(sut: StoreUnderTest, url: str, options: dict[str, str]) -> None:
    gen = generate(WRITES)
    await _upload(sut.store, sut.base, gen)
    table = hudi.HudiTable(url, options)
    tl = await Timeline.open(sut.store, sut.base)
    snaps = {t: await tl.snapshot(t) for t in gen.completed}
    pairs = {(a, b): await tl.changes(a, b) for a, b in itertools.combinations([None, *gen.completed], 2)}
    n = compare_with_hudi(lambda t: snaps[t], lambda a, b: pairs[(a, b)], gen, table)
    assert n == len(snaps) + len(pairs)


async def test_azurite_reader_equals_hudi_rs(backend_blob_azurite: StoreUnderTest) -> None:
    sut = backend_blob_azurite
    az: Any = sut.extras["emulator"]
    container = sut.extras["container"]
    options = {
        "azure_storage_account_name": az.account,
        "azure_storage_account_key": az.account_key,
        "azure_storage_endpoint": az.endpoint,
        "azure_allow_http": "true",
    }
    await _check_remote(sut, f"az://{container}/{sut.base}", options)


async def test_fake_gcs_reader_equals_hudi_rs(backend_gcs_fake: StoreUnderTest, tmp_path: Path) -> None:
    sut = backend_gcs_fake
    server: Any = sut.extras["server"]
    key = {
        "private_key": "",
        "private_key_id": "",
        "client_email": "amcommit-test@example.invalid",
        "gcs_base_url": server.url.rstrip("/"),
        "disable_oauth": True,
    }
    options = {"google_service_account_key": json.dumps(key), "google_allow_http": "true"}
    await _check_remote(sut, f"gs://{sut.extras['bucket']}/{sut.base}", options)
