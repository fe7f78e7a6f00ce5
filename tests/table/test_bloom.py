"""Hudi's footer index (amcommit.table.format.bloom) against footers written by Hudi itself."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest

from amcommit.errors import ManifestError
from amcommit.table.format import bloom
from amcommit.table.format.bloom import BloomFilter, BloomSettings, build_footer, murmur_hash, parse_footer

VECTORS = Path(__file__).parent.parent / "fixtures" / "hudi_bloom" / "hudi_rs_footers.json.gz"


def _vectors() -> list[dict[str, Any]]:
    with gzip.open(VECTORS, "rt") as f:
        out: list[dict[str, Any]] = json.load(f)
    return out


@pytest.mark.parametrize("vec", _vectors(), ids=lambda v: v["source"].rsplit("/", 1)[-1][:24])
def test_hudi_footer_decodes_and_encodes_identically(vec: dict[str, Any]) -> None:
    keys, footer = vec["keys"], vec["footer"]
    idx = parse_footer(footer, where=vec["source"])
    assert idx.bloom is not None and idx.bloom.type_code == "DYNAMIC_V0"
    assert (idx.bloom.vector_size, idx.bloom.nb_hash, idx.bloom.nr) == (2_587_966, 30, 60_000)
    assert idx.may_hold(keys) == [True] * len(keys)
    # Hudi's writers' fixed size: byte for byte, every entry
    assert build_footer(keys, BloomSettings(sized=False)) == footer
    # amcommit's filter sized to the file's keys: the same entries but a smaller filter,
    # in the same format (read by the parser that reads Hudi's)
    sized = build_footer(keys)
    assert {k: v for k, v in sized.items() if k != bloom.BLOOM_FILTER_KEY} == {
        k: v for k, v in footer.items() if k != bloom.BLOOM_FILTER_KEY
    }
    mine = parse_footer(sized).bloom
    assert mine is not None and mine.type_code == "DYNAMIC_V0" and (mine.nr, mine.current) == (len(keys),) * 2
    assert len(sized[bloom.BLOOM_FILTER_KEY]) < len(footer[bloom.BLOOM_FILTER_KEY]) // 10
    assert mine.might_contain(keys).all()


def test_filter_rules_out_absent_keys() -> None:
    vec = _vectors()[0]
    idx = parse_footer(vec["footer"])
    assert idx.bloom is not None
    absent = [f"k{i}" for i in range(2000)]
    assert not idx.bloom.might_contain(absent).any()  # fpp 1e-9
    assert idx.may_hold(["zzz"]) == [False]  # out of range


def test_vectorised_murmur_equals_scalar_reference() -> None:
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 23))) for _ in range(400)]
    pos = bloom._positions(keys, 5, 1_000_003)
    for k, row in zip(keys, pos, strict=True):
        h, want = 0, []
        for _ in range(5):
            h = murmur_hash(k, h)
            want.append(abs(int(h - int(h / 1_000_003) * 1_000_003)))  # Java's remainder
        assert row.tolist() == want


def test_dynamic_filter_grows_rows_then_round_robin() -> None:
    s = BloomSettings(num_entries=10, fpp=0.01, max_entries=25)
    keys = [f"key-{i}" for i in range(45)]
    f = BloomFilter.build(keys, s)
    assert len(f.rows) == 3 and f.current == 45 - 20
    again = BloomFilter.parse(f.serialize(), "DYNAMIC_V0")
    assert again.to_bytes() == f.to_bytes() and again.might_contain(keys).all()
    # keys 0-9 row 0, 10-19 row 1, 20-29 row 2, key 30 row 0, then 31 -> 0, 32 -> 1, ...
    for i, want in [(5, 0), (15, 1), (25, 2), (30, 0), (31, 0), (32, 1), (33, 2), (34, 0)]:
        assert bloom._row_of(i, 10, 3) == want
    few = BloomFilter.build(keys[:10], s)
    assert len(few.rows) == 1 and few.current == 10


def test_simple_filter_has_no_type_code() -> None:
    s = BloomSettings(num_entries=100, fpp=0.001, type_code="SIMPLE")
    footer = build_footer(["b", "a", "c"], s)
    assert bloom.TYPE_CODE_KEY not in footer
    assert (footer[bloom.MIN_KEY], footer[bloom.MAX_KEY]) == ("a", "c")
    idx = parse_footer(footer)
    assert idx.bloom is not None and idx.bloom.type_code == "SIMPLE"
    assert idx.may_hold(["a", "b", "c"]) == [True, True, True]


def test_key_range_in_java_order_and_never_wrongly_ruled_out() -> None:
    keys = ["\uffff", "\U0001f600"]  # UTF-16: D83D.. < FFFF; code points: FFFF < 1F600
    assert bloom.key_range(keys) == ("\U0001f600", "\uffff")
    assert bloom.key_in_range("\U0001f601", "a", "b")  # not ruled out by a range


def test_bad_filter_is_one_line_error() -> None:
    with pytest.raises(ManifestError, match=r"x\.parquet: its bloom filter does not decode"):
        assert parse_footer(
            {bloom.BLOOM_FILTER_KEY: "AAAA", bloom.TYPE_CODE_KEY: "DYNAMIC_V0"}, where="x.parquet"
        ).bloom


def test_sorted_lookup_agrees_with_per_key_lookup() -> None:
    vec = _vectors()[-1]
    idx = parse_footer(vec["footer"])
    probe = sorted([*vec["keys"], "0", "zzzz", "\U0001f600", *[f"{i:x}" for i in range(300)]])
    want = [k for k, m in zip(probe, idx.may_hold(probe), strict=True) if m]
    assert idx.may_hold_sorted(probe) == want and set(vec["keys"]) <= set(want)
