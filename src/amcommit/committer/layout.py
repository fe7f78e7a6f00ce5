"""Every path of the protocol, computed in one place.

Layout under the destination ``$dest`` (amcommit's own; Hadoop's differs only in the job
directory name, ``_temporary/$jobId`` instead of ``_temporary/manifest_$jobId``)::

    $dest/_temporary/_commit.lock              destination lock (committer/lock.py)
    $dest/_temporary/manifest_$jobId/
        _job.json                              job marker (setup_job; create-only)
        journal.json                           job-commit journal (resume / rollback)
        victims-NNNN.json                      files an overwrite will remove
        trash/...                              old files moved aside by an overwrite
        $attempt(%02d)/
            manifests/$taskId-manifest.json    committed task manifests
            manifests/$taskAttemptId-manifest.json.tmp
            tasks/$taskAttemptId/...           task attempt working directories
            task-attempts/$taskAttemptId       task attempt markers (setup_task; create-only)
    $dest/_SUCCESS                             JSON report, written last

A job kind (:mod:`amcommit.committer.kind`) may stage its jobs in a folder of its own
(``staging``, relative to the destination; e.g. a Hudi table's ``.hoodie/.aux/amcommit``, where no
``_temporary`` folder may appear): the same tree then sits under ``$dest/$staging/$jobId/``
and the destination lock is ``$dest/$staging/_commit.lock``. The kind builds such layouts
(and checks its job ids); the engine only follows them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from amcommit.errors import ConfigError
from amcommit.paths import check_path, join

if TYPE_CHECKING:
    from amcommit.committer.kind import TaskKind

TEMP_DIR_NAME = "_temporary"
SUCCESS_NAME = "_SUCCESS"
MANIFEST_SUFFIX = "-manifest.json"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")


def check_id(value: str, what: str) -> str:
    """Validate a job / task / attempt id (safe as a single path segment)."""
    if not isinstance(value, str) or not _ID_RE.match(value) or value.endswith(".tmp"):
        raise ConfigError(
            f"invalid {what} {value!r}: use 1-200 letters, digits, '_', '-' or '.', starting with a letter or digit"
        )
    return value


@dataclass(frozen=True, slots=True)
class JobLayout:
    """Paths (store paths) of one job attempt writing into ``dest``."""

    dest: str
    job_id: str
    job_attempt: int = 0
    hadoop: bool = False
    """Hadoop's layout (``_temporary/$jobId``) instead of ours (``_temporary/manifest_$jobId``)."""
    staging: str | None = None
    """A kind's own staging folder (relative to ``dest``) holding this job's directory (named
    by the job id) and the destination lock; None: ``_temporary`` (ours or Hadoop's)."""
    tasks: TaskKind | None = field(default=None, compare=False, repr=False)
    """The task side of the job's kind (:class:`~amcommit.committer.kind.TaskKind`: what a
    task setup and commit do besides the plain protocol, how outputs are named); None: plain
    files (nothing more; outputs keep the names the task gave them)."""

    def __post_init__(self) -> None:
        check_path(self.dest)
        check_id(self.job_id, "job id")
        if self.staging is not None:
            if self.hadoop:
                raise ConfigError("a kind's own staging folder cannot use Hadoop's job layout")
            check_path(join(self.dest, self.staging))
        if not 0 <= self.job_attempt <= 99:
            raise ConfigError(f"job attempt must be within 0..99, got {self.job_attempt}")

    @property
    def temp_root(self) -> str:
        return join(self.dest, self.staging or TEMP_DIR_NAME)

    @property
    def job_dir(self) -> str:
        name = self.job_id if (self.hadoop or self.staging is not None) else f"manifest_{self.job_id}"
        return join(self.temp_root, name)

    @property
    def attempt_dir(self) -> str:
        return join(self.job_dir, f"{self.job_attempt:02d}")

    @property
    def manifests_dir(self) -> str:
        return join(self.attempt_dir, "manifests")

    @property
    def tasks_dir(self) -> str:
        return join(self.attempt_dir, "tasks")

    @property
    def job_marker(self) -> str:
        return join(self.job_dir, "_job.json")

    @property
    def journal_path(self) -> str:
        return join(self.job_dir, "journal.json")

    @property
    def trash_dir(self) -> str:
        return join(self.job_dir, "trash")

    def victims_path(self, n: int) -> str:
        return join(self.job_dir, f"victims-{n:04d}.json")

    @property
    def success_path(self) -> str:
        return join(self.dest, SUCCESS_NAME)

    @property
    def success_tmp_path(self) -> str:
        return join(self.job_dir, f"{SUCCESS_NAME}.tmp")

    def task_attempt_dir(self, task_attempt_id: str) -> str:
        return join(self.tasks_dir, check_id(task_attempt_id, "task attempt id"))

    def task_attempt_marker(self, task_attempt_id: str) -> str:
        return join(self.attempt_dir, "task-attempts", check_id(task_attempt_id, "task attempt id"))

    def manifest_path(self, task_id: str) -> str:
        return join(self.manifests_dir, check_id(task_id, "task id") + MANIFEST_SUFFIX)

    def manifest_tmp_path(self, task_attempt_id: str) -> str:
        return join(
            self.manifests_dir, check_id(task_attempt_id, "task attempt id") + MANIFEST_SUFFIX + ".tmp"
        )
