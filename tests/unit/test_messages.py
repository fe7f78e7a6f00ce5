"""Errors as users read them (issue 11 item 14): store paths shown as the destination the
user gave (local paths keep their leading ``/``, cloud paths their URL), missing buckets
and containers named."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from amcommit.api import setup_job
from amcommit.cli import main
from amcommit.errors import BucketNotFound, CommitError, ConflictError, NotFound
from amcommit.messages import bucket_name, for_user, rewrite, shown_paths
from amcommit.store.local import LocalStore
from tests.engine.helpers import run_task

JOB = "202611230002_0014"


def test_rewrite_whole_paths_only() -> None:
    msg = "partition 'tmp/d/out' already holds 'tmp/d/out/p=1/a.bin'; see file:///tmp/d/out/x, xtmp/d/out"
    assert rewrite(msg, "tmp/d/out", "/tmp/d/out") == (
        "partition '/tmp/d/out' already holds '/tmp/d/out/p=1/a.bin'; see file:///tmp/d/out/x, xtmp/d/out"
    )
    assert rewrite("'tmp/d/outer/a'", "tmp/d/out", "/tmp/d/out") == "'tmp/d/outer/a'"
    assert shown_paths("/tmp/d/out/") == ("tmp/d/out", "/tmp/d/out")
    assert shown_paths("file:///tmp/d/out") == ("tmp/d/out", "/tmp/d/out")
    assert shown_paths("gs://b/w/e") == ("w/e", "gs://b/w/e")
    assert shown_paths("gs://b/") is None
    assert bucket_name("gs://b/w") == ("bucket", "b")
    assert bucket_name("wasb://c1@acct.blob.core.windows.net/x") == ("container", "c1")
    assert bucket_name("/tmp/x") is None


def test_for_user_keeps_type_and_attributes() -> None:
    e = ConflictError("partition 'tmp/d/out/p=1' is not empty", stage="check_conflicts")
    out = for_user(e, "/tmp/d/out")
    assert type(out) is ConflictError and out.stage == "check_conflicts"
    assert str(out) == "check_conflicts: partition '/tmp/d/out/p=1' is not empty"
    nf = for_user(NotFound("not found", path="w/e/_temporary/x", op="get"), "gs://b/w/e")
    assert isinstance(nf, NotFound) and str(nf) == "get 'gs://b/w/e/_temporary/x': not found"
    missing = BucketNotFound("the bucket does not exist", path="w/x", op="gcs_list", status=404)
    assert str(for_user(missing, "gs://nosuch/w")) == "bucket 'nosuch' does not exist (HTTP 404)"
    gone = BucketNotFound("the container does not exist", op="put", status=404, code="ContainerNotFound")
    assert str(for_user(gone, "wasb://c9@a.blob.core.windows.net/x")) == (
        "container 'c9' does not exist (HTTP 404, ContainerNotFound)"
    )
    assert for_user(CommitError("x"), None).args == ("x",)


def test_cli_errors_show_paths_as_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "out"
    (dest / "p=1").mkdir(parents=True)
    (dest / "p=1" / "a.txt").write_bytes(b"old")

    async def go() -> None:
        store = LocalStore("/")
        layout = await setup_job(store, str(dest).lstrip("/"), JOB)
        await run_task(store, layout, 0, {"p=1/a.txt": b"new"})

    anyio.run(go)
    assert main(["commit-job", str(dest), "--job-id", JOB, "--mode", "fail", "-q"]) == 1
    err = capsys.readouterr().err
    assert f"'{dest}/p=1" in err and f"'{str(dest).lstrip('/')}" not in err, err
