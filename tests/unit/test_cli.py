"""The amcommit command line: commands, output, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from amcommit.api import setup_job
from amcommit.cli import main
from amcommit.loop import uvloop_available
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
    assert re.search(rf"^job +{JOB}  \(SUCCESS\)$", out, re.M) and re.search(
        r"^files +3  \(6 bytes\)", out, re.M
    )
    keys = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert "rename_rate_per_s" in keys  # a diagnostic, its value aligned with the others
    value_columns = {m.end() for line in out.splitlines() if (m := re.match(r"\S.*?\s{2,}", line))}
    assert len(value_columns) == 1, out  # values aligned, even after rename_rate_per_s
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
        (["demo", "--no-spark", "--target", "local", "--tasks", "0"], "--tasks must be >= 1"),
        (["demo", "--no-spark", "--io-threads", "0"], "--io-threads must be >= 1"),
        (["demo", "--target", "local", "--rows", "0"], "--rows must be >= 1"),
        (
            ["demo", "--target", "local", "--tasks", "2", "--failed-attempts", "3"],
            "--failed-attempts must be within",
        ),
        (["demo", "--no-spark", "--target", "local", "--dest", "gs://b/x"], "--dest is for local paths"),
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
    from amcommit.cli.common import store_options
    from amcommit.cli.main import build_parser

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
    assert store_options(args) == {"use_move": False, "page_size": 64}


@pytest.mark.parametrize(
    ("env", "args", "shown"),
    [
        ("0", ["--version"], "asyncio"),
        ("auto", ["--no-uvloop", "--version"], "asyncio (--no-uvloop)"),
        ("auto", ["--version"], "uvloop " if uvloop_available() else "asyncio"),
        ("maybe", ["--version"], "none: AMCOMMIT_UVLOOP='maybe': expected 0/1"),
    ],
)
def test_version_shows_the_event_loop(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, env: str, args: list[str], shown: str
) -> None:
    from amcommit import __version__

    monkeypatch.setenv("AMCOMMIT_UVLOOP", env)
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 0
    version, loop_line = capsys.readouterr().out.strip().splitlines()
    assert version == f"amcommit {__version__}"
    assert loop_line.startswith(f"event loop: {shown}")


def test_every_argument_and_command_has_help() -> None:
    import argparse

    from amcommit.cli import build_parser

    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for cmd, sub in action.choices.items():
                    if not helps.get(cmd):
                        missing.append(f"command {cmd}")
                    walk(sub, f"{name} {cmd}")
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "amcommit")
    assert missing == []


def test_commit_of_a_committed_job_says_already_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = prepare(tmp_path)
    assert main(["commit-job", str(dest), "--job-id", JOB, "-q"]) == 0
    capsys.readouterr()
    date = json.loads((dest / "_SUCCESS").read_bytes())["date"]
    assert main(["commit-job", str(dest), "--job-id", JOB, "-q"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"job {JOB} was already committed (3 files, {date})"), out
    assert "committed 3 files from" not in out


def _several_jobs(tmp_path: Path) -> tuple[Path, float]:
    """A destination with a committed job, four pending ones in every state, a Hadoop-layout
    job (from tests/fixtures) and a lock held by the one that is renaming."""
    import shutil
    import time

    import msgspec

    from amcommit.api import commit_job
    from amcommit.committer.journal import Journal
    from amcommit.committer.lock import LockBody, lock_path

    dest = tmp_path / "dest"
    d = str(dest).lstrip("/")
    beat = time.time() - 5

    async def go() -> None:
        store = LocalStore("/")
        done = await setup_job(store, d, "job_done")
        await run_task(store, done, 0, {"a.txt": b"a"})
        await commit_job(store, d, "job_done")
        for n, (job, state) in enumerate(
            [
                ("job_setup", None),
                ("job_renaming", "renaming"),
                ("job_renamed", "renamed"),
                ("job_cmt", "committed"),
            ]
        ):
            layout = await setup_job(store, d, job, origin="spark" if job == "job_setup" else "api")
            for t in range(n + 1):
                await run_task(store, layout, t, {f"{job}/{t}.txt": b"x"})
            if state is not None:
                journal = Journal(job_id=job, state=state, conflict_mode="append")  # type: ignore[arg-type]
                await store.put(layout.journal_path, msgspec.json.encode(journal))
        lock = LockBody(
            owner="job_renaming", host="h1", pid=42, acquired=beat - 10, heartbeat=beat, token="t"
        )
        await store.put(lock_path(d), msgspec.json.encode(lock))

    anyio.run(go)
    hadoop = Path(__file__).parents[1] / "fixtures" / "hadoop" / "uncommitted" / "_temporary"
    for job_dir in hadoop.iterdir():
        shutil.copytree(job_dir, dest / "_temporary" / job_dir.name)
    return dest, beat


HADOOP_JOB = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def test_jobs_lists_states_lock_and_last_commit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest, _beat = _several_jobs(tmp_path)
    assert main(["jobs", str(dest)]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("job_", HADOOP_JOB))
    }
    assert rows["job_setup"][1:5] == ["amcommit", "set", "up", "1"] and rows["job_setup"][-1] == "spark"
    assert rows["job_renaming"][1:4] == ["amcommit", "renaming", "2"] and rows["job_renaming"][-1] == "yes"
    assert rows["job_renamed"][1:4] == ["amcommit", "renamed", "3"]
    assert rows["job_cmt"][1:4] == ["amcommit", "committed", "4"]
    assert rows[HADOOP_JOB][1:5] == ["hadoop", "set", "up", "3"]
    assert "job_done" not in rows  # committed and cleaned up: only in _SUCCESS
    assert "lock           held by job job_renaming (commit, host h1, pid 42), last heartbeat" in out
    assert "last commit    job job_done  SUCCESS" in out and ", 1 files" in out

    assert main(["jobs", str(dest), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jobs = {j["jobId"]: j for j in doc["jobs"]}
    assert set(jobs) == {"job_setup", "job_renaming", "job_renamed", "job_cmt", HADOOP_JOB}
    assert jobs["job_renamed"]["state"] == "renamed" and jobs["job_renamed"]["manifests"] == 3
    assert jobs[HADOOP_JOB]["layout"] == "hadoop" and jobs[HADOOP_JOB]["origin"] is None
    assert jobs["job_setup"]["origin"] == "spark" and isinstance(jobs["job_setup"]["created"], float)
    assert [j for j in jobs if jobs[j]["holdsLock"]] == ["job_renaming"]
    assert doc["lock"]["owner"] == "job_renaming" and 4 <= doc["lock"]["heartbeatAgeSeconds"] < 60
    assert "token" not in doc["lock"]
    assert doc["lastCommit"]["jobId"] == "job_done" and doc["lastCommit"]["success"] is True


def test_jobs_of_an_empty_destination(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "jobs           none pending" in out and "last commit    none" in out


def _table_with_pending_writes(tmp_path: Path) -> tuple[Path, list[str]]:
    """A Hudi table with one commit and three writes inflight: one whose writer is alive
    (two task manifests, and it holds the table's lock), one that said it stopped, one
    whose heartbeat is older than writer_ttl. Returns the table and the four instants."""
    import os
    import time

    import msgspec

    from amcommit.committer.lock import LockBody, lock_path
    from amcommit.table.format.naming import STAGING_DIR, heartbeat_path
    from amcommit.table.timeline.heartbeat import stop_beat
    from tests.table.writehelpers import begin, rows, write, write_tasks

    dest = tmp_path / "tbl"
    d = str(dest).lstrip("/")
    instants: list[str] = []

    async def go() -> None:
        store = LocalStore("/")
        w1, _ = await write(store, d, rows(0, 4))
        alive = await begin(store, d)
        await write_tasks(store, alive, rows(10, 4))
        stopped = await begin(store, d)
        await stop_beat(store, d, stopped.instant)
        expired = await begin(store, d)
        old = time.time() - 600
        os.utime(dest / heartbeat_path(expired.instant), (old, old))
        lock = LockBody(
            owner=alive.instant, host="h1", pid=42, acquired=time.time(), heartbeat=time.time(), token="t"
        )
        await store.put(lock_path(d, staging=STAGING_DIR), msgspec.json.encode(lock))
        instants.extend([w1.instant, alive.instant, stopped.instant, expired.instant])

    anyio.run(go)
    return dest, instants


def test_jobs_of_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23 item 11: a table's inflight instants, their heartbeat and the lock (it said
    "none pending")."""
    dest, (done, alive, stopped, expired) = _table_with_pending_writes(tmp_path)
    assert main(["jobs", str(dest)]) == 0
    out = capsys.readouterr().out
    assert "(Hudi table)" in out and "none pending" not in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:17].isdigit()}
    assert set(rows) == {alive, stopped, expired}
    assert rows[alive][1:8] == ["commit", "inflight", "INSERT", "set", "up", "2", "alive"]
    assert rows[alive][-2:] == ["api", "yes"]
    assert (
        rows[stopped][1:7] == ["commit", "inflight", "INSERT", "set", "up", "0"]
        and "stopped" in rows[stopped]
    )
    assert "expired" in rows[expired] and "10 min ago" in " ".join(rows[expired])
    assert f"lock           held by job {alive} (commit, host h1, pid 42)" in out
    assert f"last commit    instant {done} (commit)" in out

    assert main(["jobs", str(dest), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["table"] is True and doc["lastInstant"] == {"instant": done, "action": "commit"}
    writes = {w["instant"]: w for w in doc["writes"]}
    assert [writes[t]["heartbeat"] for t in (alive, stopped, expired)] == ["alive", "stopped", "expired"]
    assert (
        writes[alive]["manifests"] == 2 and writes[alive]["holdsLock"] and writes[alive]["commit"] == "set up"
    )
    assert writes[expired]["heartbeatAgeSeconds"] >= 590
    assert doc["lock"]["owner"] == alive
    # writer_ttl judges the heartbeats
    assert main(["jobs", str(dest), "--json", "--conf", "writer_ttl=3600"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {w["instant"]: w["heartbeat"] for w in doc["writes"]}[expired] == "alive"


def test_jobs_of_nothing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing exists at this destination" in err and "missing" in err
    (tmp_path / "file").write_bytes(b"x")
    assert main(["jobs", str(tmp_path / "file")]) == 1
    assert "is a file, not a destination directory" in capsys.readouterr().err


def test_changes_since_000_is_the_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest, (done, *_rest) = _table_with_pending_writes(tmp_path)
    for since in ("000", "0"):
        assert main(["changes", str(dest), "--since", since]) == 0
        out = capsys.readouterr().out
        assert out.startswith("changes in (start, latest]: 1 instants, 4 files added") and done in out
    assert main(["changes", str(dest), "--since", "000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["since"] is None


@pytest.mark.parametrize("url", ["gs://bucket1/t", "wasb://c@devstoreaccount1.blob.core.windows.net/t"])
def test_unreachable_endpoint_is_named(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong endpoint port: the error names the endpoint, not the lock path asked first."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    args = ["jobs", url, "--endpoint", endpoint + ("/devstoreaccount1" if url.startswith("wasb") else "")]
    if url.startswith("wasb"):
        args += ["--store-option", "account_key=" + "A" * 86 + "=="]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        f"amcommit: error: cannot connect to {endpoint} (ClientConnectorError): check the endpoint"
    )
    assert "_commit.lock" not in err and "_temporary" not in err and "A" * 20 not in err


def _env() -> dict[str, str]:
    import os

    root = Path(__file__).parents[2]
    return {**os.environ, "PYTHONPATH": f"{root / 'src'}:{root}"}


@pytest.mark.parametrize("cmd", [["jobs", "{dest}"], ["success", "{dest}"], ["jobs", "{dest}", "--json"]])
def test_closed_pipe_is_quiet(tmp_path: Path, cmd: list[str]) -> None:
    """The reader is gone before amcommit writes: no traceback, no error line, status 141."""
    import subprocess
    import sys

    dest, _ = _several_jobs(tmp_path)
    argv = [sys.executable, "-m", "amcommit.cli", *(c.format(dest=dest) for c in cmd)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # like `| head` that has already exited
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == b""


def test_closed_pipe_with_head(tmp_path: Path) -> None:
    """A real `| head -1` on output larger than the pipe buffer."""
    import shlex
    import subprocess
    import sys

    dest = tmp_path / "big"

    async def go() -> None:
        store = LocalStore("/")
        layout = await setup_job(store, str(dest).lstrip("/"), JOB)
        await run_task(store, layout, 0, {f"part={i % 7}/file-{i:05d}.parquet": b"" for i in range(1500)})

    anyio.run(go)
    manifest = next(dest.glob("_temporary/*/00/manifests/*-manifest.json"))
    py = shlex.quote(sys.executable)
    script = (
        f"set -o pipefail; {py} -m amcommit.cli manifest {shlex.quote(str(manifest))} --json | head -1; "
        f"echo rc=$?; {py} -m amcommit.cli jobs {shlex.quote(str(dest))} | head -1; echo rc=$?"
    )
    res = subprocess.run(["bash", "-c", script], capture_output=True, env=_env(), timeout=120)
    lines = res.stdout.decode().splitlines()
    assert lines[0] == "{" and lines[1] == "rc=141", res.stdout
    assert lines[2].startswith("destination") and lines[3] == "rc=0", res.stdout  # fits the pipe
    assert res.stderr == b"", res.stderr


def test_tilde_in_dest_and_spool_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    dest = prepare(tmp_path, "out")
    (tmp_path / "spool").mkdir()
    assert main(["jobs", "~/out"]) == 0
    assert f"destination    file://{dest}\n" in capsys.readouterr().out
    argv = ["commit-job", "~/out", "--job-id", JOB, "-q", "--conf", "spool_dir=~/spool"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "committed 3 files" in capsys.readouterr().out
    assert (dest / "p=1" / "a.txt").read_bytes() == b"aaa"
