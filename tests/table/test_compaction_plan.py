"""The compaction plan's Avro (amcommit.table.format.compaction): round trips, the fields a Java
reader resolves against Hudi's HoodieCompactionPlan schema, version-1 full paths, bad bytes."""

from __future__ import annotations

import io

import fastavro
import pytest

from amcommit.errors import ManifestError
from amcommit.table.format.compaction import (
    COMPACTION_PLAN_SCHEMA,
    CompactionOperation,
    CompactionPlan,
    decode_compaction_plan,
    encode_compaction_plan,
)

OPS = (
    CompactionOperation(
        file_id="f1-0",
        partition="city=sf",
        base_instant="20250101000000000",
        delta_files=(".f1-0_20250101000000000.log.1_0-1-1", ".f1-0_20250101000000000.log.2_0-2-1"),
        data_file="f1-0_0-1-1_20250101000000000.parquet",
        metrics={"TOTAL_LOG_FILES": 2.0, "TOTAL_LOG_FILES_SIZE": 2048.0, "TOTAL_IO_MB": 0.5},
    ),
    CompactionOperation(
        file_id="f2-0",
        partition="",
        base_instant="20250102000000000",
        delta_files=(".f2-0_20250102000000000.log.1_0-1-1",),
    ),
)


def test_plan_round_trips() -> None:
    plan = CompactionPlan(OPS, {"k": "v"})
    data = encode_compaction_plan(plan)
    assert data[:4] == b"Obj\x01"
    assert decode_compaction_plan(data) == plan


def test_plan_record_is_hudis_shape() -> None:
    data = encode_compaction_plan(CompactionPlan(OPS))
    reader = fastavro.reader(io.BytesIO(data))
    schema = reader.writer_schema
    assert isinstance(schema, dict)
    assert schema["name"] == "org.apache.hudi.avro.model.HoodieCompactionPlan"
    [rec] = list(reader)
    assert isinstance(rec, dict)
    assert rec["version"] == 2
    op = rec["operations"][0]
    assert list(op) == [
        "baseInstantTime",
        "deltaFilePaths",
        "dataFilePath",
        "fileId",
        "partitionPath",
        "metrics",
        "bootstrapFilePath",
    ]
    assert op["dataFilePath"] == "f1-0_0-1-1_20250101000000000.parquet"
    assert rec["operations"][1]["dataFilePath"] is None


def test_version_one_full_paths_read_as_names() -> None:
    buf = io.BytesIO()
    rec = {
        "operations": [
            {
                "baseInstantTime": "1",
                "deltaFilePaths": ["s3://b/t/p/.f_1.log.1_0-1-1"],
                "dataFilePath": "s3://b/t/p/f_0-1-1_1.parquet",
                "fileId": "f",
                "partitionPath": "p",
                "metrics": None,
            }
        ],
        "extraMetadata": None,
        "version": 1,
    }
    fastavro.writer(buf, fastavro.parse_schema(COMPACTION_PLAN_SCHEMA), [rec])
    plan = decode_compaction_plan(buf.getvalue())
    assert plan.version == 1
    assert plan.operations[0].delta_files == (".f_1.log.1_0-1-1",)
    assert plan.operations[0].data_file == "f_0-1-1_1.parquet"


def test_bad_bytes_are_one_line() -> None:
    with pytest.raises(
        ManifestError, match=r"^\.hoodie/1\.compaction\.requested: not an Avro compaction plan"
    ):
        decode_compaction_plan(b"nope", where=".hoodie/1.compaction.requested")
