"""Bad values are never echoed (issue 23, item 5): a value given to the wrong option may be a
secret (``--conf io_threads=<an account key>`` printed the key). Every option parser (the CLI's
``--conf`` and typed arguments, CommitterConfig, the Spark writer, reader, stream and session
settings, store options) answers one line naming the option and what it expects, never the
value."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amcommit.cli import main
from amcommit.committer.config import CommitterConfig
from amcommit.errors import ConfigError
from amcommit.spark.options import build_plan
from amcommit.spark.reader import build_read_plan
from amcommit.spark.sqlconf import (
    MAX_RECORDS_PER_FILE,
    PARQUET_CODEC,
    PARTITION_OVERWRITE_MODE,
    task_settings,
)
from amcommit.spark.stream import _stream_options
from amcommit.store.schemes import store_options
from amcommit.table.settings import TableConfig

SECRET = base64.b64encode(os.urandom(64)).decode()  # an account key's shape, fresh per run
"""Never registered as a secret (it is not given as a secret option): redaction cannot hide
an echo of it."""


def _clean(msg: str, *names: str) -> None:
    """One line, naming every one of ``names``, with no piece of SECRET in it."""
    assert "\n" not in msg.strip(), msg
    assert not any(SECRET[i : i + 10] in msg for i in range(len(SECRET) - 10)), msg
    assert "***" not in msg, msg  # not even masked: the value has no business there
    for n in names:
        assert n in msg, (n, msg)


# -- CommitterConfig -------------------------------------------------------------------------

_FREE_TEXT = {"summary_report_directory", "spool_dir"}
"""String options: any text is a valid value (a directory)."""


@pytest.mark.parametrize("field", [f for f in TableConfig.__struct_fields__ if f not in _FREE_TEXT])
def test_committer_option_values_not_echoed(field: str) -> None:
    """Every option users give as committer options: the engine's and the table's."""
    for make in (
        lambda: TableConfig.from_mapping({field: SECRET}),
        lambda: TableConfig.from_mapping({f"spark.amcommit.{field}": SECRET}),
        lambda: TableConfig().with_options(**{field: SECRET}),
    ):
        with pytest.raises(ConfigError) as ei:
            make()
        _clean(str(ei.value), field, "must be")


@pytest.mark.parametrize(
    ("values", "name"),
    [
        ({"io_threads": "0"}, "'io_threads' must be an integer >= 1"),
        ({"lock_ttl": "-5"}, "'lock_ttl' must be a number of seconds > 0"),
        ({"lock_ttl": "nan"}, "'lock_ttl' must be a number of seconds > 0"),
        ({"io_rate": "nan"}, "'io_rate' must be a number > 0"),
        ({"mapreduce.manifest.committer.io.threads": SECRET}, "'mapreduce.manifest.committer.io.threads'"),
    ],
)
def test_committer_checks_name_the_option_not_the_value(values: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError) as ei:
        CommitterConfig.from_mapping(values)
    _clean(str(ei.value), name)
    for v in values.values():
        assert f"got {v}" not in str(ei.value) and repr(v) not in str(ei.value)


def test_store_option_values_not_echoed() -> None:
    for url, key in (("gs://b/d", "page_size"), ("wasb://c@a.blob.core.windows.net/d", "request_timeout")):
        with pytest.raises(ConfigError) as ei:
            store_options(url, {key: SECRET})
        _clean(str(ei.value), key)


# -- the command line ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["commit-job", "{d}", "--job-id", "j", "--conf", f"io_threads={SECRET}"], ["'io_threads'"]),
        (["abort-job", "{d}", "--job-id", "j", "--conf", f"io.threads={SECRET}"], ["'io.threads'"]),
        (["commit-job", "{d}", "--job-id", "j", "--conf", SECRET.rstrip("=")], ["--conf", "KEY=VALUE"]),
        (
            ["commit-job", "{d}", "--job-id", "j", "--conf", SECRET + "="],
            ["unknown committer option", "not shown"],
        ),
        (["clean", "{d}", "--retain-commits", "1", "--conf", f"lock_wait={SECRET}"], ["'lock_wait'"]),
        (["commit-job", "{d}", "--job-id", "j", "--io-threads", SECRET], ["--io-threads", "integer"]),
        (["commit-job", "{d}", "--job-id", "j", "--mode", SECRET], ["--mode", "append, fail"]),
        (["clean", "{d}", "--retain-commits", SECRET], ["--retain-commits", "an integer"]),
        (["emulator", "start", SECRET], ["gcs, azurite"]),
        (["emulator", "start", "gcs", "--port", SECRET], ["--port", "integer"]),
    ],
)
def test_cli_option_values_not_echoed(
    tmp_path: Path, argv: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.replace("{d}", str(tmp_path / "dest")) for a in argv]
    try:
        rc = main(args)
    except SystemExit as e:  # argparse: usage, then one error line
        rc = int(e.code or 0)
    out = capsys.readouterr()
    assert rc in (1, 2), (rc, out)
    err = out.err.strip().splitlines()[-1]
    assert "error:" in err
    _clean(err, *names)
    assert SECRET[:10] not in out.err + out.out


# -- Spark: writer options, session settings, reader, stream ---------------------------------


class _Type:
    def simpleString(self) -> str:
        return "string"


class _Field:
    def __init__(self, name: str) -> None:
        self.name = name
        self.dataType = _Type()

    def jsonValue(self) -> dict[str, Any]:
        return {"name": self.name, "type": "string", "nullable": True, "metadata": {}}


class _Schema:
    fields = [_Field("a"), _Field("b")]  # noqa: RUF012


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"format": SECRET}, ["'format'", "parquet"]),
        ({"compression": SECRET}, ["'compression'", "zstd"]),
        ({"partitionBy": SECRET}, ["'partitionBy'", "1st column", "(a, b)"]),
        ({"partitionOverwriteMode": SECRET}, ["'partitionOverwriteMode'", "static or dynamic"]),
        ({"tableFormat": SECRET}, ["'tableFormat'", "hudi"]),
        ({"tableFormat": "hudi", "tableName": SECRET}, ["'tableName'", "letters"]),
        ({"tableFormat": "hudi", "recordKey": SECRET}, ["'recordKey'", "1st column"]),
        ({"rowGroupRows": SECRET}, ["'rowgrouprows'", "integer"]),
        ({"maxRecordsPerFile": SECRET}, ["'maxrecordsperfile'", "integer"]),
        ({"compressionLevel": SECRET}, ["'compressionlevel'", "integer"]),
        ({"io_threads": SECRET}, ["'io_threads'", "integer"]),
        ({"mapreduce.manifest.committer.validate.output": SECRET}, ["validate.output", "true or false"]),
    ],
)
def test_spark_writer_option_values_not_echoed(options: dict[str, str], names: list[str]) -> None:
    opts = {"path": "/tmp/amcommit-never-written/d", **{k.lower(): v for k, v in options.items()}}
    with pytest.raises(ConfigError) as ei:
        build_plan(opts, _Schema(), True)
    _clean(str(ei.value), *names)


def test_spark_session_conf_values_not_echoed() -> None:
    with pytest.raises(ConfigError) as ei:
        build_plan(
            {"path": "/tmp/amcommit-never-written/d"},
            _Schema(),
            False,
            session_conf={"spark.amcommit.io_threads": SECRET},
        )
    _clean(str(ei.value), "'io_threads'", "integer")
    plan = build_plan({"path": "/tmp/amcommit-never-written/d"}, _Schema(), True)
    for key in (
        PARQUET_CODEC,
        MAX_RECORDS_PER_FILE,
        PARTITION_OVERWRITE_MODE,
        "spark.sql.parquet.outputTimestampType",
    ):
        with pytest.raises(ConfigError) as ei:
            task_settings(plan, {key: SECRET})
        _clean(str(ei.value), key)


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: build_read_plan({"path": "/t", "as.of.instant": SECRET}), ["'asOf'", "17 digits"]),
        (lambda: build_read_plan({"path": "/t", "since": SECRET}), ["'since'", "17 digits"]),
        (
            lambda: build_read_plan({"path": "/t", "query.type": SECRET}),
            ["query.type", "snapshot, read_optimized or incremental"],
        ),
        (
            lambda: build_read_plan({"path": "/t", "maxPartitionBytes": SECRET}),
            ["max_partition_bytes", "integer"],
        ),
        (lambda: _stream_options({"leaseTtl": SECRET}), ["'leaseTtl'", "seconds"]),
    ],
)
def test_spark_reader_and_stream_values_not_echoed(make: Callable[[], Any], names: list[str]) -> None:
    with pytest.raises(ConfigError) as ei:
        make()
    _clean(str(ei.value), *names)
