"""Reads and upserts of an archived table (issue 35 item 1 follow-ups).

- ``amcommit.table.read`` (the engine reader) reads the file groups archived commits wrote:
  snapshot, time travel and incremental reads equal the model and hudi-rs's snapshot.
- Archive files never change, so a process decodes each once: the next upsert or read in
  the same process lists ``.hoodie/archived/`` and GETs no archive file it has decoded;
  a new archive file (another archival) is read, alone; a file whose size or etag changed
  (the table made again) is read again. Counted through a local store that records requests.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import hudi
import pytest

from amcommit.store.local import LocalStore
from amcommit.table.commit.archive import archive
from amcommit.table.mutate.engine import upsert
from amcommit.table.query.read import read, read_store
from amcommit.table.timeline.archived import clear_archive_cache
from amcommit.testing.tablegen import Write, generate, write_local
from tests.table.test_file_versions import VERSIONED, hudi_read, model_rows
from tests.table.test_upsert_requests import CFG, KW, Recorder, rows

pytestmark = pytest.mark.timeout(120)

WRITES = [w for w in VERSIONED if not w.failed]


def _local_archive(root: Path, keep_max: int, keep_min: int) -> list[str]:
    async def main() -> list[str]:
        return (
            await archive(
                LocalStore(str(root.parent), fsync=False), root.name, keep_max=keep_max, keep_min=keep_min
            )
        ).archived

    return anyio.run(main)


def _rows(t: object) -> list[tuple[str, str, str]]:
    d = t.select(["_hoodie_record_key", "value", "_hoodie_commit_time"]).to_pydict()  # type: ignore[attr-defined]
    return sorted(zip(d["_hoodie_record_key"], d["value"], d["_hoodie_commit_time"], strict=True))


def test_the_engine_reader_reads_what_archived_commits_wrote(tmp_path: Path) -> None:
    """Before: a snapshot by ``amcommit.table.read`` after an archival missed every file group
    only archived commits wrote (rows silently lost at read)."""
    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")
    done = gen.completed
    assert _local_archive(root, 4, 3) == done[:5]
    assert _rows(read(str(root))) == model_rows(gen.snapshot(done[-1]))
    assert hudi_read(hudi.HudiTable(str(root)), hudi.HudiReadOptions()) == model_rows(gen.snapshot(done[-1]))
    for t in done:  # time travel to every instant, archived or active
        assert _rows(read(str(root), as_of=t)) == model_rows(gen.snapshot(t)), t
    for a in done[:-1]:  # incremental reads from archived and active instants
        got = _rows(read(str(root), since=a, query_type="incremental"))
        assert got == model_rows(gen.incremental(a, done[-1])), a


def _archive_gets(store: Recorder) -> list[str]:
    return [c[1] for c in store.log if c[0] == "get" and "/.hoodie/archived/" in c[1]]


def _archive_lists(store: Recorder) -> list[str]:
    return [c[1] for c in store.log if c[0] == "list" and c[1].rstrip("/").endswith(".hoodie/archived")]


async def test_an_upsert_into_an_archived_table_reads_no_archive_file_twice(tmp_path: Path) -> None:
    clear_archive_cache()
    store = Recorder(str(tmp_path))
    cfg = CFG.with_options(archive=False)
    for k in range(8):
        await upsert(store, "t", rows([10 * k, 10 * k + 1], f"w{k}"), config=cfg, **KW)
    first = (await archive(store, "t", keep_max=4, keep_min=2)).file
    assert first is not None
    store.log.clear()
    await upsert(store, "t", rows([0, 100], "u"), config=cfg, **KW)
    assert _archive_gets(store) == [f"t/{first}"]  # the first read in this process decodes it
    store.log.clear()
    report = await upsert(store, "t", rows([1, 10, 101], "v"), config=cfg, **KW)
    assert report.updated == 2 and report.inserted == 1
    assert _archive_gets(store) == []  # decoded already: no archive GET
    assert len(_archive_lists(store)) >= 1  # the listing still decides what the archive holds
    # another archival: only its new file is read by the next upsert
    second = (await archive(store, "t", keep_max=3, keep_min=1)).file
    assert second is not None and second != first
    store.log.clear()
    await upsert(store, "t", rows([11], "x"), config=cfg, **KW)
    assert _archive_gets(store) == [f"t/{second}"]
    store.log.clear()
    got = (await read_store(store, "t")).select(["id", "v"]).sort_by("id").to_pylist()
    assert _archive_gets(store) == []
    want = {i: f"w{i // 10}{i}" for k in range(8) for i in (10 * k, 10 * k + 1)}
    want.update({0: "u0", 100: "u100", 1: "v1", 10: "v10", 101: "v101", 11: "x11"})
    assert got == [{"id": i, "v": v} for i, v in sorted(want.items())]


async def test_an_archive_file_made_again_is_read_again(tmp_path: Path) -> None:
    """A table removed and made again at the same path: its archive file of the same name
    (another size) is read, not the decoded one of the table before."""
    clear_archive_cache()
    gen_a = generate([Write(files={"a": 1}) for _ in range(8)])
    gen_b = generate([Write(files={"a": 2}) for _ in range(8)])
    root = tmp_path / "t"
    store = Recorder(str(tmp_path))
    for gen in (gen_a, gen_b):
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        write_local(gen, root)
        assert (await archive(store, "t", keep_max=4, keep_min=2)).archived
        store.log.clear()
        got = _rows(await read_store(store, "t"))
        assert got == model_rows(gen.snapshot(gen.completed[-1]))
        assert len(_archive_gets(store)) == 1


def test_hudi_rs_incremental_read_from_before_the_active_timeline_misses_archived_rows(
    tmp_path: Path,
) -> None:
    """Pins a hudi-rs 0.5 limitation that docs/tables/read.md states: an incremental read
    starting before the active timeline silently returns only the active commits' rows
    (amcommit's reader returns them all). Fails when a hudi-rs upgrade changes it: then
    update the docs' reader table and this test."""
    from tests.table.test_file_versions import incremental

    gen = generate([Write(files={"a": 1}) for _ in range(12)])
    root = write_local(gen, tmp_path / "t")
    done = gen.completed
    assert _local_archive(root, 8, 5) == done[:7]
    table = hudi.HudiTable(str(root))
    for since in (None, done[2]):
        want = model_rows(gen.incremental(since, done[-1]))
        got = hudi_read(table, incremental(since, done[-1]))
        assert len(got) < len(want) and sorted({r[2] for r in got}) == done[7:], since
        assert got == [r for r in want if r[2] in done[7:]]
        assert _rows(read(str(root), since=since or "000", until=done[-1], query_type="incremental")) == want
    # time travel to an archived instant and the snapshot are right
    assert hudi_read(table, hudi.HudiReadOptions().with_as_of_timestamp(done[2])) == model_rows(
        gen.snapshot(done[2])
    )
    assert hudi_read(table, hudi.HudiReadOptions()) == model_rows(gen.snapshot(done[-1]))
