"""Typed options (store, committer, Spark) and redaction of secrets: pure, no network."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.committer.report import JobReport
from amcommit.errors import AmcommitError, ConfigError, InvalidInput, StoreError
from amcommit.options import Options, convert_options
from amcommit.redact import Secret, has_credentials, redact, redact_url, register_secret
from amcommit.spark.options import build_plan
from amcommit.store.azure import BlobStore, DfsStore
from amcommit.store.azure._common import AzureBase
from amcommit.store.gcs import GcsStore
from amcommit.store.limits import Limiter
from amcommit.store.local import LocalStore
from amcommit.store.options import (
    BlobOptions,
    DfsOptions,
    GcsOptions,
    LocalOptions,
    StoreOptions,
)
from amcommit.store.schemes import open_store, store_options

WASB = "wasb://c@acct.blob.core.windows.net/dest"
ABFS = "abfs://fs@acct.dfs.core.windows.net/dest"
GS = "gs://bucket/dest"


# -- typed conversion ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "raw", "typed"),
    [
        (GS, {"use_move": "false"}, {"use_move": False}),
        (GS, {"use_move": "TRUE", "anonymous": "yes"}, {"use_move": True, "anonymous": True}),
        (GS, {"use_move": "none"}, {"use_move": None}),
        (GS, {"page_size": "64", "write_rate": "2.5"}, {"page_size": 64, "write_rate": 2.5}),
        (GS, {"write_rate": "none", "chunk_size": " 262144 "}, {"write_rate": None, "chunk_size": 262144}),
        (GS, {"Use-Move": "0"}, {"use_move": False}),
        (
            WASB,
            {"preserve_metadata": "off", "block_size": "1024"},
            {"preserve_metadata": False, "block_size": 1024},
        ),
        (WASB, {"account": "acct", "request_timeout": "3"}, {"account": "acct", "request_timeout": 3.0}),
        (
            ABFS,
            {"append_size": "1048576", "list_page_size": "10"},
            {"append_size": 1048576, "list_page_size": 10},
        ),
        ("/tmp/x", {"fsync": "false", "offload_metadata": "1"}, {"fsync": False, "offload_metadata": True}),
        (GS, {}, {}),
    ],
)
def test_store_options_are_typed_per_backend(url: str, raw: dict[str, str], typed: dict[str, Any]) -> None:
    got = store_options(url, raw)
    assert got == typed
    assert all(type(got[k]) is type(v) for k, v in typed.items())


def test_python_objects_pass_through() -> None:
    lim = Limiter(max_concurrency=3)
    assert store_options(GS, {"limiter": lim})["limiter"] is lim
    assert store_options(WASB, {"account_key": Secret("a2V5")}) == {"account_key": "a2V5"}


def test_open_store_converts_strings() -> None:
    """The bug of issue 11.10: ``use_move=false`` reached GcsStore as the (true) string."""

    async def main() -> None:
        gcs = open_store("gs://bucket/x", endpoint="http://127.0.0.1:9", use_move="false", write_rate="none")
        assert isinstance(gcs, GcsStore) and gcs.uses_move is False and gcs.write_limiter is None
        await gcs.aclose()
        blob = open_store(WASB, endpoint="http://127.0.0.1:9/acct", preserve_metadata="false")
        assert isinstance(blob, BlobStore) and blob.preserve_metadata is False
        await blob.aclose()
        local = open_store("/", fsync="false")
        assert isinstance(local, LocalStore) and local.fsync is False
        await local.aclose()

    anyio.run(main)


def _keywords(*fns: Callable[..., Any], drop: set[str]) -> set[str]:
    names: set[str] = set()
    for fn in fns:
        for p in inspect.signature(fn).parameters.values():
            if p.kind is p.KEYWORD_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "self"):
                names.add(p.name)
    return names - drop


@pytest.mark.parametrize(
    ("cls", "fields"),
    [
        (LocalOptions, _keywords(LocalStore.__init__, drop={"root"})),
        (GcsOptions, _keywords(GcsStore.__init__, drop={"bucket"}) | {"token"}),
        (
            BlobOptions,
            _keywords(AzureBase.__init__, BlobStore.__init__, drop={"container"}) | {"connection_string"},
        ),
        (
            DfsOptions,
            _keywords(AzureBase.__init__, DfsStore.__init__, drop={"container", "filesystem"})
            | {"connection_string"},
        ),
    ],
)
def test_structs_cover_exactly_the_constructor_keywords(cls: type[StoreOptions], fields: set[str]) -> None:
    assert set(cls.__struct_fields__) == fields


# -- unknown keys, wrong types ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: store_options(WASB, {"acount_key": "x"}),
            "unknown Azure Blob store option 'acount_key'; did you mean 'account_key'?",
        ),
        (
            lambda: store_options(GS, {"use_movee": "1"}),
            "unknown GCS store option 'use_movee'; did you mean 'use_move'?",
        ),
        (lambda: store_options(ABFS, {"block_size": "1"}), "unknown ADLS Gen2 store option 'block_size'"),
        (lambda: open_store(GS, colour="blue"), "unknown GCS store option 'colour'"),
        (lambda: store_options("/x", {"fsynk": "1"}), "did you mean 'fsync'?"),
        (
            lambda: CommitterConfig.from_mapping({"io.threadz": "1"}),
            "unknown committer option 'io.threadz'; did you mean 'io_threads'?",
        ),
        (lambda: DEFAULT_CONFIG.with_options(rename_attempt=3), "did you mean 'rename_attempts'?"),
        (
            lambda: store_options(GS, {"use_move": "maybe"}),
            "GCS store option 'use_move' must be true or false (or none)",
        ),
        (lambda: store_options(GS, {"page_size": "many"}), "GCS store option 'page_size' must be an integer"),
        (lambda: store_options(GS, {"limiter": "5"}), "'limiter' must be a Limiter object (Python API only)"),
        (lambda: store_options(WASB, {"request_timeout": "soon"}), "'request_timeout' must be a number"),
        (
            lambda: CommitterConfig.from_mapping({"io_threads": "many"}),
            "committer option 'io_threads' must be an integer",
        ),
        (
            lambda: DEFAULT_CONFIG.with_options(validate_output="maybe"),
            "'validate_output' must be true or false",
        ),
        (lambda: DEFAULT_CONFIG.with_options(io_threads=0), "'io_threads' must be an integer >= 1"),
        (lambda: store_options("nosuch://x/y", {}), "unsupported URL scheme 'nosuch'"),
    ],
)
def test_bad_options_are_one_line_config_errors(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        make()
    assert message in str(ei.value) and "\n" not in str(ei.value)


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


def _plan(options: dict[str, Any], conf: dict[str, str] | None = None) -> Any:
    return build_plan(options, _Schema(), False, session_conf=conf)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"path": GS, "store.use_movee": "1"},
            "unknown GCS store option 'use_movee'; did you mean 'use_move'?",
        ),
        (
            {"path": GS, "use_movee": "1"},
            "unknown option 'use_movee' for format 'amcommit'; did you mean 'use_move'?",
        ),
        ({"path": GS, "store.use_move": "maybe"}, "GCS store option 'use_move' must be true or false"),
        ({"path": GS, "io_threadz": "1"}, "did you mean 'io_threads'?"),
        ({"path": GS, "io_threads": "x"}, "'io_threads' must be an integer"),
        (
            {"path": "/tmp/d", "use_move": "true"},
            "store option 'use_move' does not apply to file:// destinations",
        ),
    ],
)
def test_spark_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        _plan(options)
    assert message in str(ei.value) and "\n" not in str(ei.value)


def test_spark_store_options_are_typed() -> None:
    p = _plan({"path": GS, "use_move": "false", "store.page_size": "10", "endpoint": "http://127.0.0.1:9"})
    assert p.store_options == {"use_move": False, "page_size": 10, "endpoint": "http://127.0.0.1:9"}
    # a session default meant for another backend does not break a local write
    p = _plan({"path": "/tmp/d"}, {"spark.amcommit.use_move": "true", "spark.amcommit.fsync": "false"})
    assert p.store_options == {"fsync": False}


# -- secrets ---------------------------------------------------------------------------------

SECRET = "S3cr3tV4lue0123456789"
KEY = "U0VDUkVUS0VZU0VDUkVUS0VZU0VDUkVUS0VZ"  # valid base64


def _sas_url() -> None:
    open_store(f"{WASB}?sv=2020-02-10&sig={SECRET}")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: open_store(GS, endpoint=f"http://user:{SECRET}@127.0.0.1:9"), id="endpoint-userinfo"
        ),
        pytest.param(
            lambda: store_options(WASB, {"endpoint": f"https://me:{SECRET}@host"}),
            id="endpoint-userinfo-azure",
        ),
        pytest.param(_sas_url, id="sas-in-url"),
        pytest.param(lambda: store_options(f"{GS}?token={SECRET}", {}), id="token-in-url"),
        pytest.param(
            lambda: store_options(WASB, {"account_key": 5, "endpoint": 7}), id="account_key-wrong-type"
        ),
        pytest.param(lambda: store_options(WASB, {"acount_key": SECRET}), id="account_key-misspelt"),
        pytest.param(lambda: open_store(WASB, account_key=SECRET + "!"), id="account_key-not-base64"),
        pytest.param(
            lambda: open_store(WASB, connection_string=f"AccountKey={SECRET}"), id="connection-string"
        ),
        pytest.param(lambda: open_store(WASB, connection_string=f"{SECRET}"), id="connection-string-garbage"),
        pytest.param(lambda: open_store(WASB, sas_token=f"sv=1&sgi={SECRET}"), id="sas_token-no-sig"),
        pytest.param(
            lambda: store_options(GS, {"sas_token": f"sv=1&sig={SECRET}"}), id="sas_token-wrong-backend"
        ),
        pytest.param(lambda: store_options(GS, {"use_move": SECRET}), id="secret-as-a-value"),
        pytest.param(lambda: store_options(GS, {"token": SECRET, "page_size": "x"}), id="token-other-error"),
        pytest.param(
            lambda: _plan({"path": WASB, "account_key": SECRET, "io_threadz": "1"}), id="spark-unknown"
        ),
        pytest.param(lambda: _plan({"path": f"{WASB}?sig={SECRET}"}), id="spark-sas-in-path"),
        pytest.param(lambda: _plan({"path": GS, "store.use_move": SECRET}), id="spark-store-value"),
        pytest.param(lambda: _plan({"path": "/tmp/d", "sas_token": SECRET}), id="spark-wrong-backend"),
        pytest.param(
            lambda: _plan(
                {"path": GS}, {"spark.amcommit.store.token": SECRET, "spark.amcommit.store.chunk_size": "x"}
            ),
            id="spark-session-conf",
        ),
    ],
)
def test_no_secret_in_any_message(make: Callable[[], Any]) -> None:
    with pytest.raises(AmcommitError) as ei:
        make()
    for text in (str(ei.value), repr(ei.value)):
        assert SECRET not in text and "\n" not in text


def test_errors_redact_secrets_raised_anywhere() -> None:
    store_options(WASB, {"account_key": KEY})  # conversion registers the secret
    e = StoreError(f"failed with key {KEY} at https://u:pw@host/x?sig=abc&sv=1", path="p", op="put")
    assert KEY not in str(e) and "pw" not in str(e) and "sig=abc" not in str(e) and KEY not in repr(e)
    assert KEY not in str(InvalidInput(f"Bearer {KEY}")) and KEY not in str(ConfigError(KEY))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://user:pw@host/x", "https://***@host/x"),
        ("https://tokenonly@host/x", "https://***@host/x"),
        ("abfs://fs:pw@acct.dfs.core.windows.net/", "abfs://***@acct.dfs.core.windows.net/"),
        ("wasb://container@acct.blob.core.windows.net/a", "wasb://container@acct.blob.core.windows.net/a"),
        ("x?sv=2020&sig=abc%2Bdef&sp=r then", "x?sv=***&sig=***&sp=*** then"),
        ("gs://b/day=1/sig=2/file", "gs://b/day=1/sig=2/file"),
        ("AccountName=a;AccountKey=k+y/==;BlobEndpoint=x", "AccountName=a;AccountKey=***;BlobEndpoint=x"),
        ("SharedAccessSignature=sv=1&sig=zz;X=1", "SharedAccessSignature=***;X=1"),
        ("Authorization: Bearer eyJabc.def", "Authorization: Bearer ***"),
        ("SharedKey acct:c2ln", "SharedKey ***"),
        ("nothing to hide p=1/a.txt", "nothing to hide p=1/a.txt"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_registered_secrets_and_urls() -> None:
    register_secret("sv=1&sig=Zm9vYmFyYmF6cXV4%2B")
    assert redact("token Zm9vYmFyYmF6cXV4+ in text") == "token *** in text"
    register_secret("abc")  # too short to be scrubbed from free text
    assert redact("abc") == "abc"
    assert redact_url("https://u:p@h/c/x?sv=1&sig=s&comp=list") == "https://h/c/x?sv=***&sig=***&comp=list"
    assert has_credentials("http://u:p@h") and has_credentials("https://tok@h")
    assert not has_credentials("wasb://c@acct.blob.core.windows.net/") and not has_credentials("http://h/x")


def test_reprs_mask_secrets() -> None:
    opts = convert_options(BlobOptions, {"account_key": SECRET, "connection_string": "AccountName=a"})
    assert SECRET not in repr(opts) and "account_key=***" in repr(opts)
    assert "token=***" in repr(GcsOptions(token=SECRET)) and SECRET not in repr(GcsOptions(token=SECRET))
    assert isinstance(opts, Options) and SECRET not in repr(Secret(SECRET)) and f"{Secret(SECRET)}" == "***"


def test_success_report_redacts_the_error() -> None:
    r = JobReport(job_id="j", dest_uri="gs://b/d", error=f"ClientError: https://h/x?sig={SECRET}")
    text = json.dumps(r.to_success_data().diagnostics)
    assert SECRET not in text and "sig=***" in text


def test_committer_config_is_typed_once() -> None:
    c = CommitterConfig.from_mapping({"io_threads": "12", "validate-output": "on", "io_rate": "none"})
    assert (c.io_threads, c.validate_output, c.io_rate) == (12, True, None)
    assert c.with_options(io_threads="7").io_threads == 7 and c.io_threads == 12
    assert CommitterConfig.from_mapping({"mapreduce.manifest.committer.io.rate": "0"}).io_rate is None
    assert CommitterConfig.from_mapping({}, base=c) == c and hash(c) == hash(c.with_options())
    assert CommitterConfig(io_threads=3).with_options(conflict_mode="fail").io_threads == 3
    with pytest.raises(ConfigError):
        CommitterConfig(conflict_mode="merge")  # type: ignore[arg-type]


def test_spark_writer_options_are_typed() -> None:
    p = _plan({"path": GS, "rowgrouprows": "1_000", "maxrecordsperfile": " 10 ", "compressionlevel": ""})
    assert (p.row_group_rows, p.max_records_per_file, p.compression_level) == (1000, 10, None)
    assert p.max_file_bytes == 256 * 1024 * 1024 and _plan({"path": "/tmp/d"}).max_file_bytes == 0
    with pytest.raises(ConfigError, match=r"'maxopenfiles' must be an integer >= 1$"):
        _plan({"path": GS, "maxopenfiles": "0"})


def test_writer_options_documented_and_typed_alike() -> None:
    from amcommit.spark.options import WRITER_OPTIONS, WriterOptions

    assert set(WRITER_OPTIONS) == set(WriterOptions.__struct_fields__)
