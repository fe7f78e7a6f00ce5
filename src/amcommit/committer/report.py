"""The job report: ``_SUCCESS`` / summary JSON, metrics, progress events."""

from __future__ import annotations

import datetime
import getpass
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from amcommit.iostats import IOStatistics, IOStatisticsSnapshot
from amcommit.manifest import SuccessData
from amcommit.redact import redact


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress event: ``stage`` name, ``done`` of ``total`` units (files, manifests).

    ``phase`` is ``"start"`` and ``"end"`` at stage boundaries, ``"progress"`` between.
    """

    stage: str
    done: int
    total: int
    phase: str = "progress"


ProgressCallback = Callable[[Progress], None]


@dataclass
class JobReport:
    """What a job commit did. ``to_success_data()`` gives the ``_SUCCESS`` JSON. A job kind
    may report more (its ``new_report`` makes a subclass with its own fields)."""

    job_id: str
    dest_uri: str
    success: bool = False
    files: int = 0
    bytes: int = 0
    manifests: int = 0
    directories_created: int = 0
    renamed: int = 0
    recovered_renames: int = 0
    retries: int = 0
    victims_deleted: int = 0
    moved_aside: int = 0
    resumed: bool = False
    rolled_back: bool = False
    conflict_mode: str = "append"
    stage_seconds: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    finished: float = 0.0
    error: str | None = None
    failed_stage: str | None = None
    filenames: list[str] = field(default_factory=list)
    already_committed: bool = False
    """The job had been committed and cleaned up before: this report was read back from
    ``_SUCCESS``; nothing was done."""
    committed_date: str = ""
    """For an ``already_committed`` report: the ``_SUCCESS`` date of that commit."""
    completed_previous: str | None = None
    """The job whose half-done commit this commit completed first, after taking over the
    destination lock its dead holder left (see :mod:`amcommit.committer.lock`); recorded in
    ``_SUCCESS`` as diagnostic ``completed_previous_job``."""
    committed_by: str | None = None
    """For an ``already_committed`` report: the job that completed this one's commit after
    taking over the destination lock it left (None: this job committed itself)."""
    completeness: str | None = None
    """For a commit from the store alone (no manifests given): what its completeness check
    found (see :mod:`amcommit.committer.completeness`); None when the caller gave them."""
    event_loop: str = ""
    """The event loop the commit ran on (:func:`amcommit.loop.running`); ``_SUCCESS``
    diagnostic ``event_loop``."""
    task_event_loops: list[str] = field(default_factory=list)
    """The event loops the task commits ran on, as their manifests say (``extra_data``
    ``event_loop``, written by the Spark task writer); diagnostic ``task_event_loops``."""
    job_stats: IOStatistics = field(default_factory=IOStatistics)
    task_stats: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)
    store_stats: IOStatisticsSnapshot = field(default_factory=IOStatisticsSnapshot)

    @property
    def duration(self) -> float:
        return (self.finished or time.time()) - self.started

    @property
    def rename_rate(self) -> float:
        t = self.stage_seconds.get("rename_files", 0.0)
        return self.renamed / t if t > 0 else 0.0

    def restore_from_success(self, success: SuccessData) -> None:
        """Take the counts and names of a ``_SUCCESS`` this job wrote (a commit found
        already committed reports what the committing run reported)."""
        m = success.metrics
        self.files = m.get("files", 0)
        self.bytes = m.get("bytes", 0)
        self.manifests = m.get("manifests", 0)
        self.directories_created = m.get("directories_created", 0)
        self.renamed = m.get("renamed", 0)
        self.recovered_renames = m.get("recovered_renames", 0)
        self.victims_deleted = m.get("victims_deleted", 0)
        self.moved_aside = m.get("moved_aside", 0)
        self.filenames = list(success.filenames)
        for key, ms in m.items():
            if key.startswith("stage_") and key.endswith("_ms"):
                self.stage_seconds.setdefault(key[6:-3], ms / 1000)

    def to_success_data(self) -> SuccessData:
        now = time.time()
        stats = IOStatisticsSnapshot()
        stats.merge(self.task_stats)
        stats.merge(self.store_stats)
        stats.merge(self.job_stats.snapshot(prefix="job_stage_"))
        metrics = {
            "files": self.files,
            "bytes": self.bytes,
            "manifests": self.manifests,
            "directories_created": self.directories_created,
            "renamed": self.renamed,
            "recovered_renames": self.recovered_renames,
            "retries": self.retries,
            "victims_deleted": self.victims_deleted,
            "moved_aside": self.moved_aside,
            "duration_ms": int(self.duration * 1000),
        }
        for stage, secs in self.stage_seconds.items():
            metrics[f"stage_{stage}_ms"] = int(secs * 1000)
        diagnostics = {
            "stage": self.failed_stage or "committed",
            "conflict_mode": self.conflict_mode,
            "resumed": str(self.resumed).lower(),
            "rename_rate_per_s": f"{self.rename_rate:.1f}",
            "destination": self.dest_uri,
        }
        try:
            diagnostics["principal"] = getpass.getuser()
        except Exception:  # pragma: no cover - no user name in some containers
            pass
        if self.error:
            diagnostics["exception"] = redact(self.error)  # whatever raised it: no secret
        if self.rolled_back:
            diagnostics["rolled_back"] = "true"
        if self.completed_previous:
            diagnostics["completed_previous_job"] = self.completed_previous
        if self.event_loop:
            diagnostics["event_loop"] = self.event_loop
        if self.task_event_loops:
            diagnostics["task_event_loops"] = ", ".join(self.task_event_loops)
        return SuccessData(
            timestamp=int(now * 1000),
            date=datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(),
            hostname=socket.gethostname(),
            description=f"amcommit job commit of {self.files} files into {self.dest_uri}",
            job_id=self.job_id,
            job_id_source="amcommit",
            success=self.success,
            metrics=metrics,
            diagnostics=diagnostics,
            filenames=list(self.filenames),
            iostatistics=stats,
        )
