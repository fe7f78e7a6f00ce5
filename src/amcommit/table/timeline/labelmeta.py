"""Write labels, the low half: the label of a table write, its commit metadata (pure) and
the timeline's answer to "is this label committed?" (reads only). The high half, finishing
what a dead run left (:func:`amcommit.table.commit.labels.recover`), is :mod:`amcommit.table.commit.labels`,
which also re-exports everything here (its users' import path).

Write labels: exactly-once commits for streaming and other ingestion tools (issue 14).

A label ``(app_id, version)`` names one unit of input of one application: a Structured
Streaming query id and batch id, or an ingestion tool's application id and batch number. A
labelled table write carries it in its commit metadata (``extraMetadata``, three keys:
:data:`EXTRA_LABEL`, :data:`EXTRA_APP`, :data:`EXTRA_VERSION`), and the job commit accepts
each label once: under the table's commit lock, before anything is published, a write whose
label is already committed is rolled back instead (``TableReport.skipped_label``).

Semantics are Delta Lake's ``txnAppId``/``txnVersion``: an application commits its versions
in order, so a label counts as committed when its application has a completed write instant
with a version ``>=`` the label's. Only the newest instant of the application matters, so
:func:`last_committed` scans the completed timeline newest first and stops at the first
instant of the application.

Cost of one lookup: one listing of ``.hoodie/`` (not recursive; the instants are listed
anyway by every commit) plus one read of each completed write instant newer than the
application's newest one -- usually one or two reads while the application is the table's
(main) writer. An application that never committed into the table reads every completed
write instant once (its first commit). Only ``extraMetadata`` is decoded. Completed instants
are never removed by amcommit (clean deletes data files, not instants), so a label is never
forgotten.

Nothing here writes; :func:`last_committed` and :func:`committed_by` are safe to call at any
time (a caller may ask before doing the work), but only the check inside the commit lock
(:class:`amcommit.table.commit.table_commit.TablePlan`) is authoritative.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import msgspec

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.errors import ConfigError, ManifestError, NotFound
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.retry import RetryingStore
from amcommit.table.format.archive import ArchivedEntry
from amcommit.table.format.model import WRITE_ACTIONS, Instant
from amcommit.table.format.naming import HOODIE_DIR
from amcommit.table.timeline.archived import read_archive
from amcommit.table.timeline.instants import list_instants

__all__ = [
    "EXTRA_APP",
    "EXTRA_LABEL",
    "EXTRA_VERSION",
    "Label",
    "committed_by",
    "covers",
    "decode_extra",
    "find_last",
    "label_metadata",
    "label_of",
    "last_committed",
    "newest_first",
]

EXTRA_LABEL = "amcommit.label"
"""``extraMetadata`` key: :meth:`Label.text` (what ``amcommit timeline`` shows)."""
EXTRA_APP = "amcommit.label.app"
"""``extraMetadata`` key: the label's ``app_id``."""
EXTRA_VERSION = "amcommit.label.version"
"""``extraMetadata`` key: the label's ``version`` as a decimal string."""

MAX_APP_ID = 256


class Label(msgspec.Struct, frozen=True):
    """One unit of input of one application; committed at most once into a table.

    ``app_id``: non-empty, printable, at most 256 characters (a streaming query id, an
    ingestion tool's application id). ``version``: an integer >= 0 that grows with each unit
    the application commits (a batch id, a batch number). ConfigError if either is bad.
    """

    app_id: str
    version: int

    def __post_init__(self) -> None:
        if not isinstance(self.app_id, str) or not self.app_id:
            raise ConfigError(f"invalid label app id {self.app_id!r}: must be a non-empty string")
        if len(self.app_id) > MAX_APP_ID:
            raise ConfigError(
                f"invalid label app id {self.app_id[:40]!r}...: longer than {MAX_APP_ID} characters"
            )
        if not self.app_id.isprintable():
            raise ConfigError(f"invalid label app id {self.app_id!r}: must be printable")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            raise ConfigError(f"invalid label version {self.version!r}: must be an integer >= 0")

    def text(self) -> str:
        """``"<app_id>:<version>"``."""
        return f"{self.app_id}:{self.version}"


def label_metadata(label: Label) -> dict[str, str]:
    """The three ``extraMetadata`` entries of a labelled commit."""
    return {EXTRA_LABEL: label.text(), EXTRA_APP: label.app_id, EXTRA_VERSION: str(label.version)}


def label_of(extra: Mapping[str, str]) -> Label | None:
    """The label recorded in a commit's ``extraMetadata``; None if it has none (or a
    malformed one: such a commit was not written by amcommit's label code)."""
    app, version = extra.get(EXTRA_APP), extra.get(EXTRA_VERSION)
    if app is None or version is None or not version.isdigit():
        return None
    try:
        return Label(app, int(version))
    except ConfigError:
        return None


class _Extra(msgspec.Struct, rename="camel"):
    """The only part of commit metadata a label lookup decodes."""

    extra_metadata: dict[str, str] = msgspec.field(default_factory=dict)


def decode_extra(data: bytes, where: str) -> dict[str, str]:
    try:
        return msgspec.json.decode(data, type=_Extra).extra_metadata
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ManifestError(f"{where}: not valid Hudi commit metadata ({e})") from None


def newest_first(instants: Iterable[Instant]) -> list[Instant]:
    """Completed write instants (commits and replacecommits), newest first (pure)."""
    return sorted((i for i in instants if i.completed and i.action in WRITE_ACTIONS), reverse=True)


async def find_last(
    candidates: Iterable[Instant], app_id: str, read_extra: Callable[[Instant], Awaitable[Mapping[str, str]]]
) -> tuple[int, str] | None:
    """``(version, instant)`` of the first of ``candidates`` (newest first) labelled by
    ``app_id``; reads the metadata of the candidates up to that one only."""
    for i in candidates:
        label = label_of(await read_extra(i))
        if label is not None and label.app_id == app_id:
            return label.version, i.time
    return None


async def last_committed(
    store: Store,
    dest: str,
    app_id: str,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    instants: Sequence[Instant] | None = None,
) -> tuple[int, str] | None:
    """(version, instant) of ``app_id``'s newest completed write instant, scanning the
    completed timeline newest first; None if ``app_id`` never committed (or ``dest`` holds
    no table yet). Cost: see the module doc. Reads only; each request retried per ``config``."""
    rs = RetryingStore.of(store, config)
    if instants is None:
        try:
            instants = await list_instants(rs, dest)
        except NotFound:
            return None

    async def read_extra(i: Instant) -> Mapping[str, str]:
        path = join(dest, HOODIE_DIR, i.file_name)
        return decode_extra(await rs.get(path), path)

    found = await find_last(newest_first(instants), app_id, read_extra)
    if found is None:  # older than the active timeline? archival keeps labels readable
        found = last_archived(await read_archive(rs, dest, config=config), app_id)
    return found


def last_archived(entries: Sequence[ArchivedEntry], app_id: str) -> tuple[int, str] | None:
    """``(version, instant)`` of ``app_id``'s newest completed write among archived
    ``entries`` (:mod:`amcommit.table.timeline.archived`), None if none carries its label. Pure."""
    best: tuple[int, str] | None = None
    for e in entries:
        if e.commit is None or not e.instant.completed or e.instant.action not in WRITE_ACTIONS:
            continue
        label = label_of(e.commit.extra_metadata)
        if label is not None and label.app_id == app_id and (best is None or e.instant.time > best[1]):
            best = (label.version, e.instant.time)
    return best


def covers(last: tuple[int, str] | None, label: Label) -> str | None:
    """Pure: the instant of ``last`` (an application's newest committed version) if it
    covers ``label`` (version >= label.version), else None."""
    if last is not None and last[0] >= label.version:
        return last[1]
    return None


async def committed_by(
    store: Store,
    dest: str,
    label: Label,
    *,
    config: CommitterConfig = DEFAULT_CONFIG,
    instants: Sequence[Instant] | None = None,
) -> str | None:
    """The instant that already committed ``label``, else None.

    A label counts as committed when ``label.app_id`` has a completed instant with version
    ``>= label.version`` (versions of one application commit in order, Delta's
    ``txnVersion`` rule); that instant (the application's newest) is returned. Cost: see the
    module doc. Advisory outside the commit lock (a concurrent commit may land right after).
    ``instants``: the timeline's instant files as the caller listed them for this operation
    (not listed again); None: listed here.
    """
    return covers(await last_committed(store, dest, label.app_id, config=config, instants=instants), label)
