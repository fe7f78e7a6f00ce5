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
