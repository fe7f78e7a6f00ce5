"""What a streaming query keeps on the table's store besides its instants (issue 14).

Two small JSON objects, both whole-object puts (atomic each; nothing here is atomic across
objects):

``.hoodie/.temp/<instant>/_stream.json`` (the *owner* of a micro-batch's instant)
    ``{"app": <query id or null>, "run": <run id or null>, "checkpoint": <key or null>}``.
    Written by ``streamWriter()`` on the driver (checkpoint key only, when the option
    ``checkpointLocation`` was given) and again by every task (query id and run id, which
    only tasks see). A restarted query recognises the inflight instants of its own dead
    runs by it and rolls them back at once (:func:`dead_instants`, pure), instead of waiting
    ``writer_ttl`` for their heartbeat to go stale. It goes away with the staging folder.

``.hoodie/.amcommit/streams/<sha256(app)>.json`` (the query's *lease*)
    ``{"app", "run", "beat", "driver"}``: which run of the query writes, when it last said
    so (wall clock), and the run's driver process when known
    (:class:`~amcommit.liveness.ProcessId`: the Spark driver's JVM). Taken and renewed by
    tasks and the batch commit. A different run finds a fresh lease and waits up to
    ``lease_ttl`` for it to go stale, saying so in one line (WARNING): if the holder renews
    it meanwhile, two runs of one query are running at once and the newcomer fails with one
    line (:class:`~amcommit.errors.ConflictError`); if not, the holder is dead (a restart
    after a crash) and the lease is taken over. A lease whose driver is provably dead on
    this host (:func:`~amcommit.liveness.proven_dead`) is taken over at once. Clocks of the
    processes must agree within a small fraction of ``lease_ttl``.

    Every write of the lease after a read of it is conditional on what was read (``CREATE``
    when there was none, else ``UpdateIf(etag)``, the destination lock's discipline), so of
    two runs that find the same stale lease exactly one takes it: the other finds the
    winner's fresh lease and fails in one line.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping

import anyio
import msgspec

from amcommit.errors import AlreadyExists, ConflictError, NotFound, PreconditionFailed
from amcommit.liveness import ProcessId, proven_dead
from amcommit.paths import basename, join
from amcommit.store.base import PutMode, Store, UpdateIf
from amcommit.table.naming import HOODIE_DIR, TEMP_DIR, is_instant

log = logging.getLogger("amcommit.spark.stream")

OWNER_FILE = "_stream.json"
LEASE_DIR = f"{HOODIE_DIR}/.amcommit/streams"
DEFAULT_LEASE_TTL = 10.0

__all__ = [
    "DEFAULT_LEASE_TTL",
    "Lease",
    "Owner",
    "acquire_lease",
    "checkpoint_app",
    "dead_instants",
    "judge_lease",
    "lease_path",
    "read_owners",
    "write_owner",
]


class Owner(msgspec.Struct, frozen=True):
    """Who wrote a micro-batch's instant."""

    app: str | None = None
    run: str | None = None
    checkpoint: str | None = None


class Lease(msgspec.Struct, frozen=True):
    app: str
    run: str
    beat: float
    driver: ProcessId | None = None
    """The run's driver process, when known (module doc)."""


def checkpoint_app(checkpoint: str) -> str:
    """The label app id of a query known only by its checkpoint location."""
    return "checkpoint-" + hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:32]


def lease_path(dest: str, app: str) -> str:
    return join(dest, LEASE_DIR, hashlib.sha256(app.encode()).hexdigest()[:40] + ".json")


def owner_path(dest: str, instant: str) -> str:
    return join(dest, TEMP_DIR, instant, OWNER_FILE)


async def write_owner(store: Store, dest: str, instant: str, owner: Owner) -> None:
    await store.put(owner_path(dest, instant), msgspec.json.encode(owner), mode=PutMode.OVERWRITE)


async def read_owners(store: Store, dest: str) -> dict[str, Owner]:
    """Instant -> owner of every staging folder that has an owner file."""
    out: dict[str, Owner] = {}
    try:
        names = [
            basename(i.path.rstrip("/")) async for i in store.list(join(dest, TEMP_DIR), recursive=False)
        ]
    except NotFound:
        return out
    for name in names:
        if not is_instant(name):
            continue
        try:
            out[name] = msgspec.json.decode(await store.get(owner_path(dest, name)), type=Owner)
        except (NotFound, msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


def dead_instants(mine: str, owners: Mapping[str, Owner], app: str, checkpoint: str | None) -> list[str]:
    """Pure: instants earlier than ``mine`` that belong to the same query (same app id, or
    the same checkpoint key). Micro-batches of one run are sequential and two runs of one
    query are kept apart by the lease, so while ``mine`` commits such an instant can only
    be left by a dead run: it is rolled back (or completed, past its point of no return)."""
    out = []
    for t, o in owners.items():
        if t >= mine:
            continue
        if o.app == app or (checkpoint is not None and o.checkpoint == checkpoint):
            out.append(t)
    return sorted(out)


def judge_lease(lease: Lease | None, run: str, now: float, ttl: float, *, dead: bool = False) -> str:
    """Pure: ``"take"`` (no lease, our own, a stale one, or one whose driver is ``dead``) or
    ``"wait"`` (another run's, fresh)."""
    if lease is None or lease.run == run or now - lease.beat > ttl or dead:
        return "take"
    return "wait"


_CONSISTENT_READS = 5


async def _read_lease(store: Store, path: str) -> tuple[bool, str | None, Lease | None]:
    """(the object exists, its etag, its lease), read consistently: ``stat``, ``get``,
    ``stat`` until both stats agree (the etag is None if they never did). A torn or
    foreign object reads as no lease (it is taken over)."""
    for _ in range(_CONSISTENT_READS):
        try:
            first = await store.stat(path)
            data = await store.get(path)
            second = await store.stat(path)
        except NotFound:
            return False, None, None
        try:
            lease: Lease | None = msgspec.json.decode(data, type=Lease)
        except (msgspec.DecodeError, msgspec.ValidationError):
            lease = None
        if first.etag is not None and first.etag == second.etag:
            return True, first.etag, lease
    return True, None, lease


async def acquire_lease(
    store: Store,
    dest: str,
    app: str,
    run: str,
    ttl: float = DEFAULT_LEASE_TTL,
    *,
    driver: ProcessId | None = None,
) -> bool:
    """Take or renew the query's lease for run ``run`` (see module doc); ``driver``: the
    run's driver process, recorded in the lease. Returns True if this call took over a lease
    of another run (stale, or its driver dead). ConflictError (one line) if another run of
    the same query holds it and keeps renewing it, or took it first. Atomic: the one
    conditional write that takes or renews the lease."""
    path = lease_path(dest, app)
    present, etag, first = await _read_lease(store, path)
    seen = first
    deadline = time.monotonic() + ttl + 1.0
    told = False
    while True:
        now = time.time()
        other = seen is not None and seen.run != run
        dead = other and seen is not None and proven_dead(seen.driver)
        verdict = judge_lease(seen, run, now, ttl, dead=dead)
        if verdict == "take" and (etag is not None or not present):
            data = msgspec.json.encode(Lease(app=app, run=run, beat=time.time(), driver=driver))
            try:
                await store.put(path, data, mode=UpdateIf(etag) if etag is not None else PutMode.CREATE)
                return other
            except (AlreadyExists, PreconditionFailed, NotFound):
                pass  # changed since our read: read it again and judge what is there now
            present, etag, seen = await _read_lease(store, path)
            if seen is not None and seen.run == run:
                return False  # another task of our run renewed it meanwhile
            continue
        if verdict == "wait":
            assert seen is not None
            if seen != first:
                raise ConflictError(_running(app, seen, now))
            if not told:
                told = True
                log.warning(_waiting(app, run, seen, now, ttl))
        if time.monotonic() >= deadline:
            raise ConflictError(_running(app, seen, now) if seen is not None else _unreadable(app, path))
        await anyio.sleep(min(0.5, ttl / 10))
        present, etag, seen = await _read_lease(store, path)


def _waiting(app: str, run: str, lease: Lease, now: float, ttl: float) -> str:
    driver = f", driver {lease.driver.text()}" if lease.driver is not None else ""
    return (
        f"streaming query {app}: run {run} waits for the lease of run {lease.run} (heartbeat "
        f"{max(0.0, now - lease.beat):.0f}s ago{driver}): at most {ttl + 1:g} s; taken over once "
        f"not renewed for {ttl:g} s (leaseTtl), or at once if that driver is dead on this host; "
        "if it is renewed meanwhile, this run fails (two runs of one query at once)"
    )


def _unreadable(app: str, path: str) -> str:
    return f"streaming query {app}: its lease {path!r} keeps changing under our reads; is another run writing it?"


def _running(app: str, lease: Lease, now: float) -> str:
    return (
        f"streaming query {app} is already running in another run ({lease.run}, heartbeat "
        f"{max(0.0, now - lease.beat):.0f}s ago): two runs of one query at once are refused; "
        "stop the other run first"
    )
