"""The pure table contract: instant times, base file names, instant files, planning."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from amcommit.errors import ConfigError, ManifestError
from amcommit.table.format.model import (
    Action,
    CommitMetadata,
    Instant,
    Operation,
    State,
    WriteStat,
    decode_commit_metadata,
    encode_commit_metadata,
    parse_instant_file,
)
from amcommit.table.format.naming import (
    base_file_name,
    check_instant,
    format_instant,
    next_instant,
    parse_base_file_name,
    parse_instant,
)
from amcommit.table.timeline.instants import LoadedCommit, changes, snapshot


def test_instant_times_are_17_digit_utc() -> None:
    t = datetime(2026, 11, 23, 10, 4, 5, 678901, tzinfo=UTC)
    assert format_instant(t) == "20261123100405678"
    assert parse_instant("20261123100405678") == datetime(2026, 11, 23, 10, 4, 5, 678000, tzinfo=UTC)
    assert parse_instant("20261123100405") == datetime(2026, 11, 23, 10, 4, 5, tzinfo=UTC)
    with pytest.raises(ConfigError, match="2026-11-23"):
        check_instant("2026-11-23")


def test_next_instant_is_strictly_later_than_a_lagging_clock() -> None:
    now = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)
    assert next_instant(now) == "20261123100000000"
    assert next_instant(now, after="20261123100000000") == "20261123100000001"
    assert next_instant(now, after="20261123110000") == "20261123110000001"
    assert next_instant(now, after="20261123095959999") == "20261123100000000"


def test_base_file_names_round_trip_and_refuse_underscores() -> None:
    name = base_file_name("0a1b-0", "3-7-12", "20261123100405678")
    assert name == "0a1b-0_3-7-12_20261123100405678.parquet"
    parsed = parse_base_file_name(name)
    assert parsed is not None and parsed.file_id == "0a1b-0" and parsed.instant == "20261123100405678"
    assert parse_base_file_name("part-00000.parquet") is None
    with pytest.raises(ConfigError, match="a_b"):
        base_file_name("a_b", "1-1-1", "20261123100405678")


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("20261123100405678.commit", Instant("20261123100405678", "commit", State.COMPLETED)),
        (
            "20261123100405678.replacecommit.inflight",
            Instant("20261123100405678", "replacecommit", State.INFLIGHT),
        ),
        ("20261123100405678.commit.requested", Instant("20261123100405678", "commit", State.REQUESTED)),
        ("20261123100405.inflight", Instant("20261123100405", "commit", State.INFLIGHT)),
        ("hoodie.properties", None),
        ("20261123100405678.commit.tmp", None),
    ],
)
def test_instant_file_names(name: str, want: Instant | None) -> None:
    got = parse_instant_file(name)
    assert got == want
    if got is not None and len(got.time) == 17:
        assert got.file_name == name


def _commit(t: str, files: dict[str, list[str]], replace: dict[str, list[str]] | None = None) -> LoadedCommit:
    op = Operation.INSERT if replace is None else Operation.INSERT_OVERWRITE
    meta = CommitMetadata(
        partition_to_write_stats={
            p: [
                WriteStat(file_id=f, path=f"{p}/{f}_0-0-0_{t}.parquet", partition_path=p, num_writes=1)
                for f in fs
            ]
            for p, fs in files.items()
        },
        operation_type=op.value,
        partition_to_replace_file_ids=replace,
    )
    return LoadedCommit(Instant(t, op.action.value, State.COMPLETED), meta)


def test_snapshot_time_travel_and_changes() -> None:
    t1, t2, t3 = "20260101000000000", "20260102000000000", "20260103000000000"
    commits = [
        _commit(t3, {"d=1": ["c"]}, replace={"d=1": ["a"]}),
        _commit(t1, {"d=1": ["a"], "d=2": ["b"]}),
        _commit(t2, {"d=2": ["b2"]}),
    ]
    ids = lambda fs: [(f.partition, f.file_id) for f in fs]  # noqa: E731
    # Sorted by partition, then path ("b2_..." sorts before "b_...").
    assert ids(snapshot(commits)) == [("d=1", "c"), ("d=2", "b2"), ("d=2", "b")]
    assert ids(snapshot(commits, t1)) == [("d=1", "a"), ("d=2", "b")]
    assert ids(snapshot(commits, t2)) == [("d=1", "a"), ("d=2", "b2"), ("d=2", "b")]
    ch = changes(commits, t1, t3)
    assert [i.time for i in ch.instants] == [t2, t3]
    assert ids(ch.added) == [("d=2", "b2"), ("d=1", "c")]
    assert ch.replaced == [("d=1", "a")]
    assert changes(commits, t3).instants == []


def test_commit_metadata_json_as_hudi_writes_it() -> None:
    meta = CommitMetadata(
        partition_to_write_stats={"": [WriteStat(file_id="x-0", path="x-0_0-1-0_20260101000000000.parquet")]},
        operation_type="INSERT",
        extra_metadata={"schema": "{}"},
    )
    data = encode_commit_metadata(meta)
    raw = json.loads(data)  # compact JSON (readers ignore whitespace)
    assert raw["partitionToWriteStats"][""][0]["fileId"] == "x-0" and raw["operationType"] == "INSERT"
    assert "partitionToReplaceFileIds" not in raw and b"partitionToReplaceFileIds" not in data
    assert decode_commit_metadata(data) == meta
    replace = CommitMetadata(
        partition_to_write_stats=meta.partition_to_write_stats,
        operation_type="INSERT_OVERWRITE",
        partition_to_replace_file_ids={"": ["old-0"]},
    )
    rdata = encode_commit_metadata(replace)
    assert json.loads(rdata)["partitionToReplaceFileIds"] == {"": ["old-0"]}
    assert decode_commit_metadata(rdata) == replace
    # Unknown keys (Hudi Java writes more) are ignored.
    assert (
        decode_commit_metadata(b'{"partitionToWriteStats": {}, "runtimeStats": 1}').operation_type
        == "UNKNOWN"
    )
    with pytest.raises(ManifestError, match=r"x\.commit"):
        decode_commit_metadata(b"{", where="x.commit")
    assert Operation.INSERT_OVERWRITE_TABLE.action is Action.REPLACE_COMMIT
