"""Bounded-memory stream of rename entries for million-file jobs.

Manifests are decoded one at a time (a few in parallel) and their entries appended here as
MessagePack frames in an anonymous local temporary file; the rename stage reads them back
in batches. Only one batch is in memory per reader. Destination uniqueness is checked with
a set of 64-bit hashes (about 50 bytes per entry instead of the full path); hash
collisions are resolved exactly in a second pass over the spool, so the check is exact.
"""

from __future__ import annotations

import hashlib
import struct
import tempfile
from collections.abc import Iterator
from typing import IO

import msgspec

from amcommit.manifest import RenameEntry

_HDR = struct.Struct("<I")
Row = tuple[str, str, int, "str | None", int]
"""(src, dst, size, etag, manifest index)"""


def dest_hash(dst: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(dst.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
    )


class EntrySpool:
    """Append-only spool of :class:`RenameEntry` rows with exact duplicate detection."""

    def __init__(self, *, directory: str | None = None, batch_size: int = 2048) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="amcommit-spool-", dir=directory)
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(list[tuple[str, str, int, str | None, int]])
        self.batch_size = batch_size
        self.count = 0
        self.total_bytes = 0
        self.hashes: set[int] = set()
        self.suspects: set[int] = set()
        self.sources: list[str] = []
        """Manifest names, indexed by the row's manifest index."""

    def add_manifest(self, name: str) -> int:
        self.sources.append(name)
        return len(self.sources) - 1

    def append(self, entries: list[RenameEntry], manifest_index: int) -> None:
        """Add the entries of one manifest (frames of ``batch_size``)."""
        rows: list[Row] = []
        for e in entries:
            h = dest_hash(e.dst)
            if h in self.hashes:
                self.suspects.add(h)
            else:
                self.hashes.add(h)
            rows.append((e.src, e.dst, e.size, e.etag, manifest_index))
            self.total_bytes += e.size
            if len(rows) >= self.batch_size:
                self._write(rows)
                rows = []
        if rows:
            self._write(rows)
        self.count += len(entries)

    def _write(self, rows: list[Row]) -> None:
        payload = self._enc.encode(rows)
        self._file.seek(0, 2)
        self._file.write(_HDR.pack(len(payload)))
        self._file.write(payload)

    def batches(self) -> Iterator[list[Row]]:
        """Read the spool from the start, one frame at a time."""
        pos = 0
        while True:
            self._file.seek(pos)
            hdr = self._file.read(_HDR.size)
            if len(hdr) < _HDR.size:
                return
            (n,) = _HDR.unpack(hdr)
            rows = self._dec.decode(self._file.read(n))
            pos += _HDR.size + n
            yield rows

    def entries(self) -> Iterator[RenameEntry]:
        for rows in self.batches():
            for src, dst, size, etag, _ in rows:
                yield RenameEntry(src, dst, size, etag)

    def find_duplicates(self, limit: int = 10) -> list[tuple[str, list[str]]]:
        """Exact duplicate destinations (with the manifests naming them), up to ``limit``."""
        if not self.suspects:
            return []
        owners: dict[str, list[str]] = {}
        for rows in self.batches():
            for _, dst, _, _, mi in rows:
                if dest_hash(dst) in self.suspects:
                    owners.setdefault(dst, []).append(self.sources[mi])
        dups = [(d, names) for d, names in owners.items() if len(names) > 1]
        return sorted(dups)[:limit]

    def has_dest(self, dst: str) -> bool:
        """Probably a destination of this job (exact for 'False'; hash-based for 'True')."""
        return dest_hash(dst) in self.hashes

    def close(self) -> None:
        self._file.close()
