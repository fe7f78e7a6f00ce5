"""The merge of a file slice with its log blocks (amcommit.table.query.merge) and the refusals
of amcommit.table.read: which blocks count (completed instants, time travel, rollback command
blocks, torn tails), how updates and deletes meet stored records under each payload, and
one-line errors for bad arguments."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import hudi
import pyarrow as pa
import pytest

from amcommit.errors import ConfigError
from amcommit.table import read
from amcommit.table.errors import NotATable, RangeReversed, UnknownInstant
from amcommit.table.file_group.merge import Payload
from amcommit.table.file_group.model import FileGroup, FileSlice, FileVersion, LogFile
from amcommit.table.format import logblock as lb
from amcommit.table.query.merge import (
    LogBytes,
    SliceRecipe,
    arrow_schema_of_avro,
    live_blocks,
    merge_slice,
    payload_of,
)
from amcommit.table.query.read import UnknownQueryType, _effective
from amcommit.table.timeline.reader import SliceView

META = [
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
]
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "r",
        "fields": [
            *({"name": m, "type": ["null", "string"], "default": None} for m in META),
            {"name": "ts", "type": ["null", "long"], "default": None},
            {"name": "v", "type": ["null", "string"], "default": None},
        ],
    }
)
T1, T2, T3, T4 = "20250101000000001", "20250101000000002", "20250101000000003", "20250101000000004"
OVERWRITE = SliceRecipe(("k",), Payload.OVERWRITE_WITH_LATEST, "ts")
DEFAULT = SliceRecipe(("k",), Payload.DEFAULT, "ts")


def rec(t: str, key: str, ts: int, v: str) -> dict[str, object]:
    return {
        "_hoodie_commit_time": t,
        "_hoodie_commit_seqno": f"{t}_0_{key}",
        "_hoodie_record_key": key,
        "_hoodie_partition_path": "p",
        "_hoodie_file_name": "f1-0",
        "ts": ts,
        "v": v,
    }


def base() -> pa.Table:
    rows = [rec(T1, "a", 10, "a1"), rec(T1, "b", 10, "b1"), rec(T1, "c", 10, "c1")]
    return pa.Table.from_pylist(
        rows,
        schema=pa.schema([*(pa.field(m, pa.string()) for m in META), ("ts", pa.int64()), ("v", pa.string())]),
    )


def data(t: str, *rows: dict[str, object]) -> bytes:
    return lb.avro_data_block(t, SCHEMA, list(rows))


def delete(t: str, *keys: tuple[str, object]) -> bytes:
    return lb.delete_block(t, SCHEMA, [lb.DeleteRecord(k, "p", o) for k, o in keys])


def state(out: pa.Table | None) -> dict[str, tuple[int, str, str]]:
    assert out is not None
    return {r["_hoodie_record_key"]: (r["ts"], r["v"], r["_hoodie_commit_time"]) for r in out.to_pylist()}


def merged(
    logs: list[bytes], recipe: SliceRecipe = OVERWRITE, trusted: set[str] | None = None
) -> dict[str, tuple[int, str, str]]:
    ok = trusted if trusted is not None else {T1, T2, T3, T4}
    files = [LogBytes(f"p/.f1-0_{T1}.log.{i + 1}_0-1-1", b) for i, b in enumerate(logs)]
    return state(merge_slice(base(), live_blocks(files, ok.__contains__), recipe))


def test_update_overwrite_with_latest_vs_default_payload() -> None:
    logs = [data(T2, rec(T2, "a", 5, "a2"), rec(T2, "b", 20, "b2"), rec(T2, "d", 1, "d2"))]
    assert merged(logs) == {
        "a": (5, "a2", T2),  # the log record wins, whatever its ts
        "b": (20, "b2", T2),
        "c": (10, "c1", T1),
        "d": (1, "d2", T2),  # a new key in a log block is added
    }
    assert merged(logs, DEFAULT) == {
        "a": (10, "a1", T1),  # stored ts 10 > 5: the stored record stays
        "b": (20, "b2", T2),
        "c": (10, "c1", T1),
        "d": (1, "d2", T2),
    }


def test_deletes_natural_order_and_ordering_values() -> None:
    logs = [delete(T2, ("a", 0), ("b", 5), ("c", 10))]
    # OverwriteWithLatest: a delete always wins
    assert merged(logs) == {}
    # Default: ordering 0 is natural order (delete wins); 5 < stored 10 loses; 10 == 10 wins
    assert merged(logs, DEFAULT) == {"b": (10, "b1", T1)}
    # a delete with no ordering value at all wins too
    assert merged([delete(T2, ("b", None))], DEFAULT) == {"a": (10, "a1", T1), "c": (10, "c1", T1)}


def test_blocks_apply_in_order_across_log_files() -> None:
    logs = [
        delete(T2, ("a", 0)),
        data(T3, rec(T3, "a", 1, "a3")),
        data(T4, rec(T4, "a", 2, "a4"), rec(T4, "a", 3, "a5")),
    ]
    assert merged(logs)["a"] == (3, "a5", T4)  # re-inserted after the delete; the last copy of a key wins


def test_schema_parsed_and_converted_once_per_schema_string(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks in one schema string (every block of a write, of every write that keeps the
    schema) parse it once and convert it to Arrow once; a block in another schema string
    between them (a column added) still merges in order."""
    wider = json.loads(SCHEMA)
    wider["name"] = "r_once"  # a schema string no other test has parsed
    one = json.dumps(wider)
    wider["fields"] = [*wider["fields"], {"name": "x", "type": ["null", "long"], "default": None}]
    two = json.dumps(wider)
    parsed: list[object] = []
    real = lb.fastavro.parse_schema

    def counting(schema: object, *a: object, **kw: object) -> object:
        parsed.append(schema)
        return real(schema, *a, **kw)

    monkeypatch.setattr(lb.fastavro, "parse_schema", counting)
    logs = [
        lb.avro_data_block(T2, one, [rec(T2, "a", 11, "a2")]),
        lb.avro_data_block(T3, one, [rec(T3, "b", 12, "b3"), rec(T3, "a", 13, "a3")]),
        lb.avro_data_block(T3, two, [rec(T3, "c", 14, "c3") | {"x": 7}]),
        lb.avro_data_block(T4, one, [rec(T4, "d", 15, "d4")]),
    ]
    encodes = len(parsed)  # writing the blocks parsed each schema string once
    assert encodes == 2
    assert merged(logs) == {
        "a": (13, "a3", T3),
        "b": (12, "b3", T3),
        "c": (14, "c3", T3),
        "d": (15, "d4", T4),
    }
    assert len(parsed) == encodes  # reading them parsed none again
    assert arrow_schema_of_avro(one) is arrow_schema_of_avro(one)
    assert arrow_schema_of_avro(two).names[-1] == "x"


def test_blocks_of_untrusted_instants_are_skipped() -> None:
    logs = [data(T2, rec(T2, "a", 50, "a2")), delete(T3, ("b", 0))]
    assert merged(logs, trusted={T1, T3}) == {"a": (10, "a1", T1), "c": (10, "c1", T1)}
    assert merged(logs, trusted={T1, T2}) == {"a": (50, "a2", T2), "b": (10, "b1", T1), "c": (10, "c1", T1)}


def test_rollback_block_cancels_the_blocks_its_target_wrote_before_it() -> None:
    logs = [
        data(T2, rec(T2, "a", 50, "a2")) + delete(T2, ("b", 0)),
        data(T3, rec(T3, "c", 30, "c3")),
        lb.rollback_block(T4, T2),
    ]
    assert merged(logs) == {"a": (10, "a1", T1), "b": (10, "b1", T1), "c": (30, "c3", T3)}
    later = [lb.rollback_block(T4, T2), data(T2, rec(T2, "a", 50, "a2"))]
    assert merged(later)["a"] == (50, "a2", T2)  # only blocks before the command block


def test_a_torn_tail_is_skipped() -> None:
    good = data(T2, rec(T2, "a", 50, "a2"))
    torn = good + data(T3, rec(T3, "b", 60, "b3"))[:-20]
    assert merged([torn]) == {"a": (50, "a2", T2), "b": (10, "b1", T1), "c": (10, "c1", T1)}


def test_log_only_slice() -> None:
    files = [LogBytes("p/.f2-0_x.log.1_0-1-1", data(T2, rec(T2, "x", 1, "x2"), rec(T2, "y", 1, "y2")))]
    out = merge_slice(None, live_blocks(files, lambda t: True), OVERWRITE)
    assert state(out) == {"x": (1, "x2", T2), "y": (1, "y2", T2)}
    assert merge_slice(None, [], OVERWRITE) is None


def test_slice_view_trusts_completed_archived_and_not_after_as_of() -> None:
    view = SliceView([], frozenset({T2, T3}), T2, T3)
    assert [view.trusts(t) for t in (T1, T2, T3, T4)] == [True, True, True, False]
    assert not SliceView([], frozenset({T3}), T2, None).trusts("20250101000000002")


def test_logs_against_a_pending_compaction_are_read_with_the_slice_before() -> None:
    b = FileVersion("p", "f1-0", f"p/f1-0_0-1-1_{T1}.parquet", T1, 1, 3)
    log1 = LogFile("p", "f1-0", f"p/.f1-0_{T1}.log.1_0-1-1", T1, 1, T2, 1)
    log2 = LogFile("p", "f1-0", f"p/.f1-0_{T3}.log.1_0-1-1", T3, 1, T4, 1)
    g = FileGroup(
        "p", "f1-0", (FileSlice("p", "f1-0", T1, b, (log1,)), FileSlice("p", "f1-0", T3, None, (log2,)))
    )
    pending = SliceView([g], frozenset({T1, T2, T4}), T1, None)  # T3: a compaction not completed
    head, slices = _effective(g, pending)
    assert head is not None and head.base == b and [s.base_instant for s in slices] == [T1, T3]
    done = SliceView([g], frozenset({T1, T2, T3, T4}), T1, None)
    head, slices = _effective(g, done)
    assert head is not None and head.base is None and [s.base_instant for s in slices] == [T3]


def test_payload_class_names() -> None:
    assert payload_of(None) is Payload.OVERWRITE_WITH_LATEST
    assert payload_of("org.apache.hudi.common.model.DefaultHoodieRecordPayload") is Payload.DEFAULT
    assert (
        payload_of("org.apache.hudi.common.model.OverwriteWithLatestAvroPayload")
        is Payload.OVERWRITE_WITH_LATEST
    )


def _java_table(tmp_path: Path, name: str) -> Path:
    z = Path(__file__).resolve().parent.parent / "data" / "hudi-java" / "mor-v6" / f"{name}.zip"
    with zipfile.ZipFile(z) as zf:
        zf.extractall(tmp_path, [m for m in zf.namelist() if not m.startswith("__MACOSX/")])
    return tmp_path / name


def test_a_killed_writers_blocks_in_a_log_file_are_not_read(tmp_path: Path) -> None:
    """Blocks appended to a committed log file by an instant that never completed (and a
    torn block after them) change nothing, for amcommit and for hudi-rs."""
    root = _java_table(tmp_path, "v6_trips_8i1u")
    before = read(str(root)).sort_by("_hoodie_record_key")
    [log] = [p for p in root.rglob(".*.log.*")]
    [block] = lb.read_blocks(log.read_bytes()).blocks
    [r] = lb.decode_avro_records(block)
    ghost = "20250331030650000"
    changed = dict(r, _hoodie_commit_time=ghost, rider="ghost")
    extra = lb.avro_data_block(ghost, block.schema, [changed]) + lb.delete_block(
        ghost, block.schema, [lb.DeleteRecord(r["_hoodie_record_key"], r["_hoodie_partition_path"], 0)]
    )
    log.write_bytes(log.read_bytes() + extra + extra[:50])
    after = read(str(root)).sort_by("_hoodie_record_key")
    assert after.equals(before)
    theirs = pa.Table.from_batches(hudi.HudiTable(str(root)).read(hudi.HudiReadOptions()))
    assert theirs.sort_by("_hoodie_record_key").to_pylist() == after.to_pylist()
    # the same block by a completed instant is read (the test can fail)
    (root / ".hoodie" / f"{ghost}.deltacommit").write_bytes(
        (root / ".hoodie" / "20250331030645735.deltacommit").read_bytes()
    )
    assert r["_hoodie_record_key"] not in read(str(root)).column("_hoodie_record_key").to_pylist()


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    root = str(_java_table(tmp_path, "v6_trips_8i1u"))
    cases: list[tuple[dict[str, object], type[Exception], str]] = [
        (
            {"query_type": "realtime"},
            UnknownQueryType,
            "unknown query type 'realtime': use one of snapshot, read_optimized, incremental",
        ),
        (
            {"as_of": "20250331030642808", "since": "20250331030642808"},
            ConfigError,
            "as_of and since/until do not go together",
        ),
        (
            {"since": "20250331030642808", "query_type": "read_optimized"},
            ConfigError,
            "query_type read_optimized takes as_of only",
        ),
        (
            {"since": "20250331030645735", "until": "20250331030642808"},
            RangeReversed,
            "range reversed: since 20250331030645735 is later than until 20250331030642808",
        ),
        (
            {"as_of": "20200101000000000"},
            UnknownInstant,
            "it is before the active timeline, which starts at 20250331030642808",
        ),
        ({"as_of": "20250331030643000"}, UnknownInstant, "no completed instant has this time"),
    ]
    for kw, cls, text in cases:
        with pytest.raises(cls) as e:
            read(root, **kw)  # type: ignore[arg-type]
        assert text in str(e.value), kw
        assert "\n" not in str(e.value)
    with pytest.raises(NotATable, match=r"is not a table|does not exist"):
        read(str(tmp_path / "nothing"))
