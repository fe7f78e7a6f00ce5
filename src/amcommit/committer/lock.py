"""The destination lock: job commits and aborts into one destination, one at a time.

One lock object per destination, ``$dest/_temporary/_commit.lock`` (a name no job
directory can have: job ids start with a letter or digit). Its body (JSON) names the
holder: job id and attempt, the operation (``commit``/``abort``), a random token, host,
pid, wall-clock times (for people only) and the ``ttl``.

The lock is a :class:`~amcommit.coord.lease.Lease` (:mod:`amcommit.coord.lease` states the
protocol, its one clock rule and what is atomic on each store), with these rules of its own:

* **Acquire** creates the object (``PutMode.CREATE``); exactly one writer wins.
* **Heartbeat**: the holder renews it (``UpdateIf(etag it last wrote)``) every ``ttl/3``.
  A failed precondition means someone took the lock over: the holder has lost it. So does
  failing to renew before ``SAFE_FRACTION * ttl`` after its last renewal was *sent* (a
  store outage). Losing the lock cancels the guarded work at its next ``await`` and raises
  :class:`~amcommit.errors.LockLost`; a commit stopped that way is resumable (its journal
  is on the store) like one whose process was killed.
* **Expiry** never compares clocks of different hosts: a waiter takes over a lock only
  after seeing the *same etag* for longer than the body's ``ttl`` on its own monotonic
  clock (the times in the body are for people only).
* **Dead holders**: the body names the holder's process (:class:`~amcommit.liveness.ProcessId`);
  a waiter on the same host that can prove it gone (:func:`~amcommit.liveness.proven_dead`)
  takes the lock over at once. A holder on another host, or one whose status cannot be
  proven, keeps the ttl rule.
* **Takeover**: ``UpdateIf(the stale etag observed)``: of several waiters exactly one wins.
  A job takes over its *own* lock (same job id and attempt: a resume after a crash) at
  once. (Two live processes committing the *same* job at once is a caller bug: the earlier
  one loses the lock at its next heartbeat, at most ``ttl/3`` later, and stops; until then
  both run the same idempotent, journaled commit.)
* **Release**: read the body, and delete the object if it still carries our token and our
  lease has not run out (two requests: the store protocol has no conditional delete; the
  lease's module doc says why a takeover cannot land between them).
* **Release by rewrite** (a table's lock, in its staging folder, with the setting
  ``lock_release="rewrite"``; off by default): instead of the delete, one conditional
  rewrite of the version we hold (``If-Match`` / ``ifGenerationMatch``) to a *released* body (``released: true``, our
  token and job for people); the next writer acquires it by a conditional rewrite of that
  exact generation, at once (:mod:`amcommit.coord.lease`). A released lock names no holder
  (:func:`held_by`, ``amcommit jobs``). An absent lock (an older amcommit released it by
  delete) is created as before; an older amcommit that meets a released lock sees an
  unrenewed one and takes it over once it is unchanged for its ttl (or at once if the
  releaser's process is gone, on its host). Plain destinations keep the delete: a
  committed output holds no ``_temporary`` folder. It does not make commits faster under
  GCS's one change per second of one object name: a commit changes the lock twice either
  way (acquire, release), so one destination takes at most about 0.5 commits/s there.
* **Release by marker** (a table's lock, ``lock_release="marker"``): the lock object is
  left as it is and the holder creates ``<lock>.released.<its token>`` (create-only, a
  new name per commit), so the lock object changes once per commit (the next acquirer's
  takeover), about 1 commit/s under GCS's limit. A lock whose token has a marker is
  released (:mod:`amcommit.coord.lease` states why this is safe): the next writer takes
  that exact generation over at once, and deletes the marker while it holds the lock.
  Readers (:func:`read_lock`, :func:`held_by`, ``amcommit jobs``) stat the marker of the
  token they read. A table lock released by delete or rewrite also takes a marked lock at
  once (the settings may differ between writers of one table). An older amcommit that
  meets a marked lock sees an unrenewed one (as with release by rewrite).

Fence: the guarded work gets a :class:`FencedStore` (:class:`amcommit.coord.lease.FencedStore`)
that checks the lease synchronously before every write, so no write *starts* after the
lease ran out, even when the heartbeat task could not run (a blocked event loop). What is
not fenced: a request already on the wire when the lease runs out still lands (the lock
cannot recall it). ``ttl`` must be far longer than one request, including its wait for a
slot in the store's limiter (heartbeats share it with the commit's own requests); the
default is 60 s. Stores without conditional writes (``Capabilities.conditional_put``
False; none of amcommit's backends) are refused unless ``destination_lock`` is turned off.

A waiter that must wait says so once, in one line on the ``amcommit.lock`` logger (WARNING:
who holds the lock, and how long it waits at most); the CLI prints it on stderr, a Spark
driver in its log.

Appends are serialised too, although two appends into disjoint files could safely run
together: one rule is simpler to prove, and an append waits only for the other commit's
renames (seconds), not for its tasks.

A commit that fails and leaves an unfinished journal (state ``renaming``/``renamed``:
the destination holds a half-done commit) does **not** release the lock: the lock then
expires, and the next job that takes it over first completes that commit (see
:func:`run_locked`), so the two commits still happen one after the other. The failed job
itself (same id) takes its lock back at once to resume or abort.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Literal, TypeVar

import anyio
import msgspec

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.journal import Journal, decode_journal
from amcommit.committer.layout import TEMP_DIR_NAME, JobLayout
from amcommit.coord.lease import SAFE_FRACTION, FencedStore, Holding, Lease, Seen, marker_path
from amcommit.errors import CommitError, ConflictError, LockLost, NotFound, StoreError
from amcommit.liveness import ProcessId, this_process
from amcommit.paths import join, path_to_uri
from amcommit.store.base import Store
from amcommit.store.retry import RetryPolicy, policies_of, retry_call

T = TypeVar("T")

__all__ = [
    "LOCK_NAME",
    "SAFE_FRACTION",
    "DestinationLock",
    "FencedStore",
    "LockBody",
    "decode_lock",
    "describe",
    "held_by",
    "lock_path",
    "read_lock",
    "run_locked",
    "unfinished_journal",
]

log = logging.getLogger("amcommit.lock")

LOCK_NAME = "_commit.lock"
DEFAULT_POLICY = policies_of(DEFAULT_CONFIG)[0]

Operation = Literal["commit", "abort"]


class LockBody(msgspec.Struct, kw_only=True):
    """The lock object's content. Times are the writer's wall clock, for people only."""

    owner: str
    """Job id of the holder."""
    job_attempt: int = 0
    operation: str = "commit"
    token: str = ""
    host: str = ""
    pid: int = 0
    acquired: float = 0.0
    heartbeat: float = 0.0
    ttl: float = 60.0
    beats: int = 0
    boot: str = ""
    """The holder's boot id, PID namespace and process start time (with ``host`` and
    ``pid``: :class:`~amcommit.liveness.ProcessId`); empty when unknown or written by an
    older amcommit (then its death is never proven: the ttl rule applies)."""
    pidns: str = ""
    start: str = ""
    version: str = "amcommit-lock/1"
    released: bool = False
    """A released lock (release by rewrite, module doc): nobody holds it; ``owner`` and
    ``token`` name who released it."""

    def process(self) -> ProcessId:
        """The holder's process."""
        return ProcessId(host=self.host, boot=self.boot, pidns=self.pidns, pid=self.pid, start=self.start)


_dec = msgspec.json.Decoder(LockBody)


def lock_path(dest: str, *, staging: str | None = None) -> str:
    """Store path of the lock object of destination ``dest``: in ``_temporary/``, or in the
    staging folder of the job's kind (``staging``, relative to ``dest``; e.g. a Hudi table's
    ``.hoodie/.aux/amcommit/``, where no ``_temporary`` folder may appear)."""
    return join(dest, staging or TEMP_DIR_NAME, LOCK_NAME)


def decode_lock(data: bytes) -> LockBody | None:
    """The body, or None if it is not one of ours (then only its etag counts)."""
    try:
        return _dec.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def describe(body: LockBody | None) -> str:
    """One line naming the holder, for error messages."""
    if body is None:
        return "an unreadable lock object"
    age = max(0.0, time.time() - body.acquired)
    return (
        f"job {body.owner!r} ({body.operation}, host {body.host or '?'}, pid {body.pid}, "
        f"acquired {age:.0f} s ago by our clock)"
    )


class DestinationLock:
    """One writer's handle on the lock of ``dest``: a :class:`~amcommit.coord.lease.Lease`
    on :func:`lock_path` whose body is a :class:`LockBody`. ``release``: ``"rewrite"`` /
    ``"marker"`` to release a staged (table) lock by rewrite / by marker (module doc);
    plain destinations always delete theirs. Use :func:`run_locked`; the methods are
    public for tests."""

    def __init__(
        self,
        store: Store,
        dest: str,
        job_id: str,
        *,
        job_attempt: int = 0,
        operation: Operation = "commit",
        ttl: float = 60.0,
        wait: float = 600.0,
        policy: RetryPolicy = DEFAULT_POLICY,
        staging: str | None = None,
        release: Literal["delete", "rewrite", "marker"] = "delete",
    ) -> None:
        self.store = store
        self.policy = policy
        self.dest = dest
        self.staging = staging
        self.path = lock_path(dest, staging=staging)
        self.job_id = job_id
        self.job_attempt = job_attempt
        self.operation = operation
        self.ttl = ttl
        self.wait = wait
        self.token = secrets.token_hex(16)
        me = this_process()
        self._body = LockBody(
            owner=job_id,
            job_attempt=job_attempt,
            operation=operation,
            token=self.token,
            host=socket.gethostname(),
            pid=os.getpid(),
            ttl=ttl,
            boot=me.boot if me else "",
            pidns=me.pidns if me else "",
            start=me.start if me else "",
        )
        staged = staging is not None  # plain destinations delete theirs: module doc
        rewrite = staged and release in ("rewrite", "marker")
        self.lease: Lease[LockBody] = Lease(
            store,
            self.path,
            ttl=ttl,
            token=self.token,
            decode=decode_lock,
            view=_holding,
            encode=self._encode,
            policy=policy,
            what=f"the lock of destination {dest!r}",
            hint="run the commit again to resume",
            released=self._released if rewrite else None,
            markers=staged and release == "marker",
            see_markers=staged,  # any table lock follows one released by marker at once
        )

    @property
    def etag(self) -> str | None:
        """The etag of the lock as we last wrote it (None: not held)."""
        return self.lease.etag

    @property
    def safe_until(self) -> float:
        """Monotonic time until which the lock is ours (:attr:`Lease.safe_until`)."""
        return self.lease.safe_until

    @property
    def lost(self) -> str | None:
        """Why the lock was lost (None: not lost)."""
        return self.lease.lost

    @lost.setter
    def lost(self, reason: str | None) -> None:
        self.lease.lost = reason

    def _encode(self, beats: int) -> bytes:
        """The body of our write number ``beats``."""
        now = time.time()
        self._body.heartbeat = now
        if not self._body.acquired:
            self._body.acquired = now
        self._body.beats = beats
        return msgspec.json.encode(self._body)

    def _released(self) -> bytes:
        """The body of our release by rewrite."""
        body = msgspec.structs.replace(self._body, heartbeat=time.time(), beats=self.lease.beats + 1)
        body.released = True
        return msgspec.json.encode(body)

    async def read(self) -> tuple[str | None, LockBody | None]:
        """The lock object's etag and body, read consistently (:meth:`Lease.observe`): the
        etag is None if two stats around the read never agreed. NotFound if there is no
        lock."""
        seen = await self.lease.observe()
        return seen.etag, seen.body

    def check(self, op: str, path: str) -> None:
        """LockLost (:class:`~amcommit.coord.lease.LeaseLost`) unless the lease is still
        valid now (a synchronous check: it holds even when the heartbeat task could not
        run, e.g. behind a blocked event loop)."""
        self.lease.check(op, path)

    async def acquire(self) -> LockBody | None:
        """Wait for the lock and take it. Returns the body of *another* job's expired lock
        (or one whose holder is provably dead) it took over (its holder may have left a
        half-done commit), else None. Says once in the log that it waits (:meth:`_waiting`).
        Raises ConflictError naming the holder after ``wait`` seconds."""

        def mine(cur: LockBody | None) -> bool:  # our own job: a resume after a crash
            return cur is not None and cur.owner == self.job_id and cur.job_attempt == self.job_attempt

        def gave_up(seen: Seen[LockBody] | None) -> ConflictError:
            cur = seen.body if seen is not None else None
            return ConflictError(
                f"destination {self.dest!r} is locked by {describe(cur)}; gave up after "
                f"waiting {self.wait:g} s (lock_wait; a dead holder's lock is taken over at once on "
                f"its own host, elsewhere once unrenewed for {cur.ttl if cur else self.ttl:g} s)"
            )

        replaced = await self.lease.acquire(
            wait=self.wait,
            reclaim=mine,
            gave_up=gave_up,
            on_wait=lambda seen, left: log.warning(self._waiting(seen.body, left)),
        )
        if replaced is None:
            return None
        return replaced.body or LockBody(owner="")

    def _waiting(self, cur: LockBody | None, left: float) -> str:
        """The one line a waiter logs: who holds the lock, how long we wait at most."""
        where = path_to_uri(self.store.root_uri, self.dest)
        ttl = cur.ttl if cur is not None else self.ttl
        return (
            f"{self.operation} of job {self.job_id!r} waits for the lock of {where}: held by "
            f"{describe(cur)}; waiting at most {max(0.0, left):.0f} s (lock_wait), less if the "
            f"holder stops renewing it for {ttl:g} s (its lock is then taken over)"
        )

    async def tidy(self) -> None:
        """Delete earlier holders' release markers while we hold the lock (release by
        marker; :meth:`Lease.tidy`). Never raises: what is left is deleted at our release,
        and a marker whose token the lock does not carry is harmless."""
        try:
            await self.lease.tidy()
        except (StoreError, LockLost):
            pass

    async def heartbeat(self, on_lost: Callable[[], None]) -> None:
        """Renew the lock every ``ttl/3`` until cancelled; on losing it, set ``lost`` and
        call ``on_lost`` (which cancels the guarded work). See :meth:`Lease.keep`."""
        await self.lease.keep(on_lost)

    async def hand_over(self, body: LockBody) -> None:
        """Rewrite the lock to name ``body``'s job (with a fresh token nobody holds) and
        stop: it expires after ``ttl``, and that job takes it back at once."""
        if self.lost or self.etag is None:
            return
        new = msgspec.structs.replace(body, token=secrets.token_hex(16), heartbeat=time.time(), ttl=self.ttl)
        try:  # a lost answer whose retry fails its precondition: handed over all the same
            await self.lease.put_held(msgspec.json.encode(new))
        except StoreError:
            pass  # it stays ours and expires the same way
        self.lost = "handed over"

    async def release(self) -> None:
        """Release the lock if it is still ours and our lease has not run out: rewrite it to
        the released body (release by rewrite, module doc), or delete it (see the module
        doc for the read-then-delete window) and then the empty ``_temporary`` folder.
        Never raises."""
        if not await self.lease.release():
            return
        store = self.store
        if store.capabilities.directories and self.staging is None:
            temp = join(self.dest, TEMP_DIR_NAME)
            try:
                await retry_call(lambda: store.delete(temp), policy=self.policy)  # only if empty
            except StoreError:
                pass


def _holding(body: LockBody) -> Holding:
    """What the lease reads from a lock body."""
    return Holding(
        token=body.token, beats=body.beats, ttl=body.ttl, process=body.process(), released=body.released
    )


async def held_by(
    store: Store,
    dest: str,
    job_id: str,
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    staging: str | None = None,
) -> bool:
    """True if the lock of ``dest`` (in ``staging``, see :func:`lock_path`) exists, is not
    released (:func:`read_lock`) and names job ``job_id`` (alive or not). The reads go
    through the engine's retry layer with ``policy``."""
    try:
        body = await read_lock(store, lock_path(dest, staging=staging), policy=policy)
    except NotFound:
        return False
    return body is not None and not body.released and body.owner == job_id


async def read_lock(store: Store, path: str, *, policy: RetryPolicy = DEFAULT_POLICY) -> LockBody | None:
    """The lock object at ``path`` (None: not one of ours), with ``released`` set when its
    holder released it by rewrite or by marker (then one more request: a stat of the
    marker of its token). NotFound if there is no lock. Not atomic across the two reads:
    a lock released between them reads as held, as if read a moment earlier."""
    body = decode_lock(await retry_call(partial(store.get, path), policy=policy))
    if body is None or body.released or not body.token:
        return body
    try:
        await retry_call(partial(store.stat, marker_path(path, body.token)), policy=policy)
    except NotFound:
        return body
    return msgspec.structs.replace(body, released=True)


async def unfinished_journal(
    store: Store,
    dest: str,
    job_id: str,
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    staging: str | None = None,
) -> Journal | None:
    """The journal of ``job_id`` in ``dest`` if it records a half-done commit
    (``renaming``/``renamed``), looked up in the lock's staging folder (``staging``: a
    kind's own, where that kind's jobs stage), then in both job directory layouts of
    ``_temporary``. Reads go through the engine's retry layer with ``policy``."""
    if not job_id:
        return None
    layouts = [JobLayout(dest, job_id), JobLayout(dest, job_id, hadoop=True)]
    if staging is not None:
        layouts.insert(0, JobLayout(dest, job_id, staging=staging))
    for layout in layouts:
        path = layout.journal_path
        try:
            journal = decode_journal(await retry_call(partial(store.get, path), policy=policy))
        except NotFound:
            continue
        if journal is not None:
            return journal if journal.state in ("renaming", "renamed") else None
    return None


async def run_locked(
    store: Store,
    dest: str,
    job_id: str,
    config: CommitterConfig,
    body: Callable[[Store], Awaitable[T]],
    *,
    job_attempt: int = 0,
    operation: Operation = "commit",
    finish_previous: Callable[[LockBody, Store], Awaitable[object]] | None = None,
    staging: str | None = None,
) -> T:
    """Run ``body(store)`` holding the lock of ``dest`` (waiting for it first); the store
    it gets is a :class:`FencedStore`.

    If the lock was taken over from another job that left a half-done commit (its journal
    is ``renaming``/``renamed``), ``finish_previous`` completes that job first. If that
    fails and the job was rolled back, ``body`` runs; if its commit is still half done,
    the lock is handed back to that job and a ConflictError names it and the commands
    that finish it. If ``body`` fails and leaves our own journal unfinished, the
    lock is kept (it expires; see the module doc). LockLost if the lock was lost.
    """
    if not config.destination_lock:
        return await body(store)
    if not store.capabilities.conditional_put:
        raise CommitError(
            f"store {store.capabilities.name or store.root_uri!r} cannot create objects conditionally, "
            "so concurrent commits cannot be coordinated: set destination_lock=false if only one job "
            "ever commits into this destination at a time"
        )
    lock = DestinationLock(
        store,
        dest,
        job_id,
        job_attempt=job_attempt,
        operation=operation,
        ttl=config.lock_ttl,
        wait=config.lock_wait,
        policy=policies_of(config)[0],
        staging=staging,
        release=config.lock_release,
    )
    policy = lock.policy
    previous = await lock.acquire()
    fenced = FencedStore(store, lock)
    keep = done = False
    handed: LockBody | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.heartbeat, tg.cancel_scope.cancel)
            tg.start_soon(lock.tidy)  # release by marker: the previous holder's, meanwhile
            try:
                if previous is not None and finish_previous is not None:
                    if (
                        await unfinished_journal(store, dest, previous.owner, policy=policy, staging=staging)
                        is not None
                    ):
                        try:
                            await finish_previous(previous, fenced)
                        except Exception as e:
                            # rolled back (no journal left): the destination is whole, go on
                            if (
                                await unfinished_journal(
                                    store, dest, previous.owner, policy=policy, staging=staging
                                )
                                is not None
                            ):
                                handed = previous
                                raise ConflictError(
                                    f"destination {dest!r} holds a half-done commit of job {previous.owner!r} "
                                    f"whose holder died, and finishing it failed ({type(e).__name__}: {e}); run "
                                    f"`amcommit commit-job <dest> --job-id {previous.owner}` or `amcommit abort-job "
                                    f"<dest> --job-id {previous.owner}`"
                                ) from e
                result = await body(fenced)
                done = True
            except BaseException:
                with anyio.CancelScope(shield=True):
                    keep = handed is None and await _unfinished_quietly(lock, job_id)
                raise
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as eg:
        if len(eg.exceptions) == 1:
            raise eg.exceptions[0] from None
        raise
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(max(5.0, lock.ttl / 3)):
            if handed is not None:
                await lock.hand_over(handed)
            elif not keep:
                await lock.release()
    if not done:  # cancelled by the heartbeat: the lock was lost
        assert lock.lost is not None
        raise LockLost(
            f"lost the lock of destination {dest!r} ({lock.lost}); the commit stopped, run it again to resume"
        )
    return result  # a body that finished before noticing the loss did all its work


async def _unfinished_quietly(lock: DestinationLock, job_id: str) -> bool:
    """Whether the failed work left ``job_id``'s journal unfinished (then the lock is kept),
    asked within ``ttl/3`` through the retry layer; True if that cannot be told."""
    with anyio.move_on_after(max(5.0, lock.ttl / 3)):
        try:
            return (
                await unfinished_journal(
                    lock.store, lock.dest, job_id, policy=lock.policy, staging=lock.staging
                )
                is not None
            )
        except StoreError:
            pass
    return True  # cannot tell: keep the lock (it expires)
