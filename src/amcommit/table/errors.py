"""Typed errors of table reading and cleaning. Each message is one line naming the bad thing.

Each class takes the whole message as its only positional argument (so ``copy.copy`` and
:func:`amcommit.messages.for_user` can rebuild it) and is built with its ``make`` classmethod.
"""

from __future__ import annotations

from amcommit.errors import AmcommitError, ConfigError, ConflictError, ManifestError

__all__ = [
    "CleanedPast",
    "CorruptLogBlock",
    "NotATable",
    "RangeReversed",
    "SchemaMismatch",
    "UnknownInstant",
    "WriteConflict",
]


class NotATable(AmcommitError):
    """The destination holds no Hudi table (no ``.hoodie/hoodie.properties``)."""

    def __init__(self, message: str, *, dest: str = "") -> None:
        super().__init__(message)
        self.dest = dest

    @classmethod
    def make(cls, dest: str) -> NotATable:
        return cls(f"{dest!r} is not a table: no .hoodie/hoodie.properties", dest=dest)


class UnknownInstant(ConfigError):
    """A well-formed instant time that is no completed instant of the table."""

    def __init__(self, message: str, *, instant: str = "") -> None:
        super().__init__(message)
        self.instant = instant

    @classmethod
    def make(cls, instant: str, dest: str, detail: str = "") -> UnknownInstant:
        why = detail or "no completed instant has this time"
        return cls(f"unknown instant {instant} in table {dest!r}: {why}", instant=instant)


class RangeReversed(ConfigError):
    """``since`` is later than ``until``."""

    @classmethod
    def make(cls, since: str, until: str) -> RangeReversed:
        return cls(f"range reversed: since {since} is later than until {until}")


class CleanedPast(AmcommitError):
    """A time travel or incremental query reaches before what a clean kept: some files it
    would read were deleted, so the answer would silently miss rows (hudi-rs returns fewer
    rows there; amcommit refuses). ``earliest`` is the earliest instant still readable."""

    def __init__(self, message: str, *, earliest: str = "", clean: str = "") -> None:
        super().__init__(message)
        self.earliest = earliest
        self.clean = clean

    @classmethod
    def make(cls, query: str, earliest: str, clean: str) -> CleanedPast:
        return cls(
            f"{query} reaches past what clean {clean} deleted: the earliest instant still readable is {earliest}",
            earliest=earliest,
            clean=clean,
        )


class SchemaMismatch(ConfigError):
    """A write's schema breaks the table's schema-on-write rules
    (:func:`amcommit.table.format.schema.evolve_schema`): a column whose type changes other than
    by a widening Hudi allows, or a column of the table the write leaves out (unless the
    write allows missing columns). ``column`` names it (dotted for nested fields)."""

    def __init__(self, message: str, *, column: str = "") -> None:
        super().__init__(message)
        self.column = column


class WriteConflict(ConflictError):
    """A record-level write (upsert, delete) rewrites a file group that an instant completed
    after this write read it rewrote or replaced (Hudi's
    ``SimpleConcurrentFileWritesConflictResolutionStrategy``): committing would lose that
    instant's changes. The write was rolled back; run it again. ``other`` is that instant."""

    def __init__(self, message: str, *, stage: str = "", other: str = "", file_id: str = "") -> None:
        super().__init__(message, stage=stage)
        self.other = other
        self.file_id = file_id

    @classmethod
    def make(cls, mine: str, other: str, partition: str, file_id: str) -> WriteConflict:
        where = f"partition {partition!r}" if partition else "the table"
        return cls(
            f"write {mine} conflicts with instant {other}, which rewrote file group {file_id} in {where} "
            "after this write read it; the write was rolled back, run it again",
            stage="check_conflicts",
            other=other,
            file_id=file_id,
        )


class MutationError(ConfigError):
    """Bad input to an upsert or delete (:mod:`amcommit.table.mutate`) (one line naming the bad thing);
    raised before anything is written."""


class CorruptLogBlock(ManifestError):
    """A Merge-on-Read log file holds bytes that are no valid Hudi log block (Java's corruption
    check failed, or the block's content does not decode). ``path`` names the log file and
    ``offset`` the byte where the bad block starts."""

    def __init__(self, message: str, *, path: str = "", offset: int = -1) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset

    @classmethod
    def make(cls, path: str, offset: int, why: str) -> CorruptLogBlock:
        return cls(f"corrupt log block in {path!r} at byte {offset}: {why}", path=path, offset=offset)
