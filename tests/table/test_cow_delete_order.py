"""``DefaultHoodieRecordPayload`` on Copy-on-Write, ordering-aware for deletes as on
Merge-on-Read (tests/table/test_mor_ordering.py): a delete carrying an ordering value older
than the stored record's leaves it (``kept_stored`` counts it), an equal or newer one
deletes it, a delete without the precombine field always wins. The rewritten base files
are read the same by hudi-rs and amcommit's reader, as the model says."""

from __future__ import annotations

import os
from typing import Any

import pytest

from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table.errors import MutationError
from amcommit.table.mutate import engine as mutate
from tests.backends import StoreUnderTest
from tests.table.test_mor_ordering import _delete, _ours, _upsert
from tests.table.test_mutate import KW, _t, hudi_snapshot, rows_of

DEFAULT: dict[str, Any] = KW | {"payload": "DefaultHoodieRecordPayload", "precombine_field": "ts"}
DELETE: dict[str, Any] = KW | {
    "precombine_field": "ts",  # the payload by Hudi's option name
    "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
}


async def test_ordering_aware_deletes_on_cow(backend_local: StoreUnderTest) -> None:
    store = backend_local.store
    assert isinstance(store, LocalStore)
    dest = join(backend_local.base, "ord")
    uri = os.path.join(store.root, dest)
    first = [{"id": i, "p": "ab"[i % 2], "v": "0", "ts": 5} for i in range(8)]
    await mutate.upsert(store, dest, _t(first), **DEFAULT)
    m = _upsert({}, first)
    up = [{"id": 3, "p": "b", "v": "old", "ts": 2}, {"id": 4, "p": "a", "v": "new", "ts": 7}]
    rep = await mutate.upsert(store, dest, _t(up), **DEFAULT)
    m = _upsert(m, up)
    assert rep.kept_stored == 1  # id 3: the stored record is newer
    assert hudi_snapshot(uri) == rows_of(m) == _ours(uri)
    # deletes: id 0 newer than stored (goes), id 1 older (stays), id 2 equal (goes: the
    # stored one is not greater), id 4 older than its updated value 7 (stays)
    dele = [
        {"id": 0, "p": "a", "v": None, "ts": 9},
        {"id": 1, "p": "b", "v": None, "ts": 3},
        {"id": 2, "p": "a", "v": None, "ts": 5},
        {"id": 4, "p": "a", "v": None, "ts": 6},
    ]
    rep = await mutate.delete(store, dest, _t(dele), **DELETE)
    m = _delete(m, dele)
    assert (rep.deleted, rep.kept_stored) == (2, 2)
    assert hudi_snapshot(uri) == rows_of(m) == _ours(uri)
    assert (("a", 4) in m) and (("b", 1) in m) and (("a", 0) not in m) and (("a", 2) not in m)
    # a delete by keys alone (no ordering value): natural order, it always wins
    keys_only = _t([{"id": 1, "p": "b", "v": None, "ts": None}]).drop_columns(["ts"])
    rep = await mutate.delete(store, dest, keys_only, **KW)
    del m[("b", 1)]
    assert (rep.deleted, rep.kept_stored) == (1, 0)
    assert hudi_snapshot(uri) == rows_of(m) == _ours(uri)


async def test_delete_takes_the_payload_by_keyword(backend_local: StoreUnderTest) -> None:
    """``delete(payload=...)`` is the keyword spelling of the Hudi option above."""
    store = backend_local.store
    assert isinstance(store, LocalStore)
    dest = join(backend_local.base, "kw")
    uri = os.path.join(store.root, dest)
    first = [{"id": i, "p": "a", "v": "0", "ts": 5} for i in range(3)]
    await mutate.upsert(store, dest, _t(first), **DEFAULT)
    dele = [{"id": 0, "p": "a", "v": None, "ts": 9}, {"id": 1, "p": "a", "v": None, "ts": 3}]
    rep = await mutate.delete(store, dest, _t(dele), **DEFAULT)
    assert (rep.deleted, rep.kept_stored) == (1, 1)
    assert hudi_snapshot(uri) == rows_of(_delete(_upsert({}, first), dele)) == _ours(uri)


async def test_an_upsert_only_option_given_to_delete_is_named(backend_local: StoreUnderTest) -> None:
    dest = join(backend_local.base, "opt")
    with pytest.raises(MutationError) as e:
        await mutate.delete(
            backend_local.store, dest, _t([{"id": 0, "p": "a", "v": None, "ts": 1}]), **KW, max_file_rows=5
        )
    assert str(e.value) == "delete() takes no option 'max_file_rows'"
    assert not [e async for e in backend_local.store.list(dest)]
