"""Typed errors of table reading and cleaning. Each message is one line naming the bad thing."""

from __future__ import annotations

from amcommit.errors import AmcommitError, ConfigError

__all__ = ["CleanedPast", "NotATable", "RangeReversed", "UnknownInstant"]


class NotATable(AmcommitError):
    """The destination holds no Hudi table (no ``.hoodie/hoodie.properties``)."""

    def __init__(self, dest: str) -> None:
        super().__init__(f"{dest!r} is not a table: no .hoodie/hoodie.properties")
        self.dest = dest


class UnknownInstant(ConfigError):
    """A well-formed instant time that is no completed write instant of the table."""

    def __init__(self, instant: str, dest: str, detail: str = "") -> None:
        why = detail or "no completed commit or replacecommit has this time"
        super().__init__(f"unknown instant {instant} in table {dest!r}: {why}")
        self.instant = instant


class RangeReversed(ConfigError):
    """``since`` is later than ``until``."""

    def __init__(self, since: str, until: str) -> None:
        super().__init__(f"range reversed: since {since} is later than until {until}")
        self.since = since
        self.until = until


class CleanedPast(AmcommitError):
    """A time travel or incremental query reaches before what a clean kept: some files it
    would read were deleted, so the answer would silently miss rows (hudi-rs returns fewer
    rows there; amcommit refuses). ``earliest`` is the earliest instant still readable."""

    def __init__(self, query: str, earliest: str, clean: str) -> None:
        super().__init__(
            f"{query} reaches past what clean {clean} deleted: the earliest instant still readable is {earliest}"
        )
        self.earliest = earliest
        self.clean = clean
