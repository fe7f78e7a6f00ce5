"""What a streaming query keeps on the table's store besides its instants (issue 14).

Two small JSON objects, both whole-object puts (atomic each; nothing here is atomic across
objects):

``.hoodie/.temp/<instant>/_stream.json`` (the *owner* of a micro-batch's instant)
    ``{"app": <query id or null>, "run": <run id or null>, "checkpoint": <key or null>}``.
    Written by every task (query id and run id, which only tasks see). What the driver
    knows (the checkpoint key, when the option ``checkpointLocation`` was given, and the
    driver process, :attr:`Owner.driver`) is recorded earlier, in the write's job marker
    with the claim of the instant itself (``begin_write(owner=)``), so no instant is ever
    without its owner, not even one whose driver died right after allocating it.
    :func:`read_owners` merges both. A restarted query recognises the inflight instants of
    its own dead runs by them and rolls them back at once (:func:`dead_instants`, pure),
    instead of waiting ``writer_ttl`` for their heartbeat to go stale; an ``abort()`` that
    no task reported to finds its batch's instant by them (:func:`driver_instants`, pure).
    It goes away with the staging folder.

``.hoodie/.amcommit/streams/<sha256(app)>.json`` (the query's *lease*)
    ``{"app", "run", "beat"}``: which run of the query writes, and when it last said so
    (wall clock). Taken and renewed by tasks and the batch commit. A different run finds a
    fresh lease and waits up to ``lease_ttl`` for it to go stale: if the holder renews it
    meanwhile, two runs of one query are running at once and the newcomer fails with one
    line (:class:`~amcommit.errors.ConflictError`); if not, the holder is dead (a restart
    after a crash) and the lease is taken over. Clocks of the processes must agree within
    a small fraction of ``lease_ttl``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping

import anyio
import msgspec

from amcommit.committer.layout import JobLayout
from amcommit.errors import AlreadyExists, ConflictError, NotFound
from amcommit.paths import basename, join
from amcommit.store.base import PutMode, Store
from amcommit.table.naming import HOODIE_DIR, TEMP_DIR, is_instant

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
    "driver_instants",
    "judge_lease",
    "lease_path",
    "merge_owner",
    "owner_fields",
    "read_owners",
    "write_owner",
]


class Owner(msgspec.Struct, frozen=True):
    """Who wrote a micro-batch's instant."""

    app: str | None = None
    run: str | None = None
    checkpoint: str | None = None
    driver: str | None = None
    """The driver process that allocated the instant (host, pid namespace, pid and start
    time, see :func:`amcommit.spark.stream.driver_id`); recorded in the write's marker only."""


def owner_fields(owner: Owner) -> dict[str, str]:
    """Pure: the owner as ``begin_write(owner=)`` records it (fields that are set)."""
    return {k: v for k in Owner.__struct_fields__ if isinstance(v := getattr(owner, k), str)}


def merge_owner(found: Owner | None, claimed: Mapping[str, object] | None) -> Owner | None:
    """Pure: the owner file's fields (``found``), completed by those recorded with the
    instant's claim (``claimed``, the marker's ``owner``); None if neither says anything."""
    fields = {k: v for k, v in (claimed or {}).items() if k in Owner.__struct_fields__ and isinstance(v, str)}
    if found is not None:
        fields.update({k: v for k in Owner.__struct_fields__ if (v := getattr(found, k)) is not None})
    return Owner(**fields) if fields else None


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
    await store.put(owner_path(dest, instant), msgspec.json.encode(owner), mode=PutMode.OVERWRITE)


async def _owner_file(store: Store, dest: str, instant: str) -> Owner | None:
    try:
        return msgspec.json.decode(await store.get(owner_path(dest, instant)), type=Owner)
    except (NotFound, msgspec.DecodeError, msgspec.ValidationError):
        return None


async def _claimed_owner(store: Store, dest: str, instant: str) -> Mapping[str, object] | None:
    """The ``owner`` recorded in the write's job marker (``begin_write(owner=)``), if any."""
    try:
        body = json.loads(await store.get(JobLayout(dest, instant, table=True).job_marker))
    except (NotFound, ValueError):
        return None
    owner = body.get("owner") if isinstance(body, dict) else None
    return owner if isinstance(owner, dict) else None


async def read_owners(store: Store, dest: str, *, below: str | None = None) -> dict[str, Owner]:
    """Instant -> owner of every staging folder whose owner file or job marker names one
    (:func:`merge_owner`); ``below``: only instants earlier than it. Two reads per staged
    instant."""
    out: dict[str, Owner] = {}
    try:
        names = [
            basename(i.path.rstrip("/")) async for i in store.list(join(dest, TEMP_DIR), recursive=False)
        ]
    except NotFound:
        return out
    for name in names:
        if not is_instant(name) or (below is not None and name >= below):
            continue
        owner = merge_owner(await _owner_file(store, dest, name), await _claimed_owner(store, dest, name))
        if owner is not None:
            out[name] = owner
    return out


def dead_instants(
    mine: str,
    owners: Mapping[str, Owner],
    app: str,
    checkpoint: str | None,
    dead_drivers: frozenset[str] = frozenset(),
) -> list[str]:
    """Pure: instants earlier than ``mine`` that belong to the same query (same app id, or
    the same checkpoint key), or that a driver process now gone allocated (``dead_drivers``:
    checked by the caller). Micro-batches of one run are sequential and two runs of one
    query are kept apart by the lease, so while ``mine`` commits such an instant can only
    be left by a dead run: it is rolled back (or completed, past its point of no return)."""
    out = []
    for t, o in owners.items():
        if t >= mine:
            continue
        if (
            o.app == app
            or (checkpoint is not None and o.checkpoint == checkpoint)
            or (o.driver is not None and o.driver in dead_drivers)
        ):
            out.append(t)
    return sorted(out)


def driver_instants(owners: Mapping[str, Owner], driver: str, checkpoint: str | None) -> list[str]:
    """Pure: the instants that driver process ``driver`` allocated for the query of
    ``checkpoint`` (its key, None when unknown). A driver runs one micro-batch of a query
    at a time, so when that batch is aborted without any task's report this is its
    instant (plus leftovers of this driver's own earlier batches of the query)."""
    return sorted(t for t, o in owners.items() if o.driver == driver and o.checkpoint == checkpoint)


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
