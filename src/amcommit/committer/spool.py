"""Bounded-memory stream of rename entries for million-file jobs.

Manifests are decoded one at a time (a few in parallel) and their entries appended here as
MessagePack frames in an anonymous local temporary file; the rename stage reads them back
in batches. Only one batch is in memory per reader. Destination uniqueness is checked with
a set of 64-bit hashes (about 50 bytes per entry instead of the full path); hash
collisions are resolved exactly in a second pass over the spool, so the check is exact.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from typing import IO

import msgspec

from amcommit.manifest import RenameEntry

_HDR = struct.Struct("<I")
Frame = tuple[int, list[RenameEntry]]
"""(manifest index, entries of that manifest)"""


def dest_hash(dst: str) -> int:
    """64-bit hash of a destination: Python's string hash (fast, cached on the string,
    per process). The spool never persists hashes; collisions are resolved exactly."""
    return hash(dst)


class EntrySpool:
    """Append-only spool of :class:`RenameEntry` rows with exact duplicate detection."""

    def __init__(self, *, directory: str | None = None, batch_size: int = 2048) -> None:
        if directory is not None:  # "~/spool" as a user writes it in --conf / Spark conf
            directory = os.path.expanduser(directory)
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="amcommit-spool-", dir=directory)
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(tuple[int, list[RenameEntry]])
        self.batch_size = batch_size
        self.count = 0
        self.total_bytes = 0
        self.hashes: set[int] = set()
        self.suspects: set[int] = set()
        self.sources: list[str] = []
        """Manifest names, indexed by a frame's manifest index."""

    def add_manifest(self, name: str) -> int:
        self.sources.append(name)
        return len(self.sources) - 1

    def append(self, entries: list[RenameEntry], manifest_index: int) -> None:
        """Add the entries of one manifest (frames of at most ``batch_size``)."""
        hashes, suspects = self.hashes, self.suspects
        size = 0
        for e in entries:
            h = hash(e.dst)
            if h in hashes:
                suspects.add(h)
            else:
                hashes.add(h)
            size += e.size
        self.total_bytes += size
        step = self.batch_size
        for i in range(0, len(entries), step):
            self._write((manifest_index, entries[i : i + step]))
        self.count += len(entries)

    def _write(self, frame: Frame) -> None:
        payload = self._enc.encode(frame)
        self._file.seek(0, 2)
        self._file.write(_HDR.pack(len(payload)))
        self._file.write(payload)

    def frames(self) -> Iterator[Frame]:
        """Read the spool from the start, one frame at a time."""
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
        if not self.suspects:
            return []
        owners: dict[str, list[str]] = {}
        for mi, rows in self.frames():
            for e in rows:
                if hash(e.dst) in self.suspects:
                    owners.setdefault(e.dst, []).append(self.sources[mi])
        dups = [(d, names) for d, names in owners.items() if len(names) > 1]
        return sorted(dups)[:limit]

    def has_dest(self, dst: str) -> bool:
        """Probably a destination of this job (exact for 'False'; hash-based for 'True')."""
        return hash(dst) in self.hashes

    def close(self) -> None:
        self._file.close()
