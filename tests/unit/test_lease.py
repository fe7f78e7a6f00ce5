"""amcommit.coord.lease, the one lease primitive, on every backend of the conformance suite
(tests/backends.py): two contenders, renewal after loss, takeover of the observed etag
only, a dead holder, and a holder whose recorded times lie (they never count)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import anyio
import msgspec
import pytest

from amcommit.coord.lease import ABSENT, Holding, Lease, LeaseLost, Seen, Watch, judge
from amcommit.errors import ConflictError, LockLost
from amcommit.liveness import ProcessId, process_id, this_process
from amcommit.paths import join
from tests.backends import StoreUnderTest
from tests.plugins.azure_backends import REQUEST_TIMEOUT as EMULATOR_REQUEST_TIMEOUT

LEASE_BACKENDS = [
    "backend_local",
    "backend_faulty_local",
    "backend_blob_azurite",
    "backend_dfs_server",
    "backend_gcs_fake",
    "backend_gcs_double",
]
"""One representative per class of the conformance backends (tests/backends.py) as far as
the lease is concerned: it only stats, reads, puts (CREATE, UpdateIf) and deletes one
object. ``backend_faulty_local`` stands for every ``faulty(...)`` variant: with no rule
added (none here) a FaultyStore passes every call through unchanged; what differs is
only that it reports no retries of its own, so the lease's retry layer wraps it, which is
the same on every store. ``backend_gcs_double`` stands for ``backend_gcs_double_rewrite``
too: they differ only in how a rename is done (objects.move or rewrite + delete), and
the lease renames nothing. fake-gcs-server and the double stay apart: preconditions are
checked client-side on one, server-side on the other."""


@pytest.fixture(params=LEASE_BACKENDS)
def sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    """The store under test (this module's representatives, see LEASE_BACKENDS)."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


class Body(msgspec.Struct, kw_only=True):
    """A lease body as a user of the primitive might write it; ``wall``: the writer's wall
    clock (never read by the lease)."""

    token: str
    beats: int = 0
    ttl: float = 0.0
    wall: float = 0.0
    process: ProcessId | None = None


def _decode(data: bytes) -> Body | None:
    try:
        return msgspec.json.decode(data, type=Body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _view(b: Body) -> Holding:
    return Holding(token=b.token, beats=b.beats, ttl=b.ttl or None, process=b.process)


def make(sut: StoreUnderTest, ttl: float, token: str, *, wall: float | None = None) -> Lease[Body]:
    """A lease on ``<base>/l.json``; ``wall``: the time its bodies claim (else now)."""

    def encode(beats: int) -> bytes:
        me = this_process()
        return msgspec.json.encode(
            Body(token=token, beats=beats, ttl=ttl, wall=time.time() if wall is None else wall, process=me)
        )

    return Lease(
        sut.store, join(sut.base, "l.json"), ttl=ttl, token=token, decode=_decode, view=_view, encode=encode
    )


def gave_up(seen: Seen[Body] | None) -> ConflictError:
    return ConflictError(f"held by {seen.holding.token if seen and seen.holding else '?'}")


async def body_of(sut: StoreUnderTest) -> Body | None:
    return _decode(await sut.store.get(join(sut.base, "l.json")))


async def test_two_contenders_one_wins(sut: StoreUnderTest) -> None:
    """Two processes' handles acquire at once: exactly one creates it, the other waits
    (the winner renews it meanwhile) and gives up naming the winner."""
    a, b = make(sut, 30.0, "a"), make(sut, 30.0, "b")
    results: dict[str, object] = {}

    async def contend(lease: Lease[Body]) -> None:
        try:
            results[lease.token] = await lease.acquire(wait=0.6, gave_up=gave_up)
        except ConflictError as e:
            results[lease.token] = e

    async with anyio.create_task_group() as tg:
        tg.start_soon(contend, a)
        tg.start_soon(contend, b)
    won = [t for t, r in results.items() if r is None]
    assert len(won) == 1, results
    (loser,) = {"a", "b"} - set(won)
    assert isinstance(results[loser], ConflictError) and str(results[loser]) == f"held by {won[0]}"
    body = await body_of(sut)
    assert body is not None and body.token == won[0]
    winner = a if won[0] == "a" else b
    assert winner.etag == (await sut.store.stat(winner.path)).etag
    assert await winner.release()
    assert [i.path async for i in sut.store.list(sut.base) if not i.is_dir] == []


async def test_renewal_after_loss_is_lost_and_typed(sut: StoreUnderTest) -> None:
    """A holder renewing every ttl/3 whose object is taken over (a conditional replace of
    the version it held) notices at its next renewal (the guarded work is told), then
    refuses writes (the fence) and further renewals with LeaseLost, a LockLost; its
    release leaves the new holder's object alone."""
    a, b = make(sut, 9.0, "a"), make(sut, 30.0, "b")
    assert await a.acquire(wait=1.0, gave_up=gave_up) is None
    await a.renew()  # held: renewing works
    # the takeover lands between two renewals of a (before its keep runs: on a slow machine
    # a's renewals every ttl/3 would otherwise win every race with b's look-then-replace);
    # ttl 9 s: a's safe deadline (6.75 s after its renewal) is far off when keep starts
    seen = await b.observe()
    assert seen.etag == a.etag and seen.holding is not None and seen.holding.token == "a"
    assert await b.take_over(seen)
    lost: list[str | None] = []
    # the bound: a's next renewal (3 s) is a put that the HTTP stores shield from
    # cancellation (nothing lands after its caller moved on), so keep's own deadline cannot
    # cut it short: one hung emulator request waits its request timeout (20 s on the
    # suite's emulator stores) and is sent again (the likely cause of the one run on Azurite
    # where a 30 s bound ran out)
    with anyio.fail_after(3 + 3 * EMULATOR_REQUEST_TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.keep, lambda: lost.append(a.lost))
    assert lost == ["another writer took it over"]
    with pytest.raises(LeaseLost) as ei:
        await a.renew()
    assert isinstance(ei.value, LockLost) and "another writer took it over" in str(ei.value)
    with pytest.raises(LeaseLost, match="put 'x' was not started"):
        a.check("put", "x")
    assert not await a.release()
    body = await body_of(sut)
    assert body is not None and body.token == "b"


async def test_takeover_replaces_only_the_observed_etag(sut: StoreUnderTest) -> None:
    """An observer's takeover of a version renewed since it looked fails and changes
    nothing; the takeover of the current version succeeds."""
    holder, taker = make(sut, 30.0, "h"), make(sut, 30.0, "t")
    assert await holder.acquire(wait=1.0, gave_up=gave_up) is None
    old = await taker.observe()
    await holder.renew()
    assert holder.etag != old.etag
    assert not await taker.take_over(old)
    body = await body_of(sut)
    assert body is not None and body.token == "h" and holder.lost is None
    await holder.renew()  # still the holder's
    assert await taker.take_over(await taker.observe())
    body = await body_of(sut)
    assert body is not None and body.token == "t"


def _dead_process() -> ProcessId:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid = process_id(child.pid)
        assert pid is not None
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return pid


@pytest.mark.parametrize("where", ["this host", "another host"])
async def test_dead_holder(sut: StoreUnderTest, where: str) -> None:
    """A holder whose process was SIGKILLed is taken over at once on its own host (ttl
    60 s); the same holder recorded on another host cannot be proven dead: its lease is
    waited for (here: given up after 1 s)."""
    dead = _dead_process()
    if where == "another host":
        dead = msgspec.structs.replace(dead, host="another-host.example")
    path = join(sut.base, "l.json")
    await sut.store.put(path, msgspec.json.encode(Body(token="dead", beats=7, ttl=60.0, process=dead)))
    taker = make(sut, 60.0, "t")
    t0 = time.monotonic()
    if where == "this host":
        replaced = await taker.acquire(wait=30.0, gave_up=gave_up)
        assert replaced is not None and replaced.body is not None and replaced.body.token == "dead"
        assert time.monotonic() - t0 < 10
        body = await body_of(sut)
        assert body is not None and body.token == "t"
    else:
        with pytest.raises(ConflictError, match="held by dead"):
            await taker.acquire(wait=1.0, gave_up=gave_up)
        body = await body_of(sut)
        assert body is not None and body.token == "dead"


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
async def test_recorded_times_never_count(sut: StoreUnderTest, skew: float) -> None:
    """A holder whose recorded times lie by an hour (its clock behind: the body looks long
    stale; ahead: it looks fresh for an hour) is judged only by its etag on the observer's
    monotonic clock: while it renews it is never taken over, and once it stops it is taken
    over after its ttl, not before and not an hour later."""
    ttl = 3.0  # (1 s: a renewal on a loaded machine came too late and the holder lost it)
    holder = make(sut, ttl, "h", wall=time.time() + skew)
    taker = make(sut, ttl, "t")
    assert await holder.acquire(wait=1.0, gave_up=gave_up) is None
    async with anyio.create_task_group() as tg:
        tg.start_soon(holder.keep, tg.cancel_scope.cancel)
        with pytest.raises(ConflictError, match="held by h"):
            await taker.acquire(wait=1.2 * ttl, gave_up=gave_up)
        tg.cancel_scope.cancel()
    assert holder.lost is None
    t0 = time.monotonic()  # the holder stopped renewing (its process "died")
    replaced = await taker.acquire(wait=60.0, gave_up=gave_up)
    waited = time.monotonic() - t0
    assert replaced is not None and replaced.body is not None and replaced.body.token == "h"
    assert ttl <= waited < 60.0, waited  # after the ttl; not an hour later
    body = await body_of(sut)
    assert body is not None and body.token == "t"


def test_clock_rule_is_pure() -> None:
    """The judgement: unchanged for longer than ttl on the observer's clock, a dead
    holder, or our own earlier holder; a changed etag restarts the clock."""
    w = Watch()
    s1: Seen[Body] = Seen("e1", None, None)
    assert w.see(s1, 100.0) == (0.0, False)
    assert w.see(s1, 105.0) == (5.0, False)
    assert w.see(Seen("e2", None, None), 106.0) == (0.0, True)
    assert w.see(ABSENT, 107.0) == (0.0, True)
    w2 = Watch(ABSENT, 0.0)
    assert w2.see(s1, 1.0) == (0.0, True)  # created after we found none: a change
    assert judge(5.0, 4.0) == "take" and judge(3.0, 4.0) == "wait"
    assert judge(0.0, 4.0, dead=True) == "take" and judge(0.0, 4.0, reclaim=True) == "take"
