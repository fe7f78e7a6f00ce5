"""The pure checks behind issue 23, items 1 and 2: their fast paths (C loops over many names
at once) decide exactly what the one-name-at-a-time rules decide."""

from __future__ import annotations

import random

import pytest

from amcommit.store.names import AZURE_LIMITS, GCS_LIMITS, NameLimits, local_limits, shorten
from amcommit.table.format.naming import _folder_problem, _name_problem, foreign_file, new_file_id
from amcommit.table.format.writestats import paths_of_task_stats, task_write_stats

INSTANT = "20261127120000000"
LIMITS = {"local": local_limits("/data/root"), "azure": AZURE_LIMITS, "gcs": GCS_LIMITS}


def test_limits_of_each_store() -> None:
    local = LIMITS["local"]
    assert local.problem("d/" + "y" * 255) is None
    assert "256 bytes" in (local.problem("d/" + "y" * 256) or "")
    assert "256 bytes" in (local.problem("d/" + "é" * 128) or "")  # 128 characters, 256 bytes
    assert local.problem("/".join(["y" * 200] * 20)) is None  # 4,019 bytes
    assert "bytes long (UTF-8)" in (local.problem("/".join(["y" * 200] * 21)) or "")  # PATH_MAX
    assert AZURE_LIMITS.problem("y" * 1024) is None and AZURE_LIMITS.problem("é" * 1024) is None
    assert "1,025 characters" in (AZURE_LIMITS.problem("y" * 1025) or "")
    assert "1,026 characters" in (AZURE_LIMITS.problem("\U0001f600" * 513) or "")  # UTF-16 units
    assert AZURE_LIMITS.problem("/".join("y" * 254)) is None
    assert "255 path segments" in (AZURE_LIMITS.problem("/".join("y" * 255)) or "")
    assert GCS_LIMITS.problem("y" * 1024) is None and GCS_LIMITS.problem("é" * 512) is None
    assert "1,026 bytes" in (GCS_LIMITS.problem("é" * 513) or "")
    assert "\n" not in shorten("x" * 5000) and len(shorten("x" * 5000)) <= 80


def _random_path(rng: random.Random) -> str:
    alphabet = ["y", "é", "\U0001f600", "a", "/"]
    n = rng.choice([10, 60, 64, 127, 128, 255, 256, 300, 511, 512, 1023, 1024, 1025, 2000])
    s = "".join(rng.choice(alphabet) if rng.random() < 0.1 else "y" for _ in range(n))
    segs = [x or "s" for x in s.split("/")]
    return "/".join(segs)


@pytest.mark.parametrize("store", list(LIMITS))
def test_first_problem_agrees_with_problem(store: str) -> None:
    limits: NameLimits = LIMITS[store]
    rng = random.Random(23)
    for _ in range(300):
        files = [f"d/p=1/{_random_path(rng)}" for _ in range(rng.randint(1, 6))]
        dirs = {f.rpartition("/")[0] for f in files}
        want = next(((p, w) for p in sorted(dirs) if (w := limits.problem(p)) is not None), None)
        if want is None:
            want = next(((f, w) for f in files if (w := limits.problem(f)) is not None), None)
        got = limits.first_problem(files, sorted(dirs))
        assert (got is None) == (want is None), (files, got, want)
        if got is not None:
            assert limits.problem(got[0]) is not None


def _name(rng: random.Random) -> str:
    fid, token, inst = new_file_id(), f"{rng.randint(0, 9)}-0-0", INSTANT
    spoil = rng.randrange(12)
    if spoil == 0:
        fid = ""
    elif spoil == 1:
        token = ""
    elif spoil == 2:
        token = "a_b"
    elif spoil == 3:
        fid = "." + fid
    elif spoil == 4:
        inst = "20200101000000000"
    elif spoil == 5:
        return f"{fid}_{token}_{inst}.json"
    elif spoil == 6:
        return f"{fid}{token}_{inst}.parquet"
    elif spoil == 7:
        return f"_{fid}_{token}_{inst}.parquet"
    return f"{fid}_{token}_{inst}.parquet"


def test_foreign_file_fast_path_agrees_with_the_rule() -> None:
    rng = random.Random(23)
    for _ in range(500):
        files = [f"p={rng.randint(0, 3)}/{_name(rng)}" for _ in range(rng.randint(1, 5))]
        want = next(
            ((f, w) for f in files if (w := _name_problem(f.rpartition("/")[2], INSTANT)) is not None), None
        )
        assert foreign_file(files, ["p=0"], INSTANT, 1) == want, files


@pytest.mark.parametrize(
    ("folder", "depth", "exact", "bad"),
    [
        ("", 0, True, False),
        ("p=1", 1, True, False),
        ("p=1/q=2", 1, True, True),
        ("p=1", 2, False, False),
        ("p=1", 2, True, True),
        (".hoodie", 1, True, True),
        ("p=1/_tmp", 2, True, True),
        ("p_x=1", 1, True, False),
    ],
)
def test_partition_folders(folder: str, depth: int, exact: bool, bad: bool) -> None:
    assert (_folder_problem(folder, depth, exact=exact) is not None) == bad


def test_paths_of_task_stats_exact_with_escapes() -> None:
    rels = [
        f'p="q"/{new_file_id()}_0-0-0_{INSTANT}.parquet',
        f"p=é\\x/{new_file_id()}_1-0-0_{INSTANT}.parquet",
    ]
    raw = task_write_stats([(r, 10) for r in rels], {r: 1 for r in rels})
    assert sorted(paths_of_task_stats(raw) or []) == sorted(rels)
    assert paths_of_task_stats(raw.replace('"path"', '"pat"', 1)) is None
