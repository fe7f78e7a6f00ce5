"""Parquet writing for one task: Arrow batches in, Hive-style partitioned files out.

Batches are split by the partition columns (Hive-style ``col=value`` directories, values
escaped as Spark escapes them, nulls as ``__HIVE_DEFAULT_PARTITION__``), buffered per
partition and written as row groups of ``row_group_rows`` rows / ``row_group_bytes`` bytes
(not one row group per Arrow batch). All buffers together stay below ``buffer_bytes``: past
it the largest buffer is written out early. At most ``max_open_files`` files are open; the
least recently used one is finished first. ``max_records_per_file`` and ``max_file_bytes``
roll to a new file. A Hudi table's files (``meta`` set) carry Hudi's footer index: the key range
and bloom filter of their ``_hoodie_record_key`` values (:func:`amcommit.table.format.bloom.build_footer`).

Files are written to ``local_path(rel)`` and handed to ``on_closed(rel, local_path)`` once
complete (the task uploads them there for cloud stores; for local destinations the local
path *is* the task attempt directory). Nothing here is atomic: the files sit in the task
attempt's private directory until the job commit renames them.

Why not ``pyarrow.dataset.write_dataset`` (evaluated with pyarrow 26, issue 12): it covers
partitioning, open-file limits, row-group sizes and ``max_rows_per_file``, but

* Hive partition folders are escaped by RFC 3986 (``segment_encoding="uri"``: ``p=a b``
  becomes ``p=a%20b``; Spark writes ``p=a b`` and escapes only its own set, see
  :func:`escape_path_name`), or not at all (``"none"``: a ``/`` in a value makes a folder);
* it names the files itself (``basename_template``) and splits them by row count only, so a
  row cannot know its file: Hudi's ``_hoodie_file_name`` and ``_hoodie_commit_seqno`` meta
  columns must name the file the row lands in;
* no roll by bytes (``max_file_bytes``) and no memory bound in bytes (``buffer_bytes``);
* one dictionary-encoding choice for all files, decided before any data is seen, where
  parquet-mr decides per column and file (:func:`dictionary_columns`: the size parity with
  Spark's own files).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from amcommit.paths import join
from amcommit.table.format.bloom import build_footer
from amcommit.table.format.keys import (
    HIVE_DEFAULT_PARTITION,
    RecordKeyError,
    escape_path_name,
    partition_dir,
    partition_value,
    record_keys,
)

SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"
SPARK_VERSION_KEY = b"org.apache.spark.version"


PAGE_ROWS = 20_000
"""parquet-mr's ``parquet.page.row.count.limit``: rows in a data page at most."""
PAGE_BYTES = 1024 * 1024
"""parquet-mr's ``parquet.page.size`` (and pyarrow's default data page size)."""
DICTIONARY_PAGE_BYTES = 1024 * 1024
"""parquet-mr's ``parquet.dictionary.page.size``: past it a column chunk falls back to plain."""


def _plain_sizes(arr: pa.Array, int96: bool = False) -> tuple[pa.Array, int] | None:
    """Dictionary-entry bytes of each non-null value of a top-level column, and the bytes
    parquet-mr adds per value when it counts the plain size (4 for fixed-length binaries:
    INT96 timestamps, decimals past 18 digits, which it sizes as length-prefixed); None
    when the column is not a flat primitive one (nested, boolean, null: left to pyarrow).
    Fixed-length binaries are handled by the caller."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = arr.type
    if (
        pa.types.is_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_string(t)
        or pa.types.is_large_binary(t)
    ):
        return pc.add(pc.binary_length(arr.drop_null()), 4), 0
    count = len(arr) - arr.null_count
    if pa.types.is_boolean(t) or pa.types.is_null(t) or pa.types.is_nested(t):
        return None
    extra = 0
    if pa.types.is_decimal(t):
        width = 4 if t.precision <= 9 else 8
    elif pa.types.is_timestamp(t) and int96:
        width, extra = 12, 4
    elif pa.types.is_timestamp(t) or pa.types.is_date64(t):
        width = 8
    elif t.bit_width <= 32:
        width = 4
    else:
        width = 8
    return pa.repeat(width, count), extra


def _fixed_len_binary(t: pa.DataType) -> bool:
    """Whether ``t`` is written as FIXED_LEN_BYTE_ARRAY (with integer-stored decimals)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_fixed_size_binary(t) or (pa.types.is_decimal(t) and t.precision > 18))


def dictionary_pays(arr: pa.Array, *, int96: bool = False) -> bool:
    """Whether parquet-mr (Spark's native writer) keeps dictionary encoding for a column
    chunk starting with ``arr``: it checks at the end of the first page (at most
    :data:`PAGE_ROWS` rows and about :data:`PAGE_BYTES` of plain values) that dictionary
    plus bit-packed indices are smaller than the plain values, else it falls back to plain
    for the whole chunk; a dictionary past :data:`DICTIONARY_PAGE_BYTES` falls back too
    (pyarrow does that part itself). ``int96``: timestamps are written as INT96. Fixed-length
    byte arrays (decimals past 18 digits) are never dictionary-encoded by parquet-mr's v1
    writer. Pure; True for columns this does not model."""
    if _fixed_len_binary(arr.type):
        return False
    page = arr.slice(0, PAGE_ROWS)
    sized = _plain_sizes(page, int96)
    if sized is None or len(sized[0]) == 0:
        return True
    sizes, extra = sized
    cumulative = pc.cumulative_sum(sizes)
    if cumulative[-1].as_py() > PAGE_BYTES:  # the page ends at ~1 MiB of values
        n = int(pc.sum(pc.less(cumulative, PAGE_BYTES)).as_py()) + 1
        page = page.drop_null().slice(0, n)
        sizes = sizes.slice(0, n)
    else:
        page = page.drop_null()
    values = int(pc.sum(sizes).as_py())
    raw = values + extra * len(page)
    distinct = page.unique()
    dict_bytes = values if len(distinct) == len(page) else _dictionary_bytes(distinct, int96)
    bit_width = max(1, (len(distinct) - 1).bit_length())
    encoded = 1 + (len(page) * bit_width + 7) // 8
    return dict_bytes <= DICTIONARY_PAGE_BYTES and encoded + dict_bytes < raw


def _dictionary_bytes(distinct: pa.Array, int96: bool) -> int:
    sized = _plain_sizes(distinct, int96)
    return 0 if sized is None else int(pc.sum(sized[0]).as_py() or 0)


def dictionary_columns(table: pa.Table | pa.RecordBatch, *, int96: bool = False) -> list[str] | bool:
    """pyarrow's ``use_dictionary`` for a file whose first rows are ``table``: the Parquet
    leaf paths to dictionary-encode, as parquet-mr decides for top-level primitive columns
    (:func:`dictionary_pays`; nested columns keep it), or True if all. Pure."""
    keep: list[str] = []
    plain = False
    for f, col in zip(table.schema, table.columns, strict=True):
        if dictionary_pays(_chunk(col), int96=int96):
            keep.extend(_leaf_paths(f.type, f.name))
        else:
            plain = True
    return keep if plain else True


def _leaf_paths(t: pa.DataType, path: str) -> list[str]:
    """Parquet leaf column paths of an Arrow type (compliant nested names, as written)."""
    if pa.types.is_struct(t):
        return [
            p for i in range(t.num_fields) for p in _leaf_paths(t.field(i).type, f"{path}.{t.field(i).name}")
        ]
    if pa.types.is_map(t):
        return [
            *_leaf_paths(t.key_type, f"{path}.key_value.key"),
            *_leaf_paths(t.item_type, f"{path}.key_value.value"),
        ]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _leaf_paths(t.value_type, f"{path}.list.element")
    return [path]


def _chunk(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 0:
            return pa.array([], col.type)
        first = col.chunk(0)
        return (
            first
            if len(first) >= PAGE_ROWS or col.num_chunks == 1
            else pa.concat_arrays(col.slice(0, PAGE_ROWS).chunks)
        )
    return col


def _has_naive_timestamp(schema: pa.Schema) -> bool:
    """Whether any (nested) field is a timestamp without time zone (Spark's
    ``timestamp_ntz``, which Spark always writes as INT64)."""

    def naive(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.tz is None
        if pa.types.is_struct(t):
            return any(naive(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_map(t):
            return naive(t.key_type) or naive(t.item_type)
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return naive(t.value_type)
        return False

    return any(naive(f.type) for f in schema)


def writer_options(first: pa.Table | None, *, int96: bool = False) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` settings that write what Spark 4's parquet-mr writes by
    default: data pages of 1 MiB (and at most 20,000 rows), v1 data pages, statistics,
    decimals of up to 18 digits as INT32/INT64, dictionary pages up to 1 MiB, dictionary
    encoding only where it pays on the file's first rows ``first``
    (:func:`dictionary_columns`), no Arrow schema copy in the footer (Spark reads its own
    schema key; ``store_schema=False`` drops the schema's key-value metadata too, so the
    caller adds it with ``add_key_value_metadata``); timestamps as INT96 if ``int96``
    (Spark's default ``spark.sql.parquet.outputTimestampType``; pyarrow's switch covers
    every timestamp column, so the caller passes False when a ``timestamp_ntz`` column,
    always INT64 in Spark, is present: then timestamps stay INT64 microseconds, read back
    identically). Pure."""
    return {
        "use_dictionary": True if first is None else dictionary_columns(first, int96=int96),
        "data_page_size": PAGE_BYTES,
        "max_rows_per_page": PAGE_ROWS,
        "dictionary_pagesize_limit": DICTIONARY_PAGE_BYTES,
        "data_page_version": "1.0",
        "write_statistics": True,
        "store_schema": False,
        "store_decimal_as_integer": True,
        "use_deprecated_int96_timestamps": int96,
    }


def _nullable_nulls_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_list(t):
        return pa.list_(_nullable_nulls_field(t.value_field))
    if pa.types.is_large_list(t):
        return pa.large_list(_nullable_nulls_field(t.value_field))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_nullable_nulls_field(t.value_field), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([_nullable_nulls_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(t.key_field, _nullable_nulls_field(t.item_field), t.keys_sorted)
    return t


def _nullable_nulls_field(f: pa.Field) -> pa.Field:
    t = _nullable_nulls_type(f.type)
    nullable = True if pa.types.is_null(t) else f.nullable
    if t is f.type and nullable == f.nullable:
        return f
    return pa.field(f.name, t, nullable, f.metadata)


def writable_schema(schema: pa.Schema) -> pa.Schema | None:
    """``schema`` with every null-typed field (Spark's ``void``: ``array()`` is
    ``array<void>`` with ``containsNull=false``) made nullable, as Parquet writers need;
    None if nothing had to change. Values are unchanged: a null-typed field holds no data,
    and the Spark schema stored in the file keeps the original nullability, so Spark reads
    the column back with the type it wrote."""
    fields = [_nullable_nulls_field(f) for f in schema]
    if all(a is b for a, b in zip(fields, schema, strict=True)):
        return None
    return pa.schema(fields, metadata=schema.metadata)


def nullable_voids(spark_type: Any) -> Any:
    """A Spark type in JSON form with every ``void`` element, value and field made nullable
    (the Arrow conversion of ``array<void>`` with ``containsNull=false`` fails otherwise)."""
    if not isinstance(spark_type, dict):
        return spark_type
    t = dict(spark_type)
    kind = t.get("type")
    if kind == "array":
        t["elementType"] = nullable_voids(t["elementType"])
        t["containsNull"] = t["containsNull"] or t["elementType"] == "void"
    elif kind == "map":
        t["valueType"] = nullable_voids(t["valueType"])
        t["valueContainsNull"] = t["valueContainsNull"] or t["valueType"] == "void"
    elif kind == "struct":
        t["fields"] = [
            {**f, "type": nullable_voids(f["type"]), "nullable": f["nullable"] or f["type"] == "void"}
            for f in t["fields"]
        ]
    return t


def unwritable_column(schema_json: str) -> str | None:
    """The name of a column Parquet cannot hold through pyarrow (a map whose keys are
    ``void``, e.g. ``map()``), or None. Checked on the driver, before any task runs."""

    def void_key(t: Any) -> bool:
        if not isinstance(t, dict):
            return False
        kind = t.get("type")
        if kind == "map":
            return t.get("keyType") == "void" or void_key(t.get("keyType")) or void_key(t.get("valueType"))
        if kind == "array":
            return void_key(t.get("elementType"))
        if kind == "struct":
            return any(void_key(f.get("type")) for f in t.get("fields", []))
        return False

    for f in json.loads(schema_json).get("fields", []):
        if void_key(f.get("type")):
            return str(f.get("name"))
    return None


@dataclass
class WriteStats:
    """What a task wrote."""

    files: int = 0
    rows: int = 0
    bytes: int = 0
    row_groups: int = 0
    paths: list[str] = field(default_factory=list)
    """Relative paths of the finished files."""
    file_rows: dict[str, int] = field(default_factory=dict)
    """Rows of each finished file (relative path -> rows)."""


META_COLUMNS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
"""Hudi's meta columns (:data:`amcommit.table.format.naming.META_COLUMNS`), first in every file."""


@dataclass(frozen=True)
class HudiMeta:
    """What the meta columns of one task's files hold: ``_hoodie_commit_time`` = ``instant``,
    ``_hoodie_commit_seqno`` = ``<instant>_<partition_id>_<n>`` (n counts the task's rows),
    ``_hoodie_record_key`` from ``record_key_fields`` (or the seqno's form when there are
    none: a generated unique key), ``_hoodie_partition_path`` = the Hive-style partition
    folder, ``_hoodie_file_name`` = the base file's name."""

    instant: str
    partition_id: int
    record_key_fields: tuple[str, ...] = ()


@dataclass
class _Sink:
    """One partition directory: buffered batches and the file being written."""

    rel_dir: str
    buf: list[pa.RecordBatch] = field(default_factory=list)
    buf_rows: int = 0
    buf_bytes: int = 0
    writer: pq.ParquetWriter | None = None
    rel_path: str = ""
    local_path: str = ""
    file_rows: int = 0
    keys: list[pa.ChunkedArray] = field(default_factory=list)
    """``_hoodie_record_key`` of the open file's rows (a table's files: the footer index)."""


class PartitionedParquetWriter:
    """Writes one task's rows as Parquet files (see module docstring). Not thread-safe."""

    def __init__(
        self,
        *,
        partition_columns: tuple[str, ...],
        file_name: Callable[[int], str],
        local_path: Callable[[str], str],
        on_closed: Callable[[str, str], None],
        compression: str | None = "snappy",
        compression_level: int | None = None,
        row_group_rows: int = 1024 * 1024,
        row_group_bytes: int = 128 * 1024 * 1024,
        max_records_per_file: int = 0,
        max_file_bytes: int = 0,
        max_open_files: int = 100,
        buffer_bytes: int = 256 * 1024 * 1024,
        spark_schema_json: str | None = None,
        spark_version: str = "",
        partition_dir_names: tuple[str, ...] = (),
        int96_timestamps: bool = False,
        keep_partition_columns: bool = False,
        meta: HudiMeta | None = None,
    ) -> None:
        self.keep_partition_columns = keep_partition_columns
        """Partition columns stay in the files too (Hudi tables)."""
        self.meta = meta
        """Set for a Hudi table: the meta columns lead every file (:class:`HudiMeta`)."""
        self.partition_columns = partition_columns
        self.partition_dir_names = partition_dir_names or partition_columns
        """Column names in the directory names (as ``partitionBy`` spelled them)."""
        self.int96_timestamps = int96_timestamps
        self.file_name = file_name
        self.local_path = local_path
        self.on_closed = on_closed
        self.compression = compression
        self.compression_level = compression_level
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.max_records_per_file = max_records_per_file
        self.max_file_bytes = max_file_bytes
        self.max_open_files = max_open_files
        self.buffer_bytes = buffer_bytes
        self.spark_schema_json = spark_schema_json
        self.spark_version = spark_version
        self.stats = WriteStats()
        self._sinks: dict[str, _Sink] = {}
        self._open: OrderedDict[str, _Sink] = OrderedDict()  # LRU of sinks with an open file
        self._buffered = 0
        self._n = 0
        self._schema: pa.Schema | None = None
        self._part_idx: list[int] = []
        self._rows_cache: pa.Array | None = None
        self._input_schema: pa.Schema | None = None
        self._cast_to: pa.Schema | None = None
        self._fschema: pa.Schema | None = None

    def _writable(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch with null-typed fields made nullable (see :func:`writable_schema`)."""
        if self._input_schema is None or not batch.schema.equals(self._input_schema):
            self._input_schema = batch.schema
            self._cast_to = writable_schema(batch.schema)
        return batch if self._cast_to is None else batch.cast(self._cast_to)

    # -- input ---------------------------------------------------------------------------
    def _data_schema(self, batch_schema: pa.Schema) -> pa.Schema:
        if self._schema is None:
            self._part_idx = [batch_schema.get_field_index(c) for c in self.partition_columns]
            if any(i < 0 for i in self._part_idx):
                raise ValueError(
                    f"partition columns {self.partition_columns} not all in {batch_schema.names}"
                )
            keep = [
                f
                for i, f in enumerate(batch_schema)
                if self.keep_partition_columns or i not in self._part_idx
            ]
            meta: dict[bytes, bytes] = {}
            if self.spark_schema_json:
                meta[SPARK_SCHEMA_KEY] = self.spark_schema_json.encode()
            if self.spark_version:
                meta[SPARK_VERSION_KEY] = self.spark_version.encode()
            self._schema = pa.schema(keep, metadata=meta or None)
        return self._schema

    def _with_row_meta(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch with ``_hoodie_commit_seqno`` and ``_hoodie_record_key`` in front (the
        meta columns that vary per row; the others are added per file at flush)."""
        m = self.meta
        assert m is not None
        first = self.stats.rows
        n = pc.cast(pc.add(self._row_numbers(batch.num_rows), first), pa.string())
        seqno = pc.binary_join_element_wise(f"{m.instant}_{m.partition_id}_", n, "")
        keys = record_keys(batch, m.record_key_fields) if m.record_key_fields else seqno
        return pa.RecordBatch.from_arrays(
            [seqno, keys, *batch.columns],
            schema=pa.schema(
                [
                    pa.field(META_COLUMNS[1], pa.string()),
                    pa.field(META_COLUMNS[2], pa.string()),
                    *batch.schema,
                ]
            ),
        )

    def write(self, batch: pa.RecordBatch) -> None:
        """Add a batch (with the partition columns, if any)."""
        batch = self._writable(batch)
        if self.meta is not None:
            batch = self._with_row_meta(batch)
        if batch.num_rows == 0:
            self._data_schema(batch.schema)
            return
        schema = self._data_schema(batch.schema)
        self.stats.rows += batch.num_rows
        if not self.partition_columns:
            self._append("", batch.replace_schema_metadata(None))
            return
        data_idx = [
            i for i in range(batch.num_columns) if self.keep_partition_columns or i not in self._part_idx
        ]
        keys = [batch.column(i) for i in self._part_idx]
        if all(k.null_count == 0 and _single_value(k) for k in keys):
            values = tuple(k[0].as_py() for k in keys)
            self._append(partition_dir(self.partition_dir_names, values), _select(batch, data_idx, schema))
            return
        table = pa.Table.from_arrays(
            [*keys, self._row_numbers(batch.num_rows)],
            names=[*[f"k{i}" for i in range(len(keys))], "row"],
        )
        groups = table.group_by([f"k{i}" for i in range(len(keys))], use_threads=False).aggregate(
            [("row", "list")]
        )
        rows_col = groups.column("row_list")
        key_cols = [groups.column(f"k{i}") for i in range(len(keys))]
        for g in range(groups.num_rows):
            values = tuple(c[g].as_py() for c in key_cols)
            idx = rows_col[g].values
            part = _select(batch.take(idx), data_idx, schema)
            self._append(partition_dir(self.partition_dir_names, values), part)

    def _row_numbers(self, n: int) -> pa.Array:
        """``0..n-1`` as an int64 array (a zero-copy slice of a cached one)."""
        if self._rows_cache is None or len(self._rows_cache) < n:
            self._rows_cache = pa.array(range(max(n, 65_536)), pa.int64())
        return self._rows_cache.slice(0, n)

    def _append(self, rel_dir: str, batch: pa.RecordBatch) -> None:
        sink = self._sinks.get(rel_dir)
        if sink is None:
            sink = self._sinks[rel_dir] = _Sink(rel_dir)
        size = batch.nbytes
        sink.buf.append(batch)
        sink.buf_rows += batch.num_rows
        sink.buf_bytes += size
        self._buffered += size
        if sink.buf_rows >= self.row_group_rows or sink.buf_bytes >= self.row_group_bytes:
            self._flush(sink)
        while self._buffered > self.buffer_bytes:
            largest = max(self._sinks.values(), key=lambda s: s.buf_bytes)
            if largest.buf_bytes == 0:
                break
            self._flush(largest)

    # -- output --------------------------------------------------------------------------
    def _file_schema(self) -> pa.Schema:
        """The schema of the files: the buffered one, plus the per-file meta columns."""
        assert self._schema is not None
        if self.meta is None:
            return self._schema
        if self._fschema is None:
            s = self._schema
            fields = list(s)
            string = pa.string()
            fields.insert(0, pa.field(META_COLUMNS[0], string))
            fields.insert(3, pa.field(META_COLUMNS[3], string))
            fields.insert(4, pa.field(META_COLUMNS[4], string))
            self._fschema = pa.schema(fields, metadata=s.metadata)
        return self._fschema

    def _decorate(self, sink: _Sink, table: pa.Table) -> pa.Table:
        """``table`` with the per-file meta columns (commit time, partition path, file
        name) inserted where Hudi puts them; ``table`` itself without :attr:`meta`."""
        if self.meta is None:
            return table
        n = table.num_rows
        string = pa.string()
        table = table.add_column(0, META_COLUMNS[0], pa.repeat(pa.scalar(self.meta.instant, string), n))
        table = table.add_column(3, META_COLUMNS[3], pa.repeat(pa.scalar(sink.rel_dir, string), n))
        name = sink.rel_path.rsplit("/", 1)[-1]
        return table.add_column(4, META_COLUMNS[4], pa.repeat(pa.scalar(name, string), n))

    def _new_file(self, sink: _Sink) -> None:
        """Name the sink's next file (closing the least recently used file if too many are open)."""
        while len(self._open) >= self.max_open_files:
            _, lru = next(iter(self._open.items()))
            self._close_file(lru)  # its later rows go to a new file
        name = self.file_name(self._n)
        self._n += 1
        sink.rel_path = join(sink.rel_dir, name)
        sink.local_path = self.local_path(sink.rel_path)
        sink.file_rows = 0

    def _open_file(self, sink: _Sink, first: pa.Table | None = None) -> pq.ParquetWriter:
        """The sink's open file, or a new one (named by :meth:`_new_file`, called first when
        the sink has no open file) whose encodings are chosen from ``first`` (its first
        rows) as Spark's own writer would choose them (:func:`writer_options`)."""
        if sink.writer is not None:
            self._open.move_to_end(sink.rel_dir)
            return sink.writer
        if not sink.rel_path:
            self._new_file(sink)
        schema = self._file_schema()
        os.makedirs(os.path.dirname(sink.local_path), exist_ok=True)
        kwargs = writer_options(first, int96=self.int96_timestamps and not _has_naive_timestamp(schema))
        kwargs["compression"] = self.compression or "none"
        if self.compression_level is not None and self.compression:
            kwargs["compression_level"] = self.compression_level
        sink.writer = pq.ParquetWriter(sink.local_path, schema, **kwargs)
        if schema.metadata:  # without store_schema, pyarrow drops the schema's metadata
            sink.writer.add_key_value_metadata(schema.metadata)
        sink.file_rows = 0
        self._open[sink.rel_dir] = sink
        return sink.writer

    def _flush(self, sink: _Sink) -> None:
        """Write the sink's buffer as one row group (split only to honour file limits)."""
        if not sink.buf:
            return
        assert self._schema is not None
        table = pa.Table.from_batches(sink.buf).replace_schema_metadata(self._schema.metadata)
        self._buffered -= sink.buf_bytes
        sink.buf, sink.buf_rows, sink.buf_bytes = [], 0, 0
        offset = 0
        while offset < table.num_rows:
            if sink.writer is None:
                self._new_file(sink)
            n = table.num_rows - offset
            if self.max_records_per_file:
                n = min(n, self.max_records_per_file - sink.file_rows)
            rest = self._decorate(sink, table.slice(offset))
            writer = self._open_file(sink, rest)
            part = rest.slice(0, n)
            writer.write_table(part, row_group_size=max(1, n))
            if self.meta is not None:
                sink.keys.append(part.column(META_COLUMNS[2]))
            self.stats.row_groups += 1
            sink.file_rows += n
            offset += n
            if (self.max_records_per_file and sink.file_rows >= self.max_records_per_file) or (
                self.max_file_bytes and os.path.getsize(sink.local_path) >= self.max_file_bytes
            ):
                self._close_file(sink)

    def _close_file(self, sink: _Sink) -> None:
        if sink.writer is None:
            return
        writer, sink.writer = sink.writer, None
        self._open.pop(sink.rel_dir, None)
        if self.meta is not None:  # Hudi's key range and bloom filter, as its writers add them
            keys = [k for chunk in sink.keys for k in chunk.to_pylist()]
            sink.keys = []
            writer.add_key_value_metadata(build_footer(keys))
        writer.close()
        self.stats.files += 1
        self.stats.bytes += os.path.getsize(sink.local_path)
        self.stats.paths.append(sink.rel_path)
        self.stats.file_rows[sink.rel_path] = sink.file_rows
        rel, local = sink.rel_path, sink.local_path
        sink.rel_path = ""  # the next file gets a new name
        self.on_closed(rel, local)

    def close(self) -> WriteStats:
        """Write every buffer and finish every file; returns what was written."""
        for sink in list(self._sinks.values()):
            self._flush(sink)
            self._close_file(sink)
        return self.stats

    def write_empty_file(self, schema: pa.Schema) -> None:
        """Write one file with the schema and no rows (an empty unpartitioned job stays
        readable, as with Spark's own writer)."""
        self._data_schema(writable_schema(schema) or schema)
        sink = self._sinks.setdefault("", _Sink(""))
        self._open_file(sink)
        self._close_file(sink)

    def abort(self) -> None:
        """Close open files without finishing them properly; errors are ignored."""
        for sink in self._sinks.values():
            if sink.writer is not None:
                try:
                    sink.writer.close()
                except Exception:
                    pass
                sink.writer = None
        self._open.clear()
        self._sinks.clear()
        self._buffered = 0


def _single_value(arr: pa.Array) -> bool:
    if len(arr) <= 1:
        return True
    first = arr[0]
    return bool(pc.all(pc.equal(arr, first)).as_py())


def _select(batch: pa.RecordBatch, idx: list[int], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column(i) for i in idx], schema=schema.remove_metadata())


__all__ = [
    "HIVE_DEFAULT_PARTITION",
    "META_COLUMNS",
    "HudiMeta",
    "PartitionedParquetWriter",
    "RecordKeyError",
    "WriteStats",
    "dictionary_columns",
    "dictionary_pays",
    "escape_path_name",
    "nullable_voids",
    "partition_dir",
    "partition_value",
    "record_keys",
    "unwritable_column",
    "writable_schema",
    "writer_options",
]
