"""The jobs under a destination and their state (``amcommit jobs DEST``).

:func:`list_jobs` reads, without changing anything, what ``$dest/_temporary`` holds: each
job directory (ours, ``manifest_$jobId``, and Hadoop's, ``$jobId``), its marker
(``_job.json``: created time, origin), its journal (the commit state), how many task
manifests it holds; the destination lock (who holds it, heartbeat age); and the last
committed job from ``$dest/_SUCCESS``. Every read is separate: a listing taken while a
commit runs is a best-effort snapshot, not an atomic one (a job may move on between the
reads). The interpretation of what was read is pure (:func:`job_state`, :func:`beat_state`).

What a destination of another kind holds is the kind's to list
(:meth:`JobKind.list_jobs <amcommit.committer.kind.JobKind.list_jobs>`, e.g. a table's
pending instants); :func:`list_jobs` asks the kind it is given, and the helpers here
(:func:`job_info`, :func:`check_exists`, :func:`read_optional`) serve it. A destination
where nothing exists is an error (NotFound), not an empty list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import msgspec

from amcommit.committer.completeness import parse_marker
from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.journal import Journal, decode_journal
from amcommit.committer.layout import MANIFEST_SUFFIX, TEMP_DIR_NAME, JobLayout, check_id
from amcommit.committer.lock import LOCK_NAME, LockBody, decode_lock, lock_path
from amcommit.errors import ConfigError, ManifestError, NotFound
from amcommit.manifest import decode_success
from amcommit.paths import basename, join, path_to_uri
from amcommit.store.base import Store
from amcommit.store.retry import RetryPolicy, policies_of, retry_call, retry_list

if TYPE_CHECKING:
    from amcommit.committer.kind import JobKind

JobState = Literal["set up", "renaming", "renamed", "committed", "unreadable", "leftover"]
"""``set up``: no journal yet (tasks may be running, the commit has not begun);
``renaming``: the commit is under way (or stopped) before its point of no return;
``renamed``: every file is in place (past the point of no return: an abort completes it);
``committed``: ``_SUCCESS`` written, only the cleanup is pending; ``unreadable``: the
journal exists but cannot be decoded; ``leftover``: a directory of ours with neither job
marker nor journal, holding a job attempt directory, not named by the lock: the job is over
and task attempts still running then (zombies) wrote it (:mod:`amcommit.committer.leftovers`; ``amcommit jobs
--remove-leftovers``, the next commit or abort deletes it)."""


@dataclass(frozen=True, slots=True)
class LockInfo:
    """The destination lock as read (times are the holder's wall clock)."""

    owner: str
    job_attempt: int
    operation: str
    host: str
    pid: int
    acquired: float
    heartbeat: float
    ttl: float

    def heartbeat_age(self, now: float | None = None) -> float:
        """Seconds since the last heartbeat, by our clock against the holder's (for people)."""
        return max(0.0, (time.time() if now is None else now) - (self.heartbeat or self.acquired))


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job directory under ``$dest/_temporary``."""

    job_id: str
    layout: Literal["amcommit", "hadoop"]
    state: JobState
    manifests: int
    """Committed task manifests (every job attempt's ``manifests/*-manifest.json``)."""
    created: float | None = None
    origin: str | None = None
    """Who set the job up (``spark``, ``api``), from ``_job.json``; None if unknown."""
    updated: float | None = None
    """When the journal was last written (None without a journal)."""
    holds_lock: bool = False
    operation: str | None = None
    """The operation its marker names (a kind's write, e.g. a table's ``INSERT``); None for
    plain jobs."""


@dataclass(frozen=True, slots=True)
class LastCommit:
    """What ``$dest/_SUCCESS`` says."""

    job_id: str
    date: str
    success: bool
    files: int | None = None


@dataclass(frozen=True, slots=True)
class DestinationJobs:
    """Everything :func:`list_jobs` found under one destination."""

    dest_uri: str
    jobs: list[JobInfo] = field(default_factory=list)
    lock: LockInfo | None = None
    lock_unreadable: bool = False
    """A lock object exists but is not one of ours."""
    last_commit: LastCommit | None = None


def job_state(journal: Journal | None) -> JobState:
    """The state of a job from its journal (pure)."""
    return "set up" if journal is None else journal.state


def lock_info(body: LockBody) -> LockInfo:
    """The public view of a lock body (no token)."""
    return LockInfo(
        owner=body.owner,
        job_attempt=body.job_attempt,
        operation=body.operation,
        host=body.host,
        pid=body.pid,
        acquired=body.acquired,
        heartbeat=body.heartbeat,
        ttl=body.ttl,
    )


def job_dir_kind(name: str) -> tuple[str, bool] | None:
    """``(job_id, hadoop)`` for a directory name under ``_temporary`` (pure); None if the
    name is not a job directory."""
    hadoop = not name.startswith("manifest_")
    job_id = name if hadoop else name[len("manifest_") :]
    try:
        check_id(job_id, "job id")
    except ConfigError:
        return None
    return job_id, hadoop


async def read_optional(store: Store, path: str, policy: RetryPolicy) -> bytes | None:
    """The object at ``path`` (read through the retry layer), or None if there is none."""
    try:
        return await retry_call(lambda: store.get(path), policy=policy)
    except NotFound:
        return None


async def _count_manifests(store: Store, layout: JobLayout, policy: RetryPolicy) -> tuple[int, bool]:
    """``(task manifests, whether any job attempt directory NN/ exists)``."""
    n = 0
    attempts = False
    async for attempt in retry_list(store, layout.job_dir, recursive=False, policy=policy):
        if not attempt.is_dir or not basename(attempt.path).isdigit():
            continue
        attempts = True
        async for info in retry_list(store, join(attempt.path, "manifests"), recursive=False, policy=policy):
            if not info.is_dir and info.path.endswith(MANIFEST_SUFFIX):
                n += 1
    return n, attempts


async def job_info(store: Store, layout: JobLayout, lock: LockBody | None, policy: RetryPolicy) -> JobInfo:
    """What the job directory of ``layout`` holds (marker, journal, manifests). Reads only."""
    marker_data = await read_optional(store, layout.job_marker, policy)
    marker = parse_marker(marker_data, hadoop=layout.hadoop)
    created: float | None = None
    value: object = None
    if marker_data is not None:
        try:
            value = msgspec.json.decode(marker_data)
        except msgspec.DecodeError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("created"), (int, float)):
            created = float(value["created"])
    journal_data = await read_optional(store, layout.journal_path, policy)
    journal: Journal | None = None
    state: JobState = "set up"
    if journal_data is not None:
        try:
            journal = decode_journal(journal_data)
            state = job_state(journal)
        except (msgspec.DecodeError, msgspec.ValidationError):
            state = "unreadable"
    operation = value.get("operation") if isinstance(value, dict) else None
    holds_lock = lock is not None and lock.owner == layout.job_id
    manifests, attempts = await _count_manifests(store, layout, policy)
    if (  # the rules of amcommit.committer.leftovers (its marker's second look aside)
        marker_data is None
        and journal_data is None
        and attempts
        and not layout.hadoop
        and layout.staging is None
        and not holds_lock
    ):
        state = "leftover"
    return JobInfo(
        job_id=layout.job_id,
        layout="hadoop" if layout.hadoop else "amcommit",
        state=state,
        manifests=manifests,
        created=created,
        origin=marker.origin,
        updated=journal.updated if journal is not None else None,
        holds_lock=holds_lock,
        operation=operation if isinstance(operation, str) else None,
    )


async def check_exists(store: Store, dest: str, policy: RetryPolicy) -> None:
    """NotFound if nothing exists at ``dest`` (no object below it, no directory), ConfigError
    if it is a file. One listing, plus a stat when the listing is empty."""
    async for _ in retry_list(store, dest, recursive=False, policy=policy):
        return
    try:
        info = await retry_call(lambda: store.stat(dest), policy=policy)
    except NotFound:
        raise NotFound(
            "nothing exists at this destination (no such directory, no object below it)", path=dest
        ) from None
    if not info.is_dir:
        raise ConfigError(f"{dest!r} is a file, not a destination directory")


async def list_jobs(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG, kind: JobKind | None = None
) -> DestinationJobs:
    """What ``amcommit jobs`` shows of store path ``dest``: ``kind``'s listing
    (:meth:`~amcommit.committer.kind.JobKind.list_jobs`); without a kind, the plain one
    (:func:`list_plain_jobs`). :func:`amcommit.api.list_jobs` picks the kind. Reads only."""
    if kind is not None:
        return await kind.list_jobs(store, dest, config)
    return await list_plain_jobs(store, dest, config=config)


async def list_plain_jobs(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> DestinationJobs:
    """The jobs under ``$dest/_temporary`` (sorted by created time, then id), the lock and
    the last commit (module doc). Reads only; listings and reads go through the retry
    layer. NotFound if nothing exists at ``dest``."""
    policy = policies_of(config)[0]
    await check_exists(store, dest, policy)
    temp = join(dest, TEMP_DIR_NAME)
    lock_data = await read_optional(store, lock_path(dest), policy)
    lock = decode_lock(lock_data) if lock_data is not None else None
    jobs: list[JobInfo] = []
    async for entry in retry_list(store, temp, recursive=False, policy=policy):
        name = basename(entry.path)
        if not entry.is_dir or name == LOCK_NAME:
            continue
        kind = job_dir_kind(name)
        if kind is None:
            continue
        jobs.append(await job_info(store, JobLayout(dest, kind[0], hadoop=kind[1]), lock, policy))
    jobs.sort(key=lambda j: (j.created or 0.0, j.job_id))
    last: LastCommit | None = None
    success_data = await read_optional(store, join(dest, "_SUCCESS"), policy)
    if success_data:
        try:
            s = decode_success(success_data, name="_SUCCESS")
            last = LastCommit(s.job_id, s.date, s.success, s.metrics.get("files"))
        except ManifestError:
            last = None
    return DestinationJobs(
        dest_uri=path_to_uri(store.root_uri, dest),
        jobs=jobs,
        lock=lock_info(lock) if lock is not None else None,
        lock_unreadable=lock_data is not None and lock is None,
        last_commit=last,
    )


__all__ = [
    "DestinationJobs",
    "JobInfo",
    "JobState",
    "LastCommit",
    "LockInfo",
    "check_exists",
    "job_info",
    "job_state",
    "list_jobs",
    "list_plain_jobs",
    "lock_info",
    "read_optional",
]
