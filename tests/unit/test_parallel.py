"""The one bounded parallel runner (:mod:`amcommit.parallel`) and its one rule for
exception groups: what a caller sees when one or several of many calls fail."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from amcommit.errors import NotFound
from amcommit.parallel import gather_limited, run_parallel


def _two_failures() -> list[Callable[[], Awaitable[int]]]:
    """Two calls that both fail (each waits, shielded, until both run, so the second is
    not cancelled by the first): an untyped error first, then a typed store error."""
    arrived = 0
    both = anyio.Event()

    async def fail(first: bool) -> int:
        nonlocal arrived
        with anyio.CancelScope(shield=True):
            arrived += 1
            if arrived == 2:
                both.set()
            await both.wait()
            if not first:
                await anyio.sleep(0.01)  # the store error ends second
        if first:
            raise ValueError("a worker's incidental error")
        raise NotFound("the store said what went wrong", path="t/a", op="get")

    return [lambda: fail(True), lambda: fail(False)]


async def test_several_failures_raise_the_typed_store_error_not_the_first_to_end() -> None:
    with pytest.raises(NotFound, match="the store said"):
        await gather_limited(_two_failures(), 4)


async def test_results_in_order_with_at_most_limit_running() -> None:
    running = peak = 0

    async def one(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.001 * (10 - i))  # later ones end first
        running -= 1
        return i * i

    assert await gather_limited([lambda i=i: one(i) for i in range(10)], 3) == [i * i for i in range(10)]
    assert peak == 3


async def test_one_failure_is_raised_as_itself_and_stops_the_rest() -> None:
    started: list[int] = []

    async def work(i: int) -> None:
        started.append(i)
        if i == 0:
            raise NotFound("gone", path="t/0", op="get")
        await anyio.sleep(1)

    with anyio.fail_after(0.5), pytest.raises(NotFound, match="gone"):
        await run_parallel(list(range(100)), work, 4)
    assert len(started) <= 4
