"""Instants and commit metadata of a Hudi table (version 6, timeline layout 1): pure models.

An instant is one file directly in ``.hoodie/``: ``<time>.<action>[.<state>]`` where a missing
state means *completed*. Completed ``commit`` and ``replacecommit`` files hold JSON commit
metadata (:class:`CommitMetadata`); ``.requested`` and ``.inflight`` files may be empty.
Unknown JSON keys are ignored on read, so metadata written by Hudi's Java writers loads too.
"""

from __future__ import annotations

import enum
import re
from typing import Any

import msgspec

from amcommit.errors import ManifestError
from amcommit.table.format.naming import INSTANT_PATTERN

__all__ = [
    "Action",
    "CommitMetadata",
    "DeltaWriteStat",
    "Instant",
    "Operation",
    "State",
    "WriteStat",
    "decode_commit_metadata",
    "encode_commit_metadata",
    "parse_instant_file",
    "write_action",
]


class Action(enum.StrEnum):
    """Timeline actions amcommit writes or must recognise."""

    COMMIT = "commit"
    REPLACE_COMMIT = "replacecommit"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    DELTA_COMMIT = "deltacommit"
    COMPACTION = "compaction"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    INDEXING = "indexing"


WRITE_ACTIONS = frozenset({Action.COMMIT, Action.REPLACE_COMMIT, Action.DELTA_COMMIT})
"""Actions that add files to the table: ``commit`` (also a completed compaction, with
``"compacted": true``), ``replacecommit`` and Merge-on-Read's ``deltacommit`` (base files and
log files). A pending ``compaction`` (``.compaction.requested`` / ``.inflight``) is none of
them: it completes as a ``commit``. A Merge-on-Read table's writes other
than overwrites are deltacommits."""


class State(enum.StrEnum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"


class Operation(enum.StrEnum):
    """``operationType`` values amcommit writes."""

    INSERT = "INSERT"
    BULK_INSERT = "BULK_INSERT"
    INSERT_OVERWRITE = "INSERT_OVERWRITE"
    INSERT_OVERWRITE_TABLE = "INSERT_OVERWRITE_TABLE"
    UPSERT = "UPSERT"
    """Record-level: rewrites the file groups holding updated keys (:mod:`amcommit.table.mutate.engine`)."""
    DELETE = "DELETE"
    """Record-level: rewrites the file groups holding deleted keys (:mod:`amcommit.table.mutate.engine`)."""

    @property
    def action(self) -> Action:
        """``replacecommit`` for the overwrites, ``commit`` otherwise."""
        if self in (Operation.INSERT_OVERWRITE, Operation.INSERT_OVERWRITE_TABLE):
            return Action.REPLACE_COMMIT
        return Action.COMMIT


def write_action(operation: Operation, merge_on_read: bool = False) -> Action:
    """The action of a write of ``operation``: as :attr:`Operation.action` says on a
    Copy-on-Write table; on a Merge-on-Read table every write but an overwrite is a
    ``deltacommit`` (as Hudi's writers record it). Pure."""
    action = operation.action
    if merge_on_read and action is Action.COMMIT:
        return Action.DELTA_COMMIT
    return action


_INSTANT_FILE_RE = re.compile(
    rf"^(?P<time>{INSTANT_PATTERN})\.(?P<action>[a-z]+)(?:\.(?P<state>requested|inflight))?$"
)
_LEGACY_INFLIGHT_RE = re.compile(rf"{INSTANT_PATTERN}\.inflight")


class Instant(msgspec.Struct, frozen=True, order=True):
    """One instant: ordered by time first (version 6 orders by the requested time)."""

    time: str
    action: str
    state: State

    @property
    def file_name(self) -> str:
        """The instant's file name in ``.hoodie/``."""
        if self.state is State.COMPLETED:
            return f"{self.time}.{self.action}"
        return f"{self.time}.{self.action}.{self.state.value}"

    @property
    def completed(self) -> bool:
        return self.state is State.COMPLETED


def parse_instant_file(name: str) -> Instant | None:
    """The instant a file name in ``.hoodie/`` stands for; None for any other file.

    The legacy ``<time>.inflight`` name of a commit's inflight state is recognised.
    """
    if _LEGACY_INFLIGHT_RE.fullmatch(name):
        return Instant(name.split(".", 1)[0], Action.COMMIT.value, State.INFLIGHT)
    m = _INSTANT_FILE_RE.match(name)
    if m is None:
        return None
    state = State(m["state"]) if m["state"] else State.COMPLETED
    return Instant(m["time"], m["action"], state)


class WriteStat(msgspec.Struct, rename="camel", omit_defaults=False, kw_only=True):
    """``HoodieWriteStat`` as Hudi writes it in JSON commit metadata: the fields readers use.

    Hudi's Java writer also writes the compaction and log-file counters (``totalLogRecords``,
    ``totalLogBlocks``, ...: 0 for a base file), ``tempPath`` and ``minEventTime`` /
    ``maxEventTime`` (null). They are left out here: Hudi's Java reader (Jackson) leaves a
    missing field at its initial value, which is exactly those (0 and null), and hudi-rs
    reads every field as optional, so readers see the same stat; the commit metadata is
    half the size (2,000 files: ~0.55 MB instead of ~1.1 MB) and half the work to encode,
    store and decode. Decoding ignores them where another writer wrote them.
    """

    file_id: str
    path: str
    """Relative to the table root."""
    prev_commit: str = "null"
    """Hudi's ``NULL_COMMIT``: a file's first version (Java compares stats by path and this)."""
    num_writes: int = 0
    num_deletes: int = 0
    num_update_writes: int = 0
    num_inserts: int = 0
    total_write_bytes: int = 0
    total_write_errors: int = 0
    partition_path: str = ""
    file_size_in_bytes: int = 0


class DeltaWriteStat(WriteStat, kw_only=True):
    """``HoodieDeltaWriteStat``: the write stat of a Merge-on-Read log file (a deltacommit's
    updates and deletes of one file group). ``prevCommit`` is the slice's base instant."""

    log_version: int = 1
    log_offset: int = 0
    base_file: str = ""
    """The slice's base file name ("" for a slice without one)."""
    log_files: list[str] = msgspec.field(default_factory=list)
    """The slice's log file names, this one included."""


class CommitMetadata(msgspec.Struct, rename="camel", omit_defaults=False, kw_only=True):
    """``HoodieCommitMetadata`` / ``HoodieReplaceCommitMetadata`` as JSON.

    ``partition_to_replace_file_ids`` is present only in replace commits (None otherwise);
    ``extra_metadata["schema"]`` holds the Avro schema of the rows as a JSON string.
    """

    partition_to_write_stats: dict[str, list[WriteStat]] = msgspec.field(default_factory=dict)
    compacted: bool = False
    extra_metadata: dict[str, str] = msgspec.field(default_factory=dict)
    operation_type: str = "UNKNOWN"
    partition_to_replace_file_ids: dict[str, list[str]] | None = None

    def write_stats(self) -> list[WriteStat]:
        """Every write stat, partition by partition."""
        return [s for stats in self.partition_to_write_stats.values() for s in stats]


_NO_REPLACE_TAIL = b',"partitionToReplaceFileIds":null}'
"""How a commit's (not a replace's) metadata JSON ends: the struct's last field, null."""


_EMPTY_STATS_HEAD = b'{"partitionToWriteStats":{}'
"""How a commit's metadata JSON without write stats starts (its first field, empty)."""


def encode_commit_metadata(meta: CommitMetadata, *, spliced: dict[str, list[bytes]] | None = None) -> bytes:
    """Compact JSON bytes of ``meta``; a commit (not replace) omits ``partitionToReplaceFileIds``.

    Compact, not indented as Hudi's Java writer does: JSON readers (Hudi's, hudi-rs, ours)
    ignore whitespace, and at 2,000 files the indented form is three times larger and ten
    times slower to write (``amcommit timeline`` shows instants readably).

    ``spliced``: each partition's write stats as the bodies of JSON arrays, already encoded
    (the task commits' own: :mod:`amcommit.table.format.writestats`); they replace
    ``meta.partition_to_write_stats``, copied as they are, and the whole document is built
    in one buffer (at 2,000 files it is ~0.6 MB: each extra copy of it costs page faults)."""
    if spliced is None:
        return _encoded(meta)
    rest = _encoded(msgspec.structs.replace(meta, partition_to_write_stats={}))
    assert rest.startswith(_EMPTY_STATS_HEAD), rest[:40]
    parts: list[bytes | memoryview] = [_EMPTY_STATS_HEAD[:-1]]
    for i, (partition, bodies) in enumerate(spliced.items()):
        parts += (b"," if i else b"", msgspec.json.encode(partition), b":[")
        for j, body in enumerate(bodies):
            if j:
                parts.append(b",")
            parts.append(body)
        parts.append(b"]")
    parts += (b"}", memoryview(rest)[len(_EMPTY_STATS_HEAD) :])
    return b"".join(parts)


def _encoded(meta: CommitMetadata) -> bytes:
    """Compact JSON of ``meta``, without ``partitionToReplaceFileIds`` unless it is a replace."""
    data = msgspec.json.encode(meta)
    if meta.partition_to_replace_file_ids is not None:
        return data
    if data.endswith(_NO_REPLACE_TAIL):  # the last field of the struct: cut it (one copy)
        return b"".join((memoryview(data)[: -len(_NO_REPLACE_TAIL)], b"}"))
    raw: dict[str, Any] = msgspec.json.decode(data)
    raw.pop("partitionToReplaceFileIds", None)
    return msgspec.json.encode(raw)


def decode_commit_metadata(data: bytes, *, where: str = "commit metadata") -> CommitMetadata:
    """Decode JSON commit metadata; raise :class:`ManifestError` naming ``where`` if malformed."""
    try:
        return msgspec.json.decode(data, type=CommitMetadata)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ManifestError(f"{where}: not valid Hudi commit metadata ({e})") from None
