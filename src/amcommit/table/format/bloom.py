"""Hudi's record-key index in a base file's Parquet footer: key range and bloom filter. Pure.

Every base file Hudi's writers produce carries four entries in its Parquet footer key-value
metadata (``HoodieBloomFilterWriteSupport.finalizeMetadata``; all values are strings):

- ``org.apache.hudi.bloomfilter``: the bloom filter of the file's record keys, serialized
  (below) and Base64-encoded with the standard alphabet and padding (``java.util.Base64``).
  Readers also accept the legacy key ``com.uber.hoodie.bloomfilter``.
- ``hoodie_bloom_filter_type_code``: ``DYNAMIC_V0``; written only for the dynamic filter
  (a missing code means ``SIMPLE``).
- ``hoodie_min_record_key`` / ``hoodie_max_record_key``: the least and greatest record key
  of the file (absent for a file without rows). Hudi's Avro writer compares keys as Java
  strings (UTF-16 code units), its Spark row writer as UTF-8 bytes: the two orders differ
  only for keys holding characters beyond U+FFFF, so :func:`key_in_range` never rules a
  file out by its range for such keys. amcommit writes the Java-string order.

Every record written adds its key to the filter and range (duplicates too).

Sizing (amcommit's, :attr:`BloomSettings.sized`, on by default): Hudi's writers create every
file's filter for ``num_entries`` keys before they know how many the file will hold, so a
1-row file carries the same ~431 KB filter as a 60,000-row one. amcommit knows a file's keys
when it writes the footer, so it builds the filter Hudi's writer would build with
``num_entries`` = the file's key count (at least 1, at most the configured ``num_entries``):
same format, same fpp for the file's keys, a size proportional to them (43.1 bits a key at
fpp 1e-9: ~5.4 bytes, ~7.2 in the footer's Base64). A file with more keys than
``num_entries`` gets the fixed filter byte for byte (rows of ``num_entries`` keys, growing
to ``max_entries``, then round robin). The format records its own size (``nr``, the
vector size and the row count are serialized; ``max_entries`` is not), so Hudi's readers
(``InternalDynamicBloomFilter.readFields``, which reads whatever sizes the header states,
and ``membershipTest``, which asks every row) read it as they read their own; a Hudi writer
that rewrites the file group builds a new filter from its own settings. ``sized=False``
gives Hudi's fixed-size filter.

Defaults (Hudi's ``HoodieIndexConfig``, unchanged in 0.14 / 0.15 / 1.x):
``hoodie.index.bloom.num_entries`` = 60000, ``hoodie.index.bloom.fpp`` = 1e-9,
``hoodie.bloom.index.filter.type`` = ``DYNAMIC_V0``,
``hoodie.bloom.index.filter.dynamic.max.entries`` = 100000. Sizes
(``BloomFilterUtils``): bits = ceil(n * -ln(fpp) / ln(2)^2) = 2,587,966 and hashes =
ceil(ln(2) * bits / n) = 30; the hash is Hadoop's MurmurHash (hash type 1; 0 = Jenkins).

Serialization (Java ``DataOutput``: big-endian ints):

- a standard filter (``SIMPLE``; Hadoop's ``BloomFilter``, Hudi's ``InternalBloomFilter``):
  int32 -1 (the format version), int32 number of hashes, int8 hash type, int32 vector size
  in bits, then ceil(bits / 8) bytes: bit ``i`` is ``byte[i // 8] & (1 << (i % 8))``;
- ``DYNAMIC_V0`` (``HoodieDynamicBoundedBloomFilter`` over ``InternalDynamicBloomFilter``):
  the same 13-byte header, int32 ``nr`` (= num_entries), int32 the number of keys added
  since the last row was created, int32 the number of rows, then each row as a standard
  filter (header and bits). Keys go to the last row; when it holds ``nr`` keys a new row is
  added while rows * nr < max_entries; past that bound ("reached max") the next key goes to
  row 0 and every later key to row ``j % rows`` for j = 0, 1, ... (Hudi's round robin).
  A key might be in the filter if any row says so.

Positions of a key (``HashFunction``): with h_0 = 0, h_{i+1} = murmur(key bytes, seed h_i)
(a signed 32-bit result), position i = |h_{i+1} rem bits| (Java's remainder, sign of the
dividend). The key's bytes are its UTF-8 encoding.

MurmurHash (Hadoop's port of MurmurHash 2.0, 32 bits): m = 0x5bd1e995, h = seed ^ length;
each 4-byte little-endian word k: k *= m; k ^= k >>> 24; k *= m; h *= m; h ^= k; the 1..3
trailing bytes are xored in as *sign-extended* Java bytes (byte[len-3] << 16,
byte[len-2] << 8, byte[len-1]) followed by h *= m; then h ^= h >>> 13; h *= m;
h ^= h >>> 15. All arithmetic modulo 2^32.

The vector of positions is computed with numpy for a whole batch of keys at once.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from amcommit.errors import ManifestError

__all__ = [
    "BLOOM_FILTER_KEY",
    "DEFAULT_SETTINGS",
    "MAX_KEY",
    "MIN_KEY",
    "OLD_BLOOM_FILTER_KEY",
    "TYPE_CODE_KEY",
    "BloomFilter",
    "BloomSettings",
    "FooterIndex",
    "build_footer",
    "key_in_range",
    "murmur_hash",
    "parse_footer",
]

BLOOM_FILTER_KEY = "org.apache.hudi.bloomfilter"
OLD_BLOOM_FILTER_KEY = "com.uber.hoodie.bloomfilter"
TYPE_CODE_KEY = "hoodie_bloom_filter_type_code"
MIN_KEY = "hoodie_min_record_key"
MAX_KEY = "hoodie_max_record_key"

SIMPLE = "SIMPLE"
DYNAMIC_V0 = "DYNAMIC_V0"
JENKINS_HASH = 0
MURMUR_HASH = 1
_VERSION = -1
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class BloomSettings:
    """Hudi's bloom index settings (defaults = Hudi's)."""

    num_entries: int = 60_000
    """``hoodie.index.bloom.num_entries``."""
    fpp: float = 1e-9
    """``hoodie.index.bloom.fpp``."""
    max_entries: int = 100_000
    """``hoodie.bloom.index.filter.dynamic.max.entries``."""
    type_code: str = DYNAMIC_V0
    """``hoodie.bloom.index.filter.type``: ``DYNAMIC_V0`` or ``SIMPLE``."""
    sized: bool = True
    """amcommit's (no Hudi name): size each file's filter to its key count (module doc);
    False: every filter is built for ``num_entries`` keys, as Hudi's writers build it."""

    def __post_init__(self) -> None:
        if self.type_code not in (SIMPLE, DYNAMIC_V0):
            raise ValueError(f"bloom filter type {self.type_code!r}: expected SIMPLE or DYNAMIC_V0")
        if self.num_entries <= 0 or not 0.0 < self.fpp < 1.0:
            raise ValueError("bloom filter: num_entries must be > 0 and fpp within (0, 1)")

    def for_keys(self, n: int) -> BloomSettings:
        """The settings of the filter of a file of ``n`` keys: with :attr:`sized`,
        ``num_entries`` = ``n`` clamped to [1, num_entries] (the rest unchanged); else self."""
        if not self.sized:
            return self
        want = max(1, min(n, self.num_entries))
        return self if want == self.num_entries else replace(self, num_entries=want)

    @property
    def vector_size(self) -> int:
        """``BloomFilterUtils.getBitSize``."""
        return math.ceil(self.num_entries * (-math.log(self.fpp) / (math.log(2) * math.log(2))))

    @property
    def num_hashes(self) -> int:
        """``BloomFilterUtils.getNumHashes``."""
        return math.ceil(math.log(2) * self.vector_size / self.num_entries)


DEFAULT_SETTINGS = BloomSettings()


def _s32(v: int) -> int:
    v &= _MASK
    return v - (1 << 32) if v & 0x80000000 else v


def murmur_hash(data: bytes, seed: int) -> int:
    """Hadoop's MurmurHash of ``data`` with ``seed`` (see the module doc): a signed 32-bit int.
    The reference (scalar) form; :func:`_positions` computes the same for many keys."""
    n = len(data)
    h = (seed ^ n) & _MASK
    full = n >> 2
    for i in range(full):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    left = n - (full << 2)
    if left:
        if left >= 3:
            h ^= (_sext(data[n - 3]) << 16) & _MASK
        if left >= 2:
            h ^= (_sext(data[n - 2]) << 8) & _MASK
        h ^= _sext(data[n - 1]) & _MASK
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return _s32(h)


def _sext(b: int) -> int:
    """A Java byte as an int (sign-extended), as an unsigned 32-bit pattern."""
    return b | 0xFFFFFF00 if b & 0x80 else b


def _mixed_words(words: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    """Each 4-byte word mixed as MurmurHash mixes it (k *= m; k ^= k >>> 24; k *= m): it does
    not depend on the seed, so it is computed once for all the hashes of a key."""
    m = np.uint32(_M)
    with np.errstate(over="ignore"):
        k = words * m
        k ^= k >> np.uint32(24)
        k *= m
    return k


def _tail_xor(tail: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32] | None:
    """What the 1..3 trailing bytes (sign-extended) xor into the hash (seed-independent)."""
    left = tail.shape[1]
    if not left:
        return None
    t = tail[:, left - 1].copy()
    if left >= 2:
        t ^= tail[:, left - 2] << np.uint32(8)
    if left >= 3:
        t ^= tail[:, left - 3] << np.uint32(16)
    return t


def _murmur_rows(
    mixed: npt.NDArray[np.uint32], tail: npt.NDArray[np.uint32] | None, n: int, seeds: npt.NDArray[np.uint32]
) -> npt.NDArray[np.uint32]:
    """MurmurHash of many keys of one byte length ``n``: ``mixed`` (keys x n//4) their words
    mixed (:func:`_mixed_words`), ``tail`` their trailing bytes' xor (:func:`_tail_xor`),
    ``seeds`` per key."""
    m = np.uint32(_M)
    h = seeds ^ np.uint32(n)
    with np.errstate(over="ignore"):
        for j in range(mixed.shape[1]):
            h *= m
            h ^= mixed[:, j]
        if tail is not None:
            h ^= tail
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    return h


def _positions(keys: Sequence[bytes], nb_hash: int, vector_size: int) -> npt.NDArray[np.int64]:
    """Bit positions (keys x nb_hash) of each key, in key order (``HashFunction.hash``)."""
    out = np.empty((len(keys), nb_hash), dtype=np.int64)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if len(keys) and not lengths.min():
        raise ValueError("bloom filter: an empty key cannot be added or tested (Hudi refuses it)")
    for n in np.unique(lengths).tolist():
        idx = np.nonzero(lengths == n)[0]
        raw = np.frombuffer(b"".join([keys[i] for i in idx.tolist()]), dtype=np.uint8).reshape(len(idx), n)
        full = n >> 2
        words = np.ascontiguousarray(raw[:, : 4 * full]).view("<u4").astype(np.uint32).reshape(len(idx), full)
        tail_bytes = raw[:, 4 * full :].astype(np.uint32)
        tail = np.where(tail_bytes & 0x80, tail_bytes | np.uint32(0xFFFFFF00), tail_bytes).astype(np.uint32)
        mixed, txor = _mixed_words(words), _tail_xor(tail)
        seeds = np.zeros(len(idx), dtype=np.uint32)
        cols = np.empty((len(idx), nb_hash), dtype=np.int64)
        for i in range(nb_hash):
            seeds = _murmur_rows(mixed, txor, n, seeds)
            # Java's |h rem size|: the truncated remainder's magnitude is |h| mod size
            cols[:, i] = np.abs(seeds.view(np.int32).astype(np.int64)) % vector_size
        out[idx] = cols
    return out


def _row_of(i: int, nr: int, rows_bound: int) -> int:
    """The dynamic filter's row that the ``i``-th key added (0-based) goes to."""
    full = rows_bound * nr
    if i < full:
        return i // nr
    if i == full:
        return 0
    return (i - full - 1) % rows_bound


def _rows_bound(nr: int, max_nr: int) -> int:
    """How many rows a dynamic filter grows to: the least r >= 1 with r * nr >= max_nr."""
    return max(1, -(-max_nr // nr))


@dataclass
class BloomFilter:
    """A Hudi bloom filter (``SIMPLE`` or ``DYNAMIC_V0``): rows of packed bits (one row for
    ``SIMPLE``), each ``ceil(vector_size / 8)`` bytes in Hudi's bit order."""

    type_code: str
    vector_size: int
    nb_hash: int
    hash_type: int = MURMUR_HASH
    nr: int = 0
    """Keys per row (``DYNAMIC_V0``)."""
    current: int = 0
    """Keys added since the last row was created (``DYNAMIC_V0``), as Hudi serializes it."""
    rows: list[npt.NDArray[np.uint8]] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        keys: Sequence[str],
        settings: BloomSettings = DEFAULT_SETTINGS,
        *,
        max_entries: int | None = None,
    ) -> BloomFilter:
        """The filter Hudi's writer builds after adding ``keys`` in this order, with
        ``settings`` as :meth:`BloomSettings.for_keys` sizes them for ``keys``."""
        settings = settings.for_keys(len(keys))
        size, nb = settings.vector_size, settings.num_hashes
        nbytes = (size + 7) // 8
        pos = _positions([k.encode("utf-8") for k in keys], nb, size)
        n = len(keys)
        if settings.type_code == SIMPLE:
            assignment = [np.arange(n)]
            current = 0
        else:
            nr = settings.num_entries
            bound = _rows_bound(nr, settings.max_entries if max_entries is None else max_entries)
            full = bound * nr
            if n <= full:
                nrows = 1 if n == 0 else (n - 1) // nr + 1
                current = n - (nrows - 1) * nr
            else:
                nrows = bound
                current = n - (bound - 1) * nr
            which = np.arange(n, dtype=np.int64) // nr
            if n > full:  # past the bound: key `full` to row 0, then round robin from row 0
                which[full] = 0
                which[full + 1 :] = (np.arange(full + 1, n, dtype=np.int64) - full - 1) % bound
            assignment = [np.nonzero(which == r)[0] for r in range(nrows)]
        rows = []
        for idx in assignment:
            bits = np.zeros(nbytes * 8, dtype=bool)
            bits[pos[idx].ravel()] = True
            rows.append(np.packbits(bits, bitorder="little"))
        return cls(
            type_code=settings.type_code,
            vector_size=size,
            nb_hash=nb,
            hash_type=MURMUR_HASH,
            nr=settings.num_entries if settings.type_code == DYNAMIC_V0 else 0,
            current=current,
            rows=rows,
        )

    def _header(self) -> bytes:
        return struct.pack(">iiBi", _VERSION, self.nb_hash, self.hash_type, self.vector_size)

    def to_bytes(self) -> bytes:
        """The Java serialization (see the module doc)."""
        if self.type_code == SIMPLE:
            return self._header() + self.rows[0].tobytes()
        parts = [self._header(), struct.pack(">iii", self.nr, self.current, len(self.rows))]
        for row in self.rows:
            parts.append(self._header())
            parts.append(row.tobytes())
        return b"".join(parts)

    def serialize(self) -> str:
        """The footer value: :meth:`to_bytes` in Base64."""
        return base64.b64encode(self.to_bytes()).decode("ascii")

    @classmethod
    def parse(cls, value: str | bytes, type_code: str | None = None) -> BloomFilter:
        """A filter from its footer value; ValueError if it is not a Hudi bloom filter."""
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("not Base64") from None
        code = type_code or SIMPLE
        if code not in (SIMPLE, DYNAMIC_V0):
            raise ValueError(f"unknown bloom filter type {code!r}")
        off = 0

        def header() -> tuple[int, int, int]:
            nonlocal off
            if len(data) < off + 13:
                raise ValueError("truncated")
            ver, nb, ht, size = struct.unpack_from(">iiBi", data, off)
            if ver != _VERSION:  # > 0: Hadoop's old unversioned form (Jenkins hash): not Hudi's
                raise ValueError(f"unsupported filter version {ver}")
            off += 13
            if nb <= 0 or size <= 0 or ht != MURMUR_HASH:
                raise ValueError(f"unsupported hashes={nb} type={ht} size={size}")
            return nb, ht, size

        def bits(size: int) -> npt.NDArray[np.uint8]:
            nonlocal off
            n = (size + 7) // 8
            if len(data) < off + n:
                raise ValueError("truncated")
            row = np.frombuffer(data, dtype=np.uint8, count=n, offset=off)  # read-only view
            off += n
            return row

        nb, ht, size = header()
        if code == SIMPLE:
            f = cls(SIMPLE, size, nb, ht, rows=[bits(size)])
        else:
            if len(data) < off + 12:
                raise ValueError("truncated")
            nr, current, nrows = struct.unpack_from(">iii", data, off)
            off += 12
            if nrows <= 0:
                raise ValueError(f"{nrows} rows")
            rows = []
            for _ in range(nrows):
                rnb, rht, rsize = header()
                if (rnb, rht, rsize) != (nb, ht, size):
                    raise ValueError("rows of another shape")
                rows.append(bits(rsize))
            f = cls(DYNAMIC_V0, size, nb, ht, nr=nr, current=current, rows=rows)
        if off != len(data):
            raise ValueError(f"{len(data) - off} bytes after the filter")
        return f

    def might_contain(self, keys: Sequence[str]) -> npt.NDArray[np.bool_]:
        """For each key: True if it may be in the filter, False if it surely is not."""
        if not keys:
            return np.zeros(0, dtype=bool)
        pos = _positions([k.encode("utf-8") for k in keys], self.nb_hash, self.vector_size)
        byte, bit = pos >> 3, (pos & 7).astype(np.uint8)
        hit = np.zeros(len(keys), dtype=bool)
        for row in self.rows:
            hit |= np.all((row[byte] >> bit) & 1 == 1, axis=1)
        return hit


_NON_BMP = re.compile("[\U00010000-\U0010ffff]")


def _java_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def key_range(keys: Sequence[str]) -> tuple[str, str] | None:
    """The least and greatest key in Java's string order (UTF-16 code units), None if empty."""
    if not keys:
        return None
    if any(_NON_BMP.search(k) for k in keys):
        return min(keys, key=_java_order), max(keys, key=_java_order)
    return min(keys), max(keys)


def beyond_bmp(keys: Sequence[str]) -> list[str]:
    """The keys holding a character beyond U+FFFF (ordered differently by Hudi's writers)."""
    if max("".join(keys), default="\0") < "\U00010000":  # one C-level scan for the usual case
        return []
    return [k for k in keys if _NON_BMP.search(k)]


def key_in_range(key: str, lo: str | None, hi: str | None) -> bool:
    """False only if ``key`` surely lies outside [lo, hi] (None bounds: unknown, True)."""
    if lo is None or hi is None:
        return True
    if _NON_BMP.search(key) or _NON_BMP.search(lo) or _NON_BMP.search(hi):
        return True  # Hudi's two writers order such keys differently (module doc)
    return lo <= key <= hi


def build_footer(keys: Sequence[str], settings: BloomSettings = DEFAULT_SETTINGS) -> dict[str, str]:
    """The footer entries Hudi's writers add for a file holding ``keys`` (in write order)."""
    bloom = BloomFilter.build(keys, settings)
    out = {BLOOM_FILTER_KEY: bloom.serialize()}
    if settings.type_code == DYNAMIC_V0:
        out[TYPE_CODE_KEY] = DYNAMIC_V0
    rng = key_range(keys)
    if rng is not None:
        out[MIN_KEY], out[MAX_KEY] = rng
    return out


class FooterIndex:
    """What a base file's footer says about its keys: range and filter (either may be
    missing: a file written without them can hold any key). The filter is decoded on first
    use (:attr:`bloom`): a file that the key range rules out costs no decoding."""

    def __init__(
        self,
        min_key: str | None,
        max_key: str | None,
        bloom: BloomFilter | None = None,
        *,
        raw_bloom: str | bytes | None = None,
        type_code: str | None = None,
        where: str = "",
    ) -> None:
        self.min_key = min_key
        self.max_key = max_key
        self._bloom = bloom
        self._raw = raw_bloom
        self._type_code = type_code
        self._where = where

    @property
    def has_bloom(self) -> bool:
        return self._bloom is not None or self._raw is not None

    @property
    def bloom(self) -> BloomFilter | None:
        """The filter; ManifestError naming the file if it does not decode (never silently
        ignored: ruling out files on a wrong filter loses updates)."""
        if self._bloom is None and self._raw is not None:
            try:
                self._bloom = BloomFilter.parse(self._raw, self._type_code)
            except ValueError as e:
                raise ManifestError(
                    f"{self._where or 'a base file'}: its bloom filter does not decode ({e})"
                ) from None
            self._raw = None
        return self._bloom

    def may_hold(self, keys: Sequence[str]) -> list[bool]:
        """For each key: False only if the file surely does not hold it."""
        in_range = [key_in_range(k, self.min_key, self.max_key) for k in keys]
        return self._filtered(keys, in_range)

    def _filtered(self, keys: Sequence[str], in_range: Sequence[bool]) -> list[bool]:
        if not self.has_bloom or not any(in_range):
            return list(in_range)
        ask = [k for k, r in zip(keys, in_range, strict=True) if r]
        bloom = self.bloom
        assert bloom is not None
        maybe = iter(bloom.might_contain(ask).tolist())
        return [bool(next(maybe)) if r else False for r in in_range]

    def may_hold_sorted(self, keys: Sequence[str], odd: Sequence[str] | None = None) -> list[str]:
        """The keys (sorted, in code point order) the file may hold: those within its range
        (found by bisection), then the filter's maybes. Keys with characters beyond U+FFFF
        are never ruled out by the range (:func:`key_in_range`); ``odd``: those among
        ``keys``, if the caller found them already (:func:`beyond_bmp`)."""
        return self.probe(self.in_range_sorted(keys, odd))

    def in_range_sorted(self, keys: Sequence[str], odd: Sequence[str] | None = None) -> list[str]:
        """The keys (sorted, in code point order) within the file's key range, found by
        bisection; keys with characters beyond U+FFFF are never ruled out by the range
        (:func:`key_in_range`; ``odd``: those among ``keys``, as :meth:`may_hold_sorted`
        takes it). The first step of :meth:`may_hold_sorted`: no filter is decoded."""
        import bisect

        lo, hi = self.min_key, self.max_key
        if lo is None or hi is None or _NON_BMP.search(lo) or _NON_BMP.search(hi):
            return list(keys)
        cand = list(keys[bisect.bisect_left(keys, lo) : bisect.bisect_right(keys, hi)])
        cand += [k for k in (beyond_bmp(keys) if odd is None else odd) if not lo <= k <= hi]
        return cand

    def probe(self, cand: Sequence[str]) -> list[str]:
        """Of ``cand``, the keys the filter may hold (all of them without a filter). The
        second step of :meth:`may_hold_sorted`."""
        if not cand:
            return []
        bloom = self.bloom
        if bloom is None:
            return list(cand)
        return [k for k, m in zip(cand, bloom.might_contain(cand).tolist(), strict=True) if m]


def _text(v: str | bytes) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else v


def parse_footer(
    metadata: Mapping[str, str] | Mapping[bytes, bytes] | None, *, where: str = ""
) -> FooterIndex:
    """The index facts of a file's footer key-value metadata. A file without a filter or
    range yields None for them; a filter that does not decode is a ManifestError naming
    ``where`` when it is first used (:attr:`FooterIndex.bloom`)."""
    md: dict[str, str | bytes] = {_text(k): v for k, v in (metadata or {}).items()}
    lo, hi, code = md.get(MIN_KEY), md.get(MAX_KEY), md.get(TYPE_CODE_KEY)
    raw = md.get(BLOOM_FILTER_KEY, md.get(OLD_BLOOM_FILTER_KEY))
    return FooterIndex(
        None if lo is None else _text(lo),
        None if hi is None else _text(hi),
        raw_bloom=raw,
        type_code=None if code is None else _text(code),
        where=where,
    )
