"""Writer heartbeats of a Hudi table: ``.hoodie/.heartbeat/<instant>`` (Hudi's own place).

A writer proves it is alive by rewriting its heartbeat file (a whole-object put: atomic; the
body is its wall-clock time, for people). The commit of a later instant judges an earlier
inflight instant by it (:func:`judge_writers`, then :func:`writer_alive`, pure): its writer is
alive while its last sign of life is younger than ``writer_ttl``.

**Who must beat, and for how long.** For the whole life of the write, from
:func:`~amcommit.table.write.task.begin_write` until its commit or abort, a beat at least every
``writer_ttl`` (the loops here beat every ``writer_ttl / 4``). Otherwise a concurrent writer
may judge the live write dead and roll it back, deleting its files.

- :func:`~amcommit.table.write.task.begin_write` beats once; every task setup and task commit
  beats; a running ``commit_job`` beats for its whole duration (including a wait for an
  earlier instant, and the completion of a dead holder's commit). The beats of task setups
  and commits and the first one of a job commit are skipped while the heartbeat is younger
  than ``writer_ttl / 8`` (:func:`beat`): a short write changes its heartbeat twice (begun,
  removed), not once per task.
- The Spark writer: each write task beats while it runs, and the driver starts a keep-alive
  process when it begins the write (:mod:`amcommit.table.timeline.beater`) that beats until the write
  is committed or aborted, or the process running the write (the Spark driver's JVM, or the
  Python driver that began it) is gone (a slow upstream stage, queued tasks, the wait before
  ``commit()``).
- **Engine users** must keep the write alive between ``begin_write`` and ``commit_job`` /
  ``abort_job`` themselves, e.g.::

      write = await begin_write(store, dest, operation=Operation.INSERT, spec=spec, config=config)
      async with heartbeat(store, dest, write.instant, ttl=config.writer_ttl):
          ...                                      # tasks, however long they take
          await commit_job(store, dest, write.instant, config=config)

  (a process that runs tasks elsewhere can run :func:`keep_beating` instead: it stops by
  itself once the write is committed or aborted).

**Dead keepers.** The process that keeps a write alive for a stretch of its life
(:func:`heartbeat`, which a running ``commit_job`` uses too; the Spark driver's keep-alive
process, on behalf of the driver's JVM) records itself, when it starts, as the write's
*keeper*: ``.hoodie/.aux/amcommit/<instant>/_keeper.json`` (a :class:`~amcommit.liveness.ProcessId`;
one put, atomic; it goes away with the staging folder). :func:`heartbeat` withdraws its
record when its block ends, so only a keeper that died (killed, crashed) leaves it. A judge
on the keeper's host that can prove it dead (:func:`~amcommit.liveness.proven_dead`) judges
the writer dead at once, as if it had said it stopped, whatever other processes (tasks) beat
meanwhile: a write whose keeper is gone has nobody left to commit it. Elsewhere, or with
no record, ``writer_ttl`` alone decides.

**Clocks.** A sign of life is the *store's* modification time of the heartbeat (else of the
write's job marker, else of its ``.requested`` file), and the judge compares it with the
*store's* current time, read from a probe object it writes (:func:`store_now`) just before it
lists the heartbeats. Neither the writers' nor the judge's clocks matter; the assumption is
that the store stamps modification times with one clock that runs at a sane rate (one
service, or one file system). Only when a store gives no modification times does the judge
fall back to the heartbeat body (the writer's clock) and its own clock: those must then agree
within a small fraction of ``writer_ttl``. An instant with no sign of life at all is judged
by its time (the writer's clock at allocation) against the store's clock.

**Not a lease.** The table's commit lock is the destination lock, a
:class:`amcommit.coord.lease.Lease`; the heartbeat is not one, and keeps its own clock rule:
the file is Hudi's (``.hoodie/.heartbeat/<instant>``, its modification time is what Hudi's
writers read), several processes of one write beat it at once (no single holder, no
conditional writes), and a commit judges an earlier instant from one listing (a lease's
rule, an etag watched unchanged for a whole ttl, would make every such commit wait
``writer_ttl``). The keeper record is no lease either: the latest process keeping the write
alive overwrites it, and only :func:`~amcommit.liveness.proven_dead` is asked of it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager

import anyio
import msgspec

from amcommit.errors import NotFound, StoreError
from amcommit.liveness import ProcessId, proven_dead, this_process
from amcommit.paths import basename, join
from amcommit.store.base import PutMode, Store
from amcommit.table.format.naming import (
    HEARTBEAT_DIR,
    HOODIE_DIR,
    LEGACY_STAGING_DIR,
    STAGING_DIR,
    check_instant,
    heartbeat_path,
    is_instant,
    parse_instant,
)

__all__ = [
    "KEEPER_FILE",
    "beat",
    "claim_keeper",
    "delete_beat",
    "heartbeat",
    "judge_writers",
    "keep_beating",
    "keeper_path",
    "last_beats",
    "stop_beat",
    "store_now",
    "withdraw_keeper",
    "writer_alive",
]


FRESH_FRACTION = 1 / 8
"""A beat younger than ``FRESH_FRACTION * writer_ttl`` is not rewritten by a beat that may
be skipped (a task's setup and commit, the start of a job commit): see :func:`beat`."""

_beaten: dict[tuple[str, str], float] = {}
"""(store root, heartbeat path) -> when this process last wrote a beat there (monotonic)."""


async def beat(store: Store, dest: str, instant: str, *, fresh: float = 0.0) -> None:
    """Refresh the heartbeat of ``instant``'s writer (one put; atomic).

    ``fresh`` > 0 (``FRESH_FRACTION * writer_ttl``: task setups and commits, the start of a
    job commit): skip the beat while the heartbeat is younger than that: written by this
    process less than ``fresh`` ago, else (one read) by its body, the wall-clock time of
    the process that wrote it against ours (the processes of one write must agree on the
    time within a small fraction of ``writer_ttl``). A short write is then beaten once by
    its begin, not by each of its tasks and its commit: object stores limit how often one
    object may change (GCS: about once a second). A heartbeat that says *stopped*, is
    missing or unreadable is always beaten. The periodic beats (:func:`keep_beating`)
    always write."""
    path = join(dest, heartbeat_path(instant))
    key = (store.root_uri, path)
    sent = time.monotonic()
    if fresh > 0:
        last = _beaten.get(key)
        if last is not None and sent - last < fresh:
            return
        try:
            body = await store.get(path)
        except NotFound:
            body = b""
        if _fresh(body, time.time(), fresh):
            return
    await store.put(path, repr(time.time()).encode(), mode=PutMode.OVERWRITE)
    if len(_beaten) > 1024:
        _beaten.clear()
    _beaten[key] = sent


def _fresh(body: bytes, now: float, fresh: float) -> bool:
    """Whether a heartbeat body is a beat written less than ``fresh`` seconds before
    ``now`` by its writer's clock (a body far in the future is not trusted either) (pure)."""
    try:
        t = float(body.decode())
    except (ValueError, UnicodeDecodeError):
        return False  # stopped, empty or foreign
    return abs(now - t) < fresh


STOPPED = b"stopped"
"""Body of a heartbeat whose writer gave up (:func:`stop_beat`): judged dead at once."""


async def stop_beat(store: Store, dest: str, instant: str) -> None:
    """Say that ``instant``'s writer has stopped without finishing (its commit failed for
    good, or it was cancelled): the heartbeat body becomes ``stopped``, so a rollback or a
    later writer need not wait ``writer_ttl`` for it. A writer that resumes the write beats
    again (:func:`beat` overwrites it). One put; atomic."""
    path = join(dest, heartbeat_path(instant))
    _beaten.pop((store.root_uri, path), None)
    await store.put(path, STOPPED, mode=PutMode.OVERWRITE)


def _says_stopped(body: bytes) -> bool:
    """Whether a heartbeat body is the one :func:`stop_beat` writes (pure)."""
    return body.strip() == STOPPED


async def _stopped(store: Store, path: str) -> bool:
    """Whether the heartbeat at ``path`` says its writer stopped (False when unreadable)."""
    try:
        return _says_stopped(await store.get(path))
    except StoreError:
        return False


async def try_beat(store: Store, dest: str, instant: str, *, fresh: float = 0.0) -> None:
    """:func:`beat` (``fresh``: see there), ignoring store errors (a missed beat is retried
    at the next one)."""
    try:
        await beat(store, dest, instant, fresh=fresh)
    except StoreError:
        pass


KEEPER_FILE = "_keeper.json"


def keeper_path(dest: str, instant: str) -> str:
    """Where the keeper of ``instant``'s write is recorded (module doc)."""
    return join(dest, STAGING_DIR, check_instant(instant), KEEPER_FILE)


async def claim_keeper(store: Store, dest: str, instant: str, keeper: ProcessId) -> None:
    """Record ``keeper`` as the process keeping ``instant``'s write alive (one put; atomic;
    the last claim wins). Call it while the write is certainly not over (its staging folder
    is there): before the claimant lets the write go on."""
    await store.put(keeper_path(dest, instant), msgspec.json.encode(keeper), mode=PutMode.OVERWRITE)


async def withdraw_keeper(store: Store, dest: str, instant: str, keeper: ProcessId) -> None:
    """Remove the keeper record if it still names ``keeper`` (a read, then a delete: a
    claim landing between them is removed too, which only brings its writer back to the
    ``writer_ttl`` rule). Never raises a store error."""
    path = keeper_path(dest, instant)
    try:
        if msgspec.json.decode(await store.get(path), type=ProcessId) == keeper:
            await store.delete(path)
    except (StoreError, msgspec.DecodeError, msgspec.ValidationError):
        pass


async def _keeper_dead(store: Store, dest: str, instant: str) -> bool:
    """Whether the recorded keeper of ``instant``'s write is provably dead (False when
    there is no record or it cannot be read)."""
    try:
        data = await store.get(keeper_path(dest, instant))
        return proven_dead(msgspec.json.decode(data, type=ProcessId))
    except (StoreError, msgspec.DecodeError, msgspec.ValidationError):
        return False


async def delete_beat(store: Store, dest: str, instant: str) -> None:
    """Remove the heartbeat of ``instant`` (idempotent)."""
    path = join(dest, heartbeat_path(instant))
    _beaten.pop((store.root_uri, path), None)
    try:
        await store.delete(path)
    except NotFound:
        pass


async def last_beats(store: Store, dest: str) -> dict[str, float]:
    """Instant -> time of its writer's last heartbeat (store modification time, else the
    body), from one listing of ``.hoodie/.heartbeat/``."""
    out: dict[str, float] = {}
    try:
        async for info in store.list(join(dest, HEARTBEAT_DIR), recursive=False):
            name = basename(info.path)
            if info.is_dir or not is_instant(name):
                continue
            if info.mtime is not None:
                out[name] = info.mtime
                continue
            try:
                body = await store.get(info.path)
            except NotFound:
                continue
            try:
                out[name] = float("-inf") if _says_stopped(body) else float(body.decode())
            except (ValueError, UnicodeDecodeError):
                continue
    except NotFound:
        pass
    return out


async def store_now(store: Store, dest: str) -> float | None:
    """The store's current time: the modification time it gives a probe object written
    now (``.hoodie/.heartbeat/.clock-<random>``, deleted again). None if the store gives
    no modification times. Three requests; not atomic (a probe left by a crash is inert)."""
    probe = join(dest, HEARTBEAT_DIR, f".clock-{secrets.token_hex(8)}")
    info = await store.put(probe, b"", mode=PutMode.OVERWRITE)
    try:
        mtime = info.mtime if info.mtime is not None else (await store.stat(probe)).mtime
    finally:
        try:
            await store.delete(probe)
        except StoreError:
            pass
    return mtime


async def _first_sign(store: Store, dest: str, instant: str) -> float | None:
    """Store time of the earliest trace of a write that never heartbeated (its job marker,
    else its ``.requested`` file), None if neither is there or the store gives no times."""
    from amcommit.committer.layout import JobLayout

    paths = [
        JobLayout(dest, instant, staging=STAGING_DIR).job_marker,
        JobLayout(dest, instant, staging=LEGACY_STAGING_DIR).job_marker,  # an earlier version's
        join(dest, HOODIE_DIR, f"{instant}.commit.requested"),
        join(dest, HOODIE_DIR, f"{instant}.replacecommit.requested"),
    ]
    for path in paths:
        try:
            mtime = (await store.stat(path)).mtime
        except NotFound:
            continue
        if mtime is not None:
            return mtime
    return None


async def judge_writers(store: Store, dest: str, pending: Iterable[str]) -> tuple[dict[str, float], float]:
    """What :func:`writer_alive` needs to judge the writers of the ``pending`` instants:
    (instant -> its last sign of life, now), both by the store's clock when the store gives
    modification times (see the module doc), else by the heartbeat bodies and our clock.

    ``now`` is read *before* the heartbeats are listed, so a beat written meanwhile can only
    make a writer look younger (never a live writer dead). A writer that said it stopped
    (:func:`stop_beat`), or whose recorded keeper is provably dead (module doc), gets
    ``-inf``: dead at once. One listing, plus a read of each judged heartbeat (on stores with
    modification times) and of each judged write's keeper record."""
    wanted = sorted(set(pending))
    if not wanted:
        return {}, time.time()
    now = await store_now(store, dest)
    beats = await last_beats(store, dest)
    for t in wanted:
        if beats.get(t) != float("-inf") and await _keeper_dead(store, dest, t):
            beats[t] = float("-inf")
    if now is None:
        return beats, time.time()
    for t in wanted:
        if beats.get(t) == float("-inf"):
            continue
        if t in beats:
            # by modification time: read the body of the beats judged, for a stopped writer
            if await _stopped(store, join(dest, heartbeat_path(t))):
                beats[t] = float("-inf")
        else:
            first = await _first_sign(store, dest, t)
            if first is not None:
                beats[t] = first
    return beats, now


def writer_alive(instant: str, last_beat: float | None, now: float, ttl: float) -> bool:
    """Whether the writer of ``instant`` counts as alive at ``now`` (pure; ``last_beat``
    and ``now`` from one clock, see :func:`judge_writers`; no sign of life: the instant's
    own time)."""
    seen = last_beat if last_beat is not None else parse_instant(instant).timestamp()
    return now - seen <= ttl


async def _write_active(store: Store, dest: str, instant: str) -> bool:
    """False once the write's job marker is gone (committed or aborted); True on doubt."""
    from amcommit.committer.layout import JobLayout

    for staging in (STAGING_DIR, LEGACY_STAGING_DIR):  # (an earlier version's staging last)
        try:
            await store.stat(JobLayout(dest, instant, staging=staging).job_marker)
        except NotFound:
            continue
        except StoreError:
            return True
        return True
    return False


async def keep_beating(
    store: Store,
    dest: str,
    instant: str,
    *,
    ttl: float,
    still_running: Callable[[], bool] | None = None,
) -> None:
    """Beat every ``ttl / 4`` until the write of ``instant`` is over (its job marker is gone:
    committed or aborted) or ``still_running()`` says False. Runs until then or until
    cancelled. Each beat is preceded by a check of the marker, so nothing is written once
    the write is seen to be over (not even into a table folder deleted meanwhile), and
    followed by another: a beat that raced the end of the write (it ended between the check
    and the beat) is removed again. Once the write is over its heartbeat, if any is left, is
    removed (a removal never brings a deleted folder back), so none outlives its write."""

    async def over() -> bool:
        if await _write_active(store, dest, instant):
            return False
        try:
            await delete_beat(store, dest, instant)
        except StoreError:
            pass
        return True

    while True:
        await anyio.sleep(ttl / 4)
        if still_running is not None and not still_running():
            return
        if await over():
            return
        await try_beat(store, dest, instant)
        if await over():
            return


@asynccontextmanager
async def heartbeat(store: Store, dest: str, instant: str, *, ttl: float = 120.0) -> AsyncIterator[None]:
    """Keep ``instant``'s writer alive while the block runs: beat now (unless a beat younger
    than ``FRESH_FRACTION * ttl`` is there, see :func:`beat`), then every ``ttl/4``
    (:func:`keep_beating`: the beats stop by themselves once the write is committed or
    aborted, also inside the block). This process is recorded as the write's keeper while
    the block runs (:func:`claim_keeper`, withdrawn on exit; nested blocks of one process
    for one write claim once): if it dies inside the block, a judge on this host finds the
    writer dead at once (module doc). The heartbeat file is left in place on exit while the
    write is still going on (its commit or rollback removes it)."""
    check_instant(instant)
    await beat(store, dest, instant, fresh=FRESH_FRACTION * ttl)
    keeper, key = this_process(), (store.root_uri, dest, instant)
    claims = _claims.get(key, 0)
    if keeper is not None and not claims:
        await claim_keeper(store, dest, instant, keeper)
    _claims[key] = claims + 1
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: keep_beating(store, dest, instant, ttl=ttl))
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as eg:  # the block's own error, not a group of one
        if len(eg.exceptions) == 1:
            raise eg.exceptions[0] from None
        raise
    finally:
        _claims[key] -= 1
        if not _claims[key]:
            del _claims[key]
            if keeper is not None:
                with anyio.CancelScope(shield=True):
                    await withdraw_keeper(store, dest, instant, keeper)


_claims: dict[tuple[str, str, str], int] = {}
"""(store root, table, instant) -> how many :func:`heartbeat` blocks of this process keep
that write alive (the outermost claims and withdraws)."""
