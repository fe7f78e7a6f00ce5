"""The one token cache of the HTTP stores (amcommit.store.token), on a fake clock."""

from __future__ import annotations

import anyio
import pytest

from amcommit.store.token import TemporaryToken, TokenCache, bearer_value, refresh_at


@pytest.mark.parametrize(
    ("fetched", "expires", "due"),
    [
        (0.0, 3600.0, 3300.0),  # ordinary token: five minutes early
        (0.0, 60.0, 30.0),  # short-lived: half-way
        (0.0, None, 600.0),  # no expiry: default_ttl
        (100.0, 50.0, 50.0),  # already expired when fetched: due at once
    ],
)
def test_refresh_rule(fetched: float, expires: float | None, due: float) -> None:
    assert refresh_at(fetched, expires, min_ttl=300.0, default_ttl=600.0) == due


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_cache_refreshes_on_the_rule_and_shares_one_fetch() -> None:
    clock = Clock()
    n = 0

    async def fetch() -> TemporaryToken:
        nonlocal n
        n += 1
        await anyio.sleep(0.01)
        return TemporaryToken(f"t{n}", clock.now + 3600)

    cache = TokenCache(fetch, clock=clock)
    got: list[str] = []

    async def one() -> None:
        got.append(await cache.get())

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(one)
    assert got == ["t1"] * 10 and cache.fetches == 1
    clock.now += 3299
    assert await cache.get() == "t1"
    clock.now += 2
    assert await cache.get() == "t2"  # within five minutes of expiry: fetched anew
    assert "t2" not in repr(cache) and "t2" not in repr(TemporaryToken("t2", 1.0))


async def test_invalidate_drops_only_the_refused_token() -> None:
    n = 0

    async def fetch() -> TemporaryToken:
        nonlocal n
        n += 1
        return TemporaryToken(f"t{n}", None)

    cache = TokenCache(fetch, clock=Clock())
    assert await cache.get() == "t1"
    cache.invalidate("t1")
    assert await cache.get() == "t2"
    cache.invalidate("t1")  # a late 401 to a request signed with the old token
    assert await cache.get() == "t2" and cache.fetches == 2
    cache.invalidate()
    assert await cache.get() == "t3"
    assert cache.seen() == ["t1", "t2", "t3"]


def test_bearer_value() -> None:
    assert bearer_value({"Authorization": "Bearer abc"}) == "abc"
    assert bearer_value({"Authorization": "SharedKey a:b"}) is None
    assert bearer_value(None) is None
