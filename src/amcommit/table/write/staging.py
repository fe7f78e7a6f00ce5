"""A table write's staging and its task side (the table kind's
:class:`~amcommit.committer.kind.TaskKind`).

A write stages in ``.hoodie/.aux/amcommit/$instant/`` (:func:`table_layout`; the job id is
the instant), with the table's commit lock in ``.hoodie/.aux/amcommit/``: never in Hudi's
marker folder ``.hoodie/.temp/$instant/``, where Hudi's marker-based rollback takes every file
for a marker (and fails on any other). Writes staged in ``.hoodie/.temp/$instant/`` by an
earlier version (:func:`legacy_table_layout`) are still found (:func:`find_table_layout`) and
resumed or rolled back from there. Its task side (:data:`TABLE_TASKS`, carried by that layout):

- a task setup and the start of a task commit beat the writer's heartbeat, unless it is
  fresh (:func:`~amcommit.table.timeline.heartbeat.try_beat`);
- a task commit names each output ``<fileId>_<token>_<instant>.parquet`` in its partition
  folder (:func:`~amcommit.table.format.tasknames.plan_names`; a file without a row count in
  ``extra_data["hudi.rows"]`` has its Parquet footer read), and writes the files' write
  stats into the manifest (:func:`~amcommit.table.format.writestats.task_write_stats`), always from
  this listing, never a caller's: they hold the row counts too, so ``hudi.rows`` is not
  carried.

Nothing here publishes anything by itself (the task commit publishes the manifest).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from amcommit.committer.config import CommitterConfig
from amcommit.committer.layout import JobLayout
from amcommit.errors import CommitError, NotFound
from amcommit.parallel import run_parallel
from amcommit.paths import basename, join
from amcommit.store.base import ObjectInfo, Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.naming import LEGACY_STAGING_DIR, STAGING_DIR, check_instant, is_instant
from amcommit.table.format.tasknames import ROWS_KEY, plan_names
from amcommit.table.format.writestats import MUTATIONS_KEY, STATS_KEY, mutation_fields, task_write_stats
from amcommit.table.settings import table_settings
from amcommit.table.timeline.heartbeat import FRESH_FRACTION, try_beat

__all__ = [
    "TABLE_TASKS",
    "TableTasks",
    "find_table_layout",
    "instant_dirs",
    "is_legacy_layout",
    "is_table_layout",
    "legacy_table_layout",
    "staged_instants",
    "table_layout",
]


async def _footer_rows(store: Store, path: str, config: CommitterConfig) -> int:
    """Rows of a Parquet file, from its footer (the whole file is read: engine users who
    know their counts pass them in ``extra_data["hudi.rows"]``)."""
    import pyarrow.parquet as pq

    data = await RetryingStore.of(store, config).get(path)
    try:
        return int(pq.ParquetFile(io.BytesIO(data)).metadata.num_rows)
    except Exception as e:
        raise CommitError(
            f"{path!r} is not a readable Parquet file ({type(e).__name__})", stage="commit_task"
        ) from None


class TableTasks:
    """The task side of a table write (module doc)."""

    async def task_started(self, store: Store, layout: JobLayout, config: CommitterConfig) -> None:
        await try_beat(
            store, layout.dest, layout.job_id, fresh=FRESH_FRACTION * table_settings(config).writer_ttl
        )

    async def name_outputs(
        self,
        store: Store,
        layout: JobLayout,
        task_attempt_id: str,
        files: Sequence[tuple[str, ObjectInfo]],
        extra: dict[str, str],
        config: CommitterConfig,
    ) -> dict[str, str]:
        rels = [rel for rel, _ in files]
        names, rows, missing = plan_names(rels, layout.job_id, task_attempt_id, extra)
        by_rel = dict(files)
        for rel in missing:
            rows[names[rel]] = await _footer_rows(store, by_rel[rel].path, config)
        extra.pop(ROWS_KEY, None)
        # an upsert/delete task's per-file counts (numInserts, numUpdateWrites, numDeletes,
        # prevCommit: amcommit.table.mutate.engine) go into the write stats with the names they got
        mutations = mutation_fields(extra.pop(MUTATIONS_KEY, None), names)
        extra[STATS_KEY] = task_write_stats(((names[rel], info.size) for rel, info in files), rows, mutations)
        return names

    def __reduce__(self) -> str:
        return "TABLE_TASKS"  # one instance per process (layouts carrying it pickle by name)


TABLE_TASKS = TableTasks()
"""The task side of every table write (stateless)."""


def table_layout(dest: str, instant: str, job_attempt: int = 0) -> JobLayout:
    """The layout of table write ``instant`` into the table at ``dest``: staging in
    ``.hoodie/.aux/amcommit/$instant/``, the table's task side (:data:`TABLE_TASKS`).
    ConfigError if ``instant`` is not an instant time."""
    check_instant(instant)
    return JobLayout(dest, instant, job_attempt, staging=STAGING_DIR, tasks=TABLE_TASKS)


def legacy_table_layout(dest: str, instant: str, job_attempt: int = 0) -> JobLayout:
    """The layout earlier versions staged table write ``instant`` in
    (``.hoodie/.temp/$instant/``): only to resume or roll back such a write."""
    check_instant(instant)
    return JobLayout(dest, instant, job_attempt, staging=LEGACY_STAGING_DIR, tasks=TABLE_TASKS)


def is_table_layout(layout: JobLayout) -> bool:
    """True if ``layout`` is a table write's (staged in ``.hoodie/.aux/amcommit/``, or in
    ``.hoodie/.temp/`` by an earlier version), not a plain job's directory found in a
    table."""
    return layout.staging in (STAGING_DIR, LEGACY_STAGING_DIR)


def is_legacy_layout(layout: JobLayout) -> bool:
    """True if ``layout`` is a table write staged by an earlier version (``.hoodie/.temp/``)."""
    return layout.staging == LEGACY_STAGING_DIR


async def instant_dirs(store: Store, folder: str) -> set[str]:
    """The names of the instant folders directly in ``folder`` (one listing; none if it
    does not exist)."""
    out: set[str] = set()
    try:
        async for info in store.list(folder, recursive=False):
            if info.is_dir and is_instant(basename(info.path)):
                out.add(basename(info.path))
    except NotFound:
        pass
    return out


async def staged_instants(store: Store, dest: str) -> tuple[set[str], set[str]]:
    """``(staged, legacy)``: the instants with a staging folder in ``.hoodie/.aux/amcommit/``,
    and those without one there that an earlier version staged in ``.hoodie/.temp/`` (a
    folder there holding a job marker; the others are marker folders of direct writes).
    Two listings, and one stat per ``.hoodie/.temp/`` folder without a staging folder of
    its own (normally none: markers of a decided write that are not removed yet). Reads
    only; not retried.

    The two listings are made at the same time (one round trip). Any outcome of that is
    one the listings made one after the other could give too: a write's staging folder
    is created (its claim) before anything of it lands in ``.hoodie/.temp/`` and deleted
    (its cleanup) while its markers may still be there, so a folder seen in
    ``.hoodie/.temp/`` but not in the staging folder is either a decided write's markers
    or a legacy write, told apart by the stat below exactly as before."""
    staged: set[str] = set()
    temp: set[str] = set()

    async def one(which: tuple[set[str], str]) -> None:
        which[0].update(await instant_dirs(store, join(dest, which[1])))

    await run_parallel([(staged, STAGING_DIR), (temp, LEGACY_STAGING_DIR)], one, 2)
    legacy: set[str] = set()
    for t in sorted(temp - staged):
        try:
            await store.stat(legacy_table_layout(dest, t).job_marker)
        except NotFound:
            continue
        legacy.add(t)
    return staged, legacy


async def find_table_layout(store: Store, dest: str, instant: str) -> JobLayout | None:
    """The layout whose job marker of write ``instant`` exists: :func:`table_layout`'s, else
    :func:`legacy_table_layout`'s (looked at only when the first is not there); None if
    neither is. One or two stats, not retried (callers judge a StoreError)."""
    for layout in (table_layout(dest, instant), legacy_table_layout(dest, instant)):
        try:
            await store.stat(layout.job_marker)
        except NotFound:
            continue
        return layout
    return None
