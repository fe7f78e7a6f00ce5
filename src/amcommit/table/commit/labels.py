"""Write labels: exactly-once commits for streaming and other ingestion tools (issue 14).

The label of a write, its commit metadata and :func:`last_committed` / :func:`committed_by`
live in :mod:`amcommit.table.timeline.labelmeta` (re-exported here, the import path users know);
this module finishes what a dead run of an application left (:func:`pending_of`,
:func:`recover`), through the table's job kind. See :mod:`amcommit.table.timeline.labelmeta` for the
semantics and the cost of a lookup.
"""

from __future__ import annotations

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.job import abort_with, finish_previous_job
from amcommit.committer.lock import lock_path, read_lock, run_locked
from amcommit.errors import ManifestError, NotFound
from amcommit.liveness import proven_dead
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.retry import RetryingStore
from amcommit.table.commit.kind import TableKind
from amcommit.table.commit.table_commit import PLAN_NAME
from amcommit.table.format.model import WRITE_ACTIONS
from amcommit.table.format.naming import HOODIE_DIR, STAGING_DIR
from amcommit.table.timeline.labelmeta import (
    EXTRA_APP,
    EXTRA_LABEL,
    EXTRA_VERSION,
    MAX_APP_ID,
    Label,
    committed_by,
    covers,
    decode_extra,
    find_last,
    label_metadata,
    label_of,
    last_committed,
    newest_first,
)
from amcommit.table.timeline.reader import timeline_files
from amcommit.table.write.staging import legacy_table_layout, staged_instants, table_layout
from amcommit.table.write.task import read_marker

__all__ = [
    "EXTRA_APP",
    "EXTRA_LABEL",
    "EXTRA_VERSION",
    "MAX_APP_ID",
    "Label",
    "committed_by",
    "covers",
    "find_last",
    "label_metadata",
    "label_of",
    "last_committed",
    "newest_first",
    "pending_of",
    "recover",
]


async def pending_of(
    store: Store, dest: str, app_id: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> list[str]:
    """Unfinished writes a dead run of ``app_id`` may have left, sorted: instants with a
    staging folder (``.hoodie/.aux/amcommit/<instant>/``, or an earlier version's in
    ``.hoodie/.temp/``) whose write carries a label of ``app_id``
    (in its job marker, ``begin_write(label=)``, or in its saved commit plan, a label given
    to ``commit_job`` only), and pending write instants with no staging folder at all (a
    rollback killed after removing the staging folder; no live writer is ever in that
    state: ``begin_write`` creates the staging folder first, a commit removes it only after
    publishing). Reads only."""
    rs = RetryingStore.of(store, config)
    new, legacy = await staged_instants(rs, dest)
    staged = sorted(new | legacy)
    instants = await timeline_files(rs, dest, config=config)
    done = {i.time for i in instants if i.completed}
    out = {i.time for i in instants if i.action in WRITE_ACTIONS and i.time not in done} - set(staged)
    for t in staged:
        layout = legacy_table_layout(dest, t) if t in legacy else table_layout(dest, t)
        try:
            marker = await read_marker(rs, layout)
        except (NotFound, ManifestError):
            continue
        label = marker.label()
        if label is None:
            # the saved plan; once published by a rename (stores with atomic renames) it is
            # the completed instant itself: a leftover staging folder of a completed write
            plan_path = join(layout.job_dir, PLAN_NAME)
            paths = [plan_path] + [
                join(dest, HOODIE_DIR, i.file_name) for i in instants if i.time == t and i.completed
            ]
            for path in paths:
                try:
                    plan = await rs.get(path)
                    label = label_of(decode_extra(plan, path))
                    break
                except (NotFound, ManifestError):
                    label = None
        if label is not None and label.app_id == app_id:
            out.add(t)
    return sorted(out)


async def recover(
    store: Store, dest: str, app_id: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> list[str]:
    """Finish what a dead run of ``app_id`` left in the table: every write of
    :func:`pending_of` is aborted (``abort_job``: rolled back, or completed if its commit had
    passed its point of no return; its own lock is taken over at once). Returns those
    instants. Without it, a restarted run's next commit does the same, but only once the
    dead writer's heartbeat is older than ``writer_ttl`` (120 s by default). Then, if the
    table's commit lock is still held by a process provably dead on this host (a commit
    killed after it published, before it released the lock;
    :func:`~amcommit.liveness.proven_dead`), the lock is taken over and released (a
    half-done commit of its holder completed or rolled back first, as any taker does); a
    holder that may be alive, or runs on another host, is left alone.

    Call it once when a run of ``app_id`` starts, and only when no other run of ``app_id``
    is alive (one run per application id, as for a streaming query): it would roll back that
    run's write in progress (never a duplicate: that run's commit then fails).
    """
    done = await pending_of(store, dest, app_id, config=config)
    for t in done:
        await abort_with(TableKind(), store, dest, t, config=config)
    await _release_dead_lock(store, dest, config)
    return done


async def _release_dead_lock(store: Store, dest: str, config: CommitterConfig) -> None:
    """Take over and release the table's lock if its holder is provably dead (see
    :func:`recover`). Atomic: the takeover is the lock's conditional write."""
    path = lock_path(dest, staging=STAGING_DIR)
    try:
        body = await read_lock(store, path, policy=RetryingStore.of(store, config).policy)
    except NotFound:
        return
    if body is None or body.released or not proven_dead(body.process()):
        return

    async def nothing(_: Store) -> None:
        return None

    await run_locked(
        store,
        dest,
        "recover",
        config,
        nothing,
        operation="abort",
        finish_previous=lambda prev, s: finish_previous_job(TableKind(), s, dest, prev, config, None),
        staging=STAGING_DIR,
    )
