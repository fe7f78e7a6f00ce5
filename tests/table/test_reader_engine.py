"""Timeline and clean on a table the engine wrote (append, append, dynamic overwrite, whole
overwrite, an aborted write, append), against hudi-rs; then clean (under the table lock) and
the same checks for what stays readable."""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import pytest

from amcommit.api import abort_job
from amcommit.store.schemes import open_location
from amcommit.table.commit.clean import clean, clean_after_commit
from amcommit.table.errors import CleanedPast
from amcommit.table.format.model import Operation
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.reader import Timeline
from tests.table.writehelpers import begin, hudi_incremental, hudi_rows, listing, rows, write, write_tasks


def test_engine_written_table_reader_clean_and_hudi_rs(tmp_path: Path) -> None:
    root = tmp_path / "t"
    url = str(root)

    async def main() -> None:
        store, dest = open_location(url)
        try:
            times: list[str] = []
            for data, op in [
                (rows(0, 6), Operation.INSERT),
                (rows(6, 4), Operation.INSERT),
                (rows(10, 3, parts=("a",)), Operation.INSERT_OVERWRITE),
                (rows(13, 4, parts=("c", "d")), Operation.INSERT_OVERWRITE_TABLE),
            ]:
                w, _ = await write(store, dest, data, op)
                times.append(w.instant)
            failed = await begin(store, dest)
            await write_tasks(store, failed, rows(50, 4))
            await abort_job(store, dest, failed.instant)
            w, _ = await write(store, dest, rows(17, 2, parts=("c",)))
            times.append(w.instant)

            tl = await Timeline.open(store, dest)
            infos = await tl.instants()
            assert [i.time for i in infos if i.state == "completed"] == times
            assert [i.rows for i in infos if i.state == "completed"] == [6, 4, 3, 4, 2]
            for t in times:
                snap = await tl.snapshot(t)
                assert sum(f.rows for f in snap) == len(hudi_rows(url, as_of=t)), t
            for a, b in itertools.combinations([None, *times], 2):
                c = await tl.changes(a, b)
                assert sum(f.rows for f in c.visible()) == len(hudi_incremental(url, a, b)), (a, b)

            before = await listing(store, dest)
            report = await clean(store, dest, retain_commits=2)
            assert report.earliest_retained == times[-2] and report.instant is not None
            # one file per task and partition: c1, c2 = 4 files each; c3 = 2 files (a)
            # c3 replaced the a-files of c1, c2 (4); c4 replaced their b-files (4) and c3's (2)
            assert len(report.files) == 10
            after = await listing(store, dest)
            assert set(before) - set(after) == set(report.files)
            assert set(after) - set(before) == {
                f".hoodie/{report.instant}.clean{s}" for s in ("", ".inflight", ".requested")
            }
            assert not any(p.startswith("_temporary") for p in after)  # the table lock lives in .hoodie
            for t in times[-2:]:
                assert sum(f.rows for f in await tl.snapshot(t)) == len(hudi_rows(url, as_of=t))
            assert sum(f.rows for f in (await tl.changes(times[-2])).visible()) == len(
                hudi_incremental(url, times[-2], None)
            )
            for t in times[:-2]:
                with pytest.raises(CleanedPast):
                    await tl.snapshot(t)
            # the option: a commit followed by clean_after_commit keeps only the latest commit readable
            config = TableConfig(clean_retain_commits=1)
            w, _ = await write(
                store, dest, rows(30, 2, parts=("d",)), Operation.INSERT_OVERWRITE, config=config
            )
            # commit_job ran the clean itself (clean_retain_commits): c4's two d-files are gone
            before_again = await listing(store, dest)
            assert not any(f"_{times[3]}.parquet" in p and "/d=" in "/" + p for p in before_again)
            with pytest.raises(CleanedPast):
                await (await Timeline.open(store, dest)).snapshot(times[-1])
            # a second clean has nothing left to delete
            done = await clean_after_commit(store, dest, config)
            assert done is None or not done.files
            assert await listing(store, dest) == before_again
            latest = await (await Timeline.open(store, dest)).snapshot()
            assert sum(f.rows for f in latest) == len(hudi_rows(url)) == 6
        finally:
            await store.aclose()

    anyio.run(main)


def test_changes_since_000_is_from_the_start(tmp_path: Path) -> None:
    """Issue 32 item 12: ``Timeline.changes("000")`` (and "0", "00") reads from the start, as
    the CLI's ``--since 000`` and the Spark reader do; other non-instants stay refused."""
    from amcommit.errors import ConfigError
    from amcommit.table.timeline.reader import open_timeline

    url = str(tmp_path / "t")

    async def main() -> None:
        store, dest = open_location(url)
        try:
            w1, _ = await write(store, dest, rows(0, 3))
            w2, _ = await write(store, dest, rows(3, 2))
            tl = await Timeline.open(store, dest)
            whole = await tl.changes(None)
            assert [i.time for i in whole.instants] == [w1.instant, w2.instant]
            for start in ("000", "0", "00"):
                got = await tl.changes(start)
                assert got.since is None
                assert got.instants == whole.instants and got.added == whole.added
                assert sum(f.rows for f in got.visible()) == 5
            upto = await tl.changes("000", w1.instant)
            assert [f.rows for f in upto.visible()] == [
                f.rows for f in (await tl.changes(None, w1.instant)).visible()
            ]
            with pytest.raises(ConfigError, match="invalid instant time '0000'"):
                await tl.changes("0000")
        finally:
            await store.aclose()

    anyio.run(main)
    blocking = open_timeline(url).changes("000")
    assert sum(f.rows for f in blocking.visible()) == 5
