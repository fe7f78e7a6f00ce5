"""The stores' own ceilings as defaults (issue 27 item 3): a cold GCS bucket's write budget
(1,000 writes/s, doubling at most every 20 minutes of use), an Azure standard account's
20,000 requests/s shared by every store of the process for the account, the settings that
lift or fix them, and the adaptive in-flight limit as every HTTP store's default."""

from __future__ import annotations

import anyio
import pytest

from amcommit.errors import ConfigError
from amcommit.store.azure import BlobStore, DfsStore
from amcommit.store.gcs import GcsStore
from amcommit.store.limits import Limiter
from amcommit.store.schemes import open_store, store_options
from tests.unit.test_limiter import Clock


async def test_gcs_defaults_gate_writes_like_a_cold_bucket_shared_per_bucket() -> None:
    a = GcsStore("ceil-bucket-a", endpoint="http://127.0.0.1:9")
    b = GcsStore("ceil-bucket-a", endpoint="http://127.0.0.1:9")
    other = GcsStore("ceil-bucket-b", endpoint="http://127.0.0.1:9")
    assert a.write_limiter is not None and a.write_limiter.max_rate == 1000.0
    assert a.write_limiter.ramp == 1200.0
    assert a.write_limiter is b.write_limiter and a.limiter is b.limiter  # one budget per bucket
    assert other.write_limiter is not a.write_limiter and other.limiter is not a.limiter
    assert a.limiter.adaptive is not None and a.limiter.concurrency_limit == 64
    assert a.limiter.concurrency_ceiling == 1024
    for s in (a, b, other):
        await s.aclose()


async def test_gcs_settings_lift_or_fix_the_defaults() -> None:
    warm = GcsStore("ceil-bucket-c", endpoint="http://127.0.0.1:9", bucket_warm=True)
    assert warm.write_limiter is None
    fixed = GcsStore("ceil-bucket-c", endpoint="http://127.0.0.1:9", max_concurrency=16)
    assert fixed.limiter.adaptive is None and fixed.limiter.concurrency_limit == 16
    assert fixed.limiter is not warm.limiter  # other settings, another limiter
    faster = GcsStore("ceil-bucket-c", endpoint="http://127.0.0.1:9", write_rate=5000.0)
    assert faster.write_limiter is not None and faster.write_limiter.max_rate == 5000.0
    for s in (warm, fixed, faster):
        await s.aclose()
    with pytest.raises(ConfigError, match="max_concurrency"):
        GcsStore("ceil-bucket-c", endpoint="http://127.0.0.1:9", max_concurrency=0)


async def test_write_ramp_doubles_only_after_a_period_of_use() -> None:
    """10 writes/s ramping every 60 s (a cold bucket scaled down): used fully for a period,
    the budget doubles; a trickle for the next periods does not warm it further."""
    clock = Clock()
    lim = Limiter(max_concurrency=None, rate=10.0, burst=1.0, ramp=60.0, clock=clock)
    for _ in range(605):  # 60 s at the full rate (the clock moves, nothing sleeps)
        async with lim.slot():
            pass
        clock.t += 0.1
    assert lim.max_rate == 20.0 and lim.rate == 20.0 and lim.ramp_doublings == 1
    for _ in range(200):  # 200 s at 1 write/s
        async with lim.slot():
            pass
        clock.t += 1.0
    assert lim.max_rate == 20.0 and lim.ramp_doublings == 1
    with pytest.raises(ConfigError, match="ramp"):
        Limiter(ramp=60.0)  # a ramp needs a rate


async def test_azure_accounts_share_one_budget_on_the_service_hosts() -> None:
    blob = BlobStore("c", endpoint="https://ceilacct.blob.core.windows.net", account_key="a2V5")
    dfs = DfsStore("fs", endpoint="https://ceilacct.dfs.core.windows.net", account_key="a2V5")
    other = BlobStore("c", endpoint="https://ceilother.blob.core.windows.net", account_key="a2V5")
    assert blob.limiter is dfs.limiter  # Blob and ADLS Gen2 count against one account
    assert other.limiter is not blob.limiter
    assert blob.limiter.max_rate == 20_000.0 and blob.limiter.adaptive is not None
    # an emulator (path-style endpoint): the same defaults, a limiter per store
    az1 = BlobStore("c", endpoint="http://127.0.0.1:9/devstoreaccount1", account_key="a2V5")
    az2 = BlobStore("c", endpoint="http://127.0.0.1:9/devstoreaccount1", account_key="a2V5")
    assert az1.limiter is not az2.limiter and az1.limiter.max_rate == 20_000.0
    assert az1.limiter.adaptive is not None
    fixed = BlobStore(
        "c", endpoint="https://ceilacct.blob.core.windows.net", account_key="a2V5", max_concurrency=8
    )
    assert fixed.limiter.adaptive is None and fixed.limiter.concurrency_limit == 8
    free = BlobStore(
        "c", endpoint="http://127.0.0.1:9/devstoreaccount1", account_key="a2V5", request_rate=None
    )
    assert free.limiter.max_rate is None
    for s in (blob, dfs, other, az1, az2, fixed, free):
        await s.aclose()
    with pytest.raises(ConfigError, match="request_rate"):
        BlobStore("c", endpoint="http://127.0.0.1:9/a", request_rate=0)


def test_settings_come_as_strings_from_the_cli_and_spark() -> None:
    assert store_options("gs://b/x", {"bucket_warm": "true", "max_concurrency": "256"}) == {
        "bucket_warm": True,
        "max_concurrency": 256,
    }
    assert store_options("wasb://c@a.blob.core.windows.net/x", {"request_rate": "none"}) == {
        "request_rate": None
    }

    async def main() -> None:
        s = open_store("gs://ceil-bucket-d/x", endpoint="http://127.0.0.1:9", bucket_warm="true")
        assert isinstance(s, GcsStore) and s.write_limiter is None
        await s.aclose()

    anyio.run(main)
