"""Undoing an inflight table write (the table kind's roll back): every file stamped with its
instant, then the instant. The user's command, :func:`amcommit.table.commit.rollback.rollback_instant`
(``amcommit rollback``), runs it through the table's job kind.

Order (each step idempotent; a crash at any point leaves an inflight instant that a later
rollback finishes, because the instant files go last):

0. a write whose files were written in place (:mod:`amcommit.table.write.direct`): every base
   file its markers name, then the markers (its manifests' files are never "renamed");
1. the files the commit renamed into the table (from the journal and the task manifests,
   judged as for plain rollbacks: only provably this job's files);
2. any other base file stamped with the instant, and ``.hoodie_partition_metadata`` files
   that name it, in the partitions the write touched (the whole table when they are not
   known: the staging folder is gone); emptied partition folders;
3. the staging folder ``.hoodie/.aux/amcommit/<instant>/`` (or an earlier version's
   ``.hoodie/.temp/<instant>/``; its journal last);
4. the heartbeat ``.hoodie/.heartbeat/<instant>``;
5. the inflight file, then the ``.requested`` file.

A deltacommit's rollback is recorded as a rollback instant of its own
(:mod:`amcommit.table.commit.rollback_record`): its plan and inflight file before step 0,
its completed file after step 5.

A completed instant is never rolled back here.
"""

from __future__ import annotations

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.journal import Journal
from amcommit.committer.stages import cleanup, load_manifests, rollback
from amcommit.errors import ManifestError, NotFound, StoreError
from amcommit.paths import basename, is_within, join, parent, relative_to
from amcommit.store.base import Store
from amcommit.store.retry import RetryingStore
from amcommit.table.commit.rollback_record import begin_rollback, complete_rollback
from amcommit.table.format.naming import (
    HOODIE_DIR,
    PARTITION_METADATA_FILE,
    parse_base_file_name,
)
from amcommit.table.report import table_report
from amcommit.table.timeline.heartbeat import delete_beat
from amcommit.table.timeline.instants import completed_instant
from amcommit.table.write.direct import is_direct, rollback_from_markers

__all__ = ["finish_rollback", "remove_stamped", "rollback_table_write"]


def _instant_files(instant: str) -> tuple[list[str], list[str]]:
    """(inflight names, requested names) of a write instant, for either action."""
    inflight = [
        f"{instant}.inflight",
        f"{instant}.commit.inflight",
        f"{instant}.replacecommit.inflight",
        f"{instant}.deltacommit.inflight",
    ]
    requested = [
        f"{instant}.commit.requested",
        f"{instant}.replacecommit.requested",
        f"{instant}.deltacommit.requested",
    ]
    return inflight, requested


def _stamped_partition_metadata(data: bytes, instant: str) -> bool:
    for line in data.decode("latin-1").splitlines():
        if line.strip().replace(" ", "") == f"commitTime={instant}":
            return True
    return False


async def remove_stamped(
    store: Store, dest: str, instant: str, partitions: set[str] | None, config: CommitterConfig
) -> set[str]:
    """Delete base files stamped with ``instant`` and partition metadata naming it, in
    ``partitions`` (relative folders; None = the whole table). Returns the folders touched."""
    rs = RetryingStore.of(store, config)
    touched: set[str] = set()
    if partitions is None:
        folders = [dest]
        recursive = True
    else:
        folders = [join(dest, p) if p else dest for p in sorted(partitions)]
        recursive = False
    hoodie = join(dest, HOODIE_DIR)
    for folder in folders:
        try:
            infos = [i async for i in store.list(folder, recursive=recursive)]
        except NotFound:
            continue
        for info in infos:
            if info.is_dir or is_within(info.path, hoodie):
                continue
            name = basename(info.path)
            doomed = False
            parsed = parse_base_file_name(name)
            if parsed is not None and parsed.instant == instant:
                doomed = True
            elif name == PARTITION_METADATA_FILE:
                try:
                    data = await rs.get(info.path)
                except NotFound:
                    continue
                doomed = _stamped_partition_metadata(data, instant)
            if doomed:
                try:
                    await rs.delete(info.path)
                except NotFound:
                    pass
                touched.add(parent(info.path))
    return touched


async def _remove_empty(store: Store, dest: str, folders: set[str]) -> None:
    if not store.capabilities.directories:
        return
    todo = set(folders)
    while todo:
        d = max(todo, key=lambda p: (p.count("/"), p))
        todo.discard(d)
        if not d or d == dest or not is_within(d, dest):
            continue
        try:
            await store.delete(d)  # only if empty
        except StoreError:
            continue
        todo.add(parent(d))


async def finish_rollback(
    store: Store,
    dest: str,
    instant: str,
    *,
    partitions: set[str] | None,
    config: CommitterConfig = DEFAULT_CONFIG,
) -> bool:
    """Steps 2 (``partitions`` None: whole table), 4 and 5 of the module doc. True if
    anything of the instant was found. Never touches a completed instant (returns False):
    a write whose staging is gone may have been committed and cleaned up."""
    if await completed_instant(store, dest, instant) is not None:
        return False
    record = await begin_rollback(store, dest, instant, config)
    rs = RetryingStore.of(store, config)
    touched = await remove_stamped(store, dest, instant, partitions, config)
    await _remove_empty(store, dest, touched)
    found = bool(touched)
    await delete_beat(rs, dest, instant)
    inflight, requested = _instant_files(instant)
    for name in [*inflight, *requested]:  # inflight first, requested last
        path = join(dest, HOODIE_DIR, name)
        try:
            if await rs.delete(path):
                found = True
        except NotFound:
            pass
    if record is not None:
        await complete_rollback(store, dest, record, config)
        found = True
    return found


async def rollback_table_write(ctx: JobContext, journal: Journal | None, *, run: CommitRun) -> bool:
    """Roll back the table write of ``ctx`` (module doc). True if its instant turned out to
    be completed already (nothing is rolled back; the caller completes the cleanup).
    ``run``: what the caller loaded (the manifests are loaded into it if it holds none; the
    caller closes it)."""
    store, dest, instant = ctx.store, ctx.layout.dest, ctx.layout.job_id
    if await completed_instant(store, dest, instant) is not None:
        return True
    if run.spool is None:
        run.spool = load_manifests.new_spool(ctx)
        try:
            run.loaded = await load_manifests.run(ctx, load_manifests.LoadInputs(run.spool))
        except (ManifestError, NotFound):
            pass  # no usable manifests: nothing of theirs was renamed without a journal
    partitions: set[str] = set()
    if run.spool is not None:
        partitions = {
            relative_to(parent(e.dst), dest) if parent(e.dst) != dest else "" for e in run.spool.entries()
        }
    direct = run.loaded is not None and is_direct(run.loaded.extra_data)
    if direct and journal is not None:
        # a direct write's journal is saved after its plan, with every winning file in place
        # already: past its point of no return, as a staged write whose renames all happened
        # (the engine's "every file in place" check cannot tell on object stores: a file
        # written in place lacks the mark a rename leaves). The caller completes it.
        return True
    async with ctx.stage("rollback_markers"):
        # a deltacommit's rollback is an instant of its own, begun before anything is deleted
        await begin_rollback(store, dest, instant, ctx.config)
        # files written in place (amcommit.table.write.direct): every marked one, winner or not
        marked = await rollback_from_markers(store, dest, instant, ctx.config)
    if marked is not None:
        partitions |= {parent(r) if "/" in r else "" for r in marked}
    if journal is not None and run.loaded is not None and not direct:  # a direct write renamed nothing
        async with ctx.stage("rollback"):
            await rollback.run(ctx, rollback.RollbackInputs(run.loaded))
    if journal is not None and run.loaded is None and marked is None:
        partitions_arg: set[str] | None = None  # renamed files of unknown partitions: look everywhere
    else:
        partitions_arg = partitions
    async with ctx.stage("rollback_stamped"):
        touched = await remove_stamped(store, dest, instant, partitions_arg, ctx.config)
        await _remove_empty(store, dest, touched | {join(dest, p) for p in partitions if p})
    async with ctx.stage("cleanup"):
        await cleanup.run(ctx, cleanup.CleanupInputs())
    async with ctx.stage("rollback_instant"):
        await finish_rollback(store, dest, instant, partitions=set(), config=ctx.config)
    ctx.report.rolled_back = True
    table_report(ctx.report).instant = instant
    return False
