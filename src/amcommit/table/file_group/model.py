"""File groups and file slices (pure), as Hudi and hudi-rs model them.

A *file group* is identified by its partition path and file id. Its history is a sequence of
*file slices*, oldest first. A slice starts at its base instant and holds:

- the base file written at that instant (Parquet, :class:`FileVersion`), or none for a
  Merge-on-Read group whose first records went to a log file;
- the log files written against that base instant (Merge-on-Read only, :class:`LogFile`),
  ordered by version.

On Copy-on-Write tables every write of a group starts a new slice (a new base file); on
Merge-on-Read tables a deltacommit adds a log file to the group's latest slice and a
compaction starts the next slice. Readers take, per group, the latest slice as of an instant:
its base file alone (read-optimized) or merged with its logs (snapshot).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FileGroup", "FileSlice", "FileVersion", "LogFile", "group_files"]


@dataclass(frozen=True, slots=True)
class FileVersion:
    """One base file as a reader sees it."""

    partition: str
    file_id: str
    path: str
    """Relative to the table root."""
    instant: str
    size: int
    rows: int


@dataclass(frozen=True, slots=True)
class LogFile:
    """One log file of a file slice (Merge-on-Read)."""

    partition: str
    file_id: str
    path: str
    """Relative to the table root."""
    base_instant: str
    """The instant of the slice's base file, from the log file's name."""
    version: int
    instant: str
    """The instant that wrote it (a deltacommit, or a rollback's command block)."""
    size: int


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A base file (or none) and the log files written against its base instant."""

    partition: str
    file_id: str
    base_instant: str
    base: FileVersion | None = None
    logs: tuple[LogFile, ...] = ()

    @property
    def latest_instant(self) -> str:
        """The newest instant that wrote into this slice."""
        return max([self.base_instant, *(log.instant for log in self.logs)])

    def with_log(self, log: LogFile) -> FileSlice:
        """This slice with one more log file (kept in version order)."""
        logs = tuple(sorted((*self.logs, log), key=lambda f: (f.version, f.instant)))
        return FileSlice(self.partition, self.file_id, self.base_instant, self.base, logs)


@dataclass(frozen=True, slots=True)
class FileGroup:
    """A file group: its slices, oldest first."""

    partition: str
    file_id: str
    slices: tuple[FileSlice, ...]

    @property
    def latest(self) -> FileSlice:
        return self.slices[-1]

    def as_of(self, instant: str | None) -> FileSlice | None:
        """The latest slice whose base instant is at or before ``instant`` (None: the latest)."""
        found = [s for s in self.slices if instant is None or s.base_instant <= instant]
        return found[-1] if found else None


def group_files(bases: Iterable[FileVersion], logs: Iterable[LogFile] = ()) -> list[FileGroup]:
    """Group base files and log files into file groups (sorted by partition, file id).

    A base file starts the slice of its instant; a log file joins the slice of its base
    instant (a slice without a base file is created for it: a log-only group, or logs
    written against a compaction's instant before its base file exists). Pure.
    """
    slices: dict[tuple[str, str, str], FileSlice] = {}
    for b in bases:
        key = (b.partition, b.file_id, b.instant)
        old = slices.get(key)
        slices[key] = FileSlice(b.partition, b.file_id, b.instant, b, old.logs if old else ())
    for log in logs:
        key = (log.partition, log.file_id, log.base_instant)
        old = slices.get(key) or FileSlice(log.partition, log.file_id, log.base_instant)
        slices[key] = old.with_log(log)
    groups: dict[tuple[str, str], list[FileSlice]] = {}
    for (partition, file_id, _), s in sorted(slices.items()):
        groups.setdefault((partition, file_id), []).append(s)
    return [FileGroup(p, f, tuple(s)) for (p, f), s in sorted(groups.items())]
