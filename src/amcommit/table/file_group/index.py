"""The footer index lookup: which base files may hold a key (key range and bloom filter from
their footers), confirmed by reading only the ``_hoodie_record_key`` column. Reads only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from amcommit.committer.config import CommitterConfig
from amcommit.paths import join
from amcommit.store.base import Store, local_os_path
from amcommit.table.format.bloom import (
    FooterIndex,
    parse_footer,
)

if TYPE_CHECKING:
    import pyarrow as pa
from amcommit.table.file_group.merge import KEY_COLUMN

T = TypeVar("T")

# -- I/O --------------------------------------------------------------------------------


TAIL_GUESS = 64 * 1024
"""Bytes first read from a base file's end to get its footer in one request: amcommit's
footers hold a bloom filter sized to the file's keys (~7.2 Base64 bytes a key at fpp 1e-9:
a file of up to ~8,000 keys). A longer footer (Hudi's writers', and amcommit's before it
sized filters: ~432 KB with the default filter) costs one more read, of exactly the footer,
and raises :attr:`IndexReader.tail_guess` for the files read after it (a table of such files
costs one read a footer after the first)."""


WHOLE_READ_BUDGET = 256 * 1024 * 1024
"""Bytes of whole base files :meth:`IndexReader.key_array` may hold at once, read ahead for
their rewrite (:attr:`IndexReader.whole`)."""


def key_chunks(md: Any, column: str) -> list[tuple[int, int]]:
    """``(start, length)`` of every column chunk of ``column`` in a Parquet file's metadata
    (dictionary page first where there is one). Pure."""
    out = []
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        for j in range(group.num_columns):
            c = group.column(j)
            if c.path_in_schema != column:
                continue
            start = c.data_page_offset
            if (
                c.has_dictionary_page
                and c.dictionary_page_offset is not None
                and c.dictionary_page_offset > 0
            ):
                start = min(start, c.dictionary_page_offset)
            out.append((start, c.total_compressed_size))
    return out


@dataclass
class IndexReader:
    """Reads base files of the table. Local files: the footer, or the key column, straight
    from the file. Elsewhere: the footer by a ranged read of the file's end, the key column
    by ranged reads of its column chunks (:func:`~amcommit.store.base.read_range`; a store
    without ranged reads answers with whole objects). ``bytes_read`` counts what came back."""

    store: Store
    dest: str
    config: CommitterConfig
    footers: dict[str, tuple[Any, bytes, int]] = field(default_factory=dict)
    """Path -> (FileMetaData, footer bytes with its length and magic, file size)."""
    key_columns: dict[str, pa.ChunkedArray] = field(default_factory=dict)
    """Path -> its key column as :meth:`key_array` read it, until :meth:`table` reads the
    rest of the file (the key column is not decoded twice)."""
    bytes_read: int = 0
    index_bytes_read: int = 0
    """Of :attr:`bytes_read`, what footers and key columns took (not whole base files)."""
    whole: dict[str, bytes] = field(default_factory=dict)
    """Path -> the whole file, read by :meth:`key_array` (``whole=True``) for its rewrite,
    until :meth:`table` takes it."""
    whole_budget: int = WHOLE_READ_BUDGET
    """The most bytes :attr:`whole` holds at once; past it key columns are read alone."""
    tail_guess: int = TAIL_GUESS
    """Bytes read from a file's end for its footer: :data:`TAIL_GUESS`, raised to the
    longest footer met so far (a table's files tend to have footers of one size)."""

    def _local(self, rel: str) -> str | None:
        return local_os_path(self.store, join(self.dest, rel))

    def local_path(self, rel: str) -> str | None:
        """The OS path of base file ``rel`` where the store is local files, else None."""
        return self._local(rel)

    async def _range(self, rel: str, start: int, length: int) -> bytes:
        from amcommit.store.retry import RetryingStore

        data = await RetryingStore.of(self.store, self.config).get_range(join(self.dest, rel), start, length)
        self.bytes_read += len(data)
        self.index_bytes_read += len(data)
        return data

    async def _size(self, rel: str, known: int) -> int:
        if known > 0:
            return known
        from amcommit.store.retry import RetryingStore

        return (await RetryingStore.of(self.store, self.config).stat(join(self.dest, rel))).size

    async def footer(self, rel: str, size: int = 0) -> FooterIndex:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from amcommit.errors import ManifestError

        local = self._local(rel)
        if local is not None:
            import anyio

            md = await anyio.to_thread.run_sync(pq.read_metadata, local)
            return parse_footer(md.metadata, where=rel)
        size = await self._size(rel, size)
        guess = self.tail_guess
        tail = await self._range(rel, max(0, size - guess), min(size, guess))
        if len(tail) < 8 or tail[-4:] != b"PAR1":
            raise ManifestError(f"{rel}: not a Parquet file (no footer)")
        n = int.from_bytes(tail[-8:-4], "little") + 8
        if n > len(tail):
            tail = await self._range(rel, size - n, n)
        footer = tail[-n:]
        md = pq.read_metadata(pa.BufferReader(footer))
        self.tail_guess = max(self.tail_guess, n)  # a footer that parsed: its length is real
        self.footers[rel] = (md, footer, size)
        return parse_footer(md.metadata, where=rel)

    async def keys(self, rel: str) -> list[str]:
        col: list[str] = (await self.key_array(rel)).to_pylist()
        return col

    async def key_array(self, rel: str, *, whole: bool = False) -> pa.ChunkedArray:
        """The file's ``_hoodie_record_key`` column (only that column is read). ``whole``:
        the file will most likely be rewritten (its footer's bloom filter holds a key of the
        batch): on an object store the whole file is read in one request instead, kept for
        :meth:`table` (one request less per rewritten file), while :attr:`whole` holds less
        than :attr:`whole_budget`."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        local = self._local(rel)
        if local is not None:
            import anyio

            t = await anyio.to_thread.run_sync(lambda: pq.read_table(local, columns=[KEY_COLUMN]))
            self.key_columns[rel] = t.column(0)
            return t.column(0)
        if rel not in self.footers:
            await self.footer(rel)
        md, footer, size = self.footers[rel]
        if whole and sum(map(len, self.whole.values())) + size <= self.whole_budget:
            import anyio

            from amcommit.store.retry import RetryingStore

            data = await RetryingStore.of(self.store, self.config).get(join(self.dest, rel))
            self.bytes_read += len(data)
            self.whole[rel] = data
            t = await anyio.to_thread.run_sync(
                lambda: pq.read_table(pa.BufferReader(data), columns=[KEY_COLUMN])
            )
            self.key_columns[rel] = t.column(0)
            return t.column(0)
        # a file of the same size holding only the footer and the key column's chunks:
        # Parquet's reader reads nothing else for one column
        sparse = bytearray(size)
        sparse[size - len(footer) :] = footer
        for start, length in key_chunks(md, KEY_COLUMN):
            sparse[start : start + length] = await self._range(rel, start, length)
        col = pq.read_table(pa.BufferReader(bytes(sparse)), columns=[KEY_COLUMN]).column(0)
        self.key_columns[rel] = col
        return col

    async def table(self, rel: str) -> pa.Table:
        """The whole base file (decoded in a worker thread; its key column taken from
        :attr:`key_columns` if :meth:`key_array` read it)."""
        return await self.apply(rel, _same)

    async def apply(self, rel: str, fn: Callable[[pa.Table], T], limiter: Any = None) -> T:
        """``fn`` of the whole base file (:meth:`table`), decoded and passed to ``fn`` in one
        worker-thread call (``limiter``: the anyio capacity limiter of that call)."""
        import anyio
        import pyarrow as pa

        keys = self.key_columns.pop(rel, None)
        local = self._local(rel)
        if local is not None:
            return await anyio.to_thread.run_sync(lambda: fn(_read_base_file(local, keys)), limiter=limiter)
        from amcommit.store.retry import RetryingStore

        data = self.whole.pop(rel, None)  # read by key_array already
        if data is None:
            data = await RetryingStore.of(self.store, self.config).get(join(self.dest, rel))
            self.bytes_read += len(data)
        source = pa.BufferReader(data)
        return await anyio.to_thread.run_sync(lambda: fn(_read_base_file(source, keys)), limiter=limiter)


def _same(t: pa.Table) -> pa.Table:
    return t


def _read_base_file(source: Any, keys: pa.ChunkedArray | None) -> pa.Table:
    """A base file as a table; with ``keys`` (its key column, already read) the other
    columns only are decoded and ``keys`` put in its place."""
    import pyarrow.parquet as pq

    if keys is None:
        return pq.read_table(source)
    f = pq.ParquetFile(source)
    names = f.schema_arrow.names
    if KEY_COLUMN not in names:
        return f.read()
    at = names.index(KEY_COLUMN)
    t = f.read(columns=[n for n in names if n != KEY_COLUMN])
    return t.add_column(at, f.schema_arrow.field(at), keys)
