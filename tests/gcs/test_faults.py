"""Lost responses, throttling and retries, injected by the GCS double (real HTTP answers and
dropped connections, not a wrapper)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from amcommit.errors import AlreadyExists, Throttled, Transient
from amcommit.store.base import PutMode, UpdateIf
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy
from amcommit.testing.faults import FaultyStore
from tests.gcs.conftest import GcsEnv


@pytest.mark.parametrize("use_move", [True, False], ids=["move", "rewrite"])
async def test_lost_rename_response_is_recovered_by_rename_id(double_env: GcsEnv, use_move: bool) -> None:
    d = double_env.double
    store = double_env.store(use_move=use_move)
    await store.put("src", b"data")
    d.inject("move" if use_move else "rewrite", kind="lost")
    res = await store.rename("src", "dst", rename_id="rid-7")
    assert res.recovered and d.injected[f"lost:{'move' if use_move else 'rewrite'}"] == 1
    st = await store.stat("dst")
    assert st.rename_id == "rid-7" and res.etag == st.etag
    assert not [i async for i in store.list("") if i.path == "src"]
    assert store.iostats.counters["gcs_rename_recovered"] == 1


@pytest.mark.parametrize("op", ["patch", "delete", "get"])
async def test_lost_answers_of_other_rename_steps(double_env: GcsEnv, op: str) -> None:
    d = double_env.double
    store = double_env.store(use_move=(op == "patch"))
    await store.put("src", b"data")
    d.inject(op, kind="lost")
    res = await store.rename("src", "dst", rename_id="r")
    assert d.injected[f"lost:{op}"] == 1
    assert await store.get("dst") == b"data" and (await store.stat("dst")).rename_id == "r"
    assert not res.recovered or op == "delete"


async def test_engine_style_retry_after_lost_response(double_env: GcsEnv) -> None:
    """FaultyStore loses the whole answer; the caller retries with the same rename id."""
    store = double_env.store()
    faulty = FaultyStore(store)
    faulty.lose_response("rename", count=1)
    await store.put("s", b"x")
    with pytest.raises(Transient):
        await faulty.rename("s", "d", rename_id="engine-1")
    res = await faulty.rename("s", "d", rename_id="engine-1")
    assert res.recovered and (await store.stat("d")).rename_id == "engine-1"


async def test_lost_create_answer_is_recognised_as_own_write(double_env: GcsEnv) -> None:
    d = double_env.double
    store = double_env.store()
    d.inject("insert", kind="lost")
    info = await store.put("c", b"mine", mode=PutMode.CREATE)
    assert info.size == 4 and await store.get("c") == b"mine"
    # a conflicting writer is still a conflict
    with pytest.raises(AlreadyExists):
        await store.put("c", b"theirs", mode=PutMode.CREATE)
    d.inject("insert", kind="lost")
    upd = await store.put("c", b"next", mode=UpdateIf(info.etag or ""))
    assert upd.etag != info.etag and await store.get("c") == b"next"


async def test_overwrite_is_not_retried_after_an_ambiguous_failure(double_env: GcsEnv) -> None:
    d = double_env.double
    store = double_env.store()
    d.inject("insert", kind="lost")
    with pytest.raises(Transient) as ei:
        await store.put("o", b"1")
    assert ei.value.attempts == 1 and d.calls["insert"] >= 1
    d.inject("insert", status=503)
    before = d.calls["insert"]
    with pytest.raises(Throttled) as ti:
        await store.put("o", b"2")
    assert ti.value.attempts == 1 and d.calls["insert"] - before == 1
    # 429 means GCS did nothing: safe to retry even an unconditional write
    d.inject("insert", status=429, retry_after=0.01, count=2)
    await store.put("o", b"3")
    assert await store.get("o") == b"3"


async def test_lost_resumable_chunk_answers(double_env: GcsEnv) -> None:
    d = double_env.double
    store = double_env.store(multipart_threshold=1024, chunk_size=256 * 1024)
    data = bytes(range(256)) * 3000  # 768,000 bytes: three chunks
    # rules see a request until one fires: 1st chunk passes both, 2nd fires the first rule,
    # its retry passes the second rule (its 2nd match), the last chunk fires it
    d.inject("upload_chunk", kind="lost", after=1)
    d.inject("upload_chunk", kind="lost", after=2)
    info = await store.put("r", data, mode=PutMode.CREATE)
    assert info.size == len(data) and await store.get("r") == data
    assert d.injected["lost:upload_chunk"] == 2


async def test_throttling_is_retried_and_slows_the_limiters(double_env: GcsEnv) -> None:
    d = double_env.double
    # min_samples=1: a handful of requests, each throttling answer counts at once
    limiter = Limiter(max_concurrency=8, rate=500.0, cooldown=0.0, min_samples=1)
    writes = Limiter(max_concurrency=1000, rate=500.0, cooldown=0.0, min_samples=1)
    store = double_env.store(limiter=limiter, write_limiter=writes)
    d.inject("insert", status=429, retry_after=0.05, count=2)
    d.inject("get", status=503, retry_after=0.05, count=1)
    t0 = time.monotonic()
    await store.put("t", b"1", mode=PutMode.CREATE)
    st = await store.stat("t")
    assert st.size == 1
    assert time.monotonic() - t0 >= 0.1  # Retry-After honoured
    assert store.iostats.counters["store_io_throttled"] == 3
    assert store.iostats.counters["store_io_retry"] == 3
    assert limiter.throttle_events == 3 and (limiter.rate or 0) < 500
    assert writes.throttle_events == 2 and (writes.rate or 0) < 500


async def test_server_errors_exhaust_retries(double_env: GcsEnv) -> None:
    d = double_env.double
    store = double_env.store(retry=RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.002))
    await store.put("s", b"1")
    d.inject(["get", "move", "patch", "rewrite"], status=500, count=None)
    with pytest.raises(Transient) as ei:
        await store.rename("s", "d", rename_id="x")
    assert ei.value.attempts == 3
    d.clear_faults()
    d.inject("get", status=408, count=2)
    assert (await store.stat("s")).size == 1


async def test_write_gate_limits_object_writes(double_env: GcsEnv) -> None:
    store = double_env.store(write_rate=200.0)
    assert store.write_limiter is not None and store.write_limiter.max_rate == 200.0
    t0 = time.monotonic()
    for i in range(50):
        await store.put(f"w/{i}", b"x")
    elapsed = time.monotonic() - t0
    assert elapsed >= (50 - 20) / 200 * 0.9  # burst of 20, then 200/s
    # reads are not gated: counted at the gate, not timed (a busy machine slows reads too)
    gate = store.write_limiter
    passed: list[str] = []
    real_slot = gate.slot

    def counting_slot() -> Any:
        passed.append("slot")
        return real_slot()

    gate.slot = counting_slot  # type: ignore[method-assign]
    for i in range(50):
        await store.stat(f"w/{i}")
    assert passed == []
    await store.put("w/last", b"x")  # (the count does see a write)
    assert passed == ["slot"]


def test_default_write_rate_is_gcs_starting_budget() -> None:
    from amcommit.store.gcs import GcsStore

    s = GcsStore("some-bucket", endpoint="http://127.0.0.1:9")
    assert s.write_limiter is not None and s.write_limiter.max_rate == 1000.0
    assert s.write_limiter.ramp == 20 * 60.0  # doubling every 20 minutes of use
    assert s.limiter.max_concurrency is None and s.limiter.adaptive is not None  # adaptive
    assert s.limiter.max_rate is None
    assert GcsStore("some-bucket", endpoint="http://127.0.0.1:9", write_rate=None).write_limiter is None
