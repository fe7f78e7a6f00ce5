"""`amcommit timeline` and `amcommit changes` on Merge-on-Read tables Hudi's Java writer wrote
(tests/data/hudi-java/mor-v6, unzipped to tmp): deltacommits, log files, the records
changed (an incremental read merging base files with logs), and compactions pending
(``.compaction.requested`` / ``.inflight``, the plan Avro-encoded with the project's codec)
and completed (a ``.commit`` with ``"compacted": true``)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from amcommit.cli import main
from amcommit.table.format.compaction import CompactionOperation, CompactionPlan, encode_compaction_plan
from amcommit.table.format.model import CommitMetadata, WriteStat, encode_commit_metadata
from amcommit.table.format.naming import base_file_name
from amcommit.table.query.read import read
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
    # a completed compaction of the san_francisco slice (base file + log) at C1: its merged
    # records in a new base file, requested -> inflight -> commit "compacted": true
    c1, c2, c3 = "20250331030700000", "20250331030800000", "20250331030900000"
    base = next((root / SF).glob(f"{SF_ID}_*_{DELTA_1}.parquet")).name
    log = f".{SF_ID}_{DELTA_1}.log.1_0-26-85"
    plan = CompactionPlan((CompactionOperation(SF_ID, SF, DELTA_1, delta_files=(log,), data_file=base),))
    (hoodie / f"{c1}.compaction.requested").write_bytes(encode_compaction_plan(plan))
    (hoodie / f"{c1}.compaction.inflight").write_bytes(b"")
    rows = before.filter(pc.equal(before.column("_hoodie_partition_path"), SF))
    new_base = f"{SF}/{base_file_name(SF_ID, '0-1-1', c1)}"
    pq.write_table(rows, root / new_base)
    stat = WriteStat(
        file_id=SF_ID,
        path=new_base,
        prev_commit=DELTA_1,
        num_writes=rows.num_rows,
        num_update_writes=rows.num_rows,
        partition_path=SF,
        file_size_in_bytes=(root / new_base).stat().st_size,
    )
    meta = CommitMetadata(
        partition_to_write_stats={SF: [stat]}, compacted=True, operation_type="UNKNOWN", extra_metadata={}
    )
    (hoodie / f"{c1}.commit").write_bytes(encode_commit_metadata(meta))
    # two pending compactions: one requested, one inflight, each of one slice
    other = CompactionPlan((CompactionOperation(SF_ID, SF, c1, data_file=new_base.split("/")[1]),))
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
    # readers read the compacted slice: the same records, the logs no longer needed
    after = read(str(root))
    assert _by_key(after.to_pylist()) == _by_key(before.to_pylist())
    ro = read(str(root), query_type="read_optimized")
    assert _by_key(ro.to_pylist()) == _by_key(before.to_pylist())  # the update is in a base file now
