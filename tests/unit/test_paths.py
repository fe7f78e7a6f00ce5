"""amcommit.paths (store-path algebra, URIs) and the local-files store capability."""

from __future__ import annotations

from pathlib import Path

import pytest

from amcommit.errors import InvalidInput
from amcommit.paths import (
    ancestors,
    basename,
    check_path,
    fast_prefixes,
    is_plain_path,
    is_within,
    join,
    parent,
    path_to_uri,
    relative_to,
    uri_to_path,
)
from amcommit.store.base import local_os_path
from amcommit.store.local import LocalStore
from amcommit.store.schemes import open_location
from amcommit.testing.faults import FaultyStore


def test_path_algebra() -> None:
    assert join("a", "", "/b/c/", "d") == "a/b/c/d" and join() == ""
    assert (parent("a/b/c"), parent("a"), basename("a/b/c"), basename("c")) == ("a/b", "", "c", "c")
    assert ancestors("a/b/c") == ["a", "a/b"] and ancestors("a") == []
    assert is_within("a/b", "a") and is_within("a", "a") and is_within("x", "")
    assert not is_within("ab", "a") and not is_within("a", "a/b")
    assert (relative_to("a/b/c", "a"), relative_to("a", "a"), relative_to("x", "")) == ("b/c", "", "x")
    with pytest.raises(InvalidInput, match="not below 'a'"):
        relative_to("ab/c", "a")


@pytest.mark.parametrize(
    "bad",
    ["/a", "a/", "a//b", "a/./b", "a/../b", "a/\x00", ".", "..", "./a", "../a", "a/.", "a/..", "a\x00b"],
)
def test_check_path_refuses(bad: str) -> None:
    with pytest.raises(InvalidInput):
        check_path(bad)
    assert check_path("a/b") == "a/b" and check_path("") == ""


@pytest.mark.parametrize("good", ["a", "a/b", ".hoodie/x", "a/.b", "a.b/c..d", "...", "a/...", "x/y.parquet"])
def test_check_path_accepts(good: str) -> None:
    assert check_path(good, allow_root=False) == good


def test_uri_round_trip_and_fast_path() -> None:
    root = "file:///data/"
    assert path_to_uri(root, "d/a b%.bin") == "file:///data/d/a%20b%25.bin"
    assert uri_to_path(root, "file:/data/d/a%20b%25.bin") == "d/a b%.bin"
    assert fast_prefixes(root) == ("file:///data/", "file:/data/", "file://localhost/data/")
    assert is_plain_path("d/a.bin") and not is_plain_path("d/a%20b") and not is_plain_path("d/../a")


async def test_local_files_capability(tmp_path: Path) -> None:
    async with LocalStore(str(tmp_path), fsync=False) as store:
        assert local_os_path(store, "a/b") == str(tmp_path / "a" / "b")
        assert local_os_path(store, "") == str(tmp_path)
        # a wrapper that must see every operation hides the files
        assert local_os_path(FaultyStore(store), "a/b") is None
    opened, path = open_location(str(tmp_path / "x"))
    async with opened:
        assert local_os_path(opened, path) == str(tmp_path / "x")
