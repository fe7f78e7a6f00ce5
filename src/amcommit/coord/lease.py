"""A lease on one object of a store: who may act now, judged with one clock rule.

One object (``path``) names its holder; its content is the user's (the destination lock's
:class:`~amcommit.committer.lock.LockBody`, the streaming query's
:class:`~amcommit.spark.stream_state.Lease`), read through ``view`` as a :class:`Holding`:
the holder's ``token`` (all writes of one holder carry it), the number of the write
(``beats``), the ``ttl`` it announced and its process
(:class:`~amcommit.liveness.ProcessId`). The protocol uses only the store's conditional
writes:

* **Acquire**: ``put(PutMode.CREATE)``; of several creators exactly one wins.
* **Renew**: ``put(UpdateIf(etag we hold))`` (:meth:`Lease.keep`, every ``ttl/3``). A failed
  precondition means another writer replaced the object: the lease is lost
  (:class:`LeaseLost`, with the reason in :attr:`Lease.lost`). So does failing to renew
  before ``SAFE_FRACTION * ttl`` after the last successful renewal was *sent* (a store
  outage): the holder's own deadline, :attr:`Lease.safe_until`, on its monotonic clock.
* **Expiry: one clock rule.** An observer judges a lease expired only after seeing the
  *same etag* for longer than the holder's ``ttl`` on the observer's own monotonic clock
  (:class:`Watch`, :func:`judge`). Times written in the object are never compared with
  the observer's clock: the holder sent its last renewal before the observer could first
  see it, so the holder's deadline (``SAFE_FRACTION * ttl`` after sending) passes before
  any takeover is possible. Only the clock *rates* of the two processes must agree (within
  ``1/SAFE_FRACTION``), never their values: a holder whose recorded times lie (a skewed
  wall clock) is judged exactly like any other.
* **Takeover**: ``put(UpdateIf(the exact etag observed))``: of several observers of one
  stale version exactly one wins; a version renewed meanwhile is never replaced.
* **Dead holders**: a holder whose process this observer can prove gone
  (:func:`~amcommit.liveness.proven_dead`: same host, boot and PID namespace, and no such
  process or the pid reused) is taken over at once, again conditionally on the observed
  etag. One that cannot be proven dead (another host, an older body without the fields)
  keeps the ttl rule.
* **Release**: read the object and delete it if it still carries our token and our
  lease has not run out (:meth:`Lease.release`). The :class:`~amcommit.store.base.Store`
  protocol has no conditional delete, so the read and the delete are two requests: a
  takeover landing between them would lose its lease, but a takeover needs the object
  unchanged for a whole ``ttl`` and we delete only before our safe deadline, so this
  cannot happen unless one clock runs more than ``1/SAFE_FRACTION`` times faster than
  another.
* **Release by rewrite** (a lease made with ``released``): instead of the delete, replace
  the version we hold with a *released* body (``UpdateIf(our etag)``: one conditional
  request, atomic on every backend, no read-then-delete window). The object then stays,
  and ``view`` reads it as :attr:`Holding.released`; acquiring it is a takeover of that
  exact version (``UpdateIf``), at once: of several acquirers exactly one wins. An absent
  object (a store or an older amcommit that releases by delete) is still acquired by
  ``CREATE``. Both kinds of release change the object once, as the create or takeover
  that acquires it does: a commit changes the lock object twice either way.
* **Release by marker** (a lease made with ``markers=True``): the lease object is left as
  it is and a *release marker* is created next to it, ``<path>.released.<our token>``
  (``CREATE``: a new name each time, so one object name changes once per holder, not
  twice: what GCS's ~1 change per second of one name allows). Only the holder of a token
  creates its marker, after its guarded work ended and only before its safe deadline
  (fenced like every write), and it never writes again; tokens are random and never
  come back into the object (every write of another holder carries its own). So a
  version of the object whose token has a marker is released: an acquirer that sees one
  takes exactly that version over (``UpdateIf``) at once, as a released body. A marker
  that lands late (a release on the wire when its lease ran out and a waiter took over)
  names a token the object no longer carries: it releases nothing. Markers of earlier
  holders are deleted by the next holder while it holds the lease (:meth:`Lease.tidy`,
  fenced): the one it took over, and, when it acquired any other way (created the
  object, took over an expired or dead holder's, or its own), every marker found by a
  listing (a holder killed between its takeover and that delete leaves one). Deleting a
  marker whose token the object does not carry changes nothing. Readers that must tell
  a held lease from a released one stat the marker of the token they read. A process
  remembers the version it released by marker (store root, path -> etag, token); its
  next acquirer of that lease first tries to take exactly that version over (one
  ``UpdateIf``, no reads: back-to-back commits of one process), and looks as above if
  the object changed since.
* **Lost answers**: a create, renewal or takeover whose answer was lost and whose retry met
  ``AlreadyExists``/``PreconditionFailed`` is recognised by our token in the object
  (:meth:`Lease.adopt`): then we hold it, with the deadline of the write that landed.

**Fence**: :class:`FencedStore` checks the lease synchronously (:meth:`Lease.check`)
before every write it passes on, so no write *starts* after the lease ran out, even when
the renewing task could not run (a blocked event loop). Not fenced: a request already on
the wire when the lease runs out still lands. ``ttl`` must be far longer than one request.

**What is atomic, per store** (each step is one conditional request, atomic on every
backend; nothing here is atomic across two requests): local files: ``CREATE`` is a
no-replace rename/link of a complete temporary file, ``UpdateIf`` compares and replaces
under ``flock`` on the parent directory (atomic across processes of one host, and across
hosts only where the file system honours ``flock``); Azure Blob and ADLS Gen2:
``If-None-Match: *`` / ``If-Match: <etag>``; GCS: ``ifGenerationMatch=0`` /
``ifGenerationMatch=<generation>``. Stores without conditional writes
(``Capabilities.conditional_put`` False) cannot hold a lease: callers refuse them.

Reads are consistent: ``stat``, ``get``, ``stat`` until both stats agree (:meth:`Lease.observe`);
a holder renews only every ``ttl/3``, so they soon do.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Generic, Literal, Never, Protocol, Self, TypeVar

import anyio

from amcommit.errors import AlreadyExists, CommitError, LockLost, NotFound, PreconditionFailed, StoreError
from amcommit.iostats import IOStatistics
from amcommit.liveness import ProcessId, proven_dead
from amcommit.store.base import (
    Capabilities,
    ObjectInfo,
    PutMode,
    RenameRequest,
    RenameResult,
    Store,
    UpdateIf,
    WriteMode,
    batch_deleter,
    batch_renamer,
    read_range,
)
from amcommit.store.retry import RetryPolicy, retry_call

__all__ = [
    "ABSENT",
    "MARKER_INFIX",
    "SAFE_FRACTION",
    "FencedStore",
    "Holding",
    "Lease",
    "LeaseLost",
    "Seen",
    "Watch",
    "judge",
    "marker_path",
]

B = TypeVar("B")
B_co = TypeVar("B_co", covariant=True)
T = TypeVar("T")

SAFE_FRACTION = 0.75
"""A holder stops (and never releases) once ``SAFE_FRACTION * ttl`` passed since it sent
its last successful renewal."""
MAX_POLL = 2.0
CONSISTENT_READS = 5
_REMEMBERED_WRITES = 16


class LeaseLost(LockLost):
    """This process lost a lease: another writer replaced or deleted its object, or it was
    not renewed within ``SAFE_FRACTION * ttl``. Work guarded by it was stopped."""


@dataclass(frozen=True)
class Holding:
    """What the lease reads from a holder's object (through the user's ``view``)."""

    token: str
    """Names the holder: every write of one holder carries it."""
    beats: int = 0
    """The number of this write among the holder's writes (0: not recorded)."""
    ttl: float | None = None
    """The ttl the holder announced; None: the observer's own applies."""
    process: ProcessId | None = None
    """The holder's process, when known (dead holders: module doc)."""
    released: bool = False
    """The object is a released lease (release by rewrite: module doc); ``token`` is the
    releaser's. Nobody holds it: it is acquired at once."""


@dataclass(frozen=True)
class Seen(Generic[B_co]):
    """One consistent observation of the lease object."""

    etag: str | None
    """None when two stats around the read never agreed (it keeps changing)."""
    body: B_co | None
    """The decoded object; None if it is not one of ours (then only its etag counts)."""
    holding: Holding | None
    present: bool = True
    """False: there was no object (:data:`ABSENT`)."""


ABSENT: Seen[Never] = Seen(None, None, None, present=False)
"""An observation of no object."""

MARKER_INFIX = ".released."
"""A release marker's name: the lease object's name, this, the releaser's token."""


_RELEASED_HERE: dict[tuple[str, str], tuple[str, str]] = {}
"""(store root, lease path) -> (etag, token) of the version this process last released by
marker (release by marker: module doc)."""
_RELEASED_HERE_MAX = 1024


def marker_path(path: str, token: str) -> str:
    """Store path of the release marker of ``token`` for the lease object ``path``
    (release by marker: module doc)."""
    return f"{path}{MARKER_INFIX}{token}"


class Watch:
    """The clock rule's memory, one observer's: since when (this process's monotonic
    clock) it has seen the current etag. Pure: the caller passes ``now``."""

    def __init__(self, first: Seen[object] | None = None, now: float = 0.0) -> None:
        self.etag: str | None = None
        self.present = False
        self.since = now
        self.started = first is not None
        if first is not None:
            self.etag, self.present = first.etag, first.present

    def see(self, seen: Seen[object], now: float) -> tuple[float, bool]:
        """(how long the object has been unchanged as this observer saw it, whether it
        changed since the last observation). An etag of None (reads that never agreed)
        counts as a change each time: a changing object is alive."""
        changed = (
            not self.started or seen.etag != self.etag or seen.present != self.present or seen.etag is None
        )
        first = not self.started
        self.started = True
        if changed:
            self.etag, self.present, self.since = seen.etag, seen.present, now
        return now - self.since, changed and not first


def judge(
    unchanged_for: float, ttl: float, *, reclaim: bool = False, dead: bool = False
) -> Literal["take", "wait"]:
    """Pure: take the lease over (``"take"``) if it is our own holder's (``reclaim``), its
    holder is proven ``dead``, or this observer has seen it unchanged for longer than
    ``ttl`` on its own monotonic clock; else ``"wait"``. No time written by the holder
    enters the judgement."""
    return "take" if reclaim or dead or unchanged_for > ttl else "wait"


def _released(seen: Seen[object]) -> bool:
    return seen.holding is not None and seen.holding.released


def _never(_: object) -> bool:
    return False


class Lease(Generic[B]):
    """One process's handle on the lease object ``path`` (module doc).

    ``decode``: the object's content, or None if it is not one of ours; ``view``: what the
    lease reads from a decoded body; ``encode(beats)``: the body of our write number
    ``beats`` (it must carry ``token`` and ``beats`` as ``view`` reads them back).
    ``policy``: every request goes through :func:`~amcommit.store.retry.retry_call` with
    it (None: each request is made once). ``what`` / ``hint`` complete the message of
    :class:`LeaseLost` (``lost {what} (...); ... {hint}``). ``released``: the body of our
    release (read back by ``view`` with :attr:`Holding.released` and our ``token``): the
    lease is then released by a conditional rewrite (module doc); None: by a delete.
    ``markers``: released by creating a release marker instead (module doc; the marker's
    content is ``released()``'s body when given, for people). ``see_markers`` (default:
    ``markers``): a version whose token has a marker is released, whichever way we release."""

    def __init__(
        self,
        store: Store,
        path: str,
        *,
        ttl: float,
        decode: Callable[[bytes], B | None],
        view: Callable[[B], Holding],
        encode: Callable[[int], bytes],
        token: str | None = None,
        policy: RetryPolicy | None = None,
        what: str = "the lease",
        hint: str = "",
        released: Callable[[], bytes] | None = None,
        markers: bool = False,
        see_markers: bool | None = None,
    ) -> None:
        self.store = store
        self.path = path
        self.ttl = ttl
        self.token = token if token is not None else secrets.token_hex(16)
        self.policy = policy
        self.what = what
        self.hint = hint
        self._decode = decode
        self._view = view
        self._encode_body = encode
        self._released_body = released
        self.markers = markers
        self.see_markers = markers if see_markers is None else see_markers
        """Whether a version whose token has a release marker counts as released (also
        for a lease released by delete or rewrite: it then follows one released by marker
        at once, and deletes that marker)."""
        self._stale: set[str] = set()
        """Release markers of earlier holders to delete while we hold the lease."""
        self._sweep = False
        """Whether :meth:`tidy` must also list the markers (we did not acquire by one)."""
        self.etag: str | None = None
        """The etag of the object as we last wrote it (None: not held)."""
        self.safe_until = 0.0
        """Monotonic time until which the lease is ours (``SAFE_FRACTION * ttl`` after our
        last successful write was sent)."""
        self.lost: str | None = None
        """Why the lease was lost (None: not lost)."""
        self.beats = 0
        self._sent: dict[int, float] = {}
        """``beats`` of each body we wrote -> when its first attempt was sent (monotonic)."""

    # -- requests -----------------------------------------------------------------------

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self.policy is None:
            return await fn()
        return await retry_call(fn, policy=self.policy)

    def _seen(self, etag: str | None, data: bytes) -> Seen[B]:
        body = self._decode(data)
        return Seen(etag, body, None if body is None else self._view(body))

    async def observe(self) -> Seen[B]:
        """The object's etag and body, read consistently (``stat``, ``get``, ``stat`` until
        both stats agree; the etag is None if they never did). NotFound if there is none."""
        store, path = self.store, self.path
        seen: Seen[B] | None = None
        for _ in range(CONSISTENT_READS):
            first = await self._call(lambda: store.stat(path))
            data = await self._call(lambda: store.get(path))
            second = await self._call(lambda: store.stat(path))
            seen = self._seen(first.etag, data)
            if first.etag is not None and first.etag == second.etag:
                return seen
        assert seen is not None
        return Seen(None, seen.body, seen.holding)

    async def observe_or_absent(self) -> Seen[B]:
        """:meth:`observe`, or :data:`ABSENT` when there is no object."""
        try:
            return await self.observe()
        except NotFound:
            return ABSENT

    def encode(self, sent: float) -> bytes:
        """Our next body; ``sent``: when its first attempt is sent (monotonic)."""
        self.beats += 1
        beats = self.beats
        self._sent[beats] = sent
        for old in [b for b in self._sent if b < beats - _REMEMBERED_WRITES]:
            del self._sent[old]
        return self._encode_body(beats)

    def ours(self, seen: Seen[B]) -> bool:
        """The object carries our token."""
        return seen.holding is not None and seen.holding.token == self.token

    def adopt(self, seen: Seen[B]) -> bool | None:
        """Recognise our own write after an ambiguous answer (a lost answer whose retry met
        AlreadyExists or PreconditionFailed): if the object carries our token we hold it,
        with the lease of the write that landed. Returns None if it is not ours (or
        unreadable), else whether the landed write is our latest one."""
        h = seen.holding
        if h is None or h.token != self.token or seen.etag is None or h.released:
            return None
        sent = self._sent.get(h.beats)
        if sent is None:  # older than we remember: hold it with an expired lease
            sent = -SAFE_FRACTION * self.ttl
        self.etag = seen.etag
        self.safe_until = sent + SAFE_FRACTION * self.ttl
        return h.beats == self.beats

    def _held(self, etag: str | None, sent: float) -> None:
        if etag is None:
            raise CommitError(f"the store gave no etag for {self.path!r}: cannot hold a lease on it")
        self.etag = etag
        self.safe_until = sent + SAFE_FRACTION * self.ttl

    def check(self, op: str, path: str) -> None:
        """LeaseLost unless the lease is still valid now (a synchronous check: it holds even
        when the renewing task could not run, e.g. behind a blocked event loop)."""
        if self.lost is not None or time.monotonic() >= self.safe_until:
            reason = self.lost or f"not renewed within {SAFE_FRACTION * self.ttl:g} s"
            hint = f", {self.hint}" if self.hint else ""
            raise LeaseLost(f"lost {self.what} ({reason}); {op} {path!r} was not started{hint}")

    async def create(self) -> bool:
        """Create-only put of our body: True if we now hold the lease, False if an object
        is there (another holder's, or ours if an earlier attempt's answer was lost: see
        :meth:`adopt`)."""
        sent = time.monotonic()
        data = self.encode(sent)
        try:
            info = await self._call(partial(self.store.put, self.path, data, mode=PutMode.CREATE))
        except AlreadyExists:
            return False
        self._held(info.etag, sent)
        return True

    async def take_over(self, seen: Seen[B], now: float | None = None) -> bool:
        """Replace exactly the version ``seen`` (``UpdateIf(seen.etag)``) with our body:
        True if we now hold the lease, False if the object changed or went away since (a
        renewal, a release, another taker, or our own write whose answer was lost)."""
        if seen.etag is None:
            return False
        sent = time.monotonic() if now is None else now
        data = self.encode(sent)
        try:
            info = await self._call(partial(self.store.put, self.path, data, mode=UpdateIf(seen.etag)))
        except (PreconditionFailed, NotFound):
            return False
        self._held(info.etag, sent)
        return True

    async def acquire(
        self,
        *,
        wait: float,
        gave_up: Callable[[Seen[B] | None], BaseException],
        reclaim: Callable[[B | None], bool] = _never,
        on_wait: Callable[[Seen[B], float], None] | None = None,
        on_change: Callable[[Seen[B]], None] | None = None,
        first: Seen[B] | None = None,
        max_poll: float = MAX_POLL,
    ) -> Seen[B] | None:
        """Wait for the lease and take it: create it, or take over a version that
        :func:`judge` gives us (our own earlier holder's, per ``reclaim``; a provably dead
        holder's; or one unchanged for its ttl on our clock). Returns the observation of
        *another* holder's lease we replaced, else None (created, or ``reclaim``-ed).

        ``on_wait(seen, seconds left)``: called once per holder (token) we wait for.
        ``on_change(seen)``: called when the object changed under a holder that is not
        ours while we waited (it may raise to stop waiting). ``first``: an observation
        made just before (the clock starts from it; :data:`ABSENT` if there was none).
        After ``wait`` seconds, raises ``gave_up(last observation)``."""
        deadline = time.monotonic() + wait
        watch = Watch(first, time.monotonic())
        delay = 0.02
        took: dict[int, Seen[B]] = {}  # beats of our takeover writes -> the version each replaced
        told: str | None = None  # the holder (token) we said we wait for
        cur: Seen[B] | None = None
        # released by rewrite or by marker, the object stays: look before creating
        create = self._released_body is None and not self.markers
        self._sweep = self.markers  # unless acquired by a marker: see tidy
        hint = _RELEASED_HERE.pop((self.store.root_uri, self.path), None) if self.markers else None
        if hint is not None:  # the version this process released: take it over, no reads
            self._stale.add(marker_path(self.path, hint[1]))
            self._sweep = False
            if await self.take_over(Seen(hint[0], None, None)):
                return None
            self._sweep = True  # changed since (or our takeover's answer was lost): look
        while True:
            if create and await self.create():
                return None
            create = True
            try:
                cur = await self.observe()
            except NotFound:
                continue  # released meanwhile: try to create it again
            if self.adopt(cur) is not None:
                assert cur.holding is not None  # a create or takeover of ours landed; its answer was lost
                return took.get(cur.holding.beats)
            now = time.monotonic()
            unchanged, changed = watch.see(cur, now)
            if changed and on_change is not None:
                on_change(cur)
            if _released(cur):  # nobody holds it: take exactly this version, at once
                if await self.take_over(cur, now):
                    return None
                create = False  # another acquirer won it (or our write landed, its answer lost)
                continue
            if self.see_markers and await self._marked(cur):  # released by marker: at once
                assert cur.holding is not None
                self._stale.add(marker_path(self.path, cur.holding.token))
                self._sweep = False
                if await self.take_over(cur, now):
                    return None
                self._sweep = True
                create = False
                continue
            mine = reclaim(cur.body)
            h = cur.holding
            ttl = h.ttl if h is not None and h.ttl is not None else self.ttl
            dead = h is not None and not mine and proven_dead(h.process)
            if cur.etag is not None and judge(unchanged, ttl, reclaim=mine, dead=dead) == "take":
                replaced = None if mine else cur
                if replaced is not None:
                    took[self.beats + 1] = replaced
                if await self.take_over(cur, now):
                    return replaced
                continue  # renewed, released, taken by another waiter, or ours (lost answer)
            if now >= deadline:
                raise gave_up(cur)
            holder = "" if h is None else h.token
            if told != holder:
                told = holder
                if on_wait is not None:
                    on_wait(cur, deadline - now)
            await anyio.sleep(min(delay * random.uniform(0.5, 1.0), max(0.0, deadline - now)))
            delay = min(delay * 2, max_poll, self.ttl / 4)

    async def _marked(self, seen: Seen[B]) -> bool:
        """Whether the version ``seen`` is released by marker: its token has one."""
        h = seen.holding
        if h is None or seen.etag is None or h.released:
            return False
        store, path = self.store, marker_path(self.path, h.token)
        try:
            await self._call(lambda: store.stat(path))
        except NotFound:
            return False
        return True

    async def released_by_marker(self, seen: Seen[B]) -> bool:
        """Whether ``seen`` (the lease object's version) names a holder that released it
        by marker (readers: module doc). One stat."""
        return await self._marked(seen)

    async def tidy(self) -> None:
        """Delete the release markers of earlier holders (release by marker, module doc),
        while we hold the lease: each delete is fenced (:meth:`check`). Lists the markers
        first if we acquired other than by a marker. StoreError / LeaseLost propagate;
        what is not deleted yet stays to delete (a later call, or our release, retries)."""
        if not self.see_markers:
            return
        store = self.store
        if self._sweep:
            folder, _, name = self.path.rpartition("/")
            prefix = name + MARKER_INFIX
            own = marker_path(self.path, self.token)

            async def markers() -> list[str]:
                return [
                    e.path
                    async for e in store.list(folder, recursive=False)
                    if not e.is_dir and e.path.rpartition("/")[2].startswith(prefix) and e.path != own
                ]

            self._stale.update(await self._call(markers))
            self._sweep = False
        for path in sorted(self._stale):

            async def delete_within_lease(path: str = path) -> None:
                self.check("delete", path)
                try:
                    await store.delete(path)
                except NotFound:
                    pass  # an earlier attempt deleted it; its answer was lost

            await self._call(delete_within_lease)
            self._stale.discard(path)

    async def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew the lease every ``ttl/3`` until cancelled; on losing it, set :attr:`lost`
        and call ``on_lost`` (which cancels the guarded work). A transient store error is
        retried soon, until the safe deadline (the fence)."""
        interval = self.ttl / 3
        next_beat = self.safe_until - SAFE_FRACTION * self.ttl + interval
        while True:
            await anyio.sleep(max(0.0, min(next_beat, self.safe_until) - time.monotonic()))
            now = time.monotonic()
            if now >= self.safe_until:
                self.lost = f"not renewed within {SAFE_FRACTION * self.ttl:g} s"
                on_lost()
                return
            assert self.etag is not None
            etag, data, soon = self.etag, self.encode(now), now + min(1.0, interval / 4)
            try:
                with anyio.fail_after(self.safe_until - now):
                    try:
                        info = await self._call(partial(self.store.put, self.path, data, mode=UpdateIf(etag)))
                    except (PreconditionFailed, NotFound):
                        # taken over, or our own write landed and its answer was lost
                        cur = await self.observe_or_absent()
                        renewed = self.adopt(cur)
                        if renewed is None:
                            self.lost = "it was deleted" if not cur.present else "another writer took it over"
                            on_lost()
                            return
                        next_beat = now + interval if renewed else soon
                        continue
            except (StoreError, TimeoutError):
                next_beat = soon  # transient: retry soon, until safe_until (the fence)
                continue
            self._held(info.etag, now)
            next_beat = now + interval

    async def renew(self) -> None:
        """One renewal now (``UpdateIf(the etag we hold)``). LeaseLost if the lease was lost
        (replaced, deleted, or past its safe deadline); a transient StoreError propagates
        (the lease is still ours until :attr:`safe_until`)."""
        self.check("renew", self.path)
        assert self.etag is not None
        now = time.monotonic()
        data = self.encode(now)
        try:
            info = await self._call(partial(self.store.put, self.path, data, mode=UpdateIf(self.etag)))
        except (PreconditionFailed, NotFound):
            cur = await self.observe_or_absent()
            if self.adopt(cur) is None:
                self.lost = "it was deleted" if not cur.present else "another writer took it over"
                self.check("renew", self.path)
            return
        self._held(info.etag, now)

    async def put_held(self, data: bytes) -> ObjectInfo:
        """Replace the version we hold with ``data`` (``UpdateIf``), e.g. to hand the lease
        to another holder; PreconditionFailed if it is no longer that version."""
        assert self.etag is not None
        etag = self.etag
        return await self._call(partial(self.store.put, self.path, data, mode=UpdateIf(etag)))

    async def release(self) -> bool:
        """Release the lease if our lease has not run out: rewrite the version we hold to
        the released body (``released``: one conditional request, atomic), else delete the
        object if it still carries our token (see the module doc for the read-then-delete
        window). Returns whether it released it; never raises."""
        if self.lost is not None or time.monotonic() >= self.safe_until:
            return False
        store, path = self.store, self.path
        if self.markers:
            return await self._release_by_marker()
        if self._stale:  # we followed a release by marker: its marker first (_release_by_marker)
            try:
                await self.tidy()
            except (StoreError, LockLost):
                pass
        if self._released_body is not None:
            return await self._release_by_rewrite(self._released_body())

        async def delete_within_lease() -> bool:
            self.check("delete", path)  # every attempt: no delete starts after the lease
            try:
                return await store.delete(path)
            except NotFound:
                return False  # an earlier attempt deleted it; its answer was lost

        try:
            body = self._decode(await self._call(lambda: store.get(path)))
            if body is None or self._view(body).token != self.token:
                return False
            await self._call(delete_within_lease)
        except (StoreError, LockLost):
            return False
        return True

    async def _release_by_rewrite(self, data: bytes) -> bool:
        """``UpdateIf(our etag)`` to the released body, fenced like every write. A retry
        whose precondition failed (our rewrite landed, its answer lost) is recognised by
        the released body carrying our token."""
        store, path, etag = self.store, self.path, self.etag
        assert etag is not None

        async def rewrite_within_lease() -> ObjectInfo:
            self.check("release", path)  # every attempt: no release starts after the lease
            return await store.put(path, data, mode=UpdateIf(etag))

        try:
            try:
                await self._call(rewrite_within_lease)
            except (PreconditionFailed, NotFound):
                cur = await self.observe_or_absent()
                h = cur.holding
                return h is not None and h.released and h.token == self.token
        except (StoreError, LockLost):
            return False
        self.etag = None
        return True

    async def _release_by_marker(self) -> bool:
        """Delete the earlier holders' markers (:meth:`tidy`; one that fails stays: it is
        harmless, module doc), then create ours (``CREATE``, fenced like every write). A
        retry that meets AlreadyExists is our own create whose answer was lost: the token
        is ours alone."""
        store, path = self.store, marker_path(self.path, self.token)
        data = self._released_body() if self._released_body is not None else b""
        try:
            await self.tidy()
        except (StoreError, LockLost):
            pass

        async def create_within_lease() -> ObjectInfo:
            self.check("release", path)  # every attempt: no release starts after the lease
            return await store.put(path, data, mode=PutMode.CREATE)

        try:
            try:
                await self._call(create_within_lease)
            except AlreadyExists:
                pass
        except (StoreError, LockLost):
            return False
        if self.etag is not None:
            if len(_RELEASED_HERE) >= _RELEASED_HERE_MAX:
                _RELEASED_HERE.pop(next(iter(_RELEASED_HERE)))
            _RELEASED_HERE[(store.root_uri, self.path)] = (self.etag, self.token)
        self.etag = None
        return True


class _Fence(Protocol):
    def check(self, op: str, path: str) -> None: ...


class FencedStore:
    """The store as work under a lease sees it: every write (``put``, ``rename``,
    ``delete``, ``mkdirs``) first checks the lease (``fence.check``: :meth:`Lease.check`),
    so no write *starts* after the lease is lost. Reads pass through. ``lock``: the fence
    (its historical name: the destination lock)."""

    def __init__(self, inner: Store, lock: _Fence) -> None:
        self.inner = inner
        self.lock = lock
        caps = inner.capabilities
        if caps.batch_rename and batch_renamer(inner) is None:
            caps = replace(caps, batch_rename=False)  # a wrapper below without the method
        if caps.delete_batch_max and batch_deleter(inner) is None:
            caps = replace(caps, delete_batch_max=0)
        self.capabilities: Capabilities = caps
        self.iostats: IOStatistics = inner.iostats

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    async def stat(self, path: str) -> ObjectInfo:
        return await self.inner.stat(path)

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        return self.inner.list(prefix, recursive=recursive)

    async def get(self, path: str) -> bytes:
        return await self.inner.get(path)

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        """A ranged read of the wrapped store (:func:`~amcommit.store.base.read_range`)."""
        return await read_range(self.inner, path, start, length)

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        self.lock.check("put", path)
        return await self.inner.put(path, data, mode=mode)

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        self.lock.check("rename", src)
        return await self.inner.rename(src, dst, src_etag=src_etag, rename_id=rename_id, src_meta=src_meta)

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """The lease is checked once, before the batch starts (a batch is short: the
        engine's batches are a few hundred local renames)."""
        inner = batch_renamer(self.inner)
        if inner is None:
            raise TypeError(f"{self.inner!r} has no rename_batch")
        if requests:
            self.lock.check("rename", requests[0].src)
        return await inner.rename_batch(requests)

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        self.lock.check("delete", path)
        return await self.inner.delete(path, recursive=recursive)

    async def delete_batch(self, paths: Sequence[str]) -> dict[int, StoreError]:
        """The lease is checked once, before the batch starts (one request of at most
        ``delete_batch_max`` deletes)."""
        inner = batch_deleter(self.inner)
        if inner is None:
            raise TypeError(f"{self.inner!r} has no delete_batch")
        if paths:
            self.lock.check("delete", paths[0])
        return await inner.delete_batch(paths)

    async def mkdirs(self, path: str) -> None:
        self.lock.check("mkdirs", path)
        await self.inner.mkdirs(path)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
