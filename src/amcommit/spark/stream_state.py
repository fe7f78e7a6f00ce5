"""What a streaming query keeps on the table's store besides its instants (issue 14).

Two small JSON objects, both whole-object puts (atomic each; nothing here is atomic across
objects):

``.hoodie/.aux/amcommit/<instant>/_stream.json`` (the *owner* of a micro-batch's instant)
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
    ``{"app", "run", "beat", "driver", "replaced"}``: which run of the query writes, when it last said
    so (the writer's wall clock: for people, and to pace the run's own renewals), and the
    run's driver process when known (:class:`~amcommit.liveness.ProcessId`: the Spark
    driver's JVM). It is a :class:`amcommit.coord.lease.Lease` held by a *run*: every
    process of the run (its tasks and batch commits) writes it as the same holder. Taken
    and renewed by tasks and the batch commit (not rewritten while the run's own lease is
    younger than ``lease_ttl / 4`` by its recorded ``beat``). A different run that finds
    the lease waits up to ``lease_ttl`` + 1 s, saying so in one line (WARNING): if the
    lease changes meanwhile, two runs of one query are running at once and the newcomer
    fails with one line (:class:`~amcommit.errors.ConflictError`); if it stays unchanged
    (the same etag) for ``lease_ttl`` on the newcomer's monotonic clock, the holder is dead
    (a restart after a crash) and the lease is taken over. A lease whose driver is provably
    dead on this host (:func:`~amcommit.liveness.proven_dead`) is taken over at once. So is
    a lease of another run *of the same driver process* (a restart in the same Spark
    application, e.g. after an ``availableNow`` run ended): Spark runs at most one run of a
    query (one checkpoint, one query id) per driver JVM (it stops the active run, or refuses
    the start, before a new run begins), so that run has stopped. Python streaming sinks get
    no call when a query stops (PySpark 4: ``write``, ``commit``, ``abort`` only), so the
    ended run cannot release the lease itself; the same-driver takeover does what a release
    would. The taker records the run it replaced (``replaced``: the last 16 runs of this
    driver taken over so), and a run named there never takes the lease back: a late task
    or commit of the stopped run fails in one line instead of taking the lease from the
    run that replaced it. The
    recorded ``beat`` is never compared with the newcomer's clock (the lease's one clock
    rule), so a restart waits ``lease_ttl`` also for a lease that looks hours old, and a
    dead run whose clock ran ahead is taken over all the same.

    Every write of the lease after a read of it is conditional on what was read (``CREATE``
    when there was none, else ``UpdateIf(etag)``), so of two runs that find the same stale
    lease exactly one takes it: the other finds the winner's fresh lease and fails in one
    line.

    Limit: pacing a run's own renewals reads the recorded ``beat``, so the processes of
    *one* run must keep their clocks within about ``lease_ttl / 2`` of one another; where
    they do not, a renewal may be skipped, another run may take the lease from the live
    run, and the live run's next task or commit then fails in one line (two runs never
    both commit).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping

import msgspec

from amcommit.coord.lease import Holding, Seen
from amcommit.coord.lease import Lease as CoordLease
from amcommit.errors import ConflictError, NotFound
from amcommit.liveness import ProcessId
from amcommit.paths import basename, join
from amcommit.store.base import PutMode, Store
from amcommit.table.format.naming import HOODIE_DIR, STAGING_DIR, is_instant
from amcommit.table.write.staging import table_layout

log = logging.getLogger("amcommit.spark.stream")

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
    "driver_instants",
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
    time, see :func:`amcommit.liveness.driver_id`); recorded in the write's marker only."""


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
    driver: ProcessId | None = None
    """The run's driver process, when known (module doc)."""
    replaced: list[str] = msgspec.field(default_factory=list)
    """Earlier runs of the same driver whose lease this run (or one before it) took over at
    once (module doc): none of them may take it back."""


REPLACED_KEPT = 16
"""How many replaced runs a lease remembers."""


def _same_driver(lease: Lease | None, run: str, driver: ProcessId | None) -> bool:
    """Pure: ``lease`` is another run's, of the same (fully identified) driver process
    ``driver``, and ``run`` is not one it replaced: Spark has stopped that run (module doc)."""
    return (
        lease is not None
        and driver is not None
        and driver.pid > 0
        and bool(driver.host and driver.boot and driver.pidns and driver.start)
        and lease.driver == driver
        and lease.run != run
        and run not in lease.replaced
    )


def checkpoint_app(checkpoint: str) -> str:
    """The label app id of a query known only by its checkpoint location."""
    return "checkpoint-" + hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:32]


def lease_path(dest: str, app: str) -> str:
    return join(dest, LEASE_DIR, hashlib.sha256(app.encode()).hexdigest()[:40] + ".json")


def owner_path(dest: str, instant: str) -> str:
    return join(dest, STAGING_DIR, instant, OWNER_FILE)


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


async def _owner_file(store: Store, dest: str, instant: str) -> Owner | None:
    try:
        return msgspec.json.decode(await store.get(owner_path(dest, instant)), type=Owner)
    except (NotFound, msgspec.DecodeError, msgspec.ValidationError):
        return None


async def _claimed_owner(store: Store, dest: str, instant: str) -> Mapping[str, object] | None:
    """The ``owner`` recorded in the write's job marker (``begin_write(owner=)``), if any."""
    try:
        body = json.loads(await store.get(table_layout(dest, instant).job_marker))
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
            basename(i.path.rstrip("/")) async for i in store.list(join(dest, STAGING_DIR), recursive=False)
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


def _decode_lease(data: bytes) -> Lease | None:
    try:
        return msgspec.json.decode(data, type=Lease)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _holding(lease: Lease) -> Holding:
    """What the query's lease is to :mod:`amcommit.coord.lease`: held by a run (every
    process of the run writes it: its tasks and batch commits), whose driver is named."""
    return Holding(token=lease.run, process=lease.driver)


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
    of another run (unchanged for ``ttl`` on this process's monotonic clock, or its driver
    dead). ConflictError (one line) if another run of the same query holds it and keeps
    renewing it, or took it first. Atomic: the one conditional write that takes or renews
    the lease (:class:`amcommit.coord.lease.Lease`)."""
    path = lease_path(dest, app)
    carried: list[str] = []  # the replaced runs this write of the lease records

    def encode(_beats: int) -> bytes:
        return msgspec.json.encode(Lease(app=app, run=run, beat=time.time(), driver=driver, replaced=carried))

    lease: CoordLease[Lease] = CoordLease(
        store, path, ttl=ttl, token=run, decode=_decode_lease, view=_holding, encode=encode
    )
    first = await lease.observe_or_absent()
    if first.body is not None and run in first.body.replaced:
        raise ConflictError(_replaced(app, run, first.body))
    if first.body is not None and first.body.run == run:
        carried[:] = first.body.replaced
        if abs(time.time() - first.body.beat) < ttl * RENEW_AFTER:
            return False  # ours, renewed moments ago (by another task of this run): not rewritten
        if await lease.take_over(first):
            return False  # renewed, conditionally on the version we read
        # changed since our read: judge what is there now (ours again: another task renewed it)

    def on_wait(seen: Seen[Lease], _left: float) -> None:
        if seen.body is not None:
            log.warning(_waiting(app, run, seen.body, time.time(), ttl))

    def on_change(seen: Seen[Lease]) -> None:
        if seen.body is not None:  # another run wrote it while we looked: it is alive
            raise ConflictError(_running(app, seen.body, time.time()))

    def gave_up(seen: Seen[Lease] | None) -> ConflictError:
        body = seen.body if seen is not None else None
        return ConflictError(_running(app, body, time.time()) if body is not None else _unreadable(app, path))

    def reclaim(body: Lease | None) -> bool:
        if body is not None and body.run == run:
            carried[:] = body.replaced  # ours (renewed by another process of this run)
            return False  # (the lease adopts it as ours)
        if not _same_driver(body, run, driver):
            return False
        assert body is not None
        carried[:] = [*body.replaced, body.run][-REPLACED_KEPT:]
        log.info(
            "streaming query %s: run %s takes over the lease of run %s of the same driver", app, run, body.run
        )
        return True

    replaced = await lease.acquire(
        wait=ttl + 1.0,
        gave_up=gave_up,
        reclaim=reclaim,
        on_wait=on_wait,
        on_change=on_change,
        first=first,
        max_poll=min(0.5, ttl / 10),
    )
    return replaced is not None and replaced.body is not None


def _waiting(app: str, run: str, lease: Lease, now: float, ttl: float) -> str:
    driver = f", driver {lease.driver.text()}" if lease.driver is not None else ""
    return (
        f"streaming query {app}: run {run} waits for the lease of run {lease.run} (heartbeat "
        f"{max(0.0, now - lease.beat):.0f}s ago{driver}): at most {ttl + 1:g} s; taken over once "
        f"not renewed for {ttl:g} s (leaseTtl), or at once if that driver is dead on this host; "
        "if it is renewed meanwhile, this run fails (two runs of one query at once)"
    )


def _replaced(app: str, run: str, lease: Lease) -> str:
    return (
        f"streaming query {app}: run {run} has stopped: run {lease.run} of the same driver "
        "took its lease over (a restart); this late task or commit of the stopped run does nothing"
    )


def _unreadable(app: str, path: str) -> str:
    return f"streaming query {app}: its lease {path!r} keeps changing under our reads; is another run writing it?"


def _running(app: str, lease: Lease, now: float) -> str:
    return (
        f"streaming query {app} is already running in another run ({lease.run}, heartbeat "
        f"{max(0.0, now - lease.beat):.0f}s ago): two runs of one query at once are refused; "
        "stop the other run first"
    )
