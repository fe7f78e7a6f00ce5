"""The job-commit journal: what a resumed commit or a rollback needs to know.

Stored as ``journal.json`` in the job directory and rewritten (whole, atomically) at each
state change:

* ``renaming``: victims (old files an overwrite removes) are recorded; renames may be
  partly done. ``commit_job`` resumes; ``abort_job`` rolls back (deletes the files this job
  renamed in, restores old files moved to ``trash/``).
* ``renamed``: every file is in place; old files are being deleted. This is the point of no
  return: ``abort_job`` completes the commit instead of rolling back.
* ``committed``: ``_SUCCESS`` is written; only cleanup may remain.

The ``renamed`` write also records what the renames did (counts, the first file names,
stage times), so that a commit resumed past the point of no return reports exactly what
an uninterrupted one reports.

Every read and write goes through the job's retry layer
(:meth:`~amcommit.committer.context.JobContext.call`); the writes after the renames use its
patient policy. A write is one whole-object put (atomic); writing the same journal again
is harmless, so a lost answer is simply retried.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

import msgspec

from amcommit.committer.layout import JobLayout
from amcommit.errors import NotFound
from amcommit.store.base import PutMode

if TYPE_CHECKING:
    from amcommit.committer.context import JobContext
    from amcommit.committer.report import JobReport

JournalState = Literal["renaming", "renamed", "committed"]


class Journal(msgspec.Struct):
    job_id: str
    state: JournalState
    conflict_mode: str
    victim_chunks: int = 0
    started: float = msgspec.field(default_factory=time.time)
    updated: float = msgspec.field(default_factory=time.time)
    runs: int = 1
    """How many job-commit runs have worked on this journal (1 + resumes)."""
    layout: str = "amcommit"
    renamed: int = 0
    """Files renamed into place (recorded with state ``renamed``)."""
    recovered_renames: int = 0
    moved_aside: int = 0
    directories_created: int = 0
    filenames: list[str] = msgspec.field(default_factory=list)
    """The report's first destination names (URIs, sorted)."""
    stage_seconds: dict[str, float] = msgspec.field(default_factory=dict)
    """Seconds spent in the stages before the point of no return."""


_dec = msgspec.json.Decoder(Journal)


def decode_journal(data: bytes) -> Journal:
    """A journal from its stored bytes."""
    return _dec.decode(data)


async def load_journal(ctx: JobContext, layout: JobLayout | None = None) -> Journal | None:
    """The job's journal (None if there is none), read through the retry layer."""
    path = (layout or ctx.layout).journal_path
    try:
        data = await ctx.call(lambda: ctx.store.get(path))
    except NotFound:
        return None
    return decode_journal(data)


async def save_journal(ctx: JobContext, journal: Journal, *, patient: bool = False) -> None:
    """Write the journal (whole, atomically). ``patient``: the patient retry policy, for
    the writes after the renames (see :mod:`amcommit.store.retry`)."""
    journal.updated = time.time()
    data = msgspec.json.encode(journal)
    path = ctx.layout.journal_path
    await ctx.call(lambda: ctx.store.put(path, data, mode=PutMode.OVERWRITE), patient=patient)


def record_renames(journal: Journal, report: JobReport) -> None:
    """Copy what the renames did from ``report`` into ``journal`` (before the ``renamed``
    write), so a resumed commit can report it (:func:`restore_renames`)."""
    journal.renamed = report.renamed
    journal.recovered_renames = report.recovered_renames
    journal.moved_aside = report.moved_aside
    journal.directories_created = report.directories_created
    journal.filenames = list(report.filenames)
    journal.stage_seconds = dict(report.stage_seconds)


def restore_renames(journal: Journal, report: JobReport) -> None:
    """A commit resumed past the point of no return: report the renames (counts, names,
    stage times) as the run that did them recorded them."""
    report.renamed = journal.renamed
    report.recovered_renames = journal.recovered_renames
    report.moved_aside = journal.moved_aside
    report.directories_created = journal.directories_created
    report.filenames = list(journal.filenames)
    for stage, secs in journal.stage_seconds.items():
        report.stage_seconds.setdefault(stage, secs)
