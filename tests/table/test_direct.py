"""Table writes that copy nothing (amcommit.table.write.direct): files written in place under
Hudi's direct markers, reconciled against the markers at job commit, rolled back from the
markers; zombie attempts' files removed. Local files here; the kill tests are in
test_direct_kills.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.errors import ConfigError
from amcommit.paths import join
from amcommit.store.base import PutMode
from amcommit.store.local import LocalStore
from amcommit.table.format.naming import base_file_name, new_file_id, write_token
from amcommit.table.settings import TableConfig
from amcommit.table.write.direct import (
    AttemptMarkers,
    IOType,
    losers,
    marked_files,
    marker_name,
    parse_marker,
    sweep_late_markers,
    write_in_place,
)
from tests.table.directhelpers import (
    attempt_id_of,
    direct_attempt,
    direct_tasks,
    expected_markers,
    marker_folder,
)
from tests.table.writehelpers import (
    begin,
    hudi_incremental,
    hudi_rows,
    keys,
    listing,
    parquet_bytes,
    rows,
    write,
)

CFG = TableConfig(writer_ttl=600.0)
FIRST = rows(0, 6)
SECOND = rows(10, 5, parts=("a", "c"), tag="s")


def test_marker_names_are_hudis() -> None:
    rel = "p=a/f1-0_1-0-0_20261127101010123.parquet"
    assert marker_name(rel, IOType.CREATE) == rel + ".marker.CREATE"
    assert parse_marker(rel + ".marker.CREATE") == (rel, IOType.CREATE)
    assert parse_marker("x.parquet.marker.MERGE") == ("x.parquet", IOType.MERGE)
    # the staged path's own files in the same folder are no markers
    for other in (
        "_job.json",
        "journal.json",
        "00/manifests/t-manifest.json",
        "commit-plan.json",
        "a.marker.TXT",
    ):
        assert parse_marker(other) is None, other
    assert losers({"a/1", "a/2", "b/3"}, {"a/2"}) == ["a/1", "b/3"]


async def _table(tmp_path: Path) -> tuple[LocalStore, str, str]:
    root = tmp_path / "root"
    os.makedirs(root)
    store = LocalStore(str(root), fsync=False)
    w1, _ = await write(store, "tbl", FIRST, config=CFG)
    return store, str(root / "tbl"), w1.instant


async def test_direct_commit_publishes_winners_and_deletes_losers(tmp_path: Path) -> None:
    store, uri, first = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    lost = await direct_tasks(store, w, SECOND, losers=2)
    assert len(lost) == 4
    marked = await marked_files(store, "tbl", w.instant)
    assert marked is not None and set(lost) < marked and len(marked) == 8
    # not visible before the commit: stamped with an inflight instant
    assert hudi_rows(uri) == keys(FIRST)
    report = await commit_job(store, "tbl", w.instant, config=CFG)
    assert report.success and report.renamed == 0 and report.files == 4
    assert hudi_rows(uri) == keys(FIRST + SECOND)
    assert hudi_incremental(uri, first, w.instant) == keys(SECOND)
    names = await listing(store, "tbl")
    # staging gone; of the markers only the losers' stay (their files are gone: an upload
    # may still land, so each is kept for writer_ttl), for a later sweep
    assert not any(x.startswith(".hoodie/.aux/amcommit/") for x in names), names
    # one MARKERS<n> file per losing attempt, in Hudi's timeline-server format, and its type
    by_attempt = {
        attempt_id_of(w, n, a): [r for r in lost if f"_{n}-0-{a}_" in r] for n, a in ((0, 9), (1, 8))
    }
    assert all(by_attempt.values()) and sum(map(len, by_attempt.values())) == len(lost)
    assert await marker_folder(store, "tbl", w.instant) == expected_markers(w.instant, by_attempt)
    assert not any(lost_one in names for lost_one in lost)
    assert len([x for x in names if w.instant in x and x.endswith(".parquet")]) == 4
    assert await sweep_late_markers(store, "tbl", grace=0.0) == {}
    assert not any(".temp/" in x for x in await listing(store, "tbl"))
    assert not os.listdir(os.path.join(uri, ".hoodie", ".temp"))  # the emptied folders too


async def test_direct_abort_removes_every_marked_file(tmp_path: Path) -> None:
    """An abort removes every file a marker names, winners' and losers', wherever they are."""
    store, uri, _ = await _table(tmp_path)
    before = await listing(store, "tbl")
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND, losers=1)
    # a failed attempt that wrote into a partition no winning manifest names: only its
    # marker says where its file is
    stray = await direct_attempt(store, w, rows(50, 1, parts=("z",)), 0, 1, attempt=4, commit=False)
    assert stray and stray[0].startswith("p=z/")
    report = await abort_job(store, "tbl", w.instant, config=CFG)
    assert report.rolled_back
    after = await listing(store, "tbl")
    assert not any(w.instant in x for x in after), after
    assert [x for x in after if not x.startswith(".hoodie/")] == [
        x for x in before if not x.startswith(".hoodie/")
    ]
    assert hudi_rows(uri) == keys(FIRST)


async def test_zombie_upload_after_commit_removes_itself(tmp_path: Path) -> None:
    """An attempt still running after the job committed: its upload lands, its check sees
    the completed instant, it deletes its own file; it never publishes a manifest."""
    store, uri, _ = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND)
    await commit_job(store, "tbl", w.instant, config=CFG)
    wrote = await direct_attempt(store, w, SECOND, 0, 2, attempt=7, commit=False)
    assert wrote == []  # every upload was removed again by its own check, and its marker
    assert hudi_rows(uri) == keys(FIRST + SECOND)
    # its MARKERS.type stays (other attempts' marker files may need it) until a sweep
    assert [x for x in await listing(store, "tbl") if ".temp/" in x or "_0-0-7_" in x] == [
        f".hoodie/.temp/{w.instant}/MARKERS.type"
    ]
    assert await sweep_late_markers(store, "tbl", grace=600.0) == {}
    assert not any(".temp/" in x for x in await listing(store, "tbl"))
    with pytest.raises(Exception, match="no longer pending"):
        await direct_attempt(store, w, SECOND, 1, 2, attempt=8)
    assert hudi_rows(uri) == keys(FIRST + SECOND)


async def _late_marker(store: LocalStore, instant: str, rel: str, legacy: bool) -> None:
    """A late attempt's marker of ``rel``: the previous version's per-file marker, or a
    ``MARKERS<n>`` file (and its type) as an attempt writes it."""
    if legacy:
        marker = join("tbl", ".hoodie/.temp", instant, marker_name(rel, IOType.CREATE))
        await store.put(marker, b"", mode=PutMode.CREATE)
    else:
        await AttemptMarkers(store, "tbl", instant, f"late-{rel}").mark(rel, IOType.CREATE)


@pytest.mark.parametrize("legacy", [False, True], ids=["markers-file", "per-file"])
async def test_zombie_that_died_after_its_upload_is_swept(tmp_path: Path, legacy: bool) -> None:
    """A zombie whose upload landed after the commit and that died before its own check:
    its file (stamped with the completed instant) shows in snapshot reads (pitfall 3) until
    a sweep finds its marker and removes it."""
    store, uri, _ = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND)
    await commit_job(store, "tbl", w.instant, config=CFG)
    name = base_file_name(new_file_id(), write_token(0, 0, 5), w.instant)
    rel = f"p=a/{name}"
    zombie = rows(100, 2, parts=("a",), tag="z")
    await _late_marker(store, w.instant, rel, legacy)
    await store.put(join("tbl", rel), parquet_bytes(zombie, meta=(w.instant, "p=a", name, 0)))
    assert hudi_rows(uri) == keys(FIRST + SECOND + zombie)  # the hole the sweep closes
    swept = await sweep_late_markers(store, "tbl", grace=600.0)
    assert swept == {w.instant: [rel]}
    assert hudi_rows(uri) == keys(FIRST + SECOND)
    assert not any(".temp/" in x for x in await listing(store, "tbl"))


@pytest.mark.parametrize("legacy", [False, True], ids=["markers-file", "per-file"])
async def test_sweep_keeps_a_young_marker_without_file(tmp_path: Path, legacy: bool) -> None:
    """A late marker whose upload has not landed: kept until ``grace`` has passed (its upload
    may still land), then removed."""
    store, _, _ = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND)
    await commit_job(store, "tbl", w.instant, config=CFG)
    rel = f"p=a/{base_file_name(new_file_id(), write_token(0, 0, 6), w.instant)}"
    await _late_marker(store, w.instant, rel, legacy)
    kept = await marker_folder(store, "tbl", w.instant)
    assert await sweep_late_markers(store, "tbl", grace=600.0) == {}
    assert await marker_folder(store, "tbl", w.instant) == kept and kept
    assert await marked_files(store, "tbl", w.instant) == {rel}
    assert await sweep_late_markers(store, "tbl", grace=0.0) == {}
    assert await marked_files(store, "tbl", w.instant) is None
    assert await marker_folder(store, "tbl", w.instant) == {}
    assert not os.listdir(os.path.join(store.root, "tbl", ".hoodie", ".temp"))


async def test_write_in_place_refuses_foreign_names(tmp_path: Path) -> None:
    store, _, first = await _table(tmp_path)
    w = await begin(store, "tbl", config=CFG)
    with pytest.raises(ValueError):
        await write_in_place(store, "tbl", w.instant, "p=a/part-0.parquet", b"x")
    other = base_file_name(new_file_id(), "0-0-0", first)
    with pytest.raises(ValueError):
        await write_in_place(store, "tbl", w.instant, f"p=a/{other}", b"x")


async def test_placement_is_decided_once_and_carried_by_the_task(tmp_path: Path) -> None:
    """The ``table_commit`` setting becomes one placement (``TableSettings.placement``),
    carried by the table task set up with it: a staged task's file lands in its attempt
    directory, a direct one's at its final name; the commit of each publishes its file."""
    from amcommit.table.settings import Placement
    from amcommit.table.write.task import setup_table_task

    assert TableConfig().settings().placement is Placement.DIRECT
    assert TableConfig(table_commit="staged").settings().placement is Placement.STAGED
    store = LocalStore(str(tmp_path), fsync=False)
    for how in ("staged", "direct"):
        cfg = TableConfig(writer_ttl=600.0, table_commit=how)
        dest = join(store.root, how)
        w = await begin(store, dest, config=cfg)
        ta = f"attempt_{w.instant}_m_000000_0"
        task = await setup_table_task(store, w, f"task_{w.instant}_m_000000", ta, config=cfg)
        assert task.placement is Placement(how) and task.direct is (how == "direct")
        rel = task.new_file("a")
        await task.put(rel, parquet_bytes(FIRST[:1]), rows=1)
        in_place = rel in await listing(store, dest)
        assert in_place is (how == "direct")
        await task.commit()
        assert (await commit_job(store, dest, w.instant, config=cfg)).success
        assert rel in await listing(store, dest)


def test_table_commit_setting() -> None:
    assert TableConfig().settings().table_commit == "direct"
    assert TableConfig.from_mapping({"table_commit": "direct"}).settings().table_commit == "direct"
    with pytest.raises(ConfigError, match="'table_commit' must be 'staged' or 'direct'"):
        TableConfig.from_mapping({"table_commit": "copy"})
