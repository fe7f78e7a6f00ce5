"""Task side of the protocol: setup, commit (scan -> manifest -> publish), abort.

Nothing is renamed into the destination at task commit. Task commit lists the attempt's
working directory, builds a :class:`~amcommit.manifest.TaskManifest`, saves it under a
temporary name and publishes it by a rename to ``$taskId-manifest.json``. If another
attempt of the same task committed before, its manifest is replaced: the last successful
attempt wins, and the loser's files are never renamed (they are deleted at job cleanup).

Atomicity: the publication rename is atomic on local, ADLS Gen2 and GCS-with-move; on
copy-based stores the manifest appears whole (a copy) or not at all. Between the deletion of
an earlier attempt's manifest and the rename there is a moment with no manifest for the
task; a job commit must not run concurrently with task commits (Spark guarantees it).

What a task of another job kind does besides (e.g. a table writer's heartbeat, the names
its outputs are published under) is the kind's task side, carried by the layout
(:class:`~amcommit.committer.kind.TaskKind`, ``JobLayout.tasks``).
"""

from __future__ import annotations

import time

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.errors import AlreadyExists, CommitError, NotFound, StoreError
from amcommit.iostats import IOStatistics
from amcommit.manifest import (
    SOURCE_META_KEY,
    TASK_MANIFEST_TYPE,
    TASK_MANIFEST_VERSION,
    DirEntry,
    DirStatus,
    FileEntry,
    TaskManifest,
    encode_json,
)
from amcommit.paths import join, parent, path_to_uri, relative_to
from amcommit.store.base import ObjectInfo, PutMode, Store
from amcommit.store.retry import RetryPolicy, call_with_retries, policies_of, retry_call, retry_list


async def setup_task(
    store: Store, layout: JobLayout, task_attempt_id: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> str:
    """Prepare a task attempt; return its working directory (a store path).

    Fails with CommitError if this attempt was set up before (attempt ids are single-use).
    Requests go through the retry layer; the marker is created with a create-only put, so
    a retry after a lost answer that finds the marker with this attempt's body is ours.
    """
    policy = policies_of(config)[0]
    marker = layout.task_attempt_marker(task_attempt_id)
    body = f'{{"created": {time.time()}, "attempt": "{task_attempt_id}"}}'.encode()
    try:
        await retry_call(lambda: store.put(marker, body, mode=PutMode.CREATE), policy=policy)
    except AlreadyExists:
        if await retry_call(lambda: store.get(marker), policy=policy) != body:  # not our lost answer
            raise CommitError(
                f"task attempt {task_attempt_id} was already set up", stage="setup_task"
            ) from None
    work = layout.task_attempt_dir(task_attempt_id)
    await retry_call(lambda: store.mkdirs(work), policy=policy)
    if layout.tasks is not None:
        await layout.tasks.task_started(store, layout, config)
    return work


def _refuse_special(info: ObjectInfo, work_dir: str) -> None:
    if info.special is not None:
        what = "a symbolic link" if info.special == "symlink" else f"a {info.special}, not a regular file"
        raise CommitError(
            f"{relative_to(info.path, work_dir)!r} in the task attempt directory is {what}; "
            "task output must be regular files (links are never followed or published)",
            stage="commit_task",
        )


async def scan_attempt(
    store: Store, work_dir: str, *, policy: RetryPolicy | None = None
) -> tuple[list[ObjectInfo], set[str]]:
    """Files below ``work_dir`` and every directory (including empty ones where the store
    has directories), as paths relative to ``work_dir``'s tree.

    A symbolic link (to anything, inside or outside) or another special file found there
    is refused with :class:`~amcommit.errors.CommitError` naming it relative to
    ``work_dir``: links are never followed, and their targets are never copied (a link
    may point anywhere the committing process can read).
    """
    pol = policy or policies_of(DEFAULT_CONFIG)[0]
    files: list[ObjectInfo] = []
    dirs: set[str] = set()
    if store.capabilities.directories:
        pending = [work_dir]
        while pending:
            d = pending.pop()
            async for info in retry_list(store, d, recursive=False, policy=pol):
                _refuse_special(info, work_dir)
                if info.is_dir:
                    dirs.add(info.path)
                    pending.append(info.path)
                else:
                    files.append(info)
    else:
        async for info in retry_list(store, work_dir, recursive=True, policy=pol):
            _refuse_special(info, work_dir)
            files.append(info)
            p = parent(info.path)
            while p != work_dir and p not in dirs:
                dirs.add(p)
                p = parent(p)
    return files, dirs


async def build_manifest(
    store: Store,
    layout: JobLayout,
    task_id: str,
    task_attempt_id: str,
    *,
    extra_data: dict[str, str] | None = None,
    stats: IOStatistics | None = None,
    config: CommitterConfig = DEFAULT_CONFIG,
) -> TaskManifest:
    """Scan the attempt directory and describe it as a manifest (no I/O besides listing,
    and what the layout's task side needs to name the outputs)."""
    work = layout.task_attempt_dir(task_attempt_id)
    stats = stats or IOStatistics()
    with stats.time("task_stage_scan_directory"):
        files, dirs = await scan_attempt(store, work, policy=policies_of(config)[0])
    root = store.root_uri
    file_entries = []
    total = 0
    extra = dict(extra_data or {})
    names: dict[str, str] | None = None
    if layout.tasks is not None:  # the kind names the outputs (and may add to extra_data)
        named = [(relative_to(f.path, work), f) for f in files]
        names = await layout.tasks.name_outputs(store, layout, task_attempt_id, named, extra, config)
    extra.pop(SOURCE_META_KEY, None)  # said by this listing only, never by a caller
    if files and all(f.user_meta is False and f.etag for f in files):
        # every file was listed with its metadata and has none to carry: the job commit's
        # copy-based rename need not read it again (bound to the etags recorded here)
        extra[SOURCE_META_KEY] = "none"
    for f in sorted(files, key=lambda i: i.path):
        rel = relative_to(f.path, work)
        total += f.size
        out = names[rel] if names is not None else rel
        file_entries.append(
            FileEntry(path_to_uri(root, f.path), path_to_uri(root, join(layout.dest, out)), f.size, f.etag)
        )
    dir_entries = [
        DirEntry(
            path_to_uri(root, join(layout.dest, relative_to(d, work))),
            DirStatus.UNKNOWN,
            relative_to(d, work).count("/") + 1,
        )
        for d in sorted(dirs)
    ]
    stats.incr("committer_task_file_count", len(file_entries))
    stats.incr("committer_task_file_size", total)
    stats.incr("committer_task_directory_count", len(dir_entries))
    return TaskManifest(
        type=TASK_MANIFEST_TYPE,
        version=TASK_MANIFEST_VERSION,
        job_id=layout.job_id,
        job_attempt_number=layout.job_attempt,
        task_id=task_id,
        task_attempt_id=task_attempt_id,
        task_attempt_dir=path_to_uri(root, work),
        files=file_entries,
        directories=dir_entries,
        extra_data=extra,
    )


async def commit_task(
    store: Store,
    layout: JobLayout,
    task_id: str,
    task_attempt_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    extra_data: dict[str, str] | None = None,
) -> TaskManifest:
    """Commit a task attempt: build its manifest and publish it. Returns the manifest.

    Each request is retried by one layer (the store's own, else the job commit's policy,
    see :mod:`amcommit.store.retry`); a lost answer of the publication rename is
    recognised by reading the manifest back. The whole save is repeated up to
    ``config.manifest_save_attempts`` times when another attempt publishes concurrently.
    Idempotent for the same attempt (a repeated commit republishes the same manifest).
    A symbolic link or special file in the attempt directory fails it with CommitError
    (nothing is published; see :func:`scan_attempt`).

    A task of a job that is over (committed or aborted: its marker ``_job.json`` is gone;
    not checked for a Hadoop job directory, which has none) is refused with
    :func:`job_not_active` (a CommitError, one line): nothing is published and the
    attempt's working directory and temporary manifest are deleted. The marker is looked
    at before the scan and again after the publication (one stat each): a job that ended
    in between never read the manifest, which is deleted again. Not atomic: an attempt
    killed between its publication and that second look leaves the manifest in a job
    directory without a marker, which the next commit or abort of the destination removes
    (:mod:`amcommit.committer.leftovers`).
    """
    stats = IOStatistics()
    t0 = time.perf_counter()
    op_policy = policies_of(config)[0]
    if not await _job_active(store, layout, op_policy):
        await _discard_zombie(store, layout, task_attempt_id, op_policy)
        raise job_not_active(layout, task_attempt_id)
    if layout.tasks is not None:
        await layout.tasks.task_started(store, layout, config)
    manifest = await build_manifest(
        store, layout, task_id, task_attempt_id, extra_data=extra_data, stats=stats, config=config
    )
    stats.record("task_stage_commit", time.perf_counter() - t0)
    manifest.iostatistics = stats.snapshot(prefix="")
    data = encode_json(manifest)
    tmp = layout.manifest_tmp_path(task_attempt_id)
    final = layout.manifest_path(task_id)
    policy = RetryPolicy(max_attempts=config.manifest_save_attempts, base_delay=0.05, max_delay=2.0)

    async def publish(_attempt: int) -> None:
        # each request through the retry layer of job commits (one layer per request);
        # the outer loop only repeats the sequence after a concurrent publication
        await retry_call(lambda: store.put(tmp, data, mode=PutMode.OVERWRITE), policy=op_policy)
        await retry_call(lambda: store.delete(final), policy=op_policy)  # last successful attempt wins
        try:
            await retry_call(lambda: store.rename(tmp, final), policy=op_policy)
        except NotFound:
            # a retried rename whose first answer was lost: published if ``final`` is ours
            try:
                if await retry_call(lambda: store.get(final), policy=op_policy) == data:
                    return
            except NotFound:
                pass
            raise _Retry("manifest vanished while publishing", path=final, op="rename") from None
        except AlreadyExists:
            # a concurrent commit of another attempt of this task: retry (last wins)
            raise _Retry("manifest published concurrently", path=final, op="rename") from None

    try:
        await call_with_retries(publish, policy=policy)
    except StoreError as e:
        raise CommitError(
            f"could not save the manifest of {task_attempt_id}: {e}", stage="commit_task"
        ) from e
    if not await _job_active(store, layout, op_policy):
        # the job was committed or aborted while this attempt published: its commit never
        # read this manifest, and nothing ever will; take it back (and the attempt's files)
        try:
            await retry_call(lambda: store.delete(final), policy=op_policy)
        except NotFound:
            pass
        await _discard_zombie(store, layout, task_attempt_id, op_policy)
        raise job_not_active(layout, task_attempt_id)
    return manifest


def job_not_active(layout: JobLayout, task_attempt_id: str) -> CommitError:
    """The one-line refusal of a task commit whose job is over (its marker is gone)."""
    return CommitError(
        f"job {layout.job_id} is not active (already committed or aborted): task attempt "
        f"{task_attempt_id} is a leftover and publishes nothing",
        stage="commit_task",
    )


async def _job_active(store: Store, layout: JobLayout, policy: RetryPolicy) -> bool:
    """True while the job's marker ``_job.json`` exists (set up, neither committed nor
    aborted: both remove the job directory). A Hadoop job directory has no marker: always
    True there."""
    if layout.hadoop:
        return True
    try:
        await retry_call(lambda: store.stat(layout.job_marker), policy=policy)
    except NotFound:
        return False
    return True


async def _discard_zombie(store: Store, layout: JobLayout, task_attempt_id: str, policy: RetryPolicy) -> None:
    """Delete what a task attempt left (its working directory and temporary manifest): for
    :func:`abort_task`, and for an attempt of a job that is over, which nothing would ever
    commit. Idempotent."""
    work = layout.task_attempt_dir(task_attempt_id)
    tmp = layout.manifest_tmp_path(task_attempt_id)
    await retry_call(lambda: store.delete(work, recursive=True), policy=policy)
    try:
        await retry_call(lambda: store.delete(tmp), policy=policy)
    except NotFound:
        pass


class _Retry(StoreError):
    retryable = True


async def abort_task(
    store: Store, layout: JobLayout, task_attempt_id: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> None:
    """Delete a task attempt's output and temporary manifest. Idempotent (requests go
    through the retry layer); never touches the destination or another attempt's
    committed manifest."""
    await _discard_zombie(store, layout, task_attempt_id, policies_of(config)[0])


__all__ = ["abort_task", "build_manifest", "commit_task", "job_not_active", "scan_attempt", "setup_task"]
