"""The report of a table write: the engine's :class:`~amcommit.committer.report.JobReport`
plus the table's own fields (the table kind's ``new_report`` makes one for every commit and
abort it runs; the table's steps fill them in)."""

from __future__ import annotations

from dataclasses import dataclass

from amcommit.committer.report import JobReport

__all__ = ["TableReport", "table_report"]


@dataclass
class TableReport(JobReport):
    """What a table write's commit or abort did (:class:`JobReport`'s fields, and these)."""

    instant: str | None = None
    """The instant this commit completes (or the abort rolled back)."""
    operation: str | None = None
    """``INSERT``, ``BULK_INSERT``, ``INSERT_OVERWRITE`` or ``INSERT_OVERWRITE_TABLE``."""
    label: str | None = None
    """Labelled writes: the label's text ``"<app_id>:<version>"`` (:mod:`amcommit.table.commit.labels`)."""
    skipped_label: str | None = None
    """Set only when this labelled write was skipped because its label was already committed:
    the instant that had committed it. This write was rolled back (``files`` 0, ``success``
    True, ``instant`` this write's rolled-back instant)."""
    active_writes: int | None = None
    """Completed writes in the active timeline once this commit published (this one
    included), as its listing under the lock said; None when it did not list (a resumed
    commit, a skip). Archival after the commit looks at the timeline only when it is over
    ``keep_max_commits`` (:func:`~amcommit.table.commit.archive.archive_after_commit`)."""


def table_report(report: JobReport) -> TableReport:
    """``report`` as the table report it is (the table kind made it); TypeError if it is a
    plain one (a table step run with another kind's context: a bug)."""
    if not isinstance(report, TableReport):
        raise TypeError(f"a table write's step got a {type(report).__name__}, not a TableReport")
    return report
