"""The retrying store handle (:class:`amcommit.store.retry.RetryingStore`) over real local
files behind a fault-injecting store: each operation it retries succeeds through
transient faults and gives up after its policy; the ones it must not repeat (renames,
conditional puts) are tried once; non-retryable answers are never repeated."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from amcommit.committer import CommitterConfig
from amcommit.errors import AlreadyExists, NotFound, PreconditionFailed, Transient
from amcommit.store.base import PutMode, RenameRequest, UpdateIf, batch_deleter, batch_renamer, read_range
from amcommit.store.local import LocalStore
from amcommit.store.retry import RetryingStore, RetryPolicy
from amcommit.testing.faults import FaultyStore

ATTEMPTS = 3
FAST = RetryPolicy(max_attempts=ATTEMPTS, base_delay=0.001, max_delay=0.002)


@pytest.fixture
async def stores(tmp_path: Path) -> tuple[LocalStore, FaultyStore, RetryingStore]:
    local = LocalStore(str(tmp_path))
    await local.put("d/a", b"alpha")
    await local.put("d/b", b"beta")
    faulty = FaultyStore(local)
    return local, faulty, RetryingStore(faulty, FAST)


async def _list(rs: RetryingStore) -> Any:
    return sorted((i.path, i.size) for i in [i async for i in rs.list("d")])


async def _get_range(rs: RetryingStore) -> Any:
    return await read_range(rs, "d/a", 1, 3)  # the handle's get_range, as callers read ranges


async def _stat(rs: RetryingStore) -> Any:
    return (await rs.stat("d/a")).size


async def _put_create(rs: RetryingStore) -> Any:
    return (await rs.put("d/new", b"n", mode=PutMode.CREATE)).size


# op as FaultyStore names it, the call through the handle, its answer, the listing after
RETRIED: list[tuple[str, Callable[[RetryingStore], Awaitable[Any]], Any, list[tuple[str, bytes]]]] = [
    ("stat", _stat, 5, [("d/a", b"alpha"), ("d/b", b"beta")]),
    ("get", lambda rs: rs.get("d/b"), b"beta", [("d/a", b"alpha"), ("d/b", b"beta")]),
    ("get", _get_range, b"lph", [("d/a", b"alpha"), ("d/b", b"beta")]),
    ("list", _list, [("d/a", 5), ("d/b", 4)], [("d/a", b"alpha"), ("d/b", b"beta")]),
    ("mkdirs", lambda rs: rs.mkdirs("e/f"), None, [("d/a", b"alpha"), ("d/b", b"beta")]),
    ("delete", lambda rs: rs.delete("d/a"), True, [("d/b", b"beta")]),
    ("put", lambda rs: rs.put("d/a", b"A2"), None, [("d/a", b"A2"), ("d/b", b"beta")]),
    ("put", _put_create, 1, [("d/a", b"alpha"), ("d/b", b"beta"), ("d/new", b"n")]),
]


async def _files(local: LocalStore) -> list[tuple[str, bytes]]:
    return sorted([(i.path, await local.get(i.path)) async for i in local.list("")])


def _answer(got: Any) -> Any:
    return None if hasattr(got, "etag") else got  # an ObjectInfo of a put: checked by listing


@pytest.mark.parametrize(
    ("op", "call", "answer", "after"), RETRIED, ids=[f"{r[0]}-{i}" for i, r in enumerate(RETRIED)]
)
async def test_retried_through_transient_faults(
    stores: tuple[LocalStore, FaultyStore, RetryingStore],
    op: str,
    call: Callable[[RetryingStore], Awaitable[Any]],
    answer: Any,
    after: list[tuple[str, bytes]],
) -> None:
    local, faulty, rs = stores
    rule = faulty.fail(op, count=ATTEMPTS - 1)
    assert _answer(await call(rs)) == answer
    assert rule.fired == ATTEMPTS - 1 and rule.matched == ATTEMPTS
    assert await _files(local) == after
    if op == "mkdirs":
        assert (await local.stat("e/f")).is_dir


@pytest.mark.parametrize(
    ("op", "call", "answer", "after"), RETRIED, ids=[f"{r[0]}-{i}" for i, r in enumerate(RETRIED)]
)
async def test_gives_up_after_the_policy(
    stores: tuple[LocalStore, FaultyStore, RetryingStore],
    op: str,
    call: Callable[[RetryingStore], Awaitable[Any]],
    answer: Any,
    after: list[tuple[str, bytes]],
) -> None:
    local, faulty, rs = stores
    rule = faulty.fail(op)
    with pytest.raises(Transient) as err:
        await call(rs)
    assert rule.fired == ATTEMPTS and err.value.retries_spent and err.value.attempts == ATTEMPTS
    assert await _files(local) == [("d/a", b"alpha"), ("d/b", b"beta")]  # nothing happened


async def test_an_error_an_inner_layer_gave_up_on_is_not_retried_again(
    stores: tuple[LocalStore, FaultyStore, RetryingStore],
) -> None:
    _, faulty, rs = stores
    outer = RetryingStore(rs, FAST)  # two layers: the outer must not multiply the attempts
    rule = faulty.fail("get")
    with pytest.raises(Transient):
        await outer.get("d/a")
    assert rule.fired == ATTEMPTS


async def test_not_found_is_an_answer_not_retried(
    stores: tuple[LocalStore, FaultyStore, RetryingStore],
) -> None:
    _, faulty, rs = stores
    rule = faulty.fail("get", error=NotFound, count=1)
    with pytest.raises(NotFound):
        await rs.get("d/a")
    assert rule.fired == 1 and rule.matched == 1
    assert await rs.get("d/a") == b"alpha"


async def test_rename_is_tried_once(stores: tuple[LocalStore, FaultyStore, RetryingStore]) -> None:
    local, faulty, rs = stores
    rule = faulty.fail("rename", count=1)
    with pytest.raises(Transient):
        await rs.rename("d/a", "d/c")
    assert rule.matched == 1
    assert await _files(local) == [("d/a", b"alpha"), ("d/b", b"beta")]
    assert (await rs.rename("d/a", "d/c")).dst == "d/c"  # no fault left: passed through
    assert await _files(local) == [("d/b", b"beta"), ("d/c", b"alpha")]


async def test_rename_batch_is_passed_through_once(
    stores: tuple[LocalStore, FaultyStore, RetryingStore],
) -> None:
    local, faulty, rs = stores
    assert batch_renamer(rs) is rs and batch_deleter(rs) is None  # as the wrapped store has them
    rule = faulty.fail("rename", path="d/a", count=1)
    failed = await rs.rename_batch([RenameRequest("d/a", "x/a"), RenameRequest("d/b", "x/b")])
    assert list(failed) == [0] and isinstance(failed[0], Transient) and rule.matched == 1
    assert await _files(local) == [("d/a", b"alpha"), ("x/b", b"beta")]


async def test_conditional_put_is_tried_once(stores: tuple[LocalStore, FaultyStore, RetryingStore]) -> None:
    local, faulty, rs = stores
    etag = (await local.stat("d/a")).etag
    assert etag is not None
    rule = faulty.lose_response("put", count=1)
    with pytest.raises(Transient):  # the write happened, its answer was lost: not repeated
        await rs.put("d/a", b"A2", mode=UpdateIf(etag))
    assert rule.matched == 1
    assert await _files(local) == [("d/a", b"A2"), ("d/b", b"beta")]
    with pytest.raises(PreconditionFailed):  # what a blind repetition would have met
        await rs.put("d/a", b"A3", mode=UpdateIf(etag))


async def test_create_after_a_lost_answer_says_it_exists(
    stores: tuple[LocalStore, FaultyStore, RetryingStore],
) -> None:
    """A CREATE retried after its answer was lost meets its own object: AlreadyExists (the
    caller decides what an existing object means; the docstring says so)."""
    local, faulty, rs = stores
    faulty.lose_response("put", count=1)
    with pytest.raises(AlreadyExists):
        await rs.put("d/new", b"n", mode=PutMode.CREATE)
    assert await _files(local) == [("d/a", b"alpha"), ("d/b", b"beta"), ("d/new", b"n")]


async def test_lost_delete_answer_is_repeated_and_reports_already_gone(
    stores: tuple[LocalStore, FaultyStore, RetryingStore],
) -> None:
    local, faulty, rs = stores
    rule = faulty.lose_response("delete", count=1)
    assert await rs.delete("d/a") is False  # the last attempt's answer (class doc)
    assert rule.matched == 2
    assert await _files(local) == [("d/b", b"beta")]


async def test_of_uses_the_normal_policy_and_does_not_nest(tmp_path: Path) -> None:
    local = LocalStore(str(tmp_path))
    config = CommitterConfig(rename_attempts=4, retry_base_delay=0.01, retry_max_delay=0.5)
    rs = RetryingStore.of(local, config)
    assert rs.inner is local and rs.policy == RetryPolicy(4, 0.01, 0.5)
    assert RetryingStore.of(rs, config) is rs
    other = RetryingStore.of(rs, CommitterConfig(rename_attempts=2))
    assert other.inner is local and other.policy.max_attempts == 2
    assert rs.root_uri == local.root_uri and rs.iostats is local.iostats
    assert rs.capabilities.local_root == local.capabilities.local_root
