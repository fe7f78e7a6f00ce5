"""Hudi v6 log blocks (amcommit.table.format.logblock) against log files Hudi's Java writer wrote
(tests/data/hudi-java/: the log-blocks vectors and every log file inside the mor-v6 tables).

Each Java-written block decodes, and re-encodes byte for byte: the frame, the Avro data
records, the delete records (wrapper-record ordering values) and the rollback command block.
Corrupt bytes are found by Java's check, reported with their offset, and skipped.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from amcommit.table.errors import CorruptLogBlock
from amcommit.table.format import logblock as lb
from amcommit.table.format.naming import parse_log_file_name

DATA = Path(__file__).resolve().parent.parent / "data" / "hudi-java"
VECTORS = DATA / "log-blocks"


def _vector(name: str) -> tuple[str, bytes]:
    [f] = [p for p in (VECTORS / name).iterdir() if ".log." in p.name]
    return f.name, f.read_bytes()


def _mor_logs() -> list[tuple[str, bytes]]:
    out = []
    for z in sorted((DATA / "mor-v6").glob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            for n in zf.namelist():
                base = n.rsplit("/", 1)[-1]
                if "__MACOSX" not in n and parse_log_file_name(base) is not None:
                    out.append((f"{z.stem}/{base}", zf.read(n)))
    return out


def test_frame_bytes_are_javas_rollback_vector() -> None:
    name, data = _vector("valid_log_rollback")
    built = lb.rollback_block("20250126040936578", "20250126040826878")
    assert built == data
    # the frame spelled out: magic, length (every byte after it), version 1, type COMMAND
    assert built[:6] == b"#HUDI#"
    assert struct.unpack(">q", built[6:14]) == (len(built) - 14,)
    assert struct.unpack(">ii", built[14:22]) == (1, 0)
    assert struct.unpack(">q", built[-8:]) == (len(built) - 8,)
    [block] = lb.read_blocks(data, path=name, strict=True).blocks
    assert block.is_rollback
    assert (block.instant, block.target_instant, block.content, block.footer) == (
        "20250126040936578",
        "20250126040826878",
        b"",
        (),
    )


def test_avro_data_vector_decodes_and_reencodes_byte_for_byte() -> None:
    name, data = _vector("valid_log_avro_data")
    [block] = lb.read_blocks(data, path=name, strict=True).blocks
    assert block.type == lb.BlockType.AVRO_DATA
    assert block.instant == "20250316025828811"
    records = lb.decode_avro_records(block, path=name)
    assert len(records) == 1
    r = records[0]
    assert r["_hoodie_commit_time"] == "20250316025828811"
    assert r["_hoodie_record_key"] == "334e26e9-8355-45cc-97c6-c31daf0df330"
    assert r["_hoodie_file_name"] == "ff32ab89-5ad0-4968-83b4-89a34c95d32f-0"  # the file id in log records
    assert (r["rider"], r["fare"], r["city"]) == ("rider-A", 29.1, "san_francisco")
    assert lb.encode_avro_records(block.schema, records) == block.content
    assert lb.avro_data_block(block.instant, block.schema, records, header=block.header) == data
    assert lb.avro_data_block(block.instant, block.schema, records) == data  # Java's header order


def test_delete_vector_decodes_wrapper_ordering_and_reencodes() -> None:
    name, data = _vector("valid_log_delete")
    [block] = lb.read_blocks(data, path=name, strict=True).blocks
    assert block.type == lb.BlockType.DELETE
    recs = lb.decode_delete_records(block, path=name)
    assert recs == [
        lb.DeleteRecord("e96c4396-3fad-413a-a942-4cb36106d721", "city=san_francisco", 0, "IntWrapper"),
        lb.DeleteRecord("9909a8b1-2d15-4d3d-8ec9-efc48c536a00", "city=san_francisco", 0, "IntWrapper"),
        lb.DeleteRecord("334e26e9-8355-45cc-97c6-c31daf0df330", "city=san_francisco", 0, "IntWrapper"),
    ]
    assert lb.encode_delete_records(recs) == block.content
    assert lb.delete_block(block.instant, block.schema, recs) == data
    # a plain int of 0 is wrapped as Java wraps it
    plain = [lb.DeleteRecord(r.record_key, r.partition_path, 0) for r in recs]
    assert lb.encode_delete_records(plain) == block.content


def test_delete_ordering_beyond_int_is_a_long_wrapper() -> None:
    recs = [
        lb.DeleteRecord("k1", "p", 2**40),
        lb.DeleteRecord("k2", None, None),
        lb.DeleteRecord("k3", "p", "x"),
        lb.DeleteRecord("k4", "p", 1.5),
        lb.DeleteRecord("k5", "p", 7, "LongWrapper"),
    ]
    block = lb.decode_block(lb.delete_block("20250101000000000", "{}", recs))
    back = lb.decode_delete_records(block)
    assert [(r.record_key, r.ordering, r.ordering_type) for r in back] == [
        ("k1", 2**40, "LongWrapper"),
        ("k2", None, None),
        ("k3", "x", "StringWrapper"),
        ("k4", 1.5, "DoubleWrapper"),
        ("k5", 7, "LongWrapper"),
    ]


def test_parquet_data_vector_decodes() -> None:
    name, data = _vector("valid_log_parquet_data")
    [block] = lb.read_blocks(data, path=name, strict=True).blocks
    assert block.type == lb.BlockType.PARQUET_DATA
    assert block.instant == "20250113230424191"
    table = lb.decode_parquet_records(block, path=name)
    assert table.num_rows == 1
    assert table.column_names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    assert lb.encode_block(block.type, block.header, block.content, block.footer) == data


def test_every_log_file_of_the_java_tables_reencodes() -> None:
    logs = _mor_logs()
    assert len(logs) >= 5
    kinds = set()
    for name, data in logs:
        got = lb.read_blocks(data, path=name, strict=True)
        assert got.corrupt == ()
        assert b"".join(lb.encode_block(b.type, b.header, b.content, b.footer) for b in got.blocks) == data
        for b in got.blocks:
            kinds.add(b.type)
            if b.type == lb.BlockType.AVRO_DATA:
                assert lb.encode_avro_records(b.schema, lb.decode_avro_records(b, path=name)) == b.content
            elif b.type == lb.BlockType.DELETE:
                assert lb.encode_delete_records(lb.decode_delete_records(b, path=name)) == b.content
            elif b.type == lb.BlockType.PARQUET_DATA:
                assert lb.decode_parquet_records(b, path=name).num_rows >= 1
    assert {
        lb.BlockType.AVRO_DATA,
        lb.BlockType.DELETE,
        lb.BlockType.PARQUET_DATA,
        lb.BlockType.COMMAND,
    } <= kinds


def test_several_blocks_in_one_file_and_a_torn_tail() -> None:
    _, avro = _vector("valid_log_avro_data")
    _, rollback = _vector("valid_log_rollback")
    data = avro + rollback
    got = lb.read_blocks(data, path="x.log.1")
    assert [(b.type, b.offset) for b in got.blocks] == [
        (lb.BlockType.AVRO_DATA, 0),
        (lb.BlockType.COMMAND, len(avro)),
    ]
    torn = data + avro[:100]  # a killed writer's partial block
    got = lb.read_blocks(torn, path="x.log.1")
    assert len(got.blocks) == 2
    assert got.corrupt == (lb.CorruptRegion(len(data), 100, got.corrupt[0].reason),)
    assert "runs past the end" in got.corrupt[0].reason
    with pytest.raises(CorruptLogBlock) as e:
        lb.read_blocks(torn, path="p/.f_1.log.1_0-1-1", strict=True)
    assert e.value.offset == len(data)
    assert str(e.value).startswith(f"corrupt log block in 'p/.f_1.log.1_0-1-1' at byte {len(data)}: ")
    assert "\n" not in str(e.value)


def test_a_corrupt_block_between_good_ones_is_skipped_to_the_next_magic() -> None:
    _, avro = _vector("valid_log_avro_data")
    _, rollback = _vector("valid_log_rollback")
    bad = bytearray(rollback)
    bad[-1] ^= 0x01  # trailing total no longer matches the length field: Java's check fails
    data = avro + bytes(bad) + rollback
    got = lb.read_blocks(data)
    assert [b.offset for b in got.blocks] == [0, len(avro) + len(bad)]
    assert [(c.offset, c.size) for c in got.corrupt] == [(len(avro), len(bad))]
    assert "trailing total" in got.corrupt[0].reason
    # the bytes after a block must be the next magic or the end of the file
    junk = avro + b"garbage" + rollback
    got = lb.read_blocks(junk)
    assert [b.offset for b in got.blocks] == [len(avro) + 7]
    assert got.corrupt[0].offset == 0 and "neither a block nor the end" in got.corrupt[0].reason


def test_bad_contents_name_the_file_and_offset() -> None:
    block = lb.LogBlock(
        lb.BlockType.AVRO_DATA,
        ((lb.HeaderKey.SCHEMA, '"string"'),),
        b"\x00\x00\x00\x03\x00\x00\x00\x05",
        offset=42,
    )
    with pytest.raises(
        CorruptLogBlock, match=r"^corrupt log block in 'a/b.log' at byte 42: Avro data does not decode"
    ):
        lb.decode_avro_records(block, path="a/b.log")
    dblock = lb.LogBlock(lb.BlockType.DELETE, (), b"\x00\x00\x00\x02\x00\x00\x00\x00", offset=7)
    with pytest.raises(CorruptLogBlock, match=r"at byte 7: delete block does not decode .*content version 2"):
        lb.decode_delete_records(dblock, path="a/b.log")
    with pytest.raises(CorruptLogBlock, match="expected a PARQUET_DATA block, found DELETE"):
        lb.decode_parquet_records(dblock)
    future = bytearray(lb.rollback_block("1", "2"))
    future[14:18] = struct.pack(">i", 2)
    assert "log format version 2" in lb.read_blocks(bytes(future)).corrupt[0].reason


def test_avro_records_round_trip_in_a_new_schema() -> None:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
            {"name": "n", "type": ["null", "long"], "default": None},
        ],
    }
    import json

    text = json.dumps(schema)
    recs = [{"_hoodie_record_key": "a", "n": 1}, {"_hoodie_record_key": "b", "n": None}]
    block = lb.decode_block(lb.avro_data_block("20250101000000000", text, recs))
    assert block.instant == "20250101000000000"
    assert lb.decode_avro_records(block) == recs
    empty = lb.decode_block(lb.avro_data_block("20250101000000000", text, []))
    assert lb.decode_avro_records(empty) == []


def test_parquet_block_of_a_table() -> None:
    t = pa.table({"_hoodie_record_key": ["a"], "v": [1]})
    buf = pa.BufferOutputStream()
    pq.write_table(t, buf)
    data = lb.encode_block(
        lb.BlockType.PARQUET_DATA, ((lb.HeaderKey.INSTANT_TIME, "1"),), buf.getvalue().to_pybytes()
    )
    assert lb.decode_parquet_records(lb.decode_block(data)).equals(t)
