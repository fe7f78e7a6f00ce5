"""Bounded-memory stream of rename entries for million-file jobs.

Manifests are decoded one at a time (a few in parallel) and their entries appended here as
MessagePack frames in an anonymous local temporary file; the rename stage reads them back
in batches. Only one batch is in memory per reader.

Destination uniqueness is checked with fixed-size 64-bit digests of the destinations
(Python's string hash, computed in C): :class:`DestIndex`. Appending only adds each
digest to a flat ``array('q')`` (8 bytes per entry, no Python object per entry); the
index is *sealed* (sorted, equal neighbours found) once, when it is first asked. With
numpy installed and a million digests or more, the sort is numpy's (about 1 s for 10
million digests, 8 bytes per entry in all); otherwise the digests go into a Python set at
sealing (about 70 bytes per entry: fine for millions of files, not for tens of millions). Digest collisions are
resolved exactly in a second pass over the spool (:meth:`EntrySpool.find_duplicates`), so
the duplicate check is exact either way.

Task attempts that write local files before uploading them (a Spark task into a cloud
store) spool them in a folder of their own, ``amcommit-<attempt id>-<random>`` in the temp
directory (:func:`attempt_spool_dir`), removed when the attempt ends. An attempt killed
(SIGKILL, OOM) leaves its folder; :func:`remove_stale_spools`, run when a task starts,
removes those whose owner, recorded in the folder, is provably dead.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import struct
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

import msgspec

from amcommit.liveness import ProcessId, proven_dead, this_process
from amcommit.manifest import RenameEntry


@functools.cache
def _numpy() -> Any:
    """numpy if installed (the ``fast`` extra), else None. Imported on first use: a task
    process that never seals an index does not pay for the import."""
    try:
        import numpy
    except ImportError:  # pragma: no cover - the set fallback is tested with use_numpy=False
        return None
    return numpy


_HDR = struct.Struct("<I")
_FLUSH_AT = 1 << 20
Frame = tuple[int, list[RenameEntry]]
"""(manifest index, entries of that manifest)"""


def dest_hash(dst: str) -> int:
    """64-bit digest of a destination: Python's string hash (fast, cached on the string,
    per process). The spool never persists digests; collisions are resolved exactly."""
    return hash(dst)


class DestIndex:
    """Multiset of destination digests: which digests occur more than once, and whether a
    digest occurs at all. ``use_numpy``: sort with numpy (bounded memory: 8 bytes per
    entry); None chooses numpy when it is installed and the index holds at least
    ``NUMPY_FROM`` digests when first asked (below that a set is faster than importing
    numpy, about 0.1 s, and small enough)."""

    NUMPY_FROM = 1_000_000

    def __init__(self, *, use_numpy: bool | None = None) -> None:
        self._use_numpy = use_numpy
        self._pending = array("q")
        self._sorted: Any = None  # numpy int64 array, sorted (numpy mode)
        self._set: set[int] = set()  # every digest (set mode)
        self._dups: set[int] = set()
        self.count = 0

    @property
    def use_numpy(self) -> bool:
        """Whether this index sorts its digests with numpy (decided on first use)."""
        if self._use_numpy is None:
            self._use_numpy = self.count >= self.NUMPY_FROM and _numpy() is not None
        elif self._use_numpy and _numpy() is None:
            raise RuntimeError("numpy is not installed")
        return self._use_numpy

    def add(self, dests: Iterable[str]) -> None:
        """Add the digests of ``dests`` (C loops only: no Python code per entry)."""
        before = len(self._pending)
        self._pending.extend(map(hash, dests))
        self.count += len(self._pending) - before

    def _seal(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, array("q")
        if self.use_numpy:
            np = _numpy()
            new = np.frombuffer(pending, dtype=np.int64)  # a view: no copy
            merged = new if self._sorted is None else np.concatenate((self._sorted, new))
            del new, pending
            merged.sort()  # in place, in C: about 1 s for 10 million digests
            same = merged[1:] == merged[:-1]
            if same.any():
                self._dups.update(merged[1:][same].tolist())
            self._sorted = merged
        else:
            batch = set(pending)
            if len(batch) != len(pending):  # a digest repeats inside the batch: which?
                counted: set[int] = set()
                for h in pending:
                    if h in counted:
                        self._dups.add(h)
                    counted.add(h)
            if not self._set.isdisjoint(batch):
                self._dups.update(self._set.intersection(batch))
            self._set.update(batch)

    def duplicates(self) -> set[int]:
        """Digests added more than once."""
        self._seal()
        return self._dups

    def __contains__(self, digest: int) -> bool:
        self._seal()
        if self.use_numpy:
            s = self._sorted
            if s is None:
                return False
            i = int(_numpy().searchsorted(s, digest))
            return i < len(s) and int(s[i]) == digest
        return digest in self._set


class EntrySpool:
    """Append-only spool of :class:`RenameEntry` rows with exact duplicate detection."""

    def __init__(
        self, *, directory: str | None = None, batch_size: int = 2048, use_numpy: bool | None = None
    ) -> None:
        if directory is not None:  # "~/spool" as a user writes it in --conf / Spark conf
            directory = os.path.expanduser(directory)
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="amcommit-spool-", dir=directory)
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(tuple[int, list[RenameEntry]])
        self.batch_size = batch_size
        self.count = 0
        self.total_bytes = 0
        self.index = DestIndex(use_numpy=use_numpy)
        self.sources: list[str] = []
        """Manifest names, indexed by a frame's manifest index."""
        self._buf = bytearray()
        """Frames not written to the file yet (written in chunks of about 1 MB)."""

    def add_manifest(self, name: str) -> int:
        self.sources.append(name)
        return len(self.sources) - 1

    def append(self, entries: list[RenameEntry], manifest_index: int) -> None:
        """Add the entries of one manifest (frames of at most ``batch_size``)."""
        if not entries:
            return
        srcs, dsts, sizes, etags, metas = zip(*entries, strict=True)
        meta = metas[0] if len(set(metas)) == 1 else None  # mixed: not known (the safe side)
        self.append_columns(srcs, dsts, sizes, etags, manifest_index, meta)

    def append_columns(
        self,
        srcs: Sequence[str],
        dsts: Sequence[str],
        sizes: Sequence[int],
        etags: Sequence[str | None],
        manifest_index: int,
        meta: bool | None = None,
    ) -> None:
        """Add the entries of one manifest given as columns (as :func:`check_manifest_columns`
        returns them): no Python code runs per entry. ``meta``: every entry's
        :attr:`~amcommit.manifest.RenameEntry.meta` (None is not stored: the default)."""
        n = len(dsts)
        if not n:
            return
        self.index.add(dsts)
        self.total_bytes += sum(sizes)
        if meta is None:
            rows: list[tuple[Any, ...]] = list(zip(srcs, dsts, sizes, etags, strict=True))
        else:
            rows = list(zip(srcs, dsts, sizes, etags, itertools.repeat(meta, n), strict=False))
        step = self.batch_size
        buf = self._buf
        for i in range(0, n, step):
            start = len(buf)
            buf += b"\0\0\0\0"
            self._enc.encode_into((manifest_index, rows[i : i + step] if n > step else rows), buf, -1)
            _HDR.pack_into(buf, start, len(buf) - start - _HDR.size)
        self.count += n
        if len(buf) >= _FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        """Write the frames buffered in memory at the end of the file."""
        if self._buf:
            self._file.seek(0, 2)
            self._file.write(self._buf)
            self._buf.clear()

    def frames(self) -> Iterator[Frame]:
        """Read the spool from the start, one frame at a time."""
        self._flush()
        pos = 0
        while True:
            self._file.seek(pos)
            hdr = self._file.read(_HDR.size)
            if len(hdr) < _HDR.size:
                return
            (n,) = _HDR.unpack(hdr)
            frame = self._dec.decode(self._file.read(n))
            pos += _HDR.size + n
            yield frame

    def entries(self) -> Iterator[RenameEntry]:
        for _, rows in self.frames():
            yield from rows

    def find_duplicates(self, limit: int = 10) -> list[tuple[str, list[str]]]:
        """Exact duplicate destinations (with the manifests naming them), up to ``limit``."""
        suspects = self.index.duplicates()
        if not suspects:
            return []
        owners: dict[str, list[str]] = {}
        for mi, rows in self.frames():
            for e in rows:
                if hash(e.dst) in suspects:
                    owners.setdefault(e.dst, []).append(self.sources[mi])
        dups = [(d, names) for d, names in owners.items() if len(names) > 1]
        return sorted(dups)[:limit]

    def has_dest(self, dst: str) -> bool:
        """Probably a destination of this job (exact for 'False'; digest-based for 'True')."""
        return hash(dst) in self.index

    def close(self) -> None:
        self._file.close()


ATTEMPT_SPOOL_PREFIX = "amcommit-attempt_"
"""Name prefix of the spool folders of task attempts (attempt ids start ``attempt_``)."""
SPOOL_OWNER_FILE = ".owner.json"
"""The owner record in an attempt's spool folder: the :class:`~amcommit.liveness.ProcessId`
of the process that created it."""


def attempt_spool_dir(attempt_id: str, directory: str | None = None) -> str:
    """Create the local spool folder of task attempt ``attempt_id``
    (``amcommit-<attempt_id>-<random>`` in ``directory``, default the system temp dir;
    ``tempfile.mkdtemp``: private, a fresh name) and record this process as its owner in it
    (:data:`SPOOL_OWNER_FILE`, written whole then renamed into place: atomic). Returns its
    path. The caller removes the folder when the attempt ends; a folder left by a killed
    owner is removed by a later :func:`remove_stale_spools`."""
    path = tempfile.mkdtemp(prefix=f"amcommit-{attempt_id}-", dir=directory)
    me = this_process()
    if me is not None:  # no /proc: no record, the folder is never judged stale
        tmp = os.path.join(path, SPOOL_OWNER_FILE + ".tmp")
        with open(tmp, "wb") as f:
            f.write(msgspec.json.encode(me))
        os.replace(tmp, os.path.join(path, SPOOL_OWNER_FILE))
    return path


def remove_stale_spools(directory: str | None = None) -> list[str]:
    """Remove the attempt spool folders (:func:`attempt_spool_dir`) in ``directory``
    (default the system temp dir) whose owner is provably dead
    (:func:`~amcommit.liveness.proven_dead`: on this host, boot and PID namespace, its
    process gone, its pid reused, or a zombie). Kept: folders of live owners, of owners
    that cannot be proven dead (another host or container sharing the directory), without
    a readable owner record (an earlier version's, or one whose owner was killed before it
    wrote the record), and folders not owned by this user. One listing of the directory;
    never raises (a folder that cannot be removed is left). Returns the removed paths."""
    base = os.path.expanduser(directory) if directory is not None else tempfile.gettempdir()
    removed: list[str] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    uid = os.getuid() if hasattr(os, "getuid") else None
    for entry in entries:
        if not entry.name.startswith(ATTEMPT_SPOOL_PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if uid is not None and entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            with open(os.path.join(entry.path, SPOOL_OWNER_FILE), "rb") as f:
                owner = msgspec.json.decode(f.read(), type=ProcessId)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            continue
        if proven_dead(owner):
            with contextlib.suppress(OSError):
                shutil.rmtree(entry.path)
            if not os.path.lexists(entry.path):
                removed.append(entry.path)
    return removed
