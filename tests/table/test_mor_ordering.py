"""``DefaultHoodieRecordPayload`` on Merge-on-Read, ordering-aware also for deletes: a delete
block carries each delete's ordering value (Hudi's wrapper record, here ``LongWrapper``); a
stored record whose precombine value is greater than the delete's stays (``kept_stored``
counts it at write time), and so does a stored record newer than an update (on read). hudi-rs
and amcommit's reader agree with the model."""

from __future__ import annotations

import os
from typing import Any

from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table import read
from amcommit.table.format import logblock as lb
from amcommit.table.format.naming import parse_log_file_name
from amcommit.table.mutate import engine as mutate
from tests.backends import StoreUnderTest
from tests.table.test_mor_write import MOR
from tests.table.test_mutate import _t, hudi_snapshot, rows_of

DEFAULT = MOR | {"payload": "DefaultHoodieRecordPayload", "precombine_field": "ts"}

Model = dict[tuple[str, int], dict[str, Any]]


def _upsert(m: Model, rows: list[dict[str, Any]]) -> Model:
    out = dict(m)
    for r in rows:
        k = (r["p"], r["id"])
        if k not in out or not out[k]["ts"] > r["ts"]:
            out[k] = r
    return out


def _delete(m: Model, rows: list[dict[str, Any]]) -> Model:
    out = dict(m)
    for r in rows:
        k = (r["p"], r["id"])
        if k in out and not out[k]["ts"] > r["ts"]:
            del out[k]
    return out


def _ours(uri: str) -> list[tuple[Any, ...]]:
    t = read(uri)
    return sorted(zip(*(t[c].to_pylist() for c in ("id", "p", "v", "ts")), strict=True))


async def test_ordering_aware_deletes_and_updates_on_mor(backend_local: StoreUnderTest) -> None:
    store = backend_local.store
    assert isinstance(store, LocalStore)
    dest = join(backend_local.base, "ord")
    uri = os.path.join(store.root, dest)
    first = [{"id": i, "p": "ab"[i % 2], "v": "0", "ts": 5} for i in range(8)]
    await mutate.upsert(store, dest, _t(first), **DEFAULT)
    m = _upsert({}, first)
    # updates: id 3 older than stored (stays, on read), id 4 newer (wins)
    up = [{"id": 3, "p": "b", "v": "old", "ts": 2}, {"id": 4, "p": "a", "v": "new", "ts": 7}]
    await mutate.upsert(store, dest, _t(up), **DEFAULT)
    m = _upsert(m, up)
    assert hudi_snapshot(uri) == rows_of(m) == _ours(uri)
    # deletes: id 0 newer than stored (goes), id 1 older (stays), id 2 equal (goes: the
    # stored one is not greater), id 4 older than its stored value *in the log* (7: stays)
    dele = [
        {"id": 0, "p": "a", "v": None, "ts": 9},
        {"id": 1, "p": "b", "v": None, "ts": 3},
        {"id": 2, "p": "a", "v": None, "ts": 5},
        {"id": 4, "p": "a", "v": None, "ts": 6},
    ]
    rep = await mutate.delete(store, dest, _t(dele), record_key="id", partition_by="p", config=MOR["config"])
    m = _delete(m, dele)
    assert (rep.deleted, rep.kept_stored) == (2, 2)
    assert hudi_snapshot(uri) == rows_of(m) == _ours(uri)
    assert (("a", 4) in m) and (("b", 1) in m) and (("a", 0) not in m)
    # the delete blocks carry the deletes' ordering values, as LongWrapper records
    got: dict[str, tuple[Any, str | None]] = {}
    async for info in store.list(dest, recursive=True):
        name = info.path.rpartition("/")[2]
        if parse_log_file_name(name) and rep.instant in name:
            for b in lb.read_blocks(await store.get(info.path)).blocks:
                if b.type == lb.BlockType.DELETE:
                    got |= {r.record_key: (r.ordering, r.ordering_type) for r in lb.decode_delete_records(b)}
    assert got == {
        "0": (9, "LongWrapper"),
        "1": (3, "LongWrapper"),
        "2": (5, "LongWrapper"),
        "4": (6, "LongWrapper"),
    }
    # a newer update of a kept key still wins after the losing delete
    up2 = [{"id": 1, "p": "b", "v": "later", "ts": 10}]
    await mutate.upsert(store, dest, _t(up2), **DEFAULT)
    m = _upsert(m, up2)
    assert hudi_snapshot(uri) == rows_of(m) == _ours(uri)


async def test_deletes_without_ordering_values_are_natural_order(backend_local: StoreUnderTest) -> None:
    """A delete whose rows lack the precombine field always wins (``IntWrapper(0)``), on a
    Default-payload table too; ``kept_stored`` stays 0."""
    import pyarrow as pa

    store = backend_local.store
    assert isinstance(store, LocalStore)
    dest = join(backend_local.base, "nat")
    uri = os.path.join(store.root, dest)
    first = [{"id": i, "p": "a", "v": "0", "ts": 5} for i in range(3)]
    await mutate.upsert(store, dest, _t(first), **DEFAULT)
    keys = pa.table({"id": pa.array([0, 1], pa.int64()), "p": ["a", "a"]})
    rep = await mutate.delete(store, dest, keys, record_key="id", partition_by="p", config=MOR["config"])
    assert (rep.deleted, rep.kept_stored) == (2, 0)
    assert hudi_snapshot(uri) == [(2, "a", "0", 5)] == _ours(uri)
