"""`amcommit timeline` and `amcommit changes` on Merge-on-Read tables Hudi's Java writer wrote
(tests/data/hudi-java/mor-v6, unzipped to tmp): deltacommits, log files, the records
changed (an incremental read merging base files with logs), and compactions completed
(amcommit's compactor: a ``.commit`` with ``"compacted": true``) and pending
(``.compaction.requested`` / ``.inflight``, the plan Avro-encoded with the project's codec)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amcommit.cli import main
from amcommit.table.commit.compaction import compact
from amcommit.table.format.compaction import CompactionOperation, CompactionPlan, encode_compaction_plan
from amcommit.table.query.read import read
from amcommit.table.settings import TableConfig
from tests.table.test_read_oracle import unzip

DELTA_1, DELTA_2 = "20250331030642808", "20250331030645735"
SF = "city=san_francisco"
SF_ID = "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0"


def _by_key(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(rows, key=lambda r: str(r["_hoodie_record_key"]))


def test_changes_lists_log_files_and_reads_merged_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = unzip("v6_trips_8i1u", tmp_path)
    assert main(["changes", str(root), "--since", DELTA_1, "--records"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"changes in ({DELTA_1}, latest]: 1 instants, 0 files added, 1 log files written, "
        "0 file groups replaced, 1 records changed"
    )
    assert out[1] == (f"+ {SF}/.{SF_ID}_{DELTA_1}.log.1_0-26-85  (log, 1,148 bytes, {DELTA_2})")
    record = json.loads(out[2])  # the update, which lives only in the log file
    assert (record["_hoodie_commit_time"], record["_hoodie_record_key"], record["_hoodie_file_name"]) == (
        DELTA_2,
        "9909a8b1-2d15-4d3d-8ec9-efc48c536a00",
        SF_ID,
    )
    assert len(out) == 3
    assert main(["changes", str(root), "--since", "000", "--records", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(f["path"], f["instant"], f["version"]) for f in data["logs"]] == [
        (f"{SF}/.{SF_ID}_{DELTA_1}.log.1_0-26-85", DELTA_2, 1)
    ]
    assert len(data["added"]) == 3
    snapshot = read(str(root)).to_pylist()
    assert _by_key(data["records"]) == _by_key(snapshot) and len(snapshot) == 8


def test_timeline_shows_deltacommits_and_compactions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = unzip("v6_trips_8i1u", tmp_path)
    hoodie = root / ".hoodie"
    before = read(str(root))
    # a completed compaction (amcommit's compactor: requested -> inflight -> commit with
    # "compacted": true) of the one slice with a log file (san_francisco)
    rep = compact(str(root), config=TableConfig(table_commit="direct"))
    assert rep.instant is not None and rep.file_groups == 1
    c1 = rep.instant
    new_base = next(f for f in (root / SF).iterdir() if f.name.endswith(f"_{c1}.parquet")).name
    # two pending compactions written as Hudi writes them (the plan Avro-encoded with the
    # project's codec): one requested, one inflight, each of one slice
    c2, c3 = "29990101000000000", "29990101000000001"
    other = CompactionPlan((CompactionOperation(SF_ID, SF, c1, data_file=new_base),))
    (hoodie / f"{c2}.compaction.requested").write_bytes(encode_compaction_plan(other))
    (hoodie / f"{c3}.compaction.requested").write_bytes(encode_compaction_plan(other))
    (hoodie / f"{c3}.compaction.inflight").write_bytes(b"")

    assert main(["timeline", str(root)]) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines()[1:]]
    assert [(ln[0], *ln[1:4]) for ln in lines] == [
        (DELTA_1, "deltacommit", "(UPSERT)", "completed"),
        (DELTA_2, "deltacommit", "(UPSERT_PREPPED)", "completed"),
        (c1, "commit", "(compacted)", "completed"),
        (c2, "compaction", "requested", "1"),
        (c3, "compaction", "inflight", "1"),
    ]
    assert main(["timeline", str(root), "--json"]) == 0
    data = {d["time"]: d for d in json.loads(capsys.readouterr().out)}
    assert (data[c1]["action"], data[c1]["state"], data[c1]["compacted"], data[c1]["files"]) == (
        "commit",
        "completed",
        True,
        1,
    )
    assert [
        (data[t]["action"], data[t]["state"], data[t]["files"], data[t]["compacted"]) for t in (c2, c3)
    ] == [
        ("compaction", "requested", 1, False),
        ("compaction", "inflight", 1, False),
    ]
    assert not data[DELTA_2]["compacted"]
    # readers read the compacted slice: the same records; the update is in a base file now
    cols = ["_hoodie_record_key", "_hoodie_commit_time", "ts", "uuid", "rider", "driver", "fare", "city"]
    after = read(str(root)).select(cols).to_pylist()
    assert _by_key(after) == _by_key(before.select(cols).to_pylist())
    ro = read(str(root), query_type="read_optimized").select(cols).to_pylist()
    assert _by_key(ro) == _by_key(before.select(cols).to_pylist())
