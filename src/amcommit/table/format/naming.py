"""Names of things in a Hudi table (version 6, timeline layout 1): pure functions, no I/O.

Facts relied on (measured with hudi-rs 0.5.0):

- instant times are 17 digits ``yyyyMMddHHmmssSSS`` in UTC (14-digit times are read too);
- a base file is ``<partition path>/<fileId>_<writeToken>_<instant>.parquet``; the file id
  must not contain ``_`` (a UUID plus ``-0`` is the usual form);
- the write token is ``<task partition id>-<stage id>-<task attempt id>`` in Hudi's writers;
  readers only need it to be free of ``_``;
- meta columns come first in each base file, in the order of :data:`META_COLUMNS`.
"""

from __future__ import annotations

import itertools
import operator
import re
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from amcommit.errors import CommitError, ConfigError

HOODIE_DIR = ".hoodie"
"""Timeline folder, relative to the table root."""
TEMP_DIR = ".hoodie/.temp"
"""Hudi's temp folder: the marker folder of instant ``I`` is ``.hoodie/.temp/I/`` (Hudi's
``getMarkerFolderPath``; only markers go there, :mod:`amcommit.table.write.direct`). It was
amcommit's staging root before :data:`STAGING_DIR` (:data:`LEGACY_STAGING_DIR`): writes
staged there by an earlier version are still found, resumed and rolled back."""
STAGING_DIR = ".hoodie/.aux/amcommit"
"""Staging root of every table write: a write's job directory (job marker, journal, plan,
manifests, staged files) is ``.hoodie/.aux/amcommit/<instant>/``, the table's commit lock
``.hoodie/.aux/amcommit/_commit.lock`` (never ``_temporary``). ``.hoodie/.aux`` is Hudi's
auxiliary folder: Hudi keeps compaction plans and its bootstrap index there and lists it only
for instant files directly inside it; no reader lists below ``.hoodie``."""
LEGACY_STAGING_DIR = TEMP_DIR
"""Where earlier versions staged table writes (``.hoodie/.temp/<instant>/``, the lock
``.hoodie/.temp/_commit.lock``): looked at for pending writes of that layout only."""
HEARTBEAT_DIR = ".hoodie/.heartbeat"
"""Writer heartbeats, ``.hoodie/.heartbeat/<instant>`` (Hudi's own place for them)."""
PROPERTIES_FILE = ".hoodie/hoodie.properties"
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
BASE_FILE_EXTENSION = ".parquet"

META_COLUMNS: tuple[str, ...] = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
"""Hudi's meta columns, in the order they lead every base file."""

INSTANT_FORMAT = "%Y%m%d%H%M%S%f"
"""How an instant time is written (:func:`format_instant`: milliseconds, 17 digits)."""
INSTANT_PATTERN = r"\d{14}(?:\d{3})?"
"""The syntax of an instant time, as a regular expression (17 digits ``yyyyMMddHHmmssSSS``,
or 14 without milliseconds): THE one definition; every parser of names that hold an
instant (:func:`is_instant`, base file names, instant file names) is built on it."""
_INSTANT_RE = re.compile(rf"^{INSTANT_PATTERN}$")
_FILE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,127}$")
_TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,63}$")
_BASE_RE = re.compile(rf"^(?P<file_id>[^_/]+)_(?P<token>[^_/]+)_(?P<instant>{INSTANT_PATTERN})\.parquet$")


def is_instant(value: str) -> bool:
    """True for a 14- or 17-digit instant time."""
    return bool(_INSTANT_RE.match(value))


def check_instant(value: str) -> str:
    """Return ``value`` if it is an instant time, else raise :class:`ConfigError` naming it."""
    if not isinstance(value, str) or not is_instant(value):
        raise ConfigError(f"invalid instant time {value!r}: expected 17 digits yyyyMMddHHmmssSSS (UTC)")
    return value


def format_instant(moment: datetime) -> str:
    """17-digit instant time of ``moment`` (converted to UTC; naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime(INSTANT_FORMAT)[:17]


def parse_instant(value: str) -> datetime:
    """The UTC moment of a 14- or 17-digit instant time."""
    check_instant(value)
    if len(value) == 14:
        value += "000"
    return datetime.strptime(value + "000", INSTANT_FORMAT).replace(tzinfo=UTC)


def next_instant(now: datetime, after: str | None = None) -> str:
    """An instant time for ``now``, strictly later than ``after`` (1 ms later if the clock lags).

    Allocation is not made unique by this function: the caller claims the time on the store
    with a create-only write and asks again with ``after`` set to the time it lost.

    Raises :class:`~amcommit.errors.CommitError` (one line) when no instant can follow
    ``after``: it is the last time an instant can name (``99991231235959999``) or no real
    moment (month 13, say); an instant file of such a name blocks every later write until
    it is removed.
    """
    t = format_instant(now)
    if after is not None:
        check_instant(after)
        floor = after if len(after) == 17 else after + "000"
        if t <= floor:
            try:
                t = format_instant(parse_instant(floor) + timedelta(milliseconds=1))
            except OverflowError:
                raise CommitError(
                    f"no instant can follow {after}: it is the last instant time possible (year 9999); "
                    "remove its instant file if no real write made it",
                    stage="begin_write",
                ) from None
            except ValueError:
                raise CommitError(
                    f"no instant can follow {after}: it names no real moment (not a date and time "
                    "yyyyMMddHHmmssSSS); remove its instant file if no real write made it",
                    stage="begin_write",
                ) from None
    return t


def new_file_id() -> str:
    """A new file group id: a random UUID plus ``-0``, as Hudi's writers make them."""
    return f"{uuid.uuid4()}-0"


def write_token(partition_id: int, stage_id: int, attempt_id: int) -> str:
    """Hudi's write token ``<task partition id>-<stage id>-<task attempt id>``."""
    return f"{int(partition_id)}-{int(stage_id)}-{int(attempt_id)}"


class BaseFileName(NamedTuple):
    """The parts of ``<fileId>_<writeToken>_<instant>.parquet``."""

    file_id: str
    write_token: str
    instant: str

    @property
    def name(self) -> str:
        return f"{self.file_id}_{self.write_token}_{self.instant}{BASE_FILE_EXTENSION}"


def base_file_name(file_id: str, token: str, instant: str) -> str:
    """``<fileId>_<writeToken>_<instant>.parquet``; each part is validated."""
    if not _FILE_ID_RE.match(file_id):
        raise ConfigError(f"invalid file id {file_id!r}: letters, digits, '-' and '.' only (no '_')")
    if not _TOKEN_RE.match(token):
        raise ConfigError(f"invalid write token {token!r}: letters, digits, '-' and '.' only (no '_')")
    check_instant(instant)
    return BaseFileName(file_id, token, instant).name


def parse_base_file_name(name: str) -> BaseFileName | None:
    """Parse a base file's name (no folders); None if it is not one."""
    m = _BASE_RE.match(name)
    if m is None:
        return None
    return BaseFileName(m["file_id"], m["token"], m["instant"])


LOG_FILE_MARKER = ".log."
_LOG_RE = re.compile(
    rf"^\.(?P<file_id>[^_/]+)_(?P<base>{INSTANT_PATTERN})\.log\.(?P<version>[1-9][0-9]*)_(?P<token>[^_/]+)$"
)


class LogFileName(NamedTuple):
    """The parts of a Merge-on-Read log file's name ``.<fileId>_<baseInstant>.log.<version>_<writeToken>``.

    ``base_instant`` is the instant of the file slice's base file (not the deltacommit's);
    versions start at 1, and each write of the slice's logs adds the next version (object
    stores cannot append)."""

    file_id: str
    base_instant: str
    version: int
    write_token: str

    @property
    def name(self) -> str:
        return f".{self.file_id}_{self.base_instant}{LOG_FILE_MARKER}{self.version}_{self.write_token}"


def log_file_name(file_id: str, base_instant: str, version: int, token: str) -> str:
    """``.<fileId>_<baseInstant>.log.<version>_<writeToken>``; each part is validated."""
    if not _FILE_ID_RE.match(file_id):
        raise ConfigError(f"invalid file id {file_id!r}: letters, digits, '-' and '.' only (no '_')")
    if not _TOKEN_RE.match(token):
        raise ConfigError(f"invalid write token {token!r}: letters, digits, '-' and '.' only (no '_')")
    if version < 1:
        raise ConfigError(f"invalid log version {version}: versions start at 1")
    check_instant(base_instant)
    return LogFileName(file_id, base_instant, version, token).name


def parse_log_file_name(name: str) -> LogFileName | None:
    """Parse a log file's name (no folders); None if it is not one."""
    m = _LOG_RE.match(name)
    if m is None:
        return None
    return LogFileName(m["file_id"], m["base"], int(m["version"]), m["token"])


def own_log_file(name: str, instant: str) -> bool:
    """True if ``name`` is a log file that a write of ``instant`` created whole: amcommit's
    deltacommits name their log files with the write token ``<task>-<instant>-0``
    (Hudi's writers use small integers there: a Java stage id is an ``int``, never a
    17-digit instant), and never append to an existing log file. Such a file holds only
    that write's blocks, so rolling the write back may delete it. Pure."""
    parsed = parse_log_file_name(name)
    if parsed is None:
        return False
    task, _, rest = parsed.write_token.partition("-")
    return task.isdigit() and rest == f"{instant}-0"


def _folder_problem(folder: str, depth: int, *, exact: bool) -> str | None:
    """Why ``folder`` (relative to the table, ``""`` = its root) cannot hold (``exact``) or
    lead to a partition of a table with ``depth`` partition fields; None if it can."""
    segs = folder.split("/") if folder else []
    for seg in segs:
        if seg.startswith((".", "_")):
            return f"folder {seg!r} is hidden or starts with '_': not a partition folder"
    if len(segs) > depth or (exact and len(segs) != depth):
        return f"it is {len(segs)} folder(s) deep, but the table has {depth} partition field(s)"
    return None


def _name_problem(name: str, instant: str) -> str | None:
    """Why ``name`` is not a base file name of ``instant``; None if it is one."""
    if name.startswith((".", "_")):
        return "a hidden or '_' name is not a base file"
    parsed = parse_base_file_name(name)
    if parsed is None:
        return f"not a base file name (<fileId>_<writeToken>_{instant}{BASE_FILE_EXTENSION})"
    if parsed.instant != instant:
        return f"it is stamped with instant {parsed.instant}, not this write's {instant}"
    return None


def foreign_file(
    files: Sequence[str], dirs: Iterable[str], instant: str, depth: int, *, logs: bool = False
) -> tuple[str, str] | None:
    """``(path, why)`` of the first path a write of ``instant`` into a table with ``depth``
    partition fields must not publish, None if all are its own: ``files`` (relative to the
    table) must be base files stamped with ``instant``, ``<fileId>_<writeToken>_<instant>
    .parquet``, in partition folders exactly ``depth`` deep; ``dirs`` (the directories the
    write creates, relative to the table) must be partition folders or above them. No
    folder may be hidden or start with ``_`` (``.hoodie`` is the timeline). ``logs`` (a
    Merge-on-Read table's write): Merge-on-Read log file names
    (:func:`parse_log_file_name`) are accepted too, in the same partition folders. Pure.

    For the many files of a write: C loops (a split per name, a join and a few scans) while
    every name is right; the names are parsed one by one only to explain a wrong one."""
    if logs:
        log_files = [f for f in files if parse_log_file_name(f.rpartition("/")[2]) is not None]
        if log_files:
            for f in log_files:
                why = _folder_problem(f.rpartition("/")[0], depth, exact=True)
                if why is not None:
                    return f, why
            named = set(log_files)
            files = [f for f in files if f not in named]
    bad = _foreign_file(files, instant, depth)
    if bad is not None:
        return bad
    for d in dirs:
        why = _folder_problem(d, depth, exact=False)
        if why is not None:
            return d, why
    return None


_ONLY_UNDERSCORES = bytes(b for b in range(256) if b not in b"_\n")
"""For ``bytes.translate(None, ...)``: deletes every byte but ``_`` and the line break."""


def _all_base_names(names: list[str], instant: str) -> bool:
    """True if every one of ``names`` is ``<fileId>_<writeToken>_<instant>.parquet`` with a
    file id and a token that are not empty, hold no ``_`` and do not start with ``.``
    (what :func:`_name_problem` accepts); False if any is not, or may not be. One join and
    a few scans of it, in C."""
    end = f"_{instant}{BASE_FILE_EXTENSION}\n"
    joined = "\n" + "\n".join(names) + "\n"
    if joined.count(end) != len(names):  # each line ends so (a line has one end at most)
        return False
    # two "_" on each line (the end's and the one after the file id), none at its start
    # (an empty file id) or next to another (an empty token), no name starting with "."
    if "\n_" in joined or "__" in joined or "\n." in joined:
        return False
    kept = joined.encode("utf-8", "surrogatepass").translate(None, _ONLY_UNDERSCORES)
    return kept == b"\n" + b"__\n" * len(names)


def _foreign_file(files: Sequence[str], instant: str, depth: int) -> tuple[str, str] | None:
    """:func:`foreign_file` of the files alone."""
    if not files:
        return None
    parts = list(map(str.rpartition, files, itertools.repeat("/")))
    for folder in set(map(operator.itemgetter(0), parts)):
        why = _folder_problem(folder, depth, exact=True)
        if why is not None:
            return next(f for f, p in zip(files, parts, strict=True) if p[0] == folder), why
    names = list(map(operator.itemgetter(2), parts))
    if _all_base_names(names, instant):
        return None
    for f, name in zip(files, names, strict=True):
        why = _name_problem(name, instant)
        if why is not None:
            return f, why
    return None


def commit_seqno(instant: str, partition_id: int, n: int) -> str:
    """``_hoodie_commit_seqno`` of the ``n``-th row a task wrote: ``<instant>_<partition>_<n>``."""
    return f"{instant}_{int(partition_id)}_{int(n)}"


def generated_record_key(instant: str, partition_id: int, n: int) -> str:
    """A unique record key for a table without a key column (same form as the seqno)."""
    return f"{instant}_{int(partition_id)}_{int(n)}"


def heartbeat_path(instant: str) -> str:
    """Relative path of the heartbeat of the writer of ``instant``."""
    return f"{HEARTBEAT_DIR}/{check_instant(instant)}"


def staging_dir(instant: str) -> str:
    """Relative path of the staging folder of the write of ``instant``."""
    return f"{STAGING_DIR}/{check_instant(instant)}"
