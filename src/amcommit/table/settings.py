"""The table kind's settings (:class:`TableSettings`) and the one option set that holds them
beside the engine's (:class:`TableConfig`).

The engine's :class:`~amcommit.committer.config.CommitterConfig` knows no table. A table
write's own settings (how long a writer's heartbeat stays fresh, the clean after each
commit) are :class:`TableSettings`, carried by the table's job kind
(:class:`~amcommit.table.commit.kind.TableKind`). Users give both in one set of options (``--conf
writer_ttl=...``, the Spark source's options, ``spark.amcommit.*``): :class:`TableConfig` is
``CommitterConfig`` plus the table's fields, read by the same
:meth:`~amcommit.committer.config.CommitterConfig.from_mapping`; :func:`table_settings` takes
the table's part of any config (a plain ``CommitterConfig`` has the defaults).

Pure: no I/O.
"""

from __future__ import annotations

import enum

from amcommit.committer.config import CommitterConfig
from amcommit.errors import ConfigError
from amcommit.options import Options

__all__ = ["DEFAULT_SETTINGS", "Placement", "TableConfig", "TableSettings", "table_settings"]


class Placement(enum.Enum):
    """Where a table write's tasks put their base files: decided once, from the
    ``table_commit`` setting (:attr:`TableSettings.placement`), and carried by the task
    (:class:`~amcommit.table.write.task.TableTask`, Spark's write and rewrite tasks). The
    job commit learns it from the manifests, never from a setting. (Merge-on-Read will add
    appends to log files.)"""

    STAGED = "staged"
    """In the task attempt directory; the job commit renames them into the table."""
    DIRECT = "direct"
    """At their final names, each after its Hudi marker (:mod:`amcommit.table.write.direct`)."""


TABLE_COMMITS = tuple(p.value for p in Placement)


def _check(
    writer_ttl: float,
    table_commit: str = "direct",
    compact_every: int = 5,
    compaction_target_io: float = 1.0,
    keep: tuple[int, int] = (30, 20),
) -> None:
    # (no message shows the value given: it may be a secret given to the wrong option)
    if isinstance(compact_every, bool) or not isinstance(compact_every, int) or compact_every < 0:
        raise ConfigError("committer option 'compact_every' must be an integer >= 0 (0: never)")
    if not compaction_target_io > 0:
        raise ConfigError("committer option 'compaction_target_io' must be a number of megabytes > 0")
    keep_max, keep_min = keep
    if isinstance(keep_min, bool) or not isinstance(keep_min, int) or keep_min < 1:
        raise ConfigError("committer option 'keep_min_commits' must be an integer >= 1")
    if isinstance(keep_max, bool) or not isinstance(keep_max, int) or keep_max <= keep_min:
        raise ConfigError("committer option 'keep_max_commits' must be an integer > keep_min_commits")
    if not writer_ttl > 0:
        raise ConfigError("committer option 'writer_ttl' must be a number of seconds > 0")
    if table_commit not in TABLE_COMMITS:
        raise ConfigError("committer option 'table_commit' must be 'staged' or 'direct'")


class TableSettings(Options, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A table write's own settings (the table kind carries them)."""

    kind = "committer"

    writer_ttl: float = 120.0
    """Seconds a writer's heartbeat (``.hoodie/.heartbeat/<instant>``) stays fresh. An
    earlier inflight instant whose heartbeat is older (or that never heartbeated and was
    allocated longer ago) belongs to a dead writer: the next commit rolls it back. A live
    writer must refresh it at least this often (:mod:`amcommit.table.timeline.heartbeat`)."""
    clean_retain_commits: int | None = None
    """After each commit, clean file groups replaced before the latest N commits
    (:func:`amcommit.table.commit.clean.clean_after_commit`; None: never; N >= 1)."""
    table_commit: str = "direct"
    """How a table write's tasks write base files (the Spark data source's batch writes,
    streaming sink and ``foreachBatch``/``write_batch``; the engine's table tasks,
    :func:`amcommit.table.write.task.setup_table_task`; upserts and deletes): ``"direct"`` (the
    default: straight to their final names under Hudi's direct markers
    ``.hoodie/.temp/<instant>/<partition>/<file>.marker.CREATE``; the job commit renames
    nothing, it deletes the files of attempts that did not win, then publishes:
    :mod:`amcommit.table.write.direct`) or ``"staged"`` (in the task attempt directory under
    ``.hoodie/.aux/amcommit/<instant>/``, each renamed into the table at job commit: the
    behaviour before issue 26). The job commit and a rollback recognise either from the
    manifests (a write mixing both is refused); this setting only matters to the tasks.

    Direct writes keep the guarantees of staged ones (the kill matrix on local files,
    Azure Blob, ADLS Gen2 and GCS; concurrent writers; labels and replays). What differs,
    and the case ``staged`` serves: a direct write's files sit at their final names from
    the task's upload on, stamped with an instant that is not completed. Table readers
    ignore them; readers that list files without the timeline see them while the write is
    in flight and until a failed write is rolled back (plain Parquet readers of the folder;
    Daft 0.7.26, measured). A task attempt still running after its write was decided (a
    zombie) removes its own late upload, and a later commit, clean or rollback removes
    what it left (:mod:`amcommit.table.write.direct`: the window that remains), where a staged
    zombie's files never leave its attempt directory."""
    compact_every: int = 5
    """Inline compaction of a Merge-on-Read table: after a deltacommit commits, once this
    many deltacommits completed since the latest compaction, the writer compacts the table
    (:func:`amcommit.table.commit.compaction.compact_if_due`; Hudi's
    ``hoodie.compact.inline.max.delta.commits``, default 5; 0: never). Copy-on-Write tables
    are never compacted."""
    compaction_target_io: float = 512000.0
    """Megabytes of IO (reads and writes) one compaction plans at most (Hudi's
    ``hoodie.compaction.target.io``, default 500 GB); the file slices with the most log bytes
    go first (:mod:`amcommit.table.commit.compaction_plan`)."""

    archive: bool = True
    """After each commit, archive the timeline as Hudi does (``hoodie.archive.automatic``):
    once it holds more than ``keep_max_commits`` completed writes, the oldest are moved
    into ``.hoodie/archived/`` until ``keep_min_commits`` remain
    (:mod:`amcommit.table.commit.archive`)."""
    keep_max_commits: int = 30
    """Hudi's ``hoodie.keep.max.commits``: archive once more completed writes are active."""
    keep_min_commits: int = 20
    """Hudi's ``hoodie.keep.min.commits``: the completed writes an archival keeps active."""

    def __post_init__(self) -> None:
        _check(
            self.writer_ttl,
            self.table_commit,
            self.compact_every,
            self.compaction_target_io,
            (self.keep_max_commits, self.keep_min_commits),
        )

    @property
    def placement(self) -> Placement:
        """The :class:`Placement` of the tasks' base files (``table_commit``): THE place
        where that setting is read."""
        return Placement(self.table_commit)


DEFAULT_SETTINGS = TableSettings()


class TableConfig(CommitterConfig, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The engine's :class:`~amcommit.committer.config.CommitterConfig` plus the table's
    :class:`TableSettings` fields, in one option set: what the CLI (``--conf``) and the Spark
    source read, and what Python callers build to set a table's settings
    (``TableConfig(writer_ttl=30, io_threads=64)``). Its fields are those of both types
    (tests/unit/test_layering.py checks that they stay in step)."""

    writer_ttl: float = DEFAULT_SETTINGS.writer_ttl
    """:attr:`TableSettings.writer_ttl`."""
    clean_retain_commits: int | None = DEFAULT_SETTINGS.clean_retain_commits
    """:attr:`TableSettings.clean_retain_commits`."""
    table_commit: str = DEFAULT_SETTINGS.table_commit
    """:attr:`TableSettings.table_commit`."""
    compact_every: int = DEFAULT_SETTINGS.compact_every
    """:attr:`TableSettings.compact_every`."""
    compaction_target_io: float = DEFAULT_SETTINGS.compaction_target_io
    """:attr:`TableSettings.compaction_target_io`."""

    archive: bool = DEFAULT_SETTINGS.archive
    """:attr:`TableSettings.archive`."""
    keep_max_commits: int = DEFAULT_SETTINGS.keep_max_commits
    """:attr:`TableSettings.keep_max_commits`."""
    keep_min_commits: int = DEFAULT_SETTINGS.keep_min_commits
    """:attr:`TableSettings.keep_min_commits`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(
            self.writer_ttl,
            self.table_commit,
            self.compact_every,
            self.compaction_target_io,
            (self.keep_max_commits, self.keep_min_commits),
        )

    def settings(self) -> TableSettings:
        """The table's part of this config."""
        return TableSettings(
            writer_ttl=self.writer_ttl,
            clean_retain_commits=self.clean_retain_commits,
            table_commit=self.table_commit,
            compact_every=self.compact_every,
            compaction_target_io=self.compaction_target_io,
            archive=self.archive,
            keep_max_commits=self.keep_max_commits,
            keep_min_commits=self.keep_min_commits,
        )


def table_settings(config: CommitterConfig) -> TableSettings:
    """The table's settings given with ``config``: a :class:`TableConfig`'s own, else the
    defaults (a plain ``CommitterConfig`` holds none)."""
    return config.settings() if isinstance(config, TableConfig) else DEFAULT_SETTINGS
