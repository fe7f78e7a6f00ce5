"""The commit engine (no Spark types here): task and job commit over any Store."""

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig, ConflictMode
from amcommit.committer.job import abort_job, commit_job, resolve_layout, setup_job
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
    "abort_job",
    "abort_task",
    "build_manifest",
    "commit_job",
    "commit_task",
    "resolve_layout",
    "setup_job",
    "setup_task",
]
