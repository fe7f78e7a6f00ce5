"""The destination lock: job commits and aborts into one destination, one at a time.

One lock object per destination, ``$dest/_temporary/_commit.lock`` (a name no job
directory can have: job ids start with a letter or digit). Its body (JSON) names the
holder: job id and attempt, the operation (``commit``/``abort``), a random token, host,
pid, wall-clock times (for people only) and the ``ttl``.

Protocol, using only the store's conditional writes (``PutMode.CREATE``, ``UpdateIf``):

* **Acquire**: create the object with ``PutMode.CREATE``; exactly one writer wins.
* **Heartbeat**: the holder rewrites the body with ``UpdateIf(etag it last wrote)`` every
  ``ttl/3``. A failed precondition means someone took the lock over: the holder has lost
  it. So does failing to renew before ``SAFE_FRACTION * ttl`` after its last renewal was
  *sent* (a store outage). Losing the lock cancels the guarded work at its next ``await``
  and raises :class:`~amcommit.errors.LockLost`; a commit stopped that way is resumable
  (its journal is on the store) like one whose process was killed.
* **Expiry** never compares clocks of different hosts: a waiter takes over a lock only
  after seeing the *same etag* for longer than the body's ``ttl`` on its own monotonic
  clock. The holder sent its last renewal before the waiter could first see it, so the
  holder's own deadline (``SAFE_FRACTION * ttl`` after sending) passes before any
  takeover is possible; only the clock *rates* need to agree, not the clock values.
* **Dead holders**: the body names the holder's process (:class:`~amcommit.liveness.ProcessId`:
  host, boot id, PID namespace, pid, start time). A waiter on the same host that can prove
  that process gone (:func:`~amcommit.liveness.proven_dead`: no such pid, or the pid reused
  by a later process) takes the lock over at once, without waiting ``ttl``. A holder on
  another host, or one whose status cannot be proven, keeps the ttl rule above.
* **Takeover**: ``UpdateIf(stale etag)``: of several waiters exactly one wins. A job
  takes over its *own* lock (same job id and attempt: a resume after a crash) at once.
  (Two live processes committing the *same* job at once is a caller bug: the earlier one
  loses the lock at its next heartbeat, at most ``ttl/3`` later, and stops; until then
  both run the same idempotent, journaled commit.)
* **Release**: read the body, and delete the object if it still carries our token and our
  lease has not run out. The read and the delete are two requests (no store here offers a
  conditional delete): a takeover landing between them would lose its lock, but a takeover
  needs the lock unrenewed for a whole ``ttl`` and we release only before our safe
  deadline, so this cannot happen unless a clock runs more than ``1/SAFE_FRACTION`` times
  faster than another.

Fence: the guarded work gets a :class:`FencedStore` that checks the lease synchronously
before every write, so no write *starts* after the lease ran out, even when the heartbeat
task could not run (a blocked event loop). What is not fenced: a request already on the
wire when the lease runs out still lands (the lock cannot recall it). ``ttl`` must be far longer than one request, including
its wait for a slot in the store's limiter (heartbeats share it with the commit's own
requests); the default is 60 s. Stores without conditional writes
(``Capabilities.conditional_put`` False; none of amcommit's backends) are refused unless
``destination_lock`` is turned off. ``LocalStore`` makes ``UpdateIf`` atomic across
processes with ``flock`` on the parent directory; its ``CREATE`` is ``RENAME_NOREPLACE``.

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
import random
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Literal, Self, TypeVar

import anyio
import msgspec

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.journal import Journal, decode_journal
from amcommit.committer.layout import TEMP_DIR_NAME, JobLayout
from amcommit.errors import (
    AlreadyExists,
    CommitError,
    ConflictError,
    LockLost,
    NotFound,
    PreconditionFailed,
    StoreError,
)
from amcommit.iostats import IOStatistics
from amcommit.liveness import ProcessId, proven_dead, this_process
from amcommit.paths import join, path_to_uri
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
)
from amcommit.store.retry import RetryPolicy, policies_of, retry_call

T = TypeVar("T")

log = logging.getLogger("amcommit.lock")

LOCK_NAME = "_commit.lock"
SAFE_FRACTION = 0.75
"""A holder stops (and never releases) once ``SAFE_FRACTION * ttl`` passed since it sent
its last successful renewal."""
MAX_POLL = 2.0
DEFAULT_POLICY = policies_of(DEFAULT_CONFIG)[0]
_CONSISTENT_READS = 5

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

    def process(self) -> ProcessId:
        """The holder's process."""
        return ProcessId(host=self.host, boot=self.boot, pidns=self.pidns, pid=self.pid, start=self.start)


_dec = msgspec.json.Decoder(LockBody)


def lock_path(dest: str, *, staging: str | None = None) -> str:
    """Store path of the lock object of destination ``dest``: in ``_temporary/``, or in the
    staging folder of the job's kind (``staging``, relative to ``dest``; e.g. a Hudi table's
    ``.hoodie/.temp/``, where no ``_temporary`` folder may appear)."""
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
    """One writer's handle on the lock of ``dest``. Use :func:`run_locked`; the methods
    are public for tests."""

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
        self.etag: str | None = None
        self.safe_until = 0.0
        self.lost: str | None = None
        self._sent: dict[int, float] = {}
        """``beats`` of each body we wrote -> when its first attempt was sent (monotonic)."""
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

    def _encode(self, sent: float) -> bytes:
        """The next body to write; ``sent``: when its first attempt is sent (monotonic)."""
        now = time.time()
        self._body.heartbeat = now
        if not self._body.acquired:
            self._body.acquired = now
        self._body.beats += 1
        beats = self._body.beats
        self._sent[beats] = sent
        for old in [b for b in self._sent if b < beats - 16]:
            del self._sent[old]
        return msgspec.json.encode(self._body)

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """One lock request through the retry layer (``policy``; errors a store
        already retried are final: see :mod:`amcommit.store.retry`)."""
        return await retry_call(fn, policy=self.policy)

    async def read(self) -> tuple[str | None, LockBody | None]:
        """The lock object's etag and body, consistent: ``stat``, ``get``, ``stat`` again
        until both stats give the same etag (a holder renews only every ``ttl/3``). The
        etag is None if they never agreed. NotFound if there is no lock."""
        store, path = self.store, self.path
        for _ in range(_CONSISTENT_READS):
            first = await self._call(lambda: store.stat(path))
            body = decode_lock(await self._call(lambda: store.get(path)))
            second = await self._call(lambda: store.stat(path))
            if first.etag is not None and first.etag == second.etag:
                return first.etag, body
        return None, body

    def _adopt(self, etag: str | None, body: LockBody | None) -> bool | None:
        """Recognise our own write after an ambiguous answer (a lost answer whose retry met
        AlreadyExists or PreconditionFailed): if the lock carries our token we hold it, with
        the lease of the write that landed. Returns None if the lock is not ours (or
        unreadable), else whether the landed write is our latest one."""
        if body is None or body.token != self.token or etag is None:
            return None
        sent = self._sent.get(body.beats)
        if sent is None:  # older than we remember: hold it with an expired lease
            sent = -SAFE_FRACTION * self.ttl
        self.etag = etag
        self.safe_until = sent + SAFE_FRACTION * self.ttl
        return body.beats == self._body.beats

    def _held(self, etag: str | None, sent: float) -> None:
        if etag is None:
            raise CommitError(f"the store gave no etag for {self.path!r}: cannot hold a destination lock")
        self.etag = etag
        self.safe_until = sent + SAFE_FRACTION * self.ttl

    def check(self, op: str, path: str) -> None:
        """LockLost unless the lease is still valid now (a synchronous check: it holds even
        when the heartbeat task could not run, e.g. behind a blocked event loop)."""
        if self.lost is not None or time.monotonic() >= self.safe_until:
            reason = self.lost or f"not renewed within {SAFE_FRACTION * self.ttl:g} s"
            raise LockLost(
                f"lost the lock of destination {self.dest!r} ({reason}); {op} {path!r} was not started, "
                "run the commit again to resume"
            )

    async def acquire(self) -> LockBody | None:
        """Wait for the lock and take it. Returns the body of *another* job's expired lock
        (or one whose holder is provably dead) it took over (its holder may have left a
        half-done commit), else None. Says once in the log that it waits (:meth:`_waiting`).
        Raises ConflictError naming the holder after ``wait`` seconds."""
        store, path = self.store, self.path
        deadline = time.monotonic() + self.wait
        seen: tuple[str | None, float] | None = None
        delay = 0.02
        cur: LockBody | None = None
        took: dict[int, LockBody] = {}  # beats of our takeover writes -> the lock each replaced
        told: str | None = None  # the holder (token) we said we wait for
        while True:
            sent = time.monotonic()
            data = self._encode(sent)
            try:
                info = await self._call(partial(store.put, path, data, mode=PutMode.CREATE))
                self._held(info.etag, sent)
                return None
            except AlreadyExists:
                pass  # held by another, or ours if an earlier attempt's answer was lost
            try:
                etag, cur = await self.read()
            except NotFound:
                continue  # released meanwhile: try to create it again
            if self._adopt(etag, cur) is not None:
                assert cur is not None  # a create or takeover of ours landed; its answer was lost
                return took.get(cur.beats)
            now = time.monotonic()
            if seen is None or seen[0] != etag:
                seen = (etag, now)  # the holder is alive as long as this changes
            mine = cur is not None and cur.owner == self.job_id and cur.job_attempt == self.job_attempt
            ttl = cur.ttl if cur is not None else self.ttl
            dead = cur is not None and not mine and proven_dead(cur.process())
            if etag is not None and (mine or dead or now - seen[1] > ttl):
                stale = etag
                data = self._encode(now)
                taken_over = None if mine else (cur or LockBody(owner=""))
                if taken_over is not None:
                    took[self._body.beats] = taken_over
                try:
                    info = await self._call(partial(store.put, path, data, mode=UpdateIf(stale)))
                except (PreconditionFailed, NotFound):
                    continue  # renewed, released, taken by another waiter, or ours (lost answer)
                self._held(info.etag, now)
                return taken_over
            if now >= deadline:
                raise ConflictError(
                    f"destination {self.dest!r} is locked by {describe(cur)}; gave up after "
                    f"waiting {self.wait:g} s (lock_wait; a dead holder's lock is taken over at once on "
                    f"its own host, elsewhere once unrenewed for {cur.ttl if cur else self.ttl:g} s)"
                )
            holder = "" if cur is None else cur.token
            if told != holder:
                told = holder
                log.warning(self._waiting(cur, deadline - now))
            await anyio.sleep(min(delay * random.uniform(0.5, 1.0), max(0.0, deadline - now)))
            delay = min(delay * 2, MAX_POLL, self.ttl / 4)

    def _waiting(self, cur: LockBody | None, left: float) -> str:
        """The one line a waiter logs: who holds the lock, how long we wait at most."""
        where = path_to_uri(self.store.root_uri, self.dest)
        ttl = cur.ttl if cur is not None else self.ttl
        return (
            f"{self.operation} of job {self.job_id!r} waits for the lock of {where}: held by "
            f"{describe(cur)}; waiting at most {max(0.0, left):.0f} s (lock_wait), less if the "
            f"holder stops renewing it for {ttl:g} s (its lock is then taken over)"
        )

    async def heartbeat(self, on_lost: Callable[[], None]) -> None:
        """Renew the lock every ``ttl/3`` until cancelled; on losing it, set ``lost`` and
        call ``on_lost`` (which cancels the guarded work)."""
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
            etag, data, soon = self.etag, self._encode(now), now + min(1.0, interval / 4)
            try:
                with anyio.fail_after(self.safe_until - now):
                    try:
                        info = await self._call(partial(self.store.put, self.path, data, mode=UpdateIf(etag)))
                    except (PreconditionFailed, NotFound):
                        # taken over, or our own write landed and its answer was lost
                        try:
                            cur_etag, cur = await self.read()
                        except NotFound:
                            cur_etag, cur = None, None
                        renewed = self._adopt(cur_etag, cur)
                        if renewed is None:
                            self.lost = (
                                "it was deleted"
                                if cur is None and cur_etag is None
                                else "another writer took it over"
                            )
                            on_lost()
                            return
                        next_beat = now + interval if renewed else soon
                        continue
            except (StoreError, TimeoutError):
                next_beat = soon  # transient: retry soon, until safe_until (the fence)
                continue
            self._held(info.etag, now)
            next_beat = now + interval

    async def hand_over(self, body: LockBody) -> None:
        """Rewrite the lock to name ``body``'s job (with a fresh token nobody holds) and
        stop: it expires after ``ttl``, and that job takes it back at once."""
        if self.lost or self.etag is None:
            return
        new = msgspec.structs.replace(body, token=secrets.token_hex(16), heartbeat=time.time(), ttl=self.ttl)
        data, etag = msgspec.json.encode(new), self.etag
        try:  # a lost answer whose retry fails its precondition: handed over all the same
            await self._call(partial(self.store.put, self.path, data, mode=UpdateIf(etag)))
        except StoreError:
            pass  # it stays ours and expires the same way
        self.lost = "handed over"

    async def release(self) -> None:
        """Delete the lock if it is still ours and our lease has not run out (see the
        module doc for the read-then-delete window). Never raises."""
        if self.lost is not None or time.monotonic() >= self.safe_until:
            return
        store, path = self.store, self.path

        async def delete_within_lease() -> bool:
            self.check("delete", path)  # every attempt: no delete starts after the lease
            try:
                return await store.delete(path)
            except NotFound:
                return False  # an earlier attempt deleted it; its answer was lost

        try:
            body = decode_lock(await self._call(lambda: store.get(path)))
            if body is None or body.token != self.token:
                return
            await self._call(delete_within_lease)
        except (StoreError, LockLost):
            return
        if store.capabilities.directories and self.staging is None:
            temp = join(self.dest, TEMP_DIR_NAME)
            try:
                await self._call(lambda: store.delete(temp))  # only if empty
            except StoreError:
                pass


class FencedStore:
    """The store as work under a :class:`DestinationLock` sees it: every write (``put``,
    ``rename``, ``delete``, ``mkdirs``) first checks the lease (:meth:`DestinationLock.check`),
    so no write *starts* after the lock is lost. Reads pass through."""

    def __init__(self, inner: Store, lock: DestinationLock) -> None:
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


async def held_by(
    store: Store,
    dest: str,
    job_id: str,
    *,
    policy: RetryPolicy = DEFAULT_POLICY,
    staging: str | None = None,
) -> bool:
    """True if the lock of ``dest`` (in ``staging``, see :func:`lock_path`) exists and names
    job ``job_id`` (alive or not). The read goes through the engine's retry layer with
    ``policy``."""
    path = lock_path(dest, staging=staging)
    try:
        body = decode_lock(await retry_call(partial(store.get, path), policy=policy))
    except NotFound:
        return False
    return body is not None and body.owner == job_id


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
    )
    policy = lock.policy
    previous = await lock.acquire()
    fenced = FencedStore(store, lock)
    keep = done = False
    handed: LockBody | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lock.heartbeat, tg.cancel_scope.cancel)
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
