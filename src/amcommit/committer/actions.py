"""What a commit or abort run does next, given the journal: the resume/abort table of
:mod:`amcommit.committer.job` as a pure function (:func:`next_action`)."""

from __future__ import annotations

import enum
from typing import Literal

from amcommit.committer.journal import JournalState


class Action(enum.Enum):
    """What a commit or abort run does next (:func:`next_action`)."""

    FRESH = "fresh"
    """commit, no journal: check conflicts, write the journal, rename, finish."""
    RESUME_RENAMES = "resume_renames"
    """commit, journal ``renaming``: rename what is left, then finish."""
    FINISH = "finish"
    """commit, journal ``renamed``: delete old files, ``_SUCCESS``, cleanup."""
    CLEANUP = "cleanup"
    """commit, journal ``committed``: only cleanup remains."""
    DELETE_JOB = "delete_job"
    """abort, no journal: delete the job directory (nothing was renamed)."""
    CHECK_RENAMES = "check_renames"
    """abort, journal ``renaming``: load the manifests and look whether every file is in
    place (:mod:`~amcommit.committer.stages.renames_done`), then decide again."""
    ROLLBACK = "rollback"
    """abort, journal ``renaming`` with files not in place: roll back, delete the job."""
    COMPLETE = "complete"
    """abort past the point of no return: complete the commit instead."""


def next_action(
    operation: Literal["commit", "abort"],
    journal: JournalState | None,
    *,
    renames_done: bool | None = None,
) -> Action:
    """The resume/abort table of the module docstring, as a pure function: what a run of
    ``operation`` does given the journal's state (None: no journal) and, for an abort of a
    ``renaming`` commit, whether every file was found in place (None: not looked yet)."""
    if operation == "commit":
        if journal is None:
            return Action.FRESH
        return {
            "renaming": Action.RESUME_RENAMES,
            "renamed": Action.FINISH,
            "committed": Action.CLEANUP,
        }[journal]
    if journal is None:
        return Action.DELETE_JOB
    if journal in ("renamed", "committed"):
        return Action.COMPLETE
    if renames_done is None:
        return Action.CHECK_RENAMES
    return Action.COMPLETE if renames_done else Action.ROLLBACK
