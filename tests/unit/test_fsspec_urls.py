"""fsspec-style URLs (adlfs / gcsfs spelling) and ``~`` in local paths: pure parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from amcommit.errors import ConfigError
from amcommit.paths import ParsedUri, uri_to_path
from amcommit.store.azure import BlobStore, DfsStore
from amcommit.store.azure._common import canonical_fsspec_uri, fsspec_account
from amcommit.store.azure.auth import parse_connection_string
from amcommit.store.schemes import parse_location, store_options


def test_gcs_scheme_is_gs() -> None:
    assert parse_location("gcs://bucket/a/b%20c") == ParsedUri("gs", "bucket", "a/b c")
    assert uri_to_path("gs://bucket/", "gcs://bucket/a/b") == "a/b"
    assert store_options("gcs://bucket/x", {"use_move": "false"}) == {"use_move": False}


def test_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_location("~/out/x") == ParsedUri("file", "", str(tmp_path / "out" / "x").lstrip("/"))
    assert parse_location("~") == ParsedUri("file", "", str(tmp_path).lstrip("/"))


@pytest.mark.parametrize(
    ("url", "service", "expected"),
    [
        ("az://cont/p/q", "blob", ParsedUri("wasbs", "cont@acct.blob.core.windows.net", "p/q")),
        ("abfs://fs/p", "dfs", ParsedUri("abfs", "fs@acct.dfs.core.windows.net", "p")),
        ("abfss://fs/", "dfs", ParsedUri("abfss", "fs@acct.dfs.core.windows.net", "")),
    ],
)
def test_canonical_form(url: str, service: str, expected: ParsedUri) -> None:
    assert canonical_fsspec_uri(parse_location(url), service, "acct", None, None, env={}) == expected


def test_account_sources_in_order() -> None:
    conn = parse_connection_string("AccountName=fromconn;AccountKey=AAAA")
    env = {"AZURE_STORAGE_ACCOUNT_NAME": "fromenv"}
    assert fsspec_account("opt", conn, "http://127.0.0.1:1/fromep", env) == "opt"
    assert fsspec_account(None, conn, "http://127.0.0.1:1/fromep", env) == "fromconn"
    assert fsspec_account(None, None, "http://127.0.0.1:1/fromep", env) == "fromep"
    assert fsspec_account(None, None, "https://hostacct.blob.core.windows.net", env) == "hostacct"
    assert fsspec_account(None, None, "http://127.0.0.1:1", env) == "fromenv"
    assert fsspec_account(None, None, None, {}) is None


def test_missing_account_is_one_line_naming_the_option() -> None:
    with pytest.raises(ConfigError) as e:
        canonical_fsspec_uri(parse_location("az://cont/p"), "blob", None, None, None, env={})
    assert "'account' store option" in str(e.value) and "\n" not in str(e.value)
    assert "AZURE_STORAGE_ACCOUNT_NAME" in str(e.value)


def test_az_url_resolves_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    from amcommit.store.schemes import open_location

    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    store, path = open_location("az://cont/a/b", account="acct", account_key="AAAA")
    assert isinstance(store, BlobStore)
    assert store.root_uri == "wasbs://cont@acct.blob.core.windows.net/" and path == "a/b"
    assert store.endpoint == "https://acct.blob.core.windows.net"
    dfs, _ = open_location("abfss://fs/a", account="acct", account_key="AAAA")
    assert isinstance(dfs, DfsStore)
    assert dfs.root_uri == "abfss://fs@acct.dfs.core.windows.net/"
    assert dfs.endpoint == "https://acct.dfs.core.windows.net"
    with pytest.raises(ConfigError, match="names no storage account"):
        open_location("abfs://fs/a", account_key="AAAA")
