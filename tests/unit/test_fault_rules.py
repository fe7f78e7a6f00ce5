"""The one fault-rule matcher (RuleMatcher) shared by FaultyStore, the GCS double and the
ADLS Gen2 test server."""

from __future__ import annotations

import random

import pytest

from amcommit.testing.faults import FaultRule
from amcommit.testing.gcs_double import Fault
from tests.servers.adls_server import ServerFault


@pytest.mark.parametrize(
    ("ops", "path", "op", "paths", "selected"),
    [
        (None, None, "get", ("a",), True),
        (frozenset({"rename"}), None, "get", ("a",), False),
        (frozenset({"rename"}), "*.parquet", "rename", ("x/a.tmp", "x/a.parquet"), True),  # dst matches
        (None, "*.parquet", "put", ("x/a.json",), False),
        (None, "x/*", "put", ("x/deep/a",), True),  # fnmatch: * crosses '/'
    ],
)
def test_selects(
    ops: frozenset[str] | None, path: str | None, op: str, paths: tuple[str, ...], selected: bool
) -> None:
    assert FaultRule("error", ops, path).selects(op, paths) is selected


def test_after_then_count() -> None:
    rule = FaultRule("error", None, None, count=2, after=3)
    assert [rule.check("get", ("a",)) for _ in range(7)] == [False] * 3 + [True] * 2 + [False] * 2
    assert (rule.matched, rule.fired) == (7, 2)


def test_probability_uses_the_given_rng() -> None:
    rule = FaultRule("error", None, None, probability=0.5)
    rng = random.Random(7)
    fired = [rule.check("get", ("a",), rng) for _ in range(200)]
    assert 60 < sum(fired) < 140 and rule.matched == 200


def test_the_test_servers_use_the_same_matcher() -> None:
    gcs = Fault("status", frozenset({"rewrite"}), count=1, path="d/*", after=1)
    assert [gcs.check("rewrite", ("d/x",)) for _ in range(3)] == [False, True, False]
    assert not gcs.check("get", ("d/x",)) and gcs.matched == 3
    adls = ServerFault("status", "rename", path="*.bin", count=None)
    assert adls.check("rename", ("a.tmp", "b.bin")) and not adls.check("delete", ("b.bin",))
    assert adls.ops == frozenset({"rename"}) and adls.fired == 1
