"""Write options of ``df.write.format("amcommit")``: parsing and validation (no pyspark import).

Everything is checked on the driver in ``DataSource.writer()``, before any task runs, and
turned into a :class:`WritePlan`: a small picklable value that every task and the job
commit receive (the writer object is pickled once, after ``writer()``).

Option names are case-insensitive (Spark lowercases them). Three families, plus test hooks:

* writer options (:data:`WRITER_OPTIONS`): ``partitionBy``, ``compression``,
  ``partitionOverwriteMode``, ``maxRecordsPerFile``, row-group and file sizes, ``format``;
* store options: the options of the destination's backend
  (:mod:`amcommit.store.options`: ``endpoint``, ``account``, ``account_key``, ``sas_token``,
  ``connection_string``, ``token``, ``use_move``, ...), by name or as ``store.<name>``;
  converted and checked on the driver by the backend's struct; their values never appear
  in messages, logs or reprs;
* committer options: every key :meth:`CommitterConfig.from_mapping` accepts (``io_threads``,
  ``spark.amcommit.io_threads``, ``mapreduce.manifest.committer.io.threads``, ...).

Spark conf (``spark.amcommit.<option>`` and Hadoop's
``spark.hadoop.mapreduce.manifest.committer.*``) provides defaults when the source was
registered with :func:`amcommit.spark.register` (Python data sources do not see the session
conf themselves); a store option in the session conf that the destination's backend does
not take (e.g. a GCS option for a local write) is skipped. Anything else unknown is an error
naming the key and the closest known one. All conversion goes through
:func:`amcommit.options.convert_options`.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from msgspec import Meta

from amcommit.committer.config import HADOOP_KEYS, ConflictMode, normalise_key
from amcommit.errors import AmcommitError, ConfigError
from amcommit.options import _NAME_LIKE, Options, convert_options, show_key, suggest
from amcommit.redact import redact_url
from amcommit.store.options import ALL_STORE_OPTIONS
from amcommit.store.schemes import (
    convert_store_options,
    normalise_store_key,
    parse_location,
    store_options_type,
)
from amcommit.table.settings import TableConfig

SOURCE_NAME = "amcommit"

MiB = 1024 * 1024

WRITER_OPTIONS: dict[str, str] = {
    "path": "destination URL (set by save(url))",
    "format": "file format: parquet (the only one)",
    "partitionby": "comma-separated partition columns (Hive-style directories)",
    "compression": "snappy (default), zstd, gzip, lz4, brotli, none",
    "compressionlevel": "codec level (zstd, gzip, brotli)",
    "partitionoverwritemode": "static (default: replace everything) or dynamic (replace written partitions)",
    "maxrecordsperfile": "roll to a new file after this many rows (0: no limit)",
    "rowgrouprows": "rows per Parquet row group (default 1048576)",
    "rowgroupbytes": "in-memory bytes per row group (default 128 MiB)",
    "maxfilebytes": "roll to a new file past this size (default: none local, 256 MiB remote)",
    "maxopenfiles": "open files per task before the least recently used is closed (default 100)",
    "tableformat": "hudi: write an Apache Hudi Copy-on-Write table (an instant per write)",
    "tablename": "the table's name on its first write (default: the last path segment)",
    "recordkey": "record key column(s), comma-separated (default: a generated key per row)",
    "allowmissingcolumns": "true: a table write may leave out columns of the table (they read as null "
    "for its rows; default false: refused)",
}
"""Writer options (lowercase) and what they mean."""

WRITER_ALIASES: dict[str, str] = {"hoodie.write.set.null.for.missing.columns": "allowmissingcolumns"}
"""Hudi's names of writer options (lowercase) -> ours."""


class WriterOptions(Options, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The writer options of one write, typed (names lowercase, as Spark passes them)."""

    kind = "writer"

    path: str = ""
    format: str = "parquet"
    partitionby: str = ""
    compression: str = "snappy"
    compressionlevel: Annotated[int, Meta(ge=-100)] | None = None
    partitionoverwritemode: str = "static"
    maxrecordsperfile: Annotated[int, Meta(ge=0)] = 0
    rowgrouprows: Annotated[int, Meta(ge=1)] = 1024 * 1024
    rowgroupbytes: Annotated[int, Meta(ge=1)] = 128 * MiB
    maxfilebytes: Annotated[int, Meta(ge=0)] | None = None
    """None: 256 MiB for cloud destinations, no limit for local ones."""
    maxopenfiles: Annotated[int, Meta(ge=1)] = 100
    tableformat: str = ""
    tablename: str = ""
    recordkey: str = ""
    allowmissingcolumns: bool = False


TABLE_FORMATS = frozenset({"hudi"})
"""Values of the ``tableFormat`` option."""


@dataclass(frozen=True)
class TablePlan:
    """The table part of a write into an Apache Hudi table (see :mod:`amcommit.table`).

    ``instant`` and ``operation`` are set on the driver by ``writer()`` once the instant
    is allocated (``begin_write``), before the plan is pickled to the tasks; ``new`` says
    whether the destination held no table yet (then ``name`` and the key fields create it).
    """

    name: str
    record_key_fields: tuple[str, ...] = ()
    """Record key columns; () = a generated unique key per row."""
    new: bool = True
    instant: str = ""
    operation: str = ""
    """The :class:`~amcommit.table.format.model.Operation` planned from the save mode (an
    overwrite left to the session's ``partitionOverwriteMode`` is settled at job commit)."""
    allow_missing_columns: bool = False
    """The write may leave out columns of the table (``allowMissingColumns``, Hudi's
    ``hoodie.write.set.null.for.missing.columns``); refused otherwise."""


STORE_PREFIX = "store."
"""Store options may also be given as ``store.<name>``."""

SPARK_CONF_PREFIX = "spark.amcommit."
_SPARK_HADOOP_PREFIX = "spark.hadoop."

COMPRESSIONS: dict[str, str | None] = {
    "snappy": "snappy",
    "zstd": "zstd",
    "gzip": "gzip",
    "lz4": "lz4",
    "lz4_raw": "lz4",
    "brotli": "brotli",
    "none": None,
    "uncompressed": None,
}

PARTITION_TYPES = frozenset(
    {
        "StringType",
        "VarcharType",
        "CharType",
        "IntegerType",
        "LongType",
        "ShortType",
        "ByteType",
        "BooleanType",
        "DateType",
        "TimestampType",
        "TimestampNTZType",
        "DecimalType",
        "DoubleType",
        "FloatType",
    }
)
"""Spark types usable as partition columns (their values become directory names)."""

_COMMITTER_FIELDS = frozenset(TableConfig.__struct_fields__)  # the engine's and the table's
_ANY_STORE_FIELDS = frozenset(name for t in ALL_STORE_OPTIONS for name in t.__struct_fields__)


class Schema(Protocol):
    """The parts of ``pyspark.sql.types.StructType`` used here."""

    @property
    def fields(self) -> list[Any]: ...


@dataclass(frozen=True)
class WritePlan:
    """Everything a task and the job commit need to know about one write. Picklable.

    ``store_options`` hold credentials: they are excluded from ``repr`` and never logged.
    """

    url: str
    job_id: str
    overwrite: bool
    conflict_mode: ConflictMode
    partition_columns: tuple[str, ...]
    """The DataFrame's partition columns (schema names, as the rows carry them)."""
    data_columns: tuple[str, ...]
    data_schema_json: str
    """Spark schema (JSON) of the columns stored in the files (partition columns excluded)."""
    compression: str | None = "snappy"
    compression_level: int | None = None
    row_group_rows: int = 1024 * 1024
    row_group_bytes: int = 128 * MiB
    max_records_per_file: int = 0
    max_file_bytes: int = 0
    max_open_files: int = 100
    committer_options: dict[str, Any] = field(default_factory=dict)
    store_options: dict[str, Any] = field(default_factory=dict, repr=False)
    remote: bool = False
    """True unless the destination is a local path (then Parquet is written in place)."""
    spark_version: str = ""
    partition_dir_names: tuple[str, ...] = ()
    """The partition columns as ``partitionBy`` spelled them: the directory names
    (``DAY=...`` for ``partitionBy=DAY`` on a column ``day``, as Spark's own writer names
    them); empty means ``partition_columns``."""
    explicit: frozenset[str] = frozenset()
    """Writer options given (lowercase; ``conflict_mode`` too if given): they beat the
    session's SQL settings (:mod:`amcommit.spark.sqlconf`)."""
    table: TablePlan | None = None
    """Set for a write into an Apache Hudi table (``tableFormat=hudi``, or a destination
    that already holds one): the job id is then the instant. Partition columns are kept in
    the files (Hudi's default) and the five meta columns lead every file."""

    def table_operation(self) -> str:
        """The operation the table write was begun with ("" for a plain write)."""
        return self.table.operation if self.table is not None else ""

    def config(self) -> TableConfig:
        """The committer configuration (conflict mode decided by the save mode), with the
        table's settings (:class:`~amcommit.table.settings.TableConfig`)."""
        return TableConfig.from_mapping(self.committer_options).with_options(conflict_mode=self.conflict_mode)

    def file_name(self, partition: int, n: int) -> str:
        """``part-<partition:05d>-<jobId>-<n:03d>.parquet``: unique per job, task and file."""
        return f"part-{partition:05d}-{self.job_id}-{n:03d}.parquet"


def new_job_id() -> str:
    """A fresh job id: UTC time plus 48 random bits (unique per write, valid path segment)."""
    return time.strftime("%Y%m%d%H%M%S", time.gmtime()) + "_" + uuid.uuid4().hex[:12]


def _suggest(key: str, known: list[str]) -> str:
    return suggest(key, known)


def session_defaults(conf: Mapping[str, str]) -> dict[str, str]:
    """The options a Spark conf contributes: ``spark.amcommit.<option>`` (any option) and
    Hadoop's committer keys under ``spark.hadoop.`` (other ``spark.hadoop.`` keys are for
    other writers and are ignored)."""
    out: dict[str, str] = {}
    for k, v in conf.items():
        if k.startswith(SPARK_CONF_PREFIX):
            out[k[len(SPARK_CONF_PREFIX) :].lower()] = v
        elif k.startswith(_SPARK_HADOOP_PREFIX) and k[len(_SPARK_HADOOP_PREFIX) :] in HADOOP_KEYS:
            out[k[len(_SPARK_HADOOP_PREFIX) :]] = v
    return out


def build_plan(
    options: Mapping[str, Any],
    schema: Schema,
    overwrite: bool,
    *,
    session_conf: Mapping[str, str] | None = None,
    job_id: str | None = None,
    spark_version: str = "",
    existing_table: bool = False,
    table_options_checked: bool = True,
) -> WritePlan:
    """Validate the write options against ``schema`` and make the plan of this write.

    ``existing_table``: the destination already holds a Hudi table (its
    ``.hoodie/hoodie.properties`` exists), so the write continues its timeline even without
    ``tableFormat``. ``table_options_checked=False``: ``tableName`` / ``recordKey`` without
    ``tableFormat`` are left for the caller to judge once it knows whether the destination
    holds a table (:func:`check_table_options`).

    Raises :class:`~amcommit.errors.ConfigError` with a one-line message naming the bad
    option (never its value if it is a store option) on any problem.
    """
    merged: dict[str, Any] = dict(session_defaults(session_conf or {}))
    from amcommit.table.format.hudi_names import resolve, spark_table_type

    explicit = {
        str(k).lower(): v for k, v in resolve({str(k): v for k, v in options.items()}, "spark").items()
    }
    spark_table_type(explicit)
    if any(str(k).lower().startswith("hoodie.") for k in options):
        explicit.setdefault("tableformat", "hudi")  # Hudi's names: a Hudi table write
    op = explicit.pop("operation", None)  # Hudi's insert / bulk_insert: what format("amcommit") writes
    if op is not None and str(op).strip().lower() not in ("insert", "bulk_insert"):
        raise ConfigError(
            f"option operation={str(op).strip().lower()!r}: format('amcommit') writes inserts; "
            "use amcommit.spark.upsert or amcommit.spark.delete"
        )
    merged.update(explicit)

    url = str(merged.get("path") or "").strip()
    if not url:
        raise ConfigError(f"no destination: use df.write.format({SOURCE_NAME!r}).save(url)")
    try:
        parsed = parse_location(url)
        store_type = store_options_type(parsed.scheme)
    except AmcommitError as e:
        raise ConfigError(f"bad destination URL {redact_url(url)!r}: {e}") from None
    store_fields = store_type.__struct_fields__

    writer: dict[str, Any] = {}
    store: dict[str, Any] = {}
    committer: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in merged.items():
        key = WRITER_ALIASES.get(key, key)
        if key in WRITER_OPTIONS:
            writer[key] = value
        elif key.startswith(STORE_PREFIX) and len(key) > len(STORE_PREFIX):
            store[key[len(STORE_PREFIX) :]] = value  # checked below, with "did you mean"
        elif normalise_store_key(key) in store_fields:
            store[key] = value
        elif normalise_store_key(key) in _ANY_STORE_FIELDS:
            if key in explicit:  # an option of another backend
                raise ConfigError(
                    f"store option {key!r} does not apply to {parsed.scheme}:// destinations "
                    f"({store_type.kind} options: {', '.join(store_fields)})"
                )
            continue  # a session default meant for other destinations
        else:
            field_name = normalise_key(key)
            if field_name is not None and field_name in _COMMITTER_FIELDS:
                committer[key] = value
            else:
                unknown.append(key)
    if unknown:
        known = [*WRITER_OPTIONS, *store_fields, *sorted(_COMMITTER_FIELDS), *HADOOP_KEYS]
        key = sorted(unknown)[0]
        raise ConfigError(
            f"unknown option {show_key(key)} for format {SOURCE_NAME!r}{_suggest(key, known)} "
            f"(writer options: {', '.join(sorted(WRITER_OPTIONS))}; store options of "
            f"{parsed.scheme}://: {', '.join(store_fields)}, also as store.<name>; committer "
            "options: see CommitterConfig, also as mapreduce.manifest.committer.*)"
        )
    store_options = convert_store_options(store_type, store).given()
    w = convert_options(WriterOptions, writer)

    fmt = w.format.lower()
    if fmt != "parquet":
        raise ConfigError("option 'format' must be parquet: amcommit writes parquet only")

    comp_name = w.compression.lower()
    if comp_name not in COMPRESSIONS:
        raise ConfigError(f"option 'compression' must be one of {', '.join(sorted(COMPRESSIONS))}")

    # --- partition columns -----------------------------------------------------------------
    all_fields = list(schema.fields)
    by_lower = {f.name.lower(): f for f in all_fields}
    parts: list[str] = []
    given: list[str] = []
    for raw in w.partitionby.split(","):
        name = raw.strip().strip("`")
        if not name:
            continue
        f = by_lower.get(name.lower())
        if f is None:  # (the value given is not shown: it may be anything, a secret too)
            raise ConfigError(
                f"option 'partitionBy' must name columns of the DataFrame "
                f"({', '.join(x.name for x in all_fields)}): its {_ordinal(len(given) + 1)}{_named(name)} is none of them"
                f"{_suggest(name, [x.name for x in all_fields])}"
            )
        if f.name in parts:
            raise ConfigError(f"partition column {f.name!r} is listed twice in partitionBy")
        tname = type(f.dataType).__name__
        if tname not in PARTITION_TYPES:
            raise ConfigError(
                f"partition column {f.name!r} has type {f.dataType.simpleString()}, "
                "which cannot be a partition value (use strings, numbers, booleans, dates or timestamps)"
            )
        parts.append(f.name)
        given.append(name)
    table = _table_plan(w, all_fields, url, existing_table, table_options_checked)
    # a table keeps its partition columns in the files (Hudi's default; its readers take
    # column values from the files)
    data_fields = all_fields if table is not None else [f for f in all_fields if f.name not in parts]
    if parts and not [f for f in all_fields if f.name not in parts]:
        raise ConfigError("every column is a partition column: at least one data column must remain")
    if not all_fields:
        raise ConfigError("the DataFrame has no columns")
    data_schema_json = json.dumps(
        {"type": "struct", "fields": [f.jsonValue() for f in data_fields]}, separators=(",", ":")
    )

    # --- save mode -> conflict mode ----------------------------------------------------------
    pom = w.partitionoverwritemode.lower()
    if pom not in ("static", "dynamic"):
        raise ConfigError("option 'partitionOverwriteMode' must be static or dynamic")
    try:
        base = TableConfig.from_mapping(committer)
    except ConfigError as e:
        raise ConfigError(f"bad committer option: {e}") from None
    explicit_mode = any(normalise_key(k) == "conflict_mode" for k in committer)
    mode: ConflictMode
    if overwrite:
        mode = "replace" if pom == "dynamic" else "overwrite"
        if explicit_mode and base.conflict_mode != mode:
            raise ConfigError(
                f"conflict_mode {base.conflict_mode!r} contradicts mode('overwrite') "
                f"(which uses {mode!r}; set partitionOverwriteMode=dynamic for 'replace')"
            )
    else:
        if base.conflict_mode in ("replace", "overwrite"):
            raise ConfigError(
                f"conflict_mode {base.conflict_mode!r} needs mode('overwrite') "
                "(with partitionOverwriteMode=dynamic for 'replace')"
            )
        mode = base.conflict_mode

    remote = parsed.scheme != "file"
    if not remote:
        url = "/" + parsed.path  # resolved on the driver: executors may have another cwd
    max_file_bytes_default = 256 * MiB if remote else 0
    return WritePlan(
        url=url,
        job_id=job_id or new_job_id(),
        overwrite=overwrite,
        conflict_mode=mode,
        partition_columns=tuple(parts),
        partition_dir_names=tuple(given),
        data_columns=tuple(f.name for f in data_fields),
        data_schema_json=data_schema_json,
        compression=COMPRESSIONS[comp_name],
        compression_level=w.compressionlevel,
        row_group_rows=w.rowgrouprows,
        row_group_bytes=w.rowgroupbytes,
        max_records_per_file=w.maxrecordsperfile,
        max_file_bytes=max_file_bytes_default if w.maxfilebytes is None else w.maxfilebytes,
        max_open_files=w.maxopenfiles,
        committer_options=committer,
        store_options=store_options,
        remote=remote,
        spark_version=spark_version,
        explicit=frozenset(writer) | ({"conflict_mode"} if explicit_mode else frozenset()),
        table=table,
    )


def check_table_options(plan: WritePlan) -> None:
    """ConfigError if a plain write (no table at the destination, no ``tableFormat``) was
    given table options. Pure."""
    if plan.table is not None:
        return
    for name in ("tableName", "recordKey", "allowMissingColumns"):
        if name.lower() in plan.explicit:
            raise ConfigError(
                f"option {name!r} needs option('tableFormat', 'hudi') (the destination holds no table)"
            )


def _table_plan(
    w: WriterOptions, fields: list[Any], url: str, existing: bool, check: bool = True
) -> TablePlan | None:
    """The table part of the plan, or None for a plain destination. Pure."""
    fmt = w.tableformat.strip().lower()
    if fmt and fmt not in TABLE_FORMATS:
        raise ConfigError(f"option 'tableFormat' must be one of {', '.join(sorted(TABLE_FORMATS))}")
    if not fmt and not existing:
        for name, value in (
            ("tableName", w.tablename),
            ("recordKey", w.recordkey),
            ("allowMissingColumns", "x" if w.allowmissingcolumns else ""),
        ):
            if value.strip() and check:
                raise ConfigError(
                    f"option {name!r} needs option('tableFormat', 'hudi') (the destination holds no table)"
                )
        return None
    name = w.tablename.strip() or default_table_name(url)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", name):
        raise ConfigError(
            "option 'tableName' must be letters, digits, '_' and '-' only, not starting with a digit"
        )
    by_lower = {f.name.lower(): f for f in fields}
    keys: list[str] = []
    for raw in w.recordkey.split(","):
        key = raw.strip().strip("`")
        if not key:
            continue
        f = by_lower.get(key.lower())
        if f is None:  # (the value given is not shown: it may be anything, a secret too)
            names = [x.name for x in fields]
            raise ConfigError(
                f"option 'recordKey' must name columns of the DataFrame ({', '.join(names)}): its "
                f"{_ordinal(len(keys) + 1)}{_named(key)} is none of them{suggest(key, names)}"
            )
        if f.name in keys:
            raise ConfigError(f"recordKey column {f.name!r} is listed twice")
        if type(f.dataType).__name__ not in KEY_TYPES:
            raise ConfigError(
                f"recordKey column {f.name!r} has type {f.dataType.simpleString()}, which cannot be a record key "
                "(use strings, integers, booleans, dates or decimals)"
            )
        keys.append(f.name)
    return TablePlan(
        name=name,
        record_key_fields=tuple(keys),
        new=not existing,
        allow_missing_columns=w.allowmissingcolumns,
    )


def _named(name: str) -> str:
    """`` 'name'`` for a message if ``name`` looks like a column name, else ``""`` (a value
    given to the wrong option may be a secret: it is not shown)."""
    return f" {name!r}" if _NAME_LIKE.fullmatch(name) else ""


def _ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ... ``11th``, ``21st``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix} column"


KEY_TYPES = PARTITION_TYPES - {"TimestampType", "TimestampNTZType", "DoubleType", "FloatType"}
"""Spark types usable as record key columns: the partition column types, except timestamps and
floating point (their string forms are not stable keys)."""


def default_table_name(url: str) -> str:
    """The last path segment of ``url`` as a table name (``-`` and other characters Hudi
    table names avoid become ``_``); ``table`` if nothing usable is left."""
    seg = url.rstrip("/").rsplit("/", 1)[-1]
    name = re.sub(r"[^A-Za-z0-9_]", "_", seg)
    if not name or name[0].isdigit():
        name = "t_" + name if name else "table"
    return name


__all__ = [
    "SOURCE_NAME",
    "STORE_PREFIX",
    "WRITER_OPTIONS",
    "TablePlan",
    "WritePlan",
    "WriterOptions",
    "build_plan",
    "check_table_options",
    "default_table_name",
    "new_job_id",
    "session_defaults",
]
