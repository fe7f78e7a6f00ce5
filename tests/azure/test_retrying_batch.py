"""The retrying store handle's ``delete_batch`` (:class:`amcommit.store.retry.RetryingStore`)
on Azure Blob (Azurite), behind a fault-injecting store: the whole call is repeated after
a transient failure or a lost answer (paths already gone are no failure), and given up
after the policy."""

from __future__ import annotations

import pytest

from amcommit.errors import Transient
from amcommit.store.base import batch_deleter
from amcommit.store.retry import RetryingStore, RetryPolicy
from amcommit.testing.faults import FaultyStore
from tests.azure.conftest import BlobEnv
from tests.azure.test_blob_batch import names

FAST = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002)


@pytest.mark.parametrize("fault", ["fail", "lose_response"])
async def test_delete_batch_repeated_as_a_whole(blob_env: BlobEnv, fault: str) -> None:
    s = blob_env.store()
    for p in ("d/a", "d/b", "keep"):
        await s.put(p, b"x")
    faulty = FaultyStore(s)
    rule = getattr(faulty, fault)("delete_batch", count=1)
    rs = RetryingStore(faulty, FAST)
    assert batch_deleter(rs) is rs and rs.capabilities.delete_batch_max == 256
    assert await rs.delete_batch(["d/a", "d/b"]) == {}
    assert rule.fired == 1 and rule.matched == 2
    assert await names(blob_env) == ["keep"]


async def test_delete_batch_gives_up_after_the_policy(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    await s.put("d/a", b"x")
    faulty = FaultyStore(s)
    rule = faulty.fail("delete_batch")
    with pytest.raises(Transient) as err:
        await RetryingStore(faulty, FAST).delete_batch(["d/a"])
    assert rule.fired == 3 and err.value.retries_spent
    assert await names(blob_env) == ["d/a"]
