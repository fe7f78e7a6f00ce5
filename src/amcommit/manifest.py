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

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, NamedTuple

import msgspec

from amcommit.errors import InvalidInput, ManifestError
from amcommit.iostats import IOStatisticsSnapshot
from amcommit.paths import fast_prefixes, is_plain_path, is_within, path_mapper

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


class FileEntry(msgspec.Struct, omit_defaults=True):
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


class DirEntry(msgspec.Struct):
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


def check_manifest(
    m: TaskManifest, *, job_id: str, scope: Scope, name: str = "", plain: bool = False
) -> tuple[list[RenameEntry], set[str]]:
    """Validate a manifest for job ``job_id``; return its renames and directories (paths).

    ``plain``: the caller checked the raw JSON with :func:`manifest_is_plain`; otherwise the
    decoded URIs are checked here (:func:`uris_are_plain`). Either enables the fast path;
    every entry is still checked, and any doubt takes the exact path.
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
    to_path = path_mapper(scope.root_uri)
    meta = False if m.extra_data.get(SOURCE_META_KEY) == "none" else None
    entries: list[RenameEntry] = []
    dirs: set[str] = set()
    dest_prefix = scope.dest + "/" if scope.dest else ""
    temp_prefix = scope.temp_dir + "/"
    files = m.files
    fast_src = fast_dst = fast_tmp = ""
    if files and not plain:
        plain = uris_are_plain(files)
    if plain and files:
        fast_src, fast_dst, fast_tmp = _fast_prefixes_for(scope, attempt_prefix, dest_prefix, files[0])
    if fast_src:
        # fast path: prefix checks and slices; any entry in doubt goes the exact way below.
        # The prefixes are sane paths (_sane_prefix); what follows them must hold no empty
        # or dot-leading segment: searched from each prefix's last "/" on
        ls, ld = len(fast_src) - len(attempt_prefix), len(fast_dst) - len(dest_prefix)
        ks, kd = len(fast_src) - 1, len(fast_dst) - 1
        slow = []
        append = entries.append
        add_dir = dirs.add
        for f in files:
            s_uri, d_uri = f.source, f.dest
            if (
                0 <= f.size <= MAX_SIZE
                and s_uri.startswith(fast_src)
                and d_uri.startswith(fast_dst)
                and not d_uri.startswith(fast_tmp)
                and d_uri[-1] != "/"
                and s_uri[-1] != "/"
                and len(s_uri) > len(fast_src)
                and s_uri.find("//", ks) < 0
                and s_uri.find("/.", ks) < 0
                and d_uri.find("//", kd) < 0
                and d_uri.find("/.", kd) < 0
            ):
                dst = d_uri[ld:]
                append(RenameEntry(s_uri[ls:], dst, f.size, f.etag or None, meta))
                add_dir(dst.rpartition("/")[0])
                continue
            slow.append(f)
        files = slow
    for f in files:
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
        entries.append(RenameEntry(src, dst, f.size, f.etag or None, meta))
        d = dst.rpartition("/")[0]
        if d != scope.dest:
            dirs.add(d)
    for de in m.directories:
        d = _path(to_path, de.dir, "directory", name)
        _check_dest(scope, d, de.dir, name)
        if d != scope.dest:
            dirs.add(d)
    dirs.discard(scope.dest)
    return entries, dirs


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
    staging folder, ``.hoodie/.temp/...``)."""
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
