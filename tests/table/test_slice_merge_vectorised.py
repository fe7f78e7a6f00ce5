"""The vectorised data step of a file slice's merge (amcommit.table.query.merge._merge_run)
against the general path it stands in for (file_group.merge.merge_file after the per-record
last-row-per-key pass): equal tables, rows in the same order, for random slices with keys
written several times, both payloads, ordering ties, null and float precombine values; and
the fallback when the columns differ."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from amcommit.table.file_group.merge import Payload, merge_file
from amcommit.table.format.naming import META_COLUMNS
from amcommit.table.query.merge import SliceRecipe, _merge_run

KEY = META_COLUMNS[2]


def _table(keys: list[str], ts: pa.Array, tag: str) -> pa.Table:
    n = len(keys)
    return pa.table(
        {
            META_COLUMNS[0]: pa.array([tag] * n, pa.string()),
            META_COLUMNS[1]: pa.array([f"{tag}_{i}" for i in range(n)], pa.string()),
            KEY: pa.array(keys, pa.string()),
            META_COLUMNS[3]: pa.array(["p"] * n, pa.string()),
            META_COLUMNS[4]: pa.array(["f"] * n, pa.string()),
            "ts": ts,
            "v": pa.array([f"{tag}-{k}-{i}" for i, k in enumerate(keys)], pa.string()),
        }
    )


def _general(state: pa.Table, incoming: pa.Table, recipe: SliceRecipe) -> pa.Table:
    """What merge_slice did before the vectorised step: last row per key in Python, then
    merge_file with the new keys appended."""
    keys = [str(k) for k in incoming.column(KEY).to_pylist()]
    last = {k: i for i, k in enumerate(keys)}
    idx = sorted(last.values())
    incoming, keys = incoming.take(pa.array(idx, pa.int64())), [keys[i] for i in idx]
    is_new = pc.invert(pc.is_in(pa.array(keys, pa.string()), value_set=state.column(KEY)))
    appended = incoming.filter(is_new) if pc.any(is_new).as_py() else None
    out, _ = merge_file(
        state,
        incoming,
        keys,
        set(),
        precombine_field=recipe.precombine,
        payload=recipe.payload,
        appended=appended,
    )
    return out


def _ts(rng: np.random.Generator, n: int, kind: str) -> pa.Array:
    if kind == "long":
        return pa.array(rng.integers(0, 4, n), pa.int64(), mask=rng.random(n) < 0.1)
    vals = rng.choice(np.array([0.0, -0.0, 1.5, np.nan, 2.0]), n)
    return pa.array(vals, pa.float64(), mask=rng.random(n) < 0.1)


@pytest.mark.parametrize("payload", list(Payload))
@pytest.mark.parametrize("kind", ["long", "double"])
@pytest.mark.parametrize("seed", range(12))
def test_vectorised_step_equals_the_general_merge(seed: int, payload: Payload, kind: str) -> None:
    rng = np.random.default_rng(seed)
    universe = [f"k{i}" for i in range(int(rng.integers(1, 60)))]
    n_state = int(rng.integers(1, 80))
    state_keys = [str(k) for k in rng.choice(universe, n_state)]
    if seed % 3 != 0:  # a key held twice in a base file: only in every third case
        state_keys = list(dict.fromkeys(state_keys))
    in_keys = [
        str(k) for k in rng.choice(universe + [f"new{i}" for i in range(10)], int(rng.integers(1, 90)))
    ]
    state = _table(state_keys, _ts(rng, len(state_keys), kind), "s")
    incoming = _table(in_keys, _ts(rng, len(in_keys), kind), "i")
    recipe = SliceRecipe(("k",), payload, "ts")
    got = _merge_run(state, incoming, recipe)
    assert got is not None
    want = _general(state, incoming, recipe)
    assert got.schema.equals(want.schema)
    assert got.to_pylist() == want.to_pylist() or _nan_equal(got, want)


def _nan_equal(a: pa.Table, b: pa.Table) -> bool:
    fill = {"ts": pa.scalar(-99.0)}
    return bool(
        a.set_column(
            5, "ts", pc.fill_null(pc.if_else(pc.is_nan(a["ts"]), -98.0, a["ts"]), fill["ts"])
        ).to_pylist()
        == b.set_column(
            5, "ts", pc.fill_null(pc.if_else(pc.is_nan(b["ts"]), -98.0, b["ts"]), fill["ts"])
        ).to_pylist()
    )


def test_a_key_written_three_times_takes_its_last_row_then_the_payload_decides() -> None:
    state = _table(["a", "b"], pa.array([5, 5], pa.int64()), "s")
    incoming = _table(["a", "c", "a", "b", "a"], pa.array([9, 1, 1, 6, 3], pa.int64()), "i")
    over = _merge_run(state, incoming, SliceRecipe(("k",), Payload.OVERWRITE_WITH_LATEST, "ts"))
    assert over is not None
    # stored rows kept (none), the replacing rows in incoming order, then the new key
    assert over.select([KEY, "ts", "v"]).to_pylist() == [
        {KEY: "b", "ts": 6, "v": "i-b-3"},
        {KEY: "a", "ts": 3, "v": "i-a-4"},
        {KEY: "c", "ts": 1, "v": "i-c-1"},
    ]
    default = _merge_run(state, incoming, SliceRecipe(("k",), Payload.DEFAULT, "ts"))
    assert default is not None
    # a: the last row (ts 3) is older than the stored 5, so the stored row stays
    assert default.select([KEY, "ts", "v"]).to_pylist() == [
        {KEY: "a", "ts": 5, "v": "s-a-0"},
        {KEY: "b", "ts": 6, "v": "i-b-3"},
        {KEY: "c", "ts": 1, "v": "i-c-1"},
    ]


def test_other_columns_or_null_keys_take_the_general_path() -> None:
    state = _table(["a"], pa.array([1], pa.int64()), "s")
    wider = _table(["a"], pa.array([2], pa.int64()), "i").append_column("x", pa.array([1]))
    assert _merge_run(state, wider, SliceRecipe(("k",), Payload.OVERWRITE_WITH_LATEST, "ts")) is None
    null_key = _table(["a"], pa.array([2], pa.int64()), "i").set_column(2, KEY, pa.array([None], pa.string()))
    assert _merge_run(state, null_key, SliceRecipe(("k",), Payload.OVERWRITE_WITH_LATEST, "ts")) is None
