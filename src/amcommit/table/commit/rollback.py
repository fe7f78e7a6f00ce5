"""``amcommit rollback DEST --instant I``: roll back an inflight instant of a Hudi table
(:func:`rollback_instant`), as ``abort_job`` of its write through the table's job kind. What
is removed, in which order, is :mod:`amcommit.table.commit.undo` (re-exported here): every file
stamped with the instant, the staging folder and heartbeat, the instant files last. A
completed instant is never rolled back: refused before anything changes (no sweep either);
files of its late attempts are removed by the next commit's marker sweep or by ``clean``
(late markers, and orphans: :mod:`amcommit.table.commit.orphans`).
"""

from __future__ import annotations

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.job import abort_with
from amcommit.committer.report import JobReport
from amcommit.errors import CommitError, ConfigError, ConflictError
from amcommit.store.base import Store
from amcommit.table.commit.kind import TableKind
from amcommit.table.commit.undo import finish_rollback, remove_stamped, rollback_table_write
from amcommit.table.format.naming import check_instant
from amcommit.table.settings import table_settings
from amcommit.table.timeline.heartbeat import judge_writers, writer_alive
from amcommit.table.timeline.instants import completed_instant
from amcommit.table.write.direct import sweep_after
from amcommit.table.write.task import is_table

__all__ = ["finish_rollback", "remove_stamped", "rollback_instant", "rollback_table_write"]


async def rollback_instant(
    store: Store,
    dest: str,
    instant: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    force: bool = False,
) -> JobReport:
    """Roll back the inflight instant ``instant`` of the table at ``dest`` (``abort_job`` of
    its write: under the table's lock if its commit had begun). CommitError if the instant
    is completed (refused before anything changes, the marker sweep too), ConfigError if
    ``dest`` is not a table; an instant with nothing left is a no-op (``report.rolled_back``
    False).

    An instant whose writer is alive (a sign of life younger than ``config.writer_ttl``, by
    the store's clock: :mod:`amcommit.table.timeline.heartbeat`) is refused with ConflictError before
    anything changes, unless ``force`` (that deletes the files of a running write: its
    commit then fails).

    After the rollback (outside the lock) the late markers of every decided instant are
    swept (:func:`~amcommit.table.write.direct.sweep_late_markers`, grace ``writer_ttl``): a
    zombie attempt's upload stamped with a completed instant is deleted here too. The
    rollback of a dead writer by a later commit is followed by that commit's own sweep
    (:meth:`~amcommit.table.commit.kind.TableKind.guard`)."""
    check_instant(instant)
    if not await is_table(store, dest, config):
        raise ConfigError(f"{dest!r} is not a Hudi table (no .hoodie/hoodie.properties)")
    if await completed_instant(store, dest, instant) is not None:
        raise CommitError(
            f"instant {instant} of {dest!r} is completed: rollback removes only inflight instants "
            "(nothing was changed; `amcommit clean` removes files of late attempts stamped with it)",
            stage="rollback",
        )
    ttl = table_settings(config).writer_ttl
    if not force:
        await _refuse_live(store, dest, instant, ttl)
    report = await abort_with(TableKind(), store, dest, instant, config=config)
    # then (the lock released) the late markers of every decided instant, this one's too
    await sweep_after(store, dest, f"the rollback of {instant}", grace=ttl, config=config)
    return report


async def _refuse_live(store: Store, dest: str, instant: str, ttl: float) -> None:
    """ConflictError if the writer of ``instant`` is alive (nothing of it found: no error)."""
    beats, now = await judge_writers(store, dest, [instant])
    seen = beats.get(instant)
    if seen is None:
        return  # no heartbeat, marker or .requested (judge_writers looked): nothing running
    if writer_alive(instant, seen, now, ttl):
        age = now - seen
        raise ConflictError(
            f"instant {instant} of {dest!r} has a live writer (last heartbeat {max(age, 0.0):.0f} s "
            f"ago, writer_ttl {ttl:g} s): rollback refused; wait, or use --force if that writer is gone"
        )
