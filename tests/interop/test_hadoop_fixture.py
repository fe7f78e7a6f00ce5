"""Interop with Hadoop 3.5's ManifestCommitter, using a job directory it really wrote
(tests/fixtures/hadoop, made by make_fixture.py through PySpark's bundled Hadoop)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from amcommit.api import commit_job
from amcommit.committer import resolve_layout
from amcommit.manifest import Scope, check_manifest, decode_manifest, decode_success
from amcommit.paths import encode_path
from amcommit.store.local import LocalStore

FIXTURE = Path(__file__).parent.parent / "fixtures" / "hadoop"
FACTS = json.loads((FIXTURE / "fixture.json").read_text())
JOB_ID = FACTS["job"]["job_id"]


def test_uri_encoding_matches_hadoop() -> None:
    original = FACTS["original"]
    assert "file:" + encode_path(original["dest"]) == original["dest_uri_prefix"]


def relocate(tmp_path: Path) -> Path:
    """Copy the uncommitted job to a new destination (with special characters) and rewrite
    the manifests' URIs to it, as if Hadoop had written it there."""
    dest = tmp_path / "new dest+é%#" / "table"
    shutil.copytree(FIXTURE / "uncommitted", dest)
    for d in FACTS["empty_dirs_to_recreate"]:
        (dest / d).mkdir(parents=True, exist_ok=True)
    orig = FACTS["original"]
    new_enc = encode_path(str(dest))
    for m in dest.glob("_temporary/*/*/manifests/*-manifest.json"):
        text = m.read_text(encoding="utf-8")
        text = text.replace(orig["source_uri_prefix"], "file://" + new_enc)
        text = text.replace(orig["dest_uri_prefix"], "file:" + new_enc)
        m.write_text(text, encoding="utf-8")
    return dest


def tree(dest: Path) -> dict[str, str]:
    return {
        str(p.relative_to(dest)): p.read_text(encoding="utf-8")
        for p in dest.rglob("*")
        if p.is_file() and p.name != "_SUCCESS" and not p.name.endswith(".crc")
    }


def test_hadoop_manifests_load_and_validate(tmp_path: Path) -> None:
    dest = relocate(tmp_path)
    rel_dest = str(dest).lstrip("/")
    manifests = sorted(dest.glob("_temporary/*/00/manifests/*-manifest.json"))
    assert len(manifests) == 3
    scope = Scope("file:///", rel_dest, rel_dest + "/_temporary", f"{rel_dest}/_temporary/{JOB_ID}/00/tasks")
    total = 0
    for path in manifests:
        m = decode_manifest(path.read_bytes(), name=path.name)
        assert m.job_id == JOB_ID and m.task_id in FACTS["manifest_owner"]
        assert FACTS["manifest_owner"][m.task_id] == m.task_attempt_id
        entries, _dirs = check_manifest(m, job_id=JOB_ID, scope=scope, name=path.name)
        total += len(entries)
        assert all(e.src.startswith(rel_dest + "/_temporary/") for e in entries)
        assert m.iostatistics.counters  # Hadoop's statistics came through
    assert total == len(FACTS["expected_after_job_commit"]) - len(FACTS["preexisting_files"])


async def test_amcommit_commits_a_hadoop_job_directory(tmp_path: Path) -> None:
    dest = relocate(tmp_path)
    store = LocalStore("/")
    rel_dest = str(dest).lstrip("/")
    layout = await resolve_layout(store, rel_dest, JOB_ID)
    assert layout is not None and layout.hadoop
    report = await commit_job(store, rel_dest, JOB_ID)
    assert report.success and report.manifests == 3
    assert tree(dest) == FACTS["expected_after_job_commit"]
    for d in FACTS["expected_dirs_after_job_commit"]:
        assert (dest / d).is_dir(), d
    assert not (dest / "_temporary").exists()
    success = decode_success((dest / "_SUCCESS").read_bytes())
    assert success.success and success.job_id == JOB_ID


def test_hadoop_success_file_loads() -> None:
    s = decode_success((FIXTURE / "committed" / "_SUCCESS").read_bytes())
    assert s.success and s.job_id == JOB_ID and s.committer.endswith("ManifestCommitter")
    assert s.iostatistics.meanstatistics and s.filenames


@pytest.mark.parametrize("field", ["taskID", "jobId", "type"])
def test_hadoop_manifest_missing_field_is_rejected(field: str) -> None:
    from amcommit.errors import ManifestError

    path = next((FIXTURE / "uncommitted").glob("_temporary/*/00/manifests/*-manifest.json"))
    doc = json.loads(path.read_text(encoding="utf-8"))
    del doc[field]
    with pytest.raises(ManifestError, match=field):
        decode_manifest(json.dumps(doc).encode(), name=path.name)
