"""Write labels: exactly-once commits for streaming and other ingestion tools (issue 14).

A label ``(app_id, version)`` names one unit of input of one application: a Structured
Streaming query id and batch id, or an ingestion tool's application id and batch number. A
labelled table write carries it in its commit metadata (``extraMetadata``, three keys:
:data:`EXTRA_LABEL`, :data:`EXTRA_APP`, :data:`EXTRA_VERSION`), and the job commit accepts
each label once: under the table's commit lock, before anything is published, a write whose
label is already committed is rolled back instead (``JobReport.skipped_label``).

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
(:func:`amcommit.table.commit.run_table_commit`) is authoritative.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial

import msgspec

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.job import abort_with, finish_previous_job
from amcommit.errors import ConfigError, ManifestError, NotFound
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.retry import policies_of, retry_call
from amcommit.table.model import WRITE_ACTIONS, Instant
from amcommit.table.naming import HOODIE_DIR, TEMP_DIR
from amcommit.table.staging import table_layout
from amcommit.table.timeline import list_instants

__all__ = [
    "EXTRA_APP",
    "EXTRA_LABEL",
    "EXTRA_VERSION",
    "Label",
    "committed_by",
    "find_last",
    "label_metadata",
    "label_of",
    "last_committed",
    "newest_first",
    "pending_of",
    "recover",
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


def _decode_extra(data: bytes, where: str) -> dict[str, str]:
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
    store: Store, dest: str, app_id: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> tuple[int, str] | None:
    """(version, instant) of ``app_id``'s newest completed write instant, scanning the
    completed timeline newest first; None if ``app_id`` never committed (or ``dest`` holds
    no table yet). Cost: see the module doc. Reads only; each request retried per ``config``."""
    policy = policies_of(config)[0]
    try:
        instants = await retry_call(lambda: list_instants(store, dest), policy=policy)
    except NotFound:
        return None

    async def read_extra(i: Instant) -> Mapping[str, str]:
        path = join(dest, HOODIE_DIR, i.file_name)
        return _decode_extra(await retry_call(lambda: store.get(path), policy=policy), path)

    return await find_last(newest_first(instants), app_id, read_extra)


def covers(last: tuple[int, str] | None, label: Label) -> str | None:
    """Pure: the instant of ``last`` (an application's newest committed version) if it
    covers ``label`` (version >= label.version), else None."""
    if last is not None and last[0] >= label.version:
        return last[1]
    return None


async def committed_by(
    store: Store, dest: str, label: Label, *, config: CommitterConfig = DEFAULT_CONFIG
) -> str | None:
    """The instant that already committed ``label``, else None.

    A label counts as committed when ``label.app_id`` has a completed instant with version
    ``>= label.version`` (versions of one application commit in order, Delta's
    ``txnVersion`` rule); that instant (the application's newest) is returned. Cost: see the
    module doc. Advisory outside the commit lock (a concurrent commit may land right after).
    """
    return covers(await last_committed(store, dest, label.app_id, config=config), label)


async def pending_of(
    store: Store, dest: str, app_id: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> list[str]:
    """Unfinished writes a dead run of ``app_id`` may have left, sorted: instants with a
    staging folder (``.hoodie/.temp/<instant>/``) whose write carries a label of ``app_id``
    (in its job marker, ``begin_write(label=)``, or in its saved commit plan, a label given
    to ``commit_job`` only), and pending write instants with no staging folder at all (a
    rollback killed after removing the staging folder; no live writer is ever in that
    state: ``begin_write`` creates the staging folder first, a commit removes it only after
    publishing). Reads only."""
    from amcommit.paths import basename
    from amcommit.table.commit import PLAN_NAME
    from amcommit.table.naming import HOODIE_DIR, TEMP_DIR, is_instant
    from amcommit.table.write import read_marker

    policy = policies_of(config)[0]
    staged: list[str] = []
    try:
        async for info in store.list(join(dest, TEMP_DIR), recursive=False):
            if is_instant(basename(info.path)):
                staged.append(basename(info.path))
    except NotFound:
        return []
    try:
        instants = await retry_call(lambda: list_instants(store, dest), policy=policy)
    except NotFound:
        instants = []
    done = {i.time for i in instants if i.completed}
    out = {i.time for i in instants if i.action in WRITE_ACTIONS and i.time not in done} - set(staged)
    for t in staged:
        layout = table_layout(dest, t)
        try:
            marker = await retry_call(partial(read_marker, store, layout), policy=policy)
        except (NotFound, ManifestError):
            continue
        label = marker.label()
        if label is None:
            # the saved plan; once published by a rename (stores with atomic renames) it is
            # the completed instant itself: a leftover staging folder of a completed write
            plan_path = join(layout.job_dir, PLAN_NAME)
            paths = [plan_path] + [
                join(dest, HOODIE_DIR, i.file_name) for i in instants if i.time == t and i.completed
            ]
            for path in paths:
                try:
                    plan = await retry_call(partial(store.get, path), policy=policy)
                    label = label_of(_decode_extra(plan, path))
                    break
                except (NotFound, ManifestError):
                    label = None
        if label is not None and label.app_id == app_id:
            out.add(t)
    return sorted(out)


async def recover(
    store: Store, dest: str, app_id: str, *, config: CommitterConfig = DEFAULT_CONFIG
) -> list[str]:
    """Finish what a dead run of ``app_id`` left in the table: every write of
    :func:`pending_of` is aborted (``abort_job``: rolled back, or completed if its commit had
    passed its point of no return; its own lock is taken over at once). Returns those
    instants. Without it, a restarted run's next commit does the same, but only once the
    dead writer's heartbeat is older than ``writer_ttl`` (120 s by default). Then, if the
    table's commit lock is still held by a process provably dead on this host (a commit
    killed after it published, before it released the lock;
    :func:`~amcommit.liveness.proven_dead`), the lock is taken over and released (a
    half-done commit of its holder completed or rolled back first, as any taker does); a
    holder that may be alive, or runs on another host, is left alone.

    Call it once when a run of ``app_id`` starts, and only when no other run of ``app_id``
    is alive (one run per application id, as for a streaming query): it would roll back that
    run's write in progress (never a duplicate: that run's commit then fails).
    """
    from amcommit.table.kind import TableKind  # (table.kind imports this module)

    done = await pending_of(store, dest, app_id, config=config)
    for t in done:
        await abort_with(TableKind(), store, dest, t, config=config)
    await _release_dead_lock(store, dest, config)
    return done


async def _release_dead_lock(store: Store, dest: str, config: CommitterConfig) -> None:
    """Take over and release the table's lock if its holder is provably dead (see
    :func:`recover`). Atomic: the takeover is the lock's conditional write."""
    from amcommit.committer.lock import decode_lock, lock_path, run_locked
    from amcommit.liveness import proven_dead
    from amcommit.table.kind import TableKind  # (table.kind imports this module)

    path = lock_path(dest, staging=TEMP_DIR)
    try:
        body = decode_lock(await retry_call(partial(store.get, path), policy=policies_of(config)[0]))
    except NotFound:
        return
    if body is None or not proven_dead(body.process()):
        return

    async def nothing(_: Store) -> None:
        return None

    await run_locked(
        store,
        dest,
        "recover",
        config,
        nothing,
        operation="abort",
        finish_previous=lambda prev, s: finish_previous_job(TableKind(), s, dest, prev, config, None),
        staging=TEMP_DIR,
    )
