"""quote_plain (the fast path of URL-encoding object names) matches urllib's quote."""

from __future__ import annotations

import random
from urllib.parse import quote

import pytest

from amcommit.store.http import quote_plain

NAMES = [
    "",
    "a",
    "warehouse/events/day=03/part-00012-00003.bin",
    "a b/c%20d#e?f&g",
    "x:y+z,w@v~u_t.s-r",
    "ünïcødé/名前",
    "//double//slash/",
    "\x00nul",
]


@pytest.mark.parametrize("safe", ["", "/", "/~"])
@pytest.mark.parametrize("name", NAMES)
def test_same_as_quote(name: str, safe: str) -> None:
    assert quote_plain(name, safe) == quote(name, safe=safe)


def test_same_as_quote_random() -> None:
    rng = random.Random(7)
    alphabet = "aZ09_.-~/=:+,@%# ?&;é\u20ac\x7f"
    for _ in range(5000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        for safe in ("", "/", "/~"):
            assert quote_plain(s, safe) == quote(s, safe=safe), (s, safe)
