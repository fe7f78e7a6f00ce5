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
    ``{"app", "run", "beat"}``: which run of the query writes, and when it last said so
    (wall clock). Taken and renewed by tasks and the batch commit (not rewritten while the
    run's own lease is younger than ``lease_ttl / 4``). A different run finds a
    fresh lease and waits up to ``lease_ttl`` for it to go stale: if the holder renews it
    meanwhile, two runs of one query are running at once and the newcomer fails with one
    line (:class:`~amcommit.errors.ConflictError`); if not, the holder is dead (a restart
    after a crash) and the lease is taken over. Clocks of the processes must agree within
    a small fraction of ``lease_ttl``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping

import anyio
import msgspec

from amcommit.errors import AlreadyExists, ConflictError, NotFound
from amcommit.paths import basename, join
from amcommit.store.base import PutMode, Store
from amcommit.table.naming import HOODIE_DIR, TEMP_DIR, is_instant

OWNER_FILE = "_stream.json"
LEASE_DIR = f"{HOODIE_DIR}/.amcommit/streams"
DEFAULT_LEASE_TTL = 10.0
RENEW_AFTER = 0.25
"""A run's own lease younger than ``RENEW_AFTER * lease_ttl`` is not rewritten: the tasks
and the commit of every batch ask for it, and one object may change only about once a
second on GCS. It is still renewed at least every ``lease_ttl / 2`` while the run writes."""

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


def checkpoint_app(checkpoint: str) -> str:
    """The label app id of a query known only by its checkpoint location."""
    return "checkpoint-" + hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:32]


def lease_path(dest: str, app: str) -> str:
    return join(dest, LEASE_DIR, hashlib.sha256(app.encode()).hexdigest()[:40] + ".json")


def owner_path(dest: str, instant: str) -> str:
    return join(dest, TEMP_DIR, instant, OWNER_FILE)


async def write_owner(store: Store, dest: str, instant: str, owner: Owner) -> None:
    """Record ``owner`` (unless the owner file says exactly that already: the tasks of one
    batch record the same owner, and an object store limits how often one object may
    change, GCS about once a second)."""
    path = owner_path(dest, instant)
    data = msgspec.json.encode(owner)
    try:
        if await store.get(path) == data:
            return
    except NotFound:
        pass
    await store.put(path, data, mode=PutMode.OVERWRITE)


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


def judge_lease(lease: Lease | None, run: str, now: float, ttl: float) -> str:
    """Pure: ``"take"`` (no lease, our own, or a stale one) or ``"wait"`` (another run's,
    fresh)."""
    if lease is None or lease.run == run or now - lease.beat > ttl:
        return "take"
    return "wait"


async def _read_lease(store: Store, path: str) -> Lease | None:
    try:
        return msgspec.json.decode(await store.get(path), type=Lease)
    except NotFound:
        return None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None  # a torn or foreign object: taken over


async def acquire_lease(store: Store, dest: str, app: str, run: str, ttl: float = DEFAULT_LEASE_TTL) -> bool:
    """Take or renew the query's lease for run ``run`` (see module doc). Returns True if a
    stale lease of another run was taken over. ConflictError (one line) if another run of
    the same query holds it and keeps renewing it."""
    path = lease_path(dest, app)
    first = await _read_lease(store, path)
    if first is not None and first.run == run and abs(time.time() - first.beat) < ttl * RENEW_AFTER:
        return False  # ours, renewed moments ago (by another task of this run): not rewritten
    seen = first
    deadline = time.monotonic() + ttl + 1.0
    while True:
        now = time.time()
        if judge_lease(seen, run, now, ttl) == "take":
            break
        assert seen is not None
        if first is not None and seen != first:
            raise ConflictError(_running(app, seen, now))
        if time.monotonic() >= deadline:
            raise ConflictError(_running(app, seen, now))
        await anyio.sleep(min(0.5, ttl / 10))
        seen = await _read_lease(store, path)
    data = msgspec.json.encode(Lease(app=app, run=run, beat=time.time()))
    if seen is None:
        try:
            await store.put(path, data, mode=PutMode.CREATE)
            return False
        except AlreadyExists:  # another run took it at the same moment: judge it again
            return await acquire_lease(store, dest, app, run, ttl)
    await store.put(path, data, mode=PutMode.OVERWRITE)
    return seen.run != run


def _running(app: str, lease: Lease, now: float) -> str:
    return (
        f"streaming query {app} is already running in another run ({lease.run}, heartbeat "
        f"{max(0.0, now - lease.beat):.0f}s ago): two runs of one query at once are refused; "
        "stop the other run first"
    )
