"""The resume/abort table of ``committer/job.py`` (:func:`next_action`), row by row."""

from __future__ import annotations

import pytest

from amcommit.committer.job import Action, next_action

TABLE = [
    # operation, journal state, every file in place?, action
    ("commit", None, None, Action.FRESH),
    ("commit", "renaming", None, Action.RESUME_RENAMES),
    ("commit", "renamed", None, Action.FINISH),
    ("commit", "committed", None, Action.CLEANUP),
    ("abort", None, None, Action.DELETE_JOB),
    ("abort", "renaming", None, Action.CHECK_RENAMES),
    ("abort", "renaming", False, Action.ROLLBACK),
    ("abort", "renaming", True, Action.COMPLETE),
    ("abort", "renamed", None, Action.COMPLETE),
    ("abort", "committed", None, Action.COMPLETE),
]


@pytest.mark.parametrize(("operation", "journal", "in_place", "action"), TABLE)
def test_next_action(operation: str, journal: str | None, in_place: bool | None, action: Action) -> None:
    assert next_action(operation, journal, renames_done=in_place) is action  # type: ignore[arg-type]


def test_a_commit_ignores_what_only_an_abort_looks_at() -> None:
    for in_place in (None, True, False):
        assert next_action("commit", "renaming", renames_done=in_place) is Action.RESUME_RENAMES
