"""The amcommit command line: commands, output, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from amcommit.cli import main
from amcommit.committer import setup_job
from amcommit.store.local import LocalStore
from tests.engine.helpers import run_task

JOB = "202611220003_0001"


def prepare(tmp_path: Path, name: str = "out dir") -> Path:
    dest = tmp_path / name

    async def go() -> None:
        store = LocalStore("/")
        layout = await setup_job(store, str(dest).lstrip("/"), JOB)
        await run_task(store, layout, 0, {"p=1/a.txt": b"aaa", "b.txt": b"bb"})
        await run_task(store, layout, 1, {"p=2/c.txt": b"c"})

    anyio.run(go)
    return dest


def test_commit_job_then_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = prepare(tmp_path)
    assert main(["commit-job", str(dest), "--job-id", JOB, "-q"]) == 0
    out = capsys.readouterr().out
    assert "committed 3 files" in out
    assert (dest / "p=1" / "a.txt").read_bytes() == b"aaa" and not (dest / "_temporary").exists()
    assert main(["success", str(dest)]) == 0
    out = capsys.readouterr().out
    assert f"job            {JOB}  (SUCCESS)" in out and "files          3" in out
    assert main(["success", "file://" + str(dest) + "/_SUCCESS", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobId"] == JOB


def test_manifest_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = prepare(tmp_path)
    manifest = next(dest.glob("_temporary/*/00/manifests/*-manifest.json"))
    assert main(["manifest", str(manifest)]) == 0
    out = capsys.readouterr().out
    assert "files          2  (5 bytes)" in out
    assert main(["manifest", str(manifest), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobId"] == JOB


def test_abort_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = prepare(tmp_path)
    assert main(["abort-job", str(dest), "--job-id", JOB, "-q"]) == 0
    assert "destination untouched" in capsys.readouterr().out
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["success", "/nonexistent/dir"], "not found"),
        (["commit-job", "/nonexistent/dir", "--job-id", JOB], "no job directory"),
        (["commit-job", "/tmp", "--job-id", "bad/id"], "invalid job id"),
        (["commit-job", "/tmp", "--job-id", JOB, "--conf", "io.threadz=3"], "unknown committer option"),
        (["commit-job", "nosuch://x/y", "--job-id", JOB], "unsupported URL scheme"),
    ],
)
def test_errors_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("amcommit: error:") and message in err and "\n" not in err
    assert "Traceback" not in err


def test_demo_local(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "demo",
                "--no-spark",
                "--target",
                "local",
                "--tasks",
                "6",
                "--files",
                "5",
                "--failed-attempts",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "verified: 30 files" in out and "-> OK" in out


SECRET = "S3cr3tV4lue0123456789"
WASB = "wasb://c@acct.blob.core.windows.net/dest"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["commit-job", f"{WASB}?sv=2020&sig={SECRET}", "--job-id", JOB], {}, "URI has a query or fragment"),
        (["success", f"{WASB}?sv=2020&sig={SECRET}"], {}, "a SAS token goes in the sas_token option"),
        (["abort-job", f"{WASB}/x?sig={SECRET}", "--job-id", JOB], {}, "URI has a query or fragment"),
        (
            ["commit-job", "gs://b/d", "--job-id", JOB, "--endpoint", f"http://user:{SECRET}@127.0.0.1:9"],
            {},
            "the endpoint URL must not carry credentials",
        ),
        (
            ["commit-job", WASB, "--job-id", JOB, "--store-option", f"acount_key={SECRET}"],
            {},
            "unknown Azure Blob store option 'acount_key'; did you mean 'account_key'?",
        ),
        (
            ["commit-job", "gs://b/d", "--job-id", JOB, "--store-option", "use_move=maybe"],
            {},
            "GCS store option 'use_move' must be true or false",
        ),
        (
            ["commit-job", "gs://b/d", "--job-id", JOB, "--store-option", f"use_move={SECRET}"],
            {},
            "'use_move' must be true or false",
        ),
        (["commit-job", "gs://b/d", "--job-id", JOB, "--store-option", SECRET], {}, "expects KEY=VALUE"),
        (
            ["commit-job", "gs://b/d", "--job-id", JOB, "--store-option", f"sas_token=sv=1&sig={SECRET}"],
            {},
            "unknown GCS store option 'sas_token'",
        ),
        (
            ["commit-job", WASB, "--job-id", JOB, "--store-option", f"account_key={SECRET}!"],
            {},
            "account key is not valid base64",
        ),
        (
            ["commit-job", WASB, "--job-id", JOB, "--store-option", f"connection_string=AccountKey={SECRET}"],
            {},
            "connection string has no AccountName",
        ),
        (["commit-job", WASB, "--job-id", JOB], {"AZURE_STORAGE_KEY": SECRET + "!"}, "not valid base64"),
        (
            ["commit-job", WASB, "--job-id", JOB],
            {"AZURE_STORAGE_SAS_TOKEN": f"sv=1&sgi={SECRET}"},
            "a SAS token needs a 'sig=' parameter",
        ),
        (
            ["commit-job", "/tmp", "--job-id", JOB, "--store-option", "fsync=often"],
            {},
            "'fsync' must be true",
        ),
        (["commit-job", "/tmp", "--job-id", JOB, "--conf", "io_threads=lots"], {}, "must be an integer"),
    ],
)
def test_bad_input_is_one_line_without_secrets(
    argv: list[str],
    env: dict[str, str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for k in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(argv) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("amcommit: error:") and message in lines[0], lines[0]
    assert SECRET not in captured.err + captured.out and "Traceback" not in captured.err


def test_store_options_are_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    from amcommit.cli import _store_options, build_parser

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    args = build_parser().parse_args(
        [
            "commit-job",
            "gs://b/d",
            "--job-id",
            JOB,
            "--store-option",
            "use_move=false",
            "--store-option",
            "page_size=64",
        ]
    )
    assert _store_options(args) == {"use_move": False, "page_size": 64}
