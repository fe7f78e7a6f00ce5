"""Which file slices a compaction merges (pure, no I/O): Hudi's default strategy.

A Merge-on-Read file slice with log files is a compaction *operation*: its base file (or
none) and its logs become one new base file. Hudi 0.14's default strategy,
``LogFileSizeBasedCompactionStrategy`` over ``BoundedIOCompactionStrategy``, is followed:

- an operation per file group whose latest slice has log files of at least
  ``log_size_threshold`` bytes in total (``hoodie.compaction.logfile.size.threshold``,
  default 0); file groups already in a pending compaction are left out;
- each operation's metrics, as Hudi records them in the plan: ``TOTAL_LOG_FILES``,
  ``TOTAL_LOG_FILE_SIZE`` (bytes), ``TOTAL_IO_READ_MB`` (base file and logs),
  ``TOTAL_IO_WRITE_MB`` (the base file's size, else the logs'), ``TOTAL_IO_MB`` (both);
- ordered by ``TOTAL_LOG_FILE_SIZE``, largest first (ties: partition, file id, so a plan is
  reproducible), then taken in that order while the IO budget lasts: each operation taken
  spends its ``TOTAL_IO_MB`` of ``target_io_mb`` (``hoodie.compaction.target.io``, default
  512,000 MB) and the first one that uses the budget up is the last taken (so a run always
  compacts at least one slice, however large).

Inline compaction (:func:`deltacommits_since_compaction`) counts the deltacommits completed
after the latest compaction, as Hudi's ``hoodie.compact.inline.max.delta.commits`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from amcommit.table.file_group.model import FileGroup, FileSlice
from amcommit.table.format.compaction import CompactionOperation, CompactionPlan
from amcommit.table.format.model import Action, Instant

__all__ = [
    "DEFAULT_COMPACT_EVERY",
    "DEFAULT_TARGET_IO_MB",
    "compaction_metrics",
    "deltacommits_since_compaction",
    "plan_compaction",
]

DEFAULT_TARGET_IO_MB = 500 * 1024
"""``hoodie.compaction.target.io``: megabytes of IO (read and write) one compaction may plan."""
DEFAULT_COMPACT_EVERY = 5
"""``hoodie.compact.inline.max.delta.commits``."""

_MB = 1024 * 1024


def compaction_metrics(s: FileSlice) -> dict[str, float]:
    """Hudi's metrics of compacting slice ``s`` (module doc). Pure."""
    logs = float(sum(max(0, lg.size) for lg in s.logs))
    base = float(s.base.size) if s.base is not None else 0.0
    read_mb = (base + logs) / _MB
    write_mb = (base if s.base is not None else logs) / _MB
    return {
        "TOTAL_LOG_FILES": float(len(s.logs)),
        "TOTAL_LOG_FILE_SIZE": logs,
        "TOTAL_IO_READ_MB": read_mb,
        "TOTAL_IO_WRITE_MB": write_mb,
        "TOTAL_IO_MB": read_mb + write_mb,
    }


def plan_compaction(
    groups: Iterable[FileGroup],
    *,
    target_io_mb: float = DEFAULT_TARGET_IO_MB,
    log_size_threshold: int = 0,
    pending: Iterable[tuple[str, str]] = (),
    extra: dict[str, str] | None = None,
) -> CompactionPlan | None:
    """The plan of the next compaction of ``groups`` (the table's file groups, their latest
    slices as of the latest completed instant), or None when no slice has log files.
    ``pending``: (partition, file id) of the groups in a pending compaction (left out).
    Pure."""
    if not target_io_mb > 0:
        raise ValueError(f"target_io_mb must be > 0, got {target_io_mb!r}")
    busy = set(pending)
    ops: list[tuple[float, str, str, CompactionOperation]] = []
    for g in groups:
        s = g.latest
        if not s.logs or (g.partition, g.file_id) in busy:
            continue
        metrics = compaction_metrics(s)
        if metrics["TOTAL_LOG_FILE_SIZE"] < log_size_threshold:
            continue
        logs = sorted(s.logs, key=lambda lg: (lg.version, lg.path))
        op = CompactionOperation(
            file_id=g.file_id,
            partition=g.partition,
            base_instant=s.base_instant,
            delta_files=tuple(lg.path.rpartition("/")[2] for lg in logs),
            data_file=s.base.path.rpartition("/")[2] if s.base is not None else None,
            metrics=metrics,
        )
        ops.append((metrics["TOTAL_LOG_FILE_SIZE"], g.partition, g.file_id, op))
    if not ops:
        return None
    ops.sort(key=lambda o: (-o[0], o[1], o[2]))
    taken: list[CompactionOperation] = []
    left = float(target_io_mb)
    for _, _, _, op in ops:
        taken.append(op)
        left -= op.metrics["TOTAL_IO_MB"]
        if left <= 0:
            break
    return CompactionPlan(tuple(taken), dict(extra or {}))


def deltacommits_since_compaction(instants: Sequence[Instant], compactions: Iterable[str]) -> int:
    """Completed deltacommits later than the latest completed compaction (``compactions``:
    the times of completed commits that are compactions; none: every deltacommit counts).
    Pure."""
    last = max(compactions, default="")
    return sum(1 for i in instants if i.completed and i.action == Action.DELTA_COMMIT.value and i.time > last)
