"""File groups and slices (pure) and Merge-on-Read log file names."""

from __future__ import annotations

import pytest

from amcommit.errors import ConfigError
from amcommit.table.file_group.model import FileVersion, LogFile, group_files
from amcommit.table.format.naming import LogFileName, log_file_name, parse_log_file_name

FID = "6d2a9c1e-7c39-4a5e-9f0b-0d6d3b2f1a11-0"


def test_log_file_name_round_trips_hudis_form() -> None:
    name = log_file_name(FID, "20260101000000000", 3, "1-0-1")
    assert name == f".{FID}_20260101000000000.log.3_1-0-1"
    assert parse_log_file_name(name) == LogFileName(FID, "20260101000000000", 3, "1-0-1")
    # the name of a Java-written log file (../shared/MOR.md)
    java = ".b8f4e2a3-0c8d-4f57-a4ce-1f5e3b6bd6a8-0_20240101120000000.log.1_0-25-31"
    assert parse_log_file_name(java) is not None
    for bad in (
        f"{FID}_1-0-1_20260101000000000.parquet",
        f".{FID}_2026.log.1_1-0-1",
        f".{FID}_20260101000000000.log.0_1",
    ):
        assert parse_log_file_name(bad) is None


@pytest.mark.parametrize(
    ("file_id", "version", "token"), [("a_b", 1, "1-0-1"), (FID, 0, "1-0-1"), (FID, 1, "1_0")]
)
def test_log_file_name_refuses_bad_parts(file_id: str, version: int, token: str) -> None:
    with pytest.raises(ConfigError):
        log_file_name(file_id, "20260101000000000", version, token)


def _base(fid: str, t: str) -> FileVersion:
    return FileVersion("p=a", fid, f"p=a/{fid}_1-0-1_{t}.parquet", t, 10, 1)


def _log(fid: str, base: str, v: int, t: str) -> LogFile:
    return LogFile("p=a", fid, f"p=a/.{fid}_{base}.log.{v}_1-0-1", base, v, t, 5)


def test_group_files_puts_logs_in_the_slice_of_their_base_instant() -> None:
    t1, t2, t3, t4 = "20260101000000001", "20260101000000002", "20260101000000003", "20260101000000004"
    groups = group_files(
        [_base("g", t1), _base("g", t3), _base("h", t2)],
        [_log("g", t1, 2, t2), _log("g", t1, 1, t2), _log("g", t3, 1, t4), _log("k", t2, 1, t2)],
    )
    assert [(g.file_id, [s.base_instant for s in g.slices]) for g in groups] == [
        ("g", [t1, t3]),
        ("h", [t2]),
        ("k", [t2]),
    ]
    g = groups[0]
    assert [log.version for log in g.slices[0].logs] == [1, 2]
    assert g.latest.base is not None and g.latest.base.instant == t3 and g.latest.latest_instant == t4
    assert g.as_of(t2) is g.slices[0] and g.as_of(None) is g.latest and g.as_of("20250101000000000") is None
    log_only = groups[2].latest
    assert log_only.base is None and len(log_only.logs) == 1


def test_file_groups_of_a_timeline_hold_deltacommit_logs_and_match_the_snapshot() -> None:
    from amcommit.table.format.model import CommitMetadata, Instant, WriteStat
    from amcommit.table.timeline.instants import LoadedCommit, file_groups, snapshot

    t1, t2, t3 = "20260101000000001", "20260101000000002", "20260101000000003"

    def commit(
        t: str, action: str, *stats: WriteStat, replaced: dict[str, list[str]] | None = None
    ) -> LoadedCommit:
        meta = CommitMetadata(
            partition_to_write_stats={"p=a": list(stats)}, partition_to_replace_file_ids=replaced
        )
        return LoadedCommit(Instant(t, action, "completed"), meta)

    base = WriteStat(file_id="g", path=f"p=a/g_1-0-1_{t1}.parquet", partition_path="p=a", num_writes=3)
    other = WriteStat(file_id="h", path=f"p=a/h_1-0-1_{t1}.parquet", partition_path="p=a", num_writes=1)
    log = WriteStat(file_id="g", path=f"p=a/.g_{t1}.log.1_1-0-1", prev_commit=t1, partition_path="p=a")
    commits = [
        commit(t1, "commit", base, other),
        commit(t2, "deltacommit", log),
        commit(t3, "replacecommit", replaced={"p=a": ["h"]}),
    ]
    groups = file_groups(commits)
    assert [g.file_id for g in groups] == ["g"]
    (s,) = groups[0].slices
    assert s.base is not None and s.base.path == base.path
    assert [(f.path, f.instant, f.version) for f in s.logs] == [(log.path, t2, 1)]
    assert [g.latest.base for g in groups] == snapshot(commits)
    assert [g.file_id for g in file_groups(commits, as_of=t2)] == ["g", "h"]
    assert file_groups(commits, as_of=t1)[0].latest.logs == ()
