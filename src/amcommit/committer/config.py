"""Committer configuration: typed, validated, and readable from Hadoop/Spark key names.

:meth:`CommitterConfig.from_mapping` accepts our names (``io_threads``), the same with
dashes or dots (``io-threads``), the ``spark.amcommit.`` prefix, and Hadoop's
``mapreduce.manifest.committer.*`` keys (also under ``spark.hadoop.``) where they mean the
same. Values may be strings (as Spark passes them). Unknown keys are an error that names
the key and suggests the closest known one. The conversion is the one of every typed option
set (:func:`amcommit.options.convert_options`, ``msgspec.convert(..., strict=False)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self, get_args

from amcommit.errors import ConfigError
from amcommit.options import Options, convert_options

ConflictMode = Literal["append", "fail", "replace", "overwrite"]
"""What job commit does with data already in the destination:

* ``append``: add the new files; a new file whose name exists already is a conflict
  (the commit fails and rolls back) unless ``delete_target_files`` is set;
* ``fail``: refuse (before touching anything) if any partition directory written to
  already holds files;
* ``replace``: dynamic partition overwrite: the partitions written are replaced, others
  kept;
* ``overwrite``: the whole destination is replaced.

In ``replace`` and ``overwrite`` the new files go in first and the old ones are removed
after, under the job-commit journal: the destination is never empty or missing.
"""

HADOOP_PREFIX = "mapreduce.manifest.committer."

DEFAULT_IO_THREADS = 128
"""``io_threads``' default; at this value renames follow the store's limiter (see there)."""

# Hadoop key (without prefix, or full) -> our field
HADOOP_KEYS: dict[str, str] = {
    "mapreduce.manifest.committer.io.threads": "io_threads",
    "mapreduce.manifest.committer.io.rate": "io_rate",
    "mapreduce.manifest.committer.validate.output": "validate_output",
    "mapreduce.manifest.committer.summary.report.directory": "summary_report_directory",
    "mapreduce.manifest.committer.cleanup.parallel.delete": "cleanup_parallel_delete",
    "mapreduce.manifest.committer.cleanup.parallel.delete.base.first": "cleanup_base_first",
    "mapreduce.manifest.committer.delete.target.files": "delete_target_files",
    "mapreduce.manifest.committer.manifest.save.attempts": "manifest_save_attempts",
    "mapreduce.manifest.committer.writer.queue.capacity": "load_queue_capacity",
    "mapreduce.fileoutputcommitter.cleanup.skipped": "cleanup_skipped",
    "mapreduce.fileoutputcommitter.cleanup-failures.ignored": "cleanup_failures_ignored",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs": "success_marker",
}


class CommitterConfig(Options, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every knob of the committer. Defaults suit cloud stores; see docs/configuration.md for tuning.
    A job kind's own settings are the kind's (a table's: its ``TableSettings``, and
    ``TableConfig``, which adds them to these).

    A frozen ``msgspec.Struct``: build it with keywords, :meth:`from_mapping` (strings and
    Hadoop's key names) or :meth:`with_options`; every way validates the values."""

    kind = "committer"

    io_threads: int = DEFAULT_IO_THREADS
    """Concurrent file operations (renames, deletes, mkdirs) during job commit. At the
    default (:data:`DEFAULT_IO_THREADS`), the renames made path by path follow the store's
    limiter instead: its in-flight limit now plus a headroom, never fewer than the default,
    never more than its ceiling (an HTTP store's adaptive limit: 1,024 requests), and,
    while the store's write gate binds (a cold GCS bucket), about as many as keep it busy
    (see :class:`~amcommit.committer.stages.rename_files.FollowGate`); any other value
    bounds the renames too."""
    io_rate: float | None = None
    """Upper bound on file operations started per second by one job commit (None: none);
    the store's own limiter adapts further to throttling."""
    rename_batch_size: int = 256
    """Renames per call on stores that rename in batches (see
    :class:`~amcommit.store.base.BatchRenamer`; a batch never spans manifests): local files
    rename a batch in one worker-thread hop instead of one coroutine per file; Azure Blob
    copies each file of a batch, then deletes their sources in one Blob Batch request per
    256. 1 renames file by file. Not used with ``io_rate``."""
    processes: int | None = None
    """Worker processes that rename the files of a plain job commit (each with its own
    event loop; :mod:`amcommit.committer.shard`). None (the default): what the machine's
    cores and the store's request ceiling allow
    (:func:`~amcommit.committer.shard.default_processes`): one on local files (the kernel
    serialises renames between directories: more processes are slower), one for a job of
    fewer than 20,000 files (starting a worker costs about a second of CPU), else as many as
    the cores, but no more than the store's ceiling keeps busy (an Azure account's 20,000
    requests/s; a cold GCS bucket's 1,000 writes/s keeps one process busy). 1 renames in
    the committing process. The coordinating process keeps the lock, the journal,
    directories, ``_SUCCESS`` and cleanup; the workers only rename, within one rate budget
    per account or bucket. A store that cannot be opened again in another process (one
    built with objects that do not pickle, or wrapped) renames in one process; so does a
    table's commit. A worker that dies fails the commit with
    :class:`~amcommit.errors.RenameWorkerFailed`, its journal kept (resume or abort)."""
    load_threads: int = 16
    """Manifests loaded concurrently (bounds memory: at most this many are decoded at once)."""
    load_queue_capacity: int = 64
    """Accepted for compatibility with Hadoop's ``writer.queue.capacity``; amcommit's
    loaders append to the spool directly, so nothing is queued."""
    conflict_mode: ConflictMode = "append"
    delete_target_files: bool = False
    """In ``append`` mode, replace existing files with the same name instead of failing
    (they are moved aside first and deleted after all renames: no moment without a file)."""
    validate_output: bool = False
    """After renaming, check every destination's size (and etag where a rename keeps it)."""
    summary_report_directory: str | None = None
    """URL of a directory where a ``summary-<jobId>.json`` report is written, also on failure."""
    success_marker: bool = True
    """Write the ``_SUCCESS`` JSON report."""
    success_filenames: int = 100
    """How many destination names the report lists."""
    cleanup_skipped: bool = False
    """Leave the job's temporary directory in place after commit (debugging)."""
    cleanup_failures_ignored: bool = False
    """A failed cleanup after a successful commit is logged in the report instead of
    raised (the output is complete either way; ``commit_job`` again finishes the cleanup)."""
    cleanup_parallel_delete: bool = True
    """Delete task attempt directories in parallel before deleting the job directory."""
    cleanup_base_first: bool = False
    """Try deleting the whole job directory at once first (fast on ADLS Gen2 / local)."""
    manifest_save_attempts: int = 5
    """Attempts to save a task manifest before the task commit fails."""
    rename_attempts: int = 8
    """Attempts per file operation on transient errors / throttling (decorrelated jitter)."""
    retry_base_delay: float = 0.05
    retry_max_delay: float = 5.0
    rollback_on_failure: bool = True
    """When a commit fails for a reason retrying cannot fix (conflict, changed source,
    bad manifest), roll back what was renamed before raising."""
    spool_dir: str | None = None
    """Local directory for the spool of rename entries (default: the system temp dir)."""
    destination_lock: bool = True
    """Serialise job commits and aborts into one destination with a lock object on the
    store (``$dest/_temporary/_commit.lock``, see :mod:`amcommit.committer.lock`). Turning
    it off is safe only if no two jobs ever commit into one destination at once."""
    lock_ttl: float = 60.0
    """Seconds a destination lock stays valid without a heartbeat (renewed every third of
    it). A holder that died is taken over this long after its last heartbeat was seen."""
    lock_wait: float = 600.0
    """Seconds a commit waits for another job's destination lock before failing with a
    ConflictError naming the holder."""
    lock_release: Literal["delete", "rewrite", "marker"] = "delete"
    """How a table's commit lock is released: ``delete`` (read, then delete it),
    ``rewrite`` (one conditional rewrite to a released state, which stays; the next commit
    acquires it by a conditional rewrite) or ``marker`` (a create-only marker named by the
    holder's token; the lock object changes once per commit, not twice:
    :mod:`amcommit.committer.lock`). Plain destinations always delete theirs (a committed
    output holds no ``_temporary``)."""

    def __post_init__(self) -> None:
        for name in (
            "io_threads",
            "rename_batch_size",
            "load_threads",
            "load_queue_capacity",
            "manifest_save_attempts",
            "rename_attempts",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"committer option {name!r} must be an integer >= 1")
        # (no message shows the value given: it may be a secret given to the wrong option)
        if self.io_rate is not None and not self.io_rate > 0:
            raise ConfigError(
                "committer option 'io_rate' must be a number > 0 (operations per second) or none"
            )
        if self.conflict_mode not in get_args(ConflictMode):
            raise ConfigError(
                f"committer option 'conflict_mode' must be one of {', '.join(get_args(ConflictMode))}"
            )
        if self.processes is not None and (
            not isinstance(self.processes, int) or isinstance(self.processes, bool) or self.processes < 1
        ):
            raise ConfigError("committer option 'processes' must be an integer >= 1 or none")
        if self.success_filenames < 0:
            raise ConfigError("committer option 'success_filenames' must be an integer >= 0")
        if not self.lock_ttl > 0:
            raise ConfigError("committer option 'lock_ttl' must be a number of seconds > 0")
        if not self.lock_wait >= 0:
            raise ConfigError("committer option 'lock_wait' must be a number of seconds >= 0")

    def with_options(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (our field names; values converted and checked)."""
        return convert_options(type(self), changes, base=self)

    @classmethod
    def from_mapping(
        cls,
        options: Mapping[str, Any],
        *,
        base: Self | None = None,
        ignore_unknown_prefixes: tuple[str, ...] = (),
    ) -> Self:
        """Build a config from a mapping of our or Hadoop's key names (see module doc).

        Keys starting with one of ``ignore_unknown_prefixes`` that are not ours are skipped
        (e.g. other ``spark.hadoop.`` settings); every other unknown key is a ConfigError.
        """
        known = cls.__struct_fields__
        selected: dict[str, Any] = {}
        for raw_key, raw in options.items():
            name = normalise_key(raw_key)
            if name is None or name not in known:
                if any(raw_key.startswith(p) for p in ignore_unknown_prefixes):
                    continue
            elif name == "io_rate" and raw_key.endswith("io.rate") and _is_zero(raw):
                raw = None  # Hadoop's io.rate 0 means "no limit"
            selected[raw_key] = raw
        return convert_options(
            cls,
            selected,
            base=base or cls(),
            normalise=normalise_key,
            aliases=HADOOP_KEYS,
        )


def normalise_key(key: str) -> str | None:
    """Our field name for ``key``, or None if it is not a committer key."""
    k = key.strip()
    for prefix in ("spark.hadoop.", "spark.amcommit.", "amcommit."):
        if k.startswith(prefix):
            k = k[len(prefix) :]
            break
    if k in HADOOP_KEYS:
        return HADOOP_KEYS[k]
    if k.startswith("mapreduce."):
        return None
    return k.replace("-", "_").replace(".", "_").lower()


def _is_zero(value: Any) -> bool:
    try:
        return float(str(value).strip()) == 0
    except ValueError:
        return False


DEFAULT_CONFIG = CommitterConfig()
