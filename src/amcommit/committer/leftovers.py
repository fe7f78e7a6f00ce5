"""What zombie task attempts leave under ``$dest/_temporary`` after their job is over.

A task attempt still running when its job was aborted or committed (Spark aborts a job as
soon as one task has failed for good, while other attempts still run until they are
killed) may write after the job directory was removed: it recreates
``_temporary/manifest_$jobId/NN/...`` (its attempt directory, its attempt marker, a
manifest). An attempt that finds out its job is over removes what it wrote
(:mod:`amcommit.spark.task`); one that is killed first cannot. Such a directory is a
*leftover*, and :func:`remove_leftovers` deletes it: every plain job commit (after its lock
is released), every plain abort, and ``amcommit jobs DEST --remove-leftovers`` run it.

A leftover is a directory of **our** layout (``manifest_$jobId``; never Hadoop's
``$jobId``, which carries no marker of ours and may be a live Hadoop job) that

1. has no job marker ``_job.json``: :func:`~amcommit.committer.job.setup_with` creates the
   marker with the job's first request, before any other object of the job, and only the
   job's own commit cleanup or abort deletes it; a job without its marker is over (a task
   attempt refuses to start then: :func:`amcommit.spark.task.check_job_active`);
2. has no journal ``journal.json``: a journal is a commit or rollback to finish (the
   cleanup of a committed job deletes it last);
3. holds a job attempt directory (``NN/``): the only thing a task writes; a job directory
   whose marker is being created (local files: the put's temporary file) has none yet;
4. is not named by the destination lock (a commit under the lock may publish the manifests
   Spark handed it into a job directory that has no marker: ``commit_held``). The lock is
   read after 1-3 were seen, so a commit that took it earlier is seen;
5. still has no job marker when its deletion begins (checked again): a job directory listed
   while its marker was being created (local files) has its marker before its ``NN/``
   folders, so ``NN/`` folders seen before a marker that is still missing are a zombie's.

Only the job attempt directories are deleted (each recursively), then the job directory
if it is empty (stores with directories, a non-recursive delete), then ``_temporary`` if
empty: a marker created meanwhile (a job id reused after an abort) is never deleted.

Requests: one listing of ``_temporary`` (none found: nothing more), then per job
directory one stat of its marker (a live job: nothing more); per leftover one stat of the
journal, one listing of the job directory, one read of the lock (once per sweep), the
marker's second stat, one recursive delete per attempt directory and the folder deletes. Not atomic; every step is
idempotent, and a sweep cut short is finished by the next one.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.layout import TEMP_DIR_NAME, JobLayout
from amcommit.committer.lock import LOCK_NAME, decode_lock, lock_path
from amcommit.errors import NotFound, StoreError
from amcommit.paths import basename, join
from amcommit.store.base import Store
from amcommit.store.retry import RetryPolicy, policies_of, retry_call, retry_list

log = logging.getLogger("amcommit.leftovers")

_PREFIX = "manifest_"
_ATTEMPT_RE = re.compile(r"^\d{2}$")

__all__ = ["LeftoverSweep", "find_leftovers", "remove_leftovers", "sweep_quietly"]


@dataclass
class LeftoverSweep:
    """What :func:`remove_leftovers` found and did."""

    removed: list[str] = field(default_factory=list)
    """Job ids whose leftover attempt directories were deleted."""
    kept: list[str] = field(default_factory=list)
    """Job ids of directories without a marker kept because a journal or the lock names
    them (their commit or rollback is not finished), or whose marker appeared meanwhile."""


async def _exists(store: Store, path: str, policy: RetryPolicy) -> bool:
    try:
        await retry_call(lambda: store.stat(path), policy=policy)
    except NotFound:
        return False
    return True


async def _attempt_dirs(store: Store, layout: JobLayout, policy: RetryPolicy) -> list[str]:
    return [
        info.path
        async for info in retry_list(store, layout.job_dir, recursive=False, policy=policy)
        if info.is_dir and _ATTEMPT_RE.match(basename(info.path))
    ]


async def _delete_tree(store: Store, path: str, policy: RetryPolicy, *, recursive: bool = True) -> None:
    await retry_call(lambda: store.delete(path, recursive=recursive), policy=policy)


async def find_leftovers(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> tuple[list[tuple[JobLayout, list[str]]], list[str]]:
    """The leftovers under ``$dest/_temporary`` (module doc): ``([(layout, attempt dirs)],
    [job ids kept because a journal or the lock names them])``. Reads only."""
    policy = policies_of(config)[0]
    temp = join(dest, TEMP_DIR_NAME)
    found: list[tuple[JobLayout, list[str]]] = []
    kept: list[str] = []
    candidates: list[JobLayout] = []
    async for entry in retry_list(store, temp, recursive=False, policy=policy):
        name = basename(entry.path)
        if not entry.is_dir or name == LOCK_NAME or not name.startswith(_PREFIX):
            continue
        try:
            layout = JobLayout(dest, name[len(_PREFIX) :])
        except Exception:  # not a job id of ours (ConfigError)
            continue
        candidates.append(layout)
    owner: str | None = None
    lock_read = False
    for layout in candidates:
        if await _exists(store, layout.job_marker, policy):
            continue  # a live job (or one whose commit or abort has not removed it yet)
        if await _exists(store, layout.journal_path, policy):
            kept.append(layout.job_id)
            continue
        attempts = await _attempt_dirs(store, layout, policy)
        if not attempts:
            continue
        if not lock_read:  # after the marker and journal were seen missing (rule 4)
            lock_read = True
            try:
                data = await retry_call(lambda: store.get(lock_path(dest)), policy=policy)
            except NotFound:
                data = None
            body = decode_lock(data) if data is not None else None
            owner = body.owner if body is not None else None
        if owner == layout.job_id:
            kept.append(layout.job_id)
            continue
        found.append((layout, attempts))
    return found, kept


async def remove_leftovers(
    store: Store, dest: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> LeftoverSweep:
    """Delete the leftovers under ``$dest/_temporary`` (module doc says which, and the
    requests). Raises what the store raises (callers that sweep after their own work
    catch it: :func:`sweep_quietly`)."""
    policy = policies_of(config)[0]
    found, kept = await find_leftovers(store, dest, config=config)
    sweep = LeftoverSweep(kept=kept)
    for layout, attempts in found:
        if await _exists(store, layout.job_marker, policy):
            # a job set up meanwhile (its directory was listed while its marker was being
            # created): the attempt directories seen before its marker are not its own only
            # if its id is reused; keep it all the same
            sweep.kept.append(layout.job_id)
            continue
        for path in attempts:
            await _delete_tree(store, path, policy)
        if store.capabilities.directories:
            try:  # only if empty: a marker created meanwhile stays
                await _delete_tree(store, layout.job_dir, policy, recursive=False)
            except StoreError:
                pass
        sweep.removed.append(layout.job_id)
        log.info("removed what task attempts left after job %s was over", layout.job_id)
    if sweep.removed and store.capabilities.directories:
        try:  # only if empty: other jobs may use it
            await retry_call(lambda: store.delete(join(dest, TEMP_DIR_NAME)), policy=policy)
        except StoreError:
            pass
    return sweep


async def sweep_quietly(store: Store, dest: str, config: CommitterConfig) -> LeftoverSweep | None:
    """:func:`remove_leftovers` after a commit or an abort: its failure is logged (WARNING),
    never raised (the commit or abort itself succeeded; the next one sweeps again)."""
    try:
        return await remove_leftovers(store, dest, config=config)
    except StoreError as e:
        log.warning("could not remove what task attempts of finished jobs left under %s: %s", dest, e)
        return None
