"""``.hoodie/hoodie.properties``: the table config of a Hudi table (version 6), read and written.

The file is a Java properties file. amcommit writes it once, on a table's first write, with a
create-only put (atomic on every store: it appears whole or not at all, and never replaces a
concurrent first writer's file). It is never rewritten afterwards.

Written as Hudi's Java writer does (``HoodieTableConfig``): one ``key=value`` per line, keys
sorted, a leading ``#`` comment, values escaped as ``java.util.Properties.store`` escapes them
(``\\:``, ``\\=``, ``\\#``, ``\\!``, control characters, and non-ASCII as ``\\uXXXX``), and
``hoodie.table.checksum`` = CRC32 of the UTF-8 bytes of ``"<database>.<table name>"`` (the
database name is empty when unset), as a decimal number.
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from amcommit.errors import ConfigError, ManifestError

__all__ = [
    "TableProperties",
    "checksum",
    "decode_properties",
    "encode_properties",
    "new_properties",
]

NAME = "hoodie.table.name"
TYPE = "hoodie.table.type"
VERSION = "hoodie.table.version"
LAYOUT_VERSION = "hoodie.timeline.layout.version"
PARTITION_FIELDS = "hoodie.table.partition.fields"
RECORD_KEY_FIELDS = "hoodie.table.recordkey.fields"
KEY_GENERATOR = "hoodie.table.keygenerator.class"
BASE_FORMAT = "hoodie.table.base.file.format"
CREATE_SCHEMA = "hoodie.table.create.schema"
TIMEZONE = "hoodie.table.timeline.timezone"
HIVE_STYLE = "hoodie.datasource.write.hive_style_partitioning"
URL_ENCODE = "hoodie.datasource.write.partitionpath.urlencode"
DROP_PARTITION_COLUMNS = "hoodie.datasource.write.drop.partition.columns"
"""``false`` (partition columns stay in the files, as amcommit writes them): Hudi 0.14's
writer stores it, and Daft's ``read_hudi`` refuses a table without it."""
CHECKSUM = "hoodie.table.checksum"
DATABASE = "hoodie.database.name"
POPULATE_META = "hoodie.populate.meta.fields"
ARCHIVE_FOLDER = "hoodie.archivelog.folder"
PAYLOAD_CLASS = "hoodie.compaction.payload.class"
"""The payload class of a Merge-on-Read table (the key Hudi v6 reads it by; hudi-rs honours it)."""
PRECOMBINE_FIELD = "hoodie.table.precombine.field"
PARTITION_METAFILE_BASE_FORMAT = "hoodie.partition.metafile.use.base.format"

TABLE_VERSION = "6"
COPY_ON_WRITE = "COPY_ON_WRITE"
MERGE_ON_READ = "MERGE_ON_READ"
TABLE_TYPES = (COPY_ON_WRITE, MERGE_ON_READ)
"""``hoodie.table.type`` values: chosen when a table is created, never changed."""
PAYLOAD_PACKAGE = "org.apache.hudi.common.model."
TIMELINE_LAYOUT_VERSION = "1"


def checksum(table_name: str, database: str = "") -> int:
    """``hoodie.table.checksum``: CRC32 of ``"<database>.<table name>"`` (UTF-8)."""
    return zlib.crc32(f"{database}.{table_name}".encode()) & 0xFFFFFFFF


def key_generator(partition_fields: tuple[str, ...], record_key_fields: tuple[str, ...]) -> str:
    """The key generator class Hudi's Spark writer records for these fields."""
    if not partition_fields:
        return "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
    if len(partition_fields) == 1 and len(record_key_fields) <= 1:
        return "org.apache.hudi.keygen.SimpleKeyGenerator"
    return "org.apache.hudi.keygen.ComplexKeyGenerator"


def _split(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass(frozen=True)
class TableProperties:
    """The parsed ``hoodie.properties`` (every key kept in ``values``)."""

    values: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.values.get(NAME, "")

    @property
    def partition_fields(self) -> tuple[str, ...]:
        return _split(self.values.get(PARTITION_FIELDS, ""))

    @property
    def record_key_fields(self) -> tuple[str, ...]:
        return _split(self.values.get(RECORD_KEY_FIELDS, ""))

    @property
    def create_schema(self) -> str | None:
        return self.values.get(CREATE_SCHEMA)

    @property
    def meta_fields(self) -> bool:
        """Whether base files carry the meta columns (``hoodie.populate.meta.fields``)."""
        return self.values.get(POPULATE_META, "true").strip().lower() != "false"

    @property
    def version(self) -> str:
        return self.values.get(VERSION, "")

    @property
    def table_type(self) -> str:
        """``hoodie.table.type`` (``COPY_ON_WRITE`` when unset, as Hudi defaults it)."""
        return self.values.get(TYPE, COPY_ON_WRITE).strip().upper() or COPY_ON_WRITE

    @property
    def merge_on_read(self) -> bool:
        return self.table_type == MERGE_ON_READ

    def check_supported(self, where: str, *, merge_on_read: bool = False) -> None:
        """ConfigError (one line naming ``where``) unless amcommit can write this table:
        Copy-on-Write (or Merge-on-Read, when the caller writes its log files:
        ``merge_on_read``), version 6, timeline layout 1."""
        problems = []
        allowed = TABLE_TYPES if merge_on_read else (COPY_ON_WRITE,)
        if self.table_type not in allowed:
            problems.append(f"table type {self.values.get(TYPE)} (only {' or '.join(allowed)} here)")
        if self.version != TABLE_VERSION:
            problems.append(f"table version {self.version or 'unset'} (only 6)")
        if self.values.get(LAYOUT_VERSION, TIMELINE_LAYOUT_VERSION) != TIMELINE_LAYOUT_VERSION:
            problems.append(f"timeline layout {self.values.get(LAYOUT_VERSION)} (only 1)")
        if problems:
            raise ConfigError(f"{where}: amcommit cannot write this Hudi table: {'; '.join(problems)}")


def new_properties(
    name: str,
    *,
    partition_fields: tuple[str, ...] = (),
    record_key_fields: tuple[str, ...] = (),
    create_schema: str | None = None,
    meta_fields: bool = True,
    table_type: str = COPY_ON_WRITE,
    payload_class: str | None = None,
    precombine_field: str | None = None,
) -> TableProperties:
    """The properties of a new table (pure). ``meta_fields``: ``hoodie.populate.meta.fields``.
    ``table_type``: ``COPY_ON_WRITE`` or ``MERGE_ON_READ``; a Merge-on-Read table also
    records its payload (``payload_class``, a simple name is taken as Hudi's
    ``org.apache.hudi.common.model`` class; default ``OverwriteWithLatestAvroPayload``) and
    its precombine field, which its readers merge log records by."""
    if not name or any(c in name for c in "/\\\n\r"):
        raise ConfigError(f"invalid table name {name!r}")
    if table_type not in TABLE_TYPES:
        raise ConfigError(f"invalid table type {table_type!r}: {' or '.join(TABLE_TYPES)}")
    for f in (*partition_fields, *record_key_fields):
        if not f or "," in f:
            raise ConfigError(f"invalid field name {f!r} in the table's partition or record key fields")
    v: dict[str, str] = {
        NAME: name,
        TYPE: table_type,
        VERSION: TABLE_VERSION,
        LAYOUT_VERSION: TIMELINE_LAYOUT_VERSION,
        PARTITION_FIELDS: ",".join(partition_fields),
        KEY_GENERATOR: key_generator(partition_fields, record_key_fields),
        BASE_FORMAT: "PARQUET",
        TIMEZONE: "UTC",
        HIVE_STYLE: "true",
        URL_ENCODE: "false",
        DROP_PARTITION_COLUMNS: "false",
        POPULATE_META: "true" if meta_fields else "false",
        ARCHIVE_FOLDER: "archived",
        PARTITION_METAFILE_BASE_FORMAT: "false",
        CHECKSUM: str(checksum(name)),
    }
    if record_key_fields:
        v[RECORD_KEY_FIELDS] = ",".join(record_key_fields)
    if create_schema is not None:
        v[CREATE_SCHEMA] = create_schema
    if table_type == MERGE_ON_READ:
        cls = payload_class or "OverwriteWithLatestAvroPayload"
        v[PAYLOAD_CLASS] = cls if "." in cls else PAYLOAD_PACKAGE + cls
        if precombine_field:
            v[PRECOMBINE_FIELD] = precombine_field
    return TableProperties(v)


def _escape(s: str, *, key: bool) -> str:
    out = []
    for i, c in enumerate(s):
        if c == " " and (key or i == 0):
            out.append("\\ ")
        elif c in "\\=:#!":
            out.append("\\" + c)
        elif c == "\t":
            out.append("\\t")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\f":
            out.append("\\f")
        elif ord(c) < 0x20 or ord(c) > 0x7E:
            out.extend(f"\\u{u:04X}" for u in _utf16(c))
        else:
            out.append(c)
    return "".join(out)


def _utf16(c: str) -> list[int]:
    b = c.encode("utf-16-be")
    return [int.from_bytes(b[i : i + 2], "big") for i in range(0, len(b), 2)]


def encode_properties(props: TableProperties, *, now: float | None = None) -> bytes:
    """The file's bytes (ASCII), keys sorted, a ``#Properties saved on`` comment first."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(now if now is not None else time.time()))
    lines = [f"#Properties saved on {stamp}"]
    for k in sorted(props.values):
        lines.append(f"{_escape(k, key=True)}={_escape(props.values[k], key=False)}")
    return ("\n".join(lines) + "\n").encode("ascii")


_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))", re.DOTALL)
_SHORT_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape_one(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return chr(int(m.group(1), 16))
    c = m.group(2)
    return _SHORT_ESCAPES.get(c, c)


def _unescape(s: str, where: str = "hoodie.properties") -> str:
    """A key or value of a Java properties file, its backslash escapes undone (``\\uXXXX``,
    ``\\t``, ``\\n``, ``\\r``, ``\\f``, any other escaped character stands for itself; a
    trailing lone backslash is kept). ManifestError for ``\\u`` without four hex digits, as
    Java's ``Properties.load`` refuses it."""
    if "\\" not in s:
        return s
    if _BAD_U.search(s):
        raise ManifestError(f"{where}: malformed \\uXXXX escape")
    out = _ESCAPE.sub(_unescape_one, s)
    if _SURROGATE.search(out) is None:
        return out
    try:  # join surrogate pairs written as two \\u escapes
        return out.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        raise ManifestError(f"{where}: a \\uXXXX escape names half a character (a lone surrogate)") from None


_SURROGATE = re.compile("[\ud800-\udfff]")
_BAD_U = re.compile(r"(?<!\\)(?:\\\\)*\\u(?![0-9a-fA-F]{4})")
"""``\\u`` (after an even run of backslashes) not followed by four hex digits."""


def decode_properties(data: bytes, *, where: str = "hoodie.properties") -> TableProperties:
    """Parse a Java properties file (the subset Hudi writes: one entry per line, ``=`` or
    ``:`` separators, ``#``/``!`` comments, backslash escapes, line continuations).
    ManifestError naming ``where`` if it is not text or has no table name."""
    try:
        text = data.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise ManifestError(f"{where}: not a properties file") from None
    values: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = (pending + raw.lstrip()) if pending else raw.lstrip()
        pending = ""
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        logical.append(line)
    if pending:
        logical.append(pending)
    for line in logical:
        if not line or line[0] in "#!":
            continue
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t")
        values[_unescape(key, where)] = _unescape(rest, where)
    props = TableProperties(values)
    if not props.name:
        raise ManifestError(f"{where}: no {NAME} (not a Hudi table's properties)")
    return props
