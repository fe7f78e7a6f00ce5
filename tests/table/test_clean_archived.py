"""Clean of a table whose timeline was archived (issue 35 item 1 follow-up): the file versions
archived commits wrote are cleaned as if their commits were still active.

Archival moves commits into ``.hoodie/archived/`` whatever cleaning did: when no clean ran
before (cleaning off, turned on later), or a version an archived commit wrote was superseded
after the archival, the clean must still delete it (Hudi's planner sees it in its file-system
view). Each test checks the exact listing after the clean against the generator's model of
Hudi's ``KEEP_LATEST_COMMITS``, and reads (amcommit and hudi-rs) within retention."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import hudi
import pyarrow.parquet as pq
import pytest

from amcommit.committer.config import CommitterConfig
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.schemes import open_location
from amcommit.table.commit.archive import archive
from amcommit.table.commit.clean import CleanReport, clean, needs_archive
from amcommit.table.errors import CleanedPast
from amcommit.table.file_group.model import FileVersion
from amcommit.table.format.archive import ARCHIVE_DIR
from amcommit.table.timeline.reader import Timeline, open_timeline
from amcommit.testing.tablegen import GeneratedTable, generate, write_local
from tests.matrix.conftest import matrix_gcs_fake, matrix_sdk_list  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.test_clean import CHILD, _clean_files, _expected_deleted, _listing, _run_clean
from tests.table.test_file_versions import VERSIONED, Row, hudi_read, incremental, model_rows, read_files

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
WRITES = [w for w in VERSIONED if not w.failed]
"""The rewritten file groups of test_file_versions, without its failed write (a pending
instant stops archival): 8 completed writes."""


def _local_archive(root: Path, keep_max: int, keep_min: int) -> list[str]:
    async def main() -> list[str]:
        store, dest = open_location(str(root))
        try:
            return (await archive(store, dest, keep_max=keep_max, keep_min=keep_min)).archived
        finally:
            await store.aclose()

    return anyio.run(main)


def _check_reads(root: Path, gen: GeneratedTable, earliest: str) -> None:
    """amcommit and hudi-rs read the model as of every retained instant; amcommit reads every
    incremental range within retention; reads before ``earliest`` are refused."""
    tl = open_timeline(str(root))
    table = hudi.HudiTable(str(root))
    kept = [t for t in gen.completed if t >= earliest]
    assert hudi_read(table, hudi.HudiReadOptions()) == model_rows(gen.snapshot(gen.completed[-1]))
    for t in kept:
        assert read_files(root, tl.snapshot(t), None, None) == model_rows(gen.snapshot(t)), t
        assert hudi_read(table, hudi.HudiReadOptions().with_as_of_timestamp(t)) == model_rows(gen.snapshot(t))
    for a, b in itertools.combinations(kept, 2):
        assert read_files(root, tl.changes(a, b).visible(), a, b) == model_rows(gen.incremental(a, b))
        assert hudi_read(table, incremental(a, b)) == model_rows(gen.incremental(a, b))
    for t in gen.completed:
        if t < earliest:
            with pytest.raises(CleanedPast):
                tl.snapshot(t)


def test_an_archived_table_never_cleaned_is_cleaned_whole(tmp_path: Path) -> None:
    """Archive 5 of 8 commits with no clean before, then clean keeping 2: the clean deletes
    exactly Hudi's KEEP_LATEST_COMMITS set of the whole history (14 files, every one written
    by an archived commit), nothing a retained instant reads; hudi-rs reads the same rows."""
    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")
    done = gen.completed
    archived = _local_archive(root, 4, 3)
    assert archived == done[:5]
    before = _listing(root)
    rows_before = hudi_read(hudi.HudiTable(str(root)), hudi.HudiReadOptions())
    e = done[-2]
    doomed = _expected_deleted(gen, e)
    assert len(doomed) == 14
    assert all(any(d.endswith(f"_{t}.parquet") for t in archived) for d in doomed)
    dry = _run_clean(root, 2, dry_run=True)
    assert sorted(dry.files) == sorted(doomed) and _listing(root) == before
    report = _run_clean(root, 2)
    assert report.earliest_retained == e and report.instant is not None
    assert sorted(report.files) == sorted(doomed) and report.already_gone == 0
    assert _listing(root) == (before - doomed) | {
        f".hoodie/{report.instant}.clean{s}" for s in ("", ".inflight", ".requested")
    }
    assert hudi_read(hudi.HudiTable(str(root)), hudi.HudiReadOptions()) == rows_before
    _check_reads(root, gen, e)
    again = _run_clean(root, 2)
    assert again.instant is None and again.files == []


def test_a_version_archived_after_a_clean_is_cleaned_once_superseded(tmp_path: Path) -> None:
    """Clean keeping 4 (E1), archive (bounded by E1: the commits before it go), then clean
    keeping 2 (E2): the second clean deletes the versions the first kept as its groups' newest
    before E1 -- written by commits archived since -- now superseded before E2."""
    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")
    done = gen.completed
    before = _listing(root)
    first = _run_clean(root, 4)
    e1 = done[-4]
    doomed1 = _expected_deleted(gen, e1)
    assert first.earliest_retained == e1 and sorted(first.files) == sorted(doomed1)
    archived = _local_archive(root, 3, 2)
    assert archived[-1] < e1 and [t for t in archived if t in done] == [t for t in done if t < e1]
    second = _run_clean(root, 2)
    e2 = done[-2]
    doomed2 = _expected_deleted(gen, e2)
    new = doomed2 - doomed1
    # the versions written by now archived commits that only the second clean may delete
    assert {d for d in new if any(d.endswith(f"_{t}.parquet") for t in archived)}
    assert second.earliest_retained == e2 and sorted(second.files) == sorted(new)
    data = {p for p in _listing(root) if not p.startswith(".hoodie/")}
    assert data == {p for p in before if not p.startswith(".hoodie/")} - doomed2
    _check_reads(root, gen, e2)


def test_needs_archive_reads_it_only_when_an_archived_version_may_be_due() -> None:
    from tests.table.test_clean import T, _c

    inserts = [_c(T[3], {"a": ["f3"]}), _c(T[4], {"a": ["f4"]})]
    writes = [T[3], T[4]]
    assert needs_archive(inserts, writes, None)  # never cleaned: everything archived may be due
    assert needs_archive(inserts, writes, T[2])  # the previous clean's E was archived since
    assert not needs_archive(inserts, writes, T[3])  # only new groups since: nothing archived due
    rewrite = _c(T[4], {"a": ["f1"]})
    rewrite.metadata.partition_to_write_stats["a"][0].prev_commit = T[1]
    assert needs_archive([inserts[0], rewrite], writes, T[3])
    replace = _c(T[4], {"b": ["g4"]}, {"a": ["f0"]})
    assert needs_archive([inserts[0], replace], writes, T[3])
    assert not needs_archive([inserts[0], _c(T[4], {"b": ["g4"]}, {"a": ["f3"]})], writes, T[3])


@pytest.mark.parametrize("kill_at", [0, 5, 14])
def test_clean_of_an_archived_table_killed_completes_when_run_again(tmp_path: Path, kill_at: int) -> None:
    """SIGKILL after ``kill_at`` of the 14 deletes (io_threads=1), then clean again: the
    pending clean's plan (made from the archive too) is completed, exactly."""
    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")
    assert _local_archive(root, 4, 3)
    before = _listing(root)
    doomed = _expected_deleted(gen, gen.completed[-2])
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(kill_at)], env=env, timeout=60)
    assert proc.returncode == -9
    mid = _listing(root)
    assert len(before - mid) == kill_at and (before - mid) <= doomed
    pending = _clean_files(root)
    assert len(pending) == 2
    report = _run_clean(root, 2, config=CommitterConfig(lock_wait=5.0))
    t = pending.pop().split(".")[0]
    assert report.resumed == [t] and report.instant is None
    assert sorted(report.files) == sorted(doomed) and report.already_gone == kill_at
    assert _listing(root) == (before - doomed) | {
        f".hoodie/{t}.clean{s}" for s in ("", ".inflight", ".requested")
    }
    _check_reads(root, gen, gen.completed[-2])


def test_an_archived_table_never_cleaned_is_cleaned_whole_on_fake_gcs(
    matrix_gcs_fake: dict[str, Any],  # noqa: F811
    matrix_sdk_list: Callable[[str, dict[str, Any]], Callable[[str], dict[str, int]]],  # noqa: F811
) -> None:
    """The first test on fake-gcs-server: objects listed with the official SDK, sizes unchanged."""
    info = matrix_gcs_fake
    sdk_list = matrix_sdk_list("gcs-fake", info)
    gen = generate(WRITES)
    dest = "arch"
    e = gen.completed[-2]
    doomed = _expected_deleted(gen, e)

    async def go() -> None:
        store = open_store(info)
        async with store:
            for rel in sorted(gen.objects, key=lambda p: (p.startswith(".hoodie/"), p)):
                await store.put(join(dest, rel), gen.objects[rel])
            assert (await archive(store, dest, keep_max=4, keep_min=3)).archived == gen.completed[:5]
            before = sdk_list(dest)
            assert any(p.startswith(f"{dest}/{ARCHIVE_DIR}/") for p in before)
            report: CleanReport = await clean(store, dest, retain_commits=2)
            assert sorted(report.files) == sorted(doomed) and report.instant is not None
            after = sdk_list(dest)
            t = report.instant
            clean_files = {f"{dest}/.hoodie/{t}.clean{s}" for s in ("", ".inflight", ".requested")}
            assert set(after) == (set(before) - {f"{dest}/{d}" for d in doomed}) | clean_files
            assert all(after[p] == size for p, size in before.items() if p in after)
            tl = await Timeline.open(store, dest)
            for c in [c for c in gen.completed if c >= e]:
                assert await _read_at(store, dest, await tl.snapshot(c)) == model_rows(gen.snapshot(c))

    anyio.run(go)


async def _read_at(store: Store, dest: str, files: list[FileVersion]) -> list[Row]:
    out: list[Row] = []
    for f in files:
        d = pq.read_table(io.BytesIO(await store.get(join(dest, f.path)))).to_pydict()
        out.extend(zip(d["_hoodie_record_key"], d["value"], d["_hoodie_commit_time"], strict=True))
    return sorted(out)
