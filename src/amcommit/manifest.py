"""Task manifests and the ``_SUCCESS`` report: msgspec models, JSON codecs, validation.

The JSON is Hadoop's manifest committer format (Hadoop 3.5): a manifest written by
Hadoop's ``ManifestCommitter`` loads here, and ours load there. Unknown keys are ignored on
read. Paths inside are URIs as Hadoop prints them (see :mod:`amcommit.paths`).

Validation (:func:`check_manifest`) happens before anything is renamed: wrong type or
version, a foreign job id, missing or malformed task ids, sizes outside ``0 <= size <
2**63``, paths with control characters (NUL included, raw or percent-encoded), empty,
``.`` or ``..`` segments or a trailing slash, duplicate destinations, sources outside the
task attempt's own directory, destinations outside the job's destination (or inside its
``_temporary``) are all rejected with a :class:`~amcommit.errors.ManifestError` naming the
manifest and the bad entry, in one line. JSON nested too deeply to decode is a
ManifestError too (never a ``RecursionError``).
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, NamedTuple

import msgspec

from amcommit.errors import InvalidInput, ManifestError
from amcommit.iostats import IOStatisticsSnapshot
from amcommit.paths import fast_prefixes, is_plain_path, is_within, parent, path_mapper

TASK_MANIFEST_TYPE = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1"
TASK_MANIFEST_VERSION = 1
SUCCESS_NAME = "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"
COMMITTER_NAME = "amcommit"

SOURCE_META_KEY = "amcommit.sourceUserMetadata"
"""``extraData`` key of a task manifest: ``"none"`` when the task commit listed every file
of the manifest with its metadata (Blob) and none carried user metadata; absent when not
known. Lets the job commit's copy-based rename skip reading the source (see
``Store.rename(src_meta=)``). An ``extraData`` entry, not a new per-file key, so the
manifest stays exactly Hadoop's format; a manifest without it takes the safe path."""

MAX_SIZE = 2**63 - 1
"""Largest file size a manifest may declare (Hadoop's ``long``)."""
Size = Annotated[int, msgspec.Meta(ge=0, le=MAX_SIZE)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=MAX_SIZE)]


class FileEntry(msgspec.Struct, omit_defaults=True, gc=False):
    """One file to rename at job commit: ``s`` source URI, ``d`` destination URI,
    ``z`` size in bytes, ``e`` etag (absent when the store has none)."""

    source: str = msgspec.field(name="s")
    dest: str = msgspec.field(name="d")
    size: Size = msgspec.field(name="z")
    etag: str | None = msgspec.field(name="e", default=None)


class DirStatus:
    """``DirEntry.t`` codes (Hadoop ``EntryStatus``)."""

    UNKNOWN = 0
    NOT_FOUND = 1
    FILE = 2
    DIR = 3
    CREATED = 4


class DirEntry(msgspec.Struct, gc=False):
    """A destination directory: ``d`` URI, ``t`` status (:class:`DirStatus`), ``l`` depth."""

    dir: str = msgspec.field(name="d")
    type: Int64 = msgspec.field(name="t", default=DirStatus.UNKNOWN)
    level: Int64 = msgspec.field(name="l", default=0)


class TaskManifest(msgspec.Struct):
    """What one task attempt wrote (Hadoop ``TaskManifest`` JSON)."""

    type: str
    version: Int64
    job_id: str = msgspec.field(name="jobId")
    job_attempt_number: Int64 = msgspec.field(name="jobAttemptNumber")
    task_id: str = msgspec.field(name="taskID")
    task_attempt_id: str = msgspec.field(name="taskAttemptID")
    task_attempt_dir: str | None = msgspec.field(name="taskAttemptDir", default=None)
    files: list[FileEntry] = msgspec.field(default_factory=list)
    directories: list[DirEntry] = msgspec.field(default_factory=list)
    iostatistics: IOStatisticsSnapshot = msgspec.field(default_factory=IOStatisticsSnapshot)
    extra_data: dict[str, str] = msgspec.field(name="extraData", default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


class SuccessData(msgspec.Struct, omit_defaults=False):
    """The ``_SUCCESS`` JSON (Hadoop ``ManifestSuccessData``) and the summary report."""

    name: str = SUCCESS_NAME
    timestamp: int = 0
    date: str = ""
    hostname: str = ""
    committer: str = COMMITTER_NAME
    description: str = ""
    job_id: str = msgspec.field(name="jobId", default="")
    job_id_source: str = msgspec.field(name="jobIdSource", default="")
    success: bool = False
    metrics: dict[str, int] = msgspec.field(default_factory=dict)
    diagnostics: dict[str, str] = msgspec.field(default_factory=dict)
    filenames: list[str] = msgspec.field(default_factory=list)
    iostatistics: IOStatisticsSnapshot = msgspec.field(default_factory=IOStatisticsSnapshot)


_manifest_decoder = msgspec.json.Decoder(TaskManifest)
_success_decoder = msgspec.json.Decoder(SuccessData)
_encoder = msgspec.json.Encoder()


def encode_json(obj: object) -> bytes:
    """Compact JSON (Hadoop reads it; humans use ``amcommit manifest``/``success``)."""
    return _encoder.encode(obj)


def decode_manifest(data: bytes, *, name: str = "") -> TaskManifest:
    """Parse manifest JSON; ManifestError (naming ``name``) if it is not one."""
    try:
        return _manifest_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise ManifestError(f"not a valid task manifest: {_one_line(str(e))}", manifest=name) from None
    except RecursionError:  # msgspec skips unknown keys recursively
        raise ManifestError("not a valid task manifest: JSON nested too deeply", manifest=name) from None


def decode_success(data: bytes, *, name: str = "") -> SuccessData:
    """Parse ``_SUCCESS`` JSON; ManifestError (naming ``name``) if it is not one."""
    try:
        return _success_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise ManifestError(f"not a valid _SUCCESS report: {_one_line(str(e))}", manifest=name) from None
    except RecursionError:
        raise ManifestError("not a valid _SUCCESS report: JSON nested too deeply", manifest=name) from None


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: str, limit: int = 200) -> str:
    """``repr`` of a value from a manifest for a message: one line, bounded length."""
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


class RenameEntry(NamedTuple):
    """A validated rename in store paths (what job commit executes). A tuple: millions of
    them are created, spooled and read back."""

    src: str
    dst: str
    size: int
    etag: str | None
    meta: bool | None = None
    """Whether the source (at ``etag``) carries user metadata, as the task commit saw it
    (:data:`SOURCE_META_KEY`); None = not known (manifests of Hadoop or of older
    versions): the rename then reads the source where a copy must carry metadata."""


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a job's manifests may point: the store root URI, the destination directory,
    the job's temporary directory (excluded from destinations) and its task directory."""

    root_uri: str
    dest: str
    temp_dir: str
    tasks_dir: str


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Control characters (C0, DEL, C1): never allowed in a manifest's paths."""
_RAW_C1 = re.compile(rb"\xc2[\x80-\x9f]")


def _path(to_path: Callable[[str], str], uri: str, what: str, name: str, *, file: bool = False) -> str:
    """Store path of a manifest URI, or ManifestError naming it. ``file``: the URI names
    a file, so a trailing slash (raw or ``%2F``) is refused rather than stripped."""
    try:
        path = to_path(uri)
    except InvalidInput as e:
        raise ManifestError(f"{what} {_show(uri)} is not usable: {e.message}", manifest=name) from None
    if _CONTROL.search(path):
        raise ManifestError(
            f"{what} {_show(uri)} is not usable: it contains a control character (e.g. NUL)", manifest=name
        )
    if file and (not path or uri.endswith("/") or uri[-3:].upper() == "%2F"):
        raise ManifestError(
            f"{what} {_show(uri)} is not usable: a file path must not be empty or end with '/'", manifest=name
        )
    return path


def manifest_is_plain(raw: bytes) -> bool:
    """True if no URI in this manifest JSON has ``%``, ``?``, ``#``, ``\\`` (so no JSON
    escape, hence no C0 control character) or a raw DEL / C1 control character (a few
    scans in C). Lets :func:`check_manifest` map URIs to paths by prefix slicing; ``//``
    and ``/.`` are still checked per path."""
    return (
        b"%" not in raw
        and b"?" not in raw
        and b"#" not in raw
        and b"\\" not in raw
        and b"\x7f" not in raw
        and (b"\xc2" not in raw or _RAW_C1.search(raw) is None)
    )


_PLAIN_URI_BYTES = bytes(c for c in range(0x20, 0x7F) if chr(c) not in "%?#\\")
"""Printable ASCII except ``%``, ``?``, ``#`` and ``\\``: what a URI of the fast path is made of."""


def uris_are_plain(files: list[FileEntry]) -> bool:
    """True if every source and destination URI of ``files`` (decoded strings) is printable
    ASCII without ``%``, ``?``, ``#`` or ``\\`` (one join and one byte translation, in C: about
    0.5 us per entry). The decoded-string form of :func:`manifest_is_plain`, for manifests
    given as objects or whose raw JSON has escapes elsewhere (e.g. JSON in ``extraData``)."""
    for uris in ([f.source for f in files], [f.dest for f in files]):
        joined = "".join(uris)
        if not joined.isascii() or joined.encode("ascii").translate(None, _PLAIN_URI_BYTES):
            return False
    return True


def _check_id(value: str, what: str, name: str) -> None:
    if not value or "/" in value or value in (".", "..") or _CONTROL.search(value):
        raise ManifestError(f"missing or malformed {what} {_show(value)}", manifest=name)


def _check_stats(m: TaskManifest, name: str) -> None:
    """IO statistics values must fit a Java ``long`` (they are summed into ``_SUCCESS``)."""
    st = m.iostatistics
    values = [*st.counters.values(), *st.gauges.values(), *st.minimums.values(), *st.maximums.values()]
    for ms in st.meanstatistics.values():
        values += (ms.samples, ms.sum)
    for v in values:
        if not -(2**63) <= v <= MAX_SIZE:
            raise ManifestError(f"IO statistic value {v} does not fit in 64 bits", manifest=name)


class CheckedManifest(NamedTuple):
    """A validated manifest's renames as columns (store paths), and its directories."""

    srcs: list[str]
    dsts: list[str]
    sizes: list[int]
    etags: list[str | None]
    dirs: set[str]
    meta: bool | None = None
    """Whether the sources carry user metadata (:attr:`RenameEntry.meta`, the same for
    every entry of a manifest)."""

    def entries(self) -> list[RenameEntry]:
        """The renames as :class:`RenameEntry` rows."""
        n = len(self.srcs)
        return list(
            map(RenameEntry, self.srcs, self.dsts, self.sizes, self.etags, itertools.repeat(self.meta, n))
        )


def check_manifest(
    m: TaskManifest, *, job_id: str, scope: Scope, name: str = "", plain: bool = False
) -> tuple[list[RenameEntry], set[str]]:
    """Validate a manifest for job ``job_id``; return its renames and directories (paths).
    See :func:`check_manifest_columns` (the same checks; this form returns rows)."""
    checked = check_manifest_columns(m, job_id=job_id, scope=scope, name=name, plain=plain)
    return checked.entries(), checked.dirs


def check_manifest_columns(
    m: TaskManifest, *, job_id: str, scope: Scope, name: str = "", plain: bool = False
) -> CheckedManifest:
    """Validate a manifest for job ``job_id``; return its renames (as columns) and
    directories (store paths).

    ``plain``: the caller checked the raw JSON with :func:`manifest_is_plain`; otherwise the
    decoded URIs are checked here (:func:`uris_are_plain`). Either enables the fast path
    (:func:`_fast_columns`: every entry is still checked, by scans of the joined URIs in C);
    any doubt about any entry sends the whole manifest down the exact path, which finds and
    names the first bad entry.
    Raises ManifestError naming ``name`` and the first bad entry. Duplicate destinations
    (within or across manifests) are caught exactly by the job commit's spool.
    """
    if m.type != TASK_MANIFEST_TYPE:
        raise ManifestError(
            f"wrong manifest type {m.type!r} (expected {TASK_MANIFEST_TYPE!r})", manifest=name
        )
    if m.version != TASK_MANIFEST_VERSION:
        raise ManifestError(f"unsupported manifest version {m.version}", manifest=name)
    if m.job_id != job_id:
        raise ManifestError(f"manifest belongs to job {m.job_id!r}, not to job {job_id!r}", manifest=name)
    _check_id(m.task_id, "task id", name)
    _check_id(m.task_attempt_id, "task attempt id", name)
    _check_stats(m, name)
    attempt_dir = f"{scope.tasks_dir}/{m.task_attempt_id}" if scope.tasks_dir else m.task_attempt_id
    attempt_prefix = attempt_dir + "/"
    dest_prefix = scope.dest + "/" if scope.dest else ""
    files = m.files
    fast = None
    if files:
        if not plain:
            plain = uris_are_plain(files)
        if plain:
            fast = _fast_columns(scope, attempt_prefix, dest_prefix, files)
    if fast is None:
        checked = _exact_columns(m, scope, attempt_prefix, dest_prefix, name)
    else:
        checked = fast
    dirs = checked.dirs
    to_path = path_mapper(scope.root_uri)
    for de in m.directories:
        d = _path(to_path, de.dir, "directory", name)
        _check_dest(scope, d, de.dir, name)
        dirs.add(d)
    dirs.discard(scope.dest)
    if m.extra_data.get(SOURCE_META_KEY) == "none":  # the task's own listing saw no user metadata
        return checked._replace(meta=False)
    return checked


_get_source = operator.attrgetter("source")
_get_dest = operator.attrgetter("dest")
_get_size = operator.attrgetter("size")
_get_etag = operator.attrgetter("etag")
_first = operator.itemgetter(0)
_third = operator.itemgetter(2)


def _fast_columns(
    scope: Scope, attempt_prefix: str, dest_prefix: str, files: list[FileEntry]
) -> CheckedManifest | None:
    """The fast path of :func:`check_manifest_columns` for a plain manifest (see
    :func:`manifest_is_plain`), or None if any entry is in doubt.

    No Python code runs per entry (C loops with ``map``, joins, splits and scans; see
    :func:`_paths_below`): every source URI starts with the task attempt's URI prefix and
    every destination URI with the destination's (so a store path is the URI minus the
    root's prefix: a C slice), no path below its prefix has an empty segment or one
    starting with a dot (``.``, ``..``), no destination is the job's temporary directory
    or lies inside it, and every size is in range."""
    fast_src, fast_dst, _ = _fast_prefixes_for(scope, attempt_prefix, dest_prefix, files[0])
    if not fast_src:
        return None
    sizes: list[int] = list(map(_get_size, files))
    if min(sizes) < 0 or max(sizes) > MAX_SIZE:
        return None
    src_side = _paths_below(list(map(_get_source, files)), fast_src, attempt_prefix, with_dirs=False)
    dst_side = _paths_below(list(map(_get_dest, files)), fast_dst, dest_prefix, with_dirs=True)
    if src_side is None or dst_side is None:
        return None
    srcs, dsts, dirs = src_side[0], dst_side[0], dst_side[1]
    temp = scope.temp_dir
    joined_dirs = "\n" + "\n".join(dirs) + "\n"
    if "\n" + temp + "/" in joined_dirs or "\n" + temp + "\n" in joined_dirs:
        return None  # a destination inside the job's temporary directory
    if parent(temp) in dirs and temp in dsts:
        return None  # the job's temporary directory itself
    etags: list[str | None] = list(map(_get_etag, files))
    if "" in etags:
        etags = [e or None for e in etags]
    return CheckedManifest(srcs, dsts, sizes, etags, dirs)


def _paths_below(
    uris: list[str], uri_prefix: str, path_prefix: str, *, with_dirs: bool
) -> tuple[list[str], set[str]] | None:
    """Store paths of ``uris`` (and, ``with_dirs``, the set of their parent directories),
    if every URI starts with ``uri_prefix``, which ends with the store path prefix
    ``path_prefix`` (a sane path and ``/``: :func:`_sane_prefix`), and what follows it is
    a sane relative path: no empty segment (so no trailing ``/``), none starting with a dot
    (``.``, ``..``, ``.x``: those go the exact way). Else None.

    No Python code per entry: C loops over the URIs, and either the segments of all the
    tails at once (one join and one split) or, ``with_dirs``, the file names at once and
    each *distinct* directory (:func:`_dirs_below`)."""
    if not path_prefix or not all(map(str.startswith, uris, itertools.repeat(uri_prefix))):
        return None  # no prefix (the store's root): the exact path
    paths = list(map(operator.itemgetter(slice(len(uri_prefix) - len(path_prefix), None)), uris))
    if with_dirs:
        parts = list(map(str.rpartition, paths, itertools.repeat("/")))
        names = list(map(_third, parts))
        dirs = set(map(_first, parts))
        if not all(names) or "." in "".join(map(_first, names)) or not _dirs_below(dirs, path_prefix):
            return None
        return paths, dirs
    segs = "/".join(map(operator.itemgetter(slice(len(uri_prefix), None)), uris)).split("/")
    if not all(segs) or "." in "".join(map(_first, segs)):
        return None
    return paths, set()


_SANE_TAILS: set[str] = set()
"""Directory tails (below a prefix) already found sane, e.g. ``day=01``: partition
directories repeat across manifests. Bounded (cleared when large)."""


def _dirs_below(dirs: set[str], prefix: str) -> bool:
    """True if each of ``dirs`` is ``prefix`` without its ``/``, or ``prefix`` followed by
    segments that are not empty and do not start with a dot. ``dirs`` are parents of paths
    that start with ``prefix``, so each is one of those two forms or ``prefix`` itself."""
    if prefix in dirs:  # a path "prefix" + "/name": an empty segment
        return False
    tails = set(map(operator.itemgetter(slice(len(prefix), None)), dirs))
    tails.discard("")  # prefix[:-1]
    new = tails - _SANE_TAILS
    for t in new:
        if not all(seg and seg[0] != "." for seg in t.split("/")):
            return False
    if new:
        if len(_SANE_TAILS) > 100_000:
            _SANE_TAILS.clear()
        _SANE_TAILS.update(new)
    return True


def _exact_columns(
    m: TaskManifest, scope: Scope, attempt_prefix: str, dest_prefix: str, name: str
) -> CheckedManifest:
    """The exact path of :func:`check_manifest_columns`: every URI parsed and decoded."""
    to_path = path_mapper(scope.root_uri)
    temp_prefix = scope.temp_dir + "/"
    srcs: list[str] = []
    dsts: list[str] = []
    sizes: list[int] = []
    etags: list[str | None] = []
    dirs: set[str] = set()
    for f in m.files:
        if not 0 <= f.size <= MAX_SIZE:
            what = "negative size" if f.size < 0 else "size too large:"
            raise ManifestError(f"{what} {f.size} for {_show(f.dest)}", manifest=name)
        src = _path(to_path, f.source, "source", name, file=True)
        dst = _path(to_path, f.dest, "destination", name, file=True)
        if not src.startswith(attempt_prefix):
            raise ManifestError(
                f"source {_show(f.source)} is outside the task attempt directory of {m.task_attempt_id}",
                manifest=name,
            )
        if not dst.startswith(dest_prefix) or dst.startswith(temp_prefix) or dst == scope.temp_dir:
            _check_dest(scope, dst, f.dest, name)
            raise ManifestError(
                f"destination {_show(f.dest)} is the destination directory itself", manifest=name
            )
        srcs.append(src)
        dsts.append(dst)
        sizes.append(f.size)
        etags.append(f.etag or None)
        dirs.add(dst.rpartition("/")[0])
    return CheckedManifest(srcs, dsts, sizes, etags, dirs)


def _fast_prefixes_for(
    scope: Scope, attempt_prefix: str, dest_prefix: str, first: FileEntry
) -> tuple[str, str, str]:
    """URI prefixes (source, destination, temporary dir) for the fast path, chosen to match
    the URI form of the manifest's first entry; empty strings when not applicable."""
    if not (_sane_prefix(attempt_prefix[:-1]) and (not dest_prefix or _sane_prefix(dest_prefix[:-1]))):
        return "", "", ""
    prefixes = fast_prefixes(scope.root_uri)
    src_root = next((p for p in prefixes if first.source.startswith(p)), None)
    dst_root = next((p for p in prefixes if first.dest.startswith(p)), None)
    if src_root is None or dst_root is None:
        return "", "", ""
    return src_root + attempt_prefix, dst_root + dest_prefix, dst_root + scope.temp_dir + "/"


def _sane_prefix(p: str) -> bool:
    """A store path that maps to itself as a URI path: :func:`~amcommit.paths.is_plain_path`, or
    one whose only oddity is segments starting with a dot that are not ``.``/``..`` (a table's
    staging folder, ``.hoodie/.aux/amcommit/...``)."""
    if is_plain_path(p):
        return True
    return (
        bool(p)
        and p.isascii()
        and p.isprintable()
        and not any(c in p for c in "%?#\\")
        and all(seg not in ("", ".", "..") for seg in p.split("/"))
    )


def _check_dest(scope: Scope, path: str, uri: str, name: str) -> None:
    if not is_within(path, scope.dest):
        raise ManifestError(f"destination {_show(uri)} is outside the job's destination", manifest=name)
    if is_within(path, scope.temp_dir):
        raise ManifestError(
            f"destination {_show(uri)} lies inside the job's temporary directory", manifest=name
        )
