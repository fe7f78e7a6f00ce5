"""``check_paths`` (the local store's check of a batch's paths by C scans) accepts and
refuses exactly what ``check_path`` does, path by path."""

from __future__ import annotations

import itertools

import pytest

from amcommit.errors import InvalidInput
from amcommit.paths import check_path
from amcommit.store.local import check_paths


def valid(p: str) -> bool:
    try:
        check_path(p, allow_root=False)
    except InvalidInput:
        return False
    return True


CASES = ["".join(t) for n in range(6) for t in itertools.product(["a", "/", ".", "\0", "b"], repeat=n)]
"""Every string of up to 5 characters of these (3,906): empty, '.' and '..' segments,
leading, trailing and doubled slashes, NULs, names starting with dots."""


def test_same_verdict_as_check_path_for_every_short_path() -> None:
    for case in CASES:
        for around in ([], ["x/y"], ["x/.y", "z.", "..w"]):
            paths = [*around, case, *around]
            if valid(case):
                check_paths(paths)
            else:
                with pytest.raises(InvalidInput) as e:
                    check_paths(paths)
                assert e.value.path == case  # the first bad path is named


def test_all_valid_at_once_and_empty() -> None:
    check_paths([c for c in CASES if valid(c)])
    check_paths([])
