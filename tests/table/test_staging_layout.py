"""Where a table write stages (issue 26): amcommit's own job directory lives in
``.hoodie/.aux/amcommit/<instant>/`` (lock there too), never in Hudi's marker folder
``.hoodie/.temp/<instant>/``, which holds only markers; writes staged in ``.hoodie/.temp/``
by an earlier version are still listed, resumed and rolled back; markers are removed after
the commit, and late markers of a zombie attempt are swept by the next commit, clean or
rollback. Local files (hudi-rs reads the table throughout)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.committer.kind import JobKind
from amcommit.errors import CommitError, PermissionDenied
from amcommit.paths import basename, join
from amcommit.store.base import PutMode, Store
from amcommit.store.local import LocalStore
from amcommit.table.commit.clean import clean
from amcommit.table.commit.jobs import TableJobs
from amcommit.table.commit.kind import TableKind
from amcommit.table.commit.rollback import rollback_instant
from amcommit.table.format.naming import base_file_name, new_file_id, write_token
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.heartbeat import stop_beat
from amcommit.table.timeline.reader import Timeline
from amcommit.table.write.direct import IOType, attempt_markers_name, marker_name, parse_marker
from amcommit.table.write.staging import is_table_layout, legacy_table_layout, table_layout
from amcommit.table.write.task import TableWrite, setup_table_task
from tests.table.directhelpers import attempt_id_of, direct_tasks, expected_markers, marker_folder
from tests.table.killstore import KillStore
from tests.table.writehelpers import (
    begin,
    hudi_rows,
    keys,
    listing,
    parquet_bytes,
    rows,
    write,
    write_tasks,
)

CFG = TableConfig(writer_ttl=600.0)
FIRST = rows(0, 6)
SECOND = rows(10, 5, parts=("a", "c"), tag="s")
THIRD = rows(30, 4, tag="t")


async def _table(tmp_path: Path, name: str = "root") -> tuple[LocalStore, str, str]:
    root = tmp_path / name
    os.makedirs(root)
    store = LocalStore(str(root), fsync=False)
    w1, _ = await write(store, "tbl", FIRST, config=CFG)
    return store, str(root / "tbl"), w1.instant


async def test_marker_folder_holds_only_markers(tmp_path: Path) -> None:
    """While a direct write is pending (staged files, manifests, job marker written) every
    file under ``.hoodie/.temp/<instant>/`` is Hudi's: ``MARKERS.type`` saying
    ``TIMELINE_SERVER_BASED`` and one ``MARKERS<n>`` file per task attempt whose every line
    is a marker (``<partition>/<file>.marker.CREATE`` of a file there: what Hudi's
    ``MarkerBasedRollbackStrategy`` reads), the job directory and the lock are in
    ``.hoodie/.aux/amcommit/``; hudi-rs and amcommit's reader ignore both. A staged write
    leaves nothing in ``.hoodie/.temp``."""
    store, uri, _ = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND, losers=1)
    names = await listing(store, "tbl")
    temp = [x for x in names if x.startswith(".hoodie/.temp/")]
    folder = await marker_folder(store, "tbl", w.instant)
    assert sorted(folder) == temp
    attempts = [attempt_id_of(w, 0, 9), attempt_id_of(w, 0), attempt_id_of(w, 1)]
    assert sorted(folder) == sorted(
        [f".hoodie/.temp/{w.instant}/MARKERS.type"]
        + [f".hoodie/.temp/{w.instant}/{attempt_markers_name(a)}" for a in attempts]
    )
    assert folder.pop(f".hoodie/.temp/{w.instant}/MARKERS.type") == b"TIMELINE_SERVER_BASED"
    marked = []
    for data in folder.values():
        assert data.endswith(b"\n")
        for line in data.decode().splitlines():
            parsed = parse_marker(line)
            assert parsed is not None and parsed[1] is IOType.CREATE, line
            marked.append(parsed[0])
    assert sorted(marked) == sorted(x for x in names if x.endswith(".parquet") and w.instant in x)
    assert f".hoodie/.aux/amcommit/{w.instant}/_job.json" in names
    assert w.layout.job_dir == f"tbl/.hoodie/.aux/amcommit/{w.instant}"
    assert TableKind().lock_staging(w.instant) == ".hoodie/.aux/amcommit"
    assert hudi_rows(uri) == keys(FIRST)
    assert {f.path for f in await (await Timeline.open(store, "tbl")).snapshot()} == {
        x for x in names if x.endswith(".parquet") and w.instant not in x
    }
    # a staged write: nothing in Hudi's marker folder at any point
    await commit_job(store, "tbl", w.instant, config=CFG)
    w3 = await begin(store, "tbl", config=CFG)
    await write_tasks(store, w3, THIRD)
    assert not [x for x in await listing(store, "tbl") if x.startswith(f".hoodie/.temp/{w3.instant}")]
    assert hudi_rows(uri) == keys(FIRST + SECOND)
    await commit_job(store, "tbl", w3.instant, config=CFG)
    assert hudi_rows(uri) == keys(FIRST + SECOND + THIRD)


async def _legacy_write(store: Store, rs: list[dict[str, object]]) -> TableWrite:
    """A staged write as an earlier version left it: job directory (job marker, manifests,
    staged files) in ``.hoodie/.temp/<instant>/``, tasks committed, not the job."""
    w = await begin(store, "tbl", config=CFG)
    new, old = table_layout("tbl", w.instant), legacy_table_layout("tbl", w.instant)
    marker = await store.get(new.job_marker)
    await store.put(old.job_marker, marker, mode=PutMode.CREATE)
    await store.mkdirs(old.manifests_dir)
    await store.mkdirs(old.tasks_dir)
    await store.delete(new.job_dir, recursive=True)
    legacy = TableWrite(
        dest=w.dest, instant=w.instant, operation=w.operation, layout=old, properties=w.properties
    )
    await write_tasks(store, legacy, rs)
    return legacy


async def test_legacy_staging_found_resumed_and_rolled_back(tmp_path: Path) -> None:
    """A write staged in ``.hoodie/.temp/<instant>/`` (earlier versions): ``amcommit jobs``
    lists it with its staging, ``commit_job`` commits it from there, ``abort_job`` rolls it
    back, and a later writer rolls it back once its writer is gone; nothing of it stays."""
    kind: JobKind = TableKind(settings=CFG.settings())
    # listed, then committed
    store, uri, _ = await _table(tmp_path, "commit")
    w = await _legacy_write(store, SECOND)
    assert is_table_layout(w.layout)
    assert [x.job_dir for x in kind.layouts("tbl", w.instant, 0)][:2] == [
        table_layout("tbl", w.instant).job_dir,
        w.layout.job_dir,
    ]
    jobs = await kind.list_jobs(store, "tbl", CFG)
    assert isinstance(jobs, TableJobs)
    [pending] = jobs.table_writes
    assert pending.instant == w.instant and pending.staging is not None
    assert pending.staging.manifests == 2
    report = await commit_job(store, "tbl", w.instant, config=CFG)
    assert report.success and report.files == 4
    assert hudi_rows(uri) == keys(FIRST + SECOND)
    names = await listing(store, "tbl")
    assert not [x for x in names if ".temp/" in x or ".aux/" in x or ".heartbeat/" in x], names
    # rolled back by abort_job
    store, uri, _ = await _table(tmp_path, "abort")
    before = await listing(store, "tbl")
    w = await _legacy_write(store, SECOND)
    report = await abort_job(store, "tbl", w.instant, config=CFG)
    assert report.rolled_back
    assert await listing(store, "tbl") == before
    assert hudi_rows(uri) == keys(FIRST)
    # rolled back by a later commit once its writer stopped
    store, uri, _ = await _table(tmp_path, "dead")
    w = await _legacy_write(store, SECOND)
    await stop_beat(store, "tbl", w.instant)
    w3 = await begin(store, "tbl", config=CFG)
    await write_tasks(store, w3, THIRD)
    report = await commit_job(store, "tbl", w3.instant, config=CFG)
    assert report.success
    assert hudi_rows(uri) == keys(FIRST + THIRD)
    names = await listing(store, "tbl")
    assert not [x for x in names if w.instant in x], names


def _zombie_file(w: TableWrite) -> tuple[str, list[dict[str, object]], bytes]:
    name = base_file_name(new_file_id(), write_token(0, 0, 5), w.instant)
    rel = f"p=a/{name}"
    zrows: list[dict[str, object]] = [dict(r) for r in rows(100, 2, parts=("a",), tag="z")]
    return rel, zrows, parquet_bytes(zrows, meta=(w.instant, "p=a", name, 0))


async def test_zombie_after_commit_gone_after_next_commit_clean_or_rollback(tmp_path: Path) -> None:
    """A zombie attempt of a direct write: its marker was written before the commit, its
    upload lands after the commit removed the markers, and it dies before its own check. Its
    file, stamped with the completed instant, shows in hudi-rs's snapshot (TABLES.md pitfall
    3; never in amcommit's reader, which reads the commit's file list) until the next commit
    (its sweep after the lock), clean or ``amcommit rollback`` removes it (the commit kept
    the zombie's marker: its file was not there and the marker is younger than
    ``writer_ttl``). Each sweep's duration is printed (the window is until the next of
    these, plus that)."""
    for then in ("commit", "clean", "rollback"):
        store, uri, _ = await _table(tmp_path, then)
        w = await begin(store, "tbl", config=CFG)
        await direct_tasks(store, w, SECOND)
        rel, zrows, data = _zombie_file(w)
        await store.put(
            join("tbl", ".hoodie/.temp", w.instant, marker_name(rel, IOType.CREATE)), b"", mode=PutMode.CREATE
        )
        await commit_job(store, "tbl", w.instant, config=CFG)
        await store.put(join("tbl", rel), data)  # lands after the commit; the zombie dies
        assert hudi_rows(uri) == keys(FIRST + SECOND + zrows)  # the window
        assert rel not in {f.path for f in await (await Timeline.open(store, "tbl")).snapshot()}
        started = time.monotonic()
        if then == "commit":
            w3 = await begin(store, "tbl", config=CFG)
            await write_tasks(store, w3, THIRD)
            await commit_job(store, "tbl", w3.instant, config=CFG)
            expect = keys(FIRST + SECOND + THIRD)
        elif then == "clean":
            report = await clean(store, "tbl", retain_commits=5, config=CFG)
            assert report.late_files == {w.instant: [rel]}
            expect = keys(FIRST + SECOND)
        else:
            w3 = await begin(store, "tbl", config=CFG)
            await write_tasks(store, w3, THIRD)
            await rollback_instant(store, "tbl", w3.instant, config=CFG, force=True)
            expect = keys(FIRST + SECOND)
        print(f"{then}: zombie removed {time.monotonic() - started:.3f} s after it was called")
        assert hudi_rows(uri) == expect, then
        names = await listing(store, "tbl")
        assert rel not in names and not [x for x in names if ".temp/" in x or ".aux/" in x], (then, names)


class _Recorder(KillStore):
    """Records every mutating request (``"<op> <path>"``), kills nothing."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner, None, 10**12)
        self.seen: list[str] = []

    def _check(self, what: str) -> None:
        self.seen.append(what)


async def test_direct_commit_requests_do_not_grow_with_files(tmp_path: Path) -> None:
    """Mutating requests of a direct write's ``commit_job`` on local files, for 20 and 200
    files in 2 tasks: those of the commit itself (under the lock: journal, partition
    metadata, publish, cleanup of the job directory) are the same, and so is the marker
    removal after the lock (one delete per task attempt's ``MARKERS<n>`` file, one for
    ``MARKERS.type``, one for the instant's folder). Printed."""
    counts: dict[int, tuple[int, int]] = {}
    for files in (20, 200):
        store, _, _ = await _table(tmp_path, f"n{files}")
        w = await begin(store, "tbl", config=CFG)
        for t in range(2):  # each task: files/2 base files, spread over 10 partitions
            task = f"task_{w.instant}_m_{t:06d}"
            tw = await setup_table_task(store, w, task, f"attempt_{w.instant}_m_{t:06d}_0", config=CFG)
            for i in range(files // 2):
                part = f"p=k{i % 10}"
                rel = tw.new_file(part)
                one = rows(1000 + t * files + i, 1, parts=(f"k{i % 10}",))
                await tw.put(rel, parquet_bytes(one, meta=(w.instant, part, basename(rel), t)), rows=1)
            await tw.commit()
        rec = _Recorder(store)
        report = await commit_job(rec, "tbl", w.instant, config=CFG)  # type: ignore[arg-type]
        assert report.success and report.files == files
        markers = [x for x in rec.seen if "/.hoodie/.temp/" in x]
        counts[files] = (len(rec.seen) - len(markers), len(markers))
        assert len(markers) == 2 + 1 + 1, markers  # MARKERS files, MARKERS.type, the folder
        print(
            f"{files} files: {counts[files][0]} requests at job commit, {counts[files][1]} removing markers"
        )
    assert counts[20] == counts[200], counts
    shutil.rmtree(tmp_path, ignore_errors=True)


async def test_marker_folder_alone_is_no_job_directory(tmp_path: Path) -> None:
    """After a direct commit that kept its losers' young markers, ``.hoodie/.temp/<instant>/``
    looks to the engine like an earlier version's job directory: ``commit_job`` and
    ``abort_job`` of the write again report it committed and leave the markers (never the
    folder deleted as a whole); ``commit_job`` of a rolled-back write with leftover markers
    is refused in one line."""
    store, uri, _ = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    lost = await direct_tasks(store, w, SECOND, losers=1)
    await commit_job(store, "tbl", w.instant, config=CFG)
    kept = sorted(x for x in await listing(store, "tbl") if ".temp/" in x)
    folder = await marker_folder(store, "tbl", w.instant)
    assert folder == expected_markers(w.instant, {attempt_id_of(w, 0, 9): lost}) and sorted(folder) == kept
    again = await commit_job(store, "tbl", w.instant, config=CFG)
    assert again.success and again.already_committed and again.files == 4
    aborted = await abort_job(store, "tbl", w.instant, config=CFG)
    assert aborted.success and not aborted.rolled_back
    assert sorted(x for x in await listing(store, "tbl") if ".temp/" in x) == kept
    assert hudi_rows(uri) == keys(FIRST + SECOND)
    # a write rolled back, with a late marker left: no job to commit, nothing of it stays visible
    w3 = await begin(store, "tbl", config=CFG)
    await abort_job(store, "tbl", w3.instant, config=CFG)
    rel = f"p=a/{base_file_name(new_file_id(), write_token(0, 0, 3), w3.instant)}"
    await store.put(join("tbl", ".hoodie/.temp", w3.instant, marker_name(rel, IOType.CREATE)), b"")
    with pytest.raises(CommitError, match="no job directory"):
        await commit_job(store, "tbl", w3.instant, config=CFG)
    assert hudi_rows(uri) == keys(FIRST + SECOND)


class _MarkersLocked(KillStore):
    """Refuses (PermissionDenied) every delete under ``.hoodie/.temp/``."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner, None, 10**12)

    def _check(self, what: str) -> None:
        if what.startswith("delete ") and "/.hoodie/.temp/" in what:
            raise PermissionDenied(f"refused: {what}")


async def test_failed_marker_removal_never_fails_what_came_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Marker removal after a commit (or a clean, or a rollback) that fails leaves the
    commit committed: one WARNING line, the markers stay, and the next sweep (a clean here)
    removes them."""
    store, uri, _ = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND)
    locked = _MarkersLocked(store)
    with caplog.at_level("WARNING", logger="amcommit.table.write.direct"):
        report = await commit_job(locked, "tbl", w.instant, config=CFG)  # type: ignore[arg-type]
        cleaned = await clean(locked, "tbl", retain_commits=5, config=CFG)  # type: ignore[arg-type]
    assert report.success and cleaned.late_files == {}
    assert hudi_rows(uri) == keys(FIRST + SECOND)
    warned = [r.getMessage() for r in caplog.records if r.name == "amcommit.table.write.direct"]
    assert len(warned) == 2 and all("\n" not in m and "stands" in m for m in warned), warned
    assert [x for x in await listing(store, "tbl") if ".temp/" in x]
    await clean(store, "tbl", retain_commits=5, config=CFG)
    assert not [x for x in await listing(store, "tbl") if ".temp/" in x]
