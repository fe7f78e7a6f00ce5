"""Precombine values (issue 32 items 6 and 7), engine path: a ``double`` precombine column
upserted into a table where it is ``long`` is widened as the README documents (no untyped
pyarrow error), and floats order as Hudi's ``Double.compareTo`` orders them: NaN above every
value, ``-0.0`` below ``0.0`` (within a batch and against the stored record)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pyarrow as pa
import pytest

from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.file_group import merge
from amcommit.table.mutate import engine as mutate
from amcommit.table.mutate import plan
from amcommit.table.timeline.instants import list_instants
from amcommit.table.write.task import committed_schema, latest_write
from tests.backends import StoreUnderTest
from tests.table.test_mutate import KW, amcommit_snapshot, hudi_snapshot

NAN = float("nan")
DOUBLE = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string()), ("ts", pa.float64())])
LONG = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.string()), ("ts", pa.int64())])


def _t(rows: list[tuple[int, str, Any]], schema: pa.Schema = DOUBLE) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "p": "a", "v": v, "ts": ts} for i, v, ts in rows], schema=schema)


def _norm(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """NaN made comparable (NaN != NaN), -0.0 told from 0.0."""
    out = []
    for r in rows:
        ts = r[3]
        if isinstance(ts, float):
            ts = "nan" if math.isnan(ts) else (ts, math.copysign(1.0, ts))
        out.append((*r[:3], ts))
    return sorted(out)


async def _ts_type(store: Store, dest: str) -> str:
    schema = await committed_schema(store, dest, latest_write(await list_instants(store, dest)))
    assert schema is not None
    (ts,) = [f["type"] for f in json.loads(schema)["fields"] if f["name"] == "ts"]
    return str(ts[1] if isinstance(ts, list) else ts)


def _hudi(store: Store, dest: str) -> list[tuple[Any, ...]]:
    assert isinstance(store, LocalStore)
    return hudi_snapshot(os.path.join(store.root, dest))


@pytest.mark.parametrize("payload", list(mutate.Payload))
async def test_double_precombine_into_long_table_widens(backend_local: StoreUnderTest, payload: str) -> None:
    store, dest = backend_local.store, join(backend_local.base, "wide")
    first = _t([(1, "one", 5), (2, "two", 5), (3, "three", 9)], LONG)
    await mutate.upsert(store, dest, first, precombine_field="ts", **KW)
    assert await _ts_type(store, dest) == "long"
    # 6.5 replaces 5; 4.5 is older than the stored 9 (kept by the ordering-aware payload)
    rep = await mutate.upsert(
        store, dest, _t([(1, "one'", 6.5), (3, "three'", 4.5)]), precombine_field="ts", payload=payload, **KW
    )
    assert await _ts_type(store, dest) == "double"
    if payload == mutate.Payload.DEFAULT:
        assert (rep.updated, rep.kept_stored) == (1, 1)
        want = [(1, "a", "one'", 6.5), (2, "a", "two", 5.0), (3, "a", "three", 9.0)]
    else:
        assert (rep.updated, rep.kept_stored) == (2, 0)
        want = [(1, "a", "one'", 6.5), (2, "a", "two", 5.0), (3, "a", "three'", 4.5)]
    got = await amcommit_snapshot(store, dest)
    assert got == want and all(isinstance(r[3], float) for r in got)
    assert _hudi(store, dest) == want
    # and back: a long batch into the now double column is cast up
    await mutate.upsert(store, dest, _t([(2, "two'", 7)], LONG), precombine_field="ts", payload=payload, **KW)
    want[1] = (2, "a", "two'", 7.0)
    assert await amcommit_snapshot(store, dest) == want == _hudi(store, dest)


def test_precombine_key_orders_as_double_compare_to() -> None:
    values = [NAN, math.inf, 1.0, 0.0, -0.0, -1.0, -math.inf]
    got = sorted(values, key=plan.precombine_key, reverse=True)
    assert [repr(v) for v in got] == [repr(v) for v in values]
    assert plan.precombine_key(3) == 3 and plan.precombine_key("b") > plan.precombine_key("a")
    a = pa.array([NAN, 1.0, 0.0, -0.0, NAN, None, 2.0])
    b = pa.array([1e308, NAN, -0.0, 0.0, NAN, 1.0, None])
    assert merge.precombine_greater(a, b).to_pylist() == [True, False, True, False, False, None, None]
    ints = pa.array([1, 2, 3], pa.int64())
    assert merge.precombine_greater(ints, pa.array([NAN, 1.5, 3.0])).to_pylist() == [False, True, False]


async def test_nan_precombine_orders_above_every_value(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "nan")
    batch = _t(
        [
            (1, "nan-first", NAN),
            (1, "one", 1.0),
            (2, "inf", math.inf),
            (2, "nan-last", NAN),
            (3, "plus-zero", 0.0),
            (3, "minus-zero", -0.0),
            (4, "max", 1.7976931348623157e308),
            (4, "nan-mid", NAN),
            (4, "min", -1.0),
        ]
    )
    rep = await mutate.upsert(store, dest, batch, precombine_field="ts", **KW)
    assert (rep.inserted, rep.duplicates_dropped) == (4, 5)
    want = [
        (1, "a", "nan-first", "nan"),
        (2, "a", "nan-last", "nan"),
        (3, "a", "plus-zero", (0.0, 1.0)),
        (4, "a", "nan-mid", "nan"),
    ]
    assert _norm(await amcommit_snapshot(store, dest)) == want == _norm(_hudi(store, dest))
    # against the stored record (ordering-aware payload): a stored NaN stays against any
    # value, a stored 0.0 against -0.0; a stored value loses to an incoming NaN
    later = _t([(1, "huge", 1e308), (3, "minus-zero", -0.0), (5, "new", 1.0)])
    rep = await mutate.upsert(
        store, dest, later, precombine_field="ts", payload="DefaultHoodieRecordPayload", **KW
    )
    assert (rep.kept_stored, rep.updated, rep.inserted) == (2, 0, 1)
    rep = await mutate.upsert(
        store,
        dest,
        _t([(5, "nan-wins", NAN)]),
        precombine_field="ts",
        payload="DefaultHoodieRecordPayload",
        **KW,
    )
    assert (rep.kept_stored, rep.updated) == (0, 1)
    want.append((5, "a", "nan-wins", "nan"))
    assert _norm(await amcommit_snapshot(store, dest)) == want == _norm(_hudi(store, dest))
