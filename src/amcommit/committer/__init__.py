"""The commit engine (no Spark types here): task and job commit over any Store."""

from typing import TYPE_CHECKING

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig, ConflictMode
from amcommit.committer.job import resolve_layout
from amcommit.committer.layout import JobLayout
from amcommit.committer.report import JobReport, Progress, ProgressCallback
from amcommit.committer.task import abort_task, build_manifest, commit_task, setup_task

__all__ = [
    "DEFAULT_CONFIG",
    "CommitterConfig",
    "ConflictMode",
    "JobLayout",
    "JobReport",
    "Progress",
    "ProgressCallback",
    "abort_task",
    "build_manifest",
    "commit_task",
    "resolve_layout",
    "setup_task",
]

if TYPE_CHECKING:  # the names' types; at run time they come from __getattr__
    from amcommit.api import abort_job as abort_job
    from amcommit.api import commit_job as commit_job
    from amcommit.api import setup_job as setup_job

_MOVED = frozenset({"abort_job", "commit_job", "setup_job"})
"""Moved to :mod:`amcommit.api` (the front door: it picks the destination's kind). The old
paths ``amcommit.committer.commit_job`` etc. (the README showed them) still resolve, for
this release, to the front door's functions themselves; ``amcommit.committer.job`` no
longer has them."""


def __getattr__(name: str) -> object:
    """``commit_job``, ``setup_job``, ``abort_job``: :mod:`amcommit.api`'s (see ``_MOVED``),
    imported on first use only, so the engine package does not import the front door."""
    if name in _MOVED:
        import warnings

        from amcommit import api

        warnings.warn(
            f"amcommit.committer.{name} moved to amcommit.api.{name}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
