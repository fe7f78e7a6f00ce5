"""Archival (issue 35 item 1): the active timeline stays short, as Hudi's archiver keeps it.

Completed instants beyond ``keep_max`` move into ``.hoodie/archived/`` (Hudi's archived-timeline
log files) down to ``keep_min``, never past a pending instant or the earliest instant the
latest clean keeps; after each commit and by ``amcommit archive``. hudi-rs and amcommit's
readers read the same rows afterwards; a SIGKILLed archival is finished by the next one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from amcommit.cli.main import main as cli_main
from amcommit.committer.config import CommitterConfig
from amcommit.store.local import LocalStore
from amcommit.table.commit.archive import ArchiveReport, archive, plan_archive
from amcommit.table.commit.labels import Label, committed_by
from amcommit.table.format.archive import (
    archive_file_name,
    decode_archive,
    encode_archive_block,
    newest_archived,
)
from amcommit.table.format.model import Instant, State
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.reader import Timeline, open_timeline
from amcommit.testing.tablegen import Write, generate, write_local
from tests.table.writehelpers import amcommit_rows, begin, hudi_rows, keys, rows, write, write_tasks

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
SMALL = TableConfig(keep_max_commits=4, keep_min_commits=2)


def _done(t: str, action: str = "commit") -> list[Instant]:
    return [Instant(t, action, s) for s in (State.REQUESTED, State.INFLIGHT, State.COMPLETED)]


def _t(n: int) -> str:
    return f"20261101{n:06d}000"


def test_plan_archive_follows_hudis_rules() -> None:
    writes = [_t(n) for n in range(35)]
    files = [f for t in writes for f in _done(t)]
    # 35 completed > 30: the oldest 15 go, 20 stay
    assert plan_archive(files, 30, 20, None) == writes[:15]
    assert plan_archive(files[: 30 * 3], 30, 20, None) == []  # 30 is not more than 30
    # never at or past a pending instant (of any action) ...
    pending = [Instant(_t(5), "commit", State.INFLIGHT)]
    files_p = [f for f in files if f.time != _t(5)] + pending
    assert plan_archive(files_p, 30, 20, None) == writes[:5]
    # ... nor at or past the earliest instant the latest clean keeps
    assert plan_archive(files, 30, 20, writes[8]) == writes[:8]
    # completed cleans and rollbacks before the first kept write go too, the latest clean stays
    extra = [*_done("20261101000001500", "clean"), *_done("20261101000002500", "rollback")]
    extra += _done("20261101000003500", "clean")
    got = plan_archive([*files, *extra], 30, 20, None)
    assert "20261101000001500" in got and "20261101000002500" in got
    assert "20261101000003500" not in got  # the latest clean
    assert [t for t in got if t in writes] == writes[:15]


def test_archive_file_round_trip_and_corruption() -> None:
    from amcommit.errors import ManifestError
    from amcommit.table.format.archive import ArchivedEntry

    entries = [ArchivedEntry(i) for i in _done(_t(1))]
    data = encode_archive_block(entries)
    assert data[:6] == b"#HUDI#"
    # the block length counts every byte after it; the trailing total is magic + 8 + length - 8
    length = int.from_bytes(data[6:14], "big")
    assert length == len(data) - 14
    assert int.from_bytes(data[-8:], "big") == len(data) - 8
    assert decode_archive(data + data) == entries + entries
    later = encode_archive_block([ArchivedEntry(i) for i in _done(_t(2))])
    assert newest_archived(data + later) == _t(2) and newest_archived(b"") is None
    assert archive_file_name(3) == ".commits_.archive.3_1-0-1"
    with pytest.raises(ManifestError, match=r"corrupt log block|lengths disagree|truncated"):
        decode_archive(data[:-1])
    with pytest.raises(ManifestError, match="magic"):
        decode_archive(b"#HUDX#" + data[6:])


def _hoodie(root: Path) -> list[str]:
    return sorted(p.name for p in (root / ".hoodie").iterdir() if p.is_file())


def _archived(root: Path) -> list[Instant]:
    out: list[Instant] = []
    for p in sorted((root / ".hoodie" / "archived").iterdir()):
        out.extend(e.instant for e in decode_archive(p.read_bytes()))
    return out


async def test_archival_after_each_commit_keeps_readers_right(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    written = []
    instants = []
    for k in range(7):
        w, report = await write(store, "t", rows(10 * k, 4, tag=f"w{k}"), config=SMALL)
        assert report.success
        written += rows(10 * k, 4, tag=f"w{k}")
        instants.append(w.instant)
    root = tmp_path / "t"
    # writes 1-5 leave 5 > 4 active: 3 archived after the 5th, 2 + 2 active after the 7th
    assert _hoodie(root) == sorted(
        ["hoodie.properties"]
        + [f"{t}{s}" for t in instants[3:] for s in (".commit", ".commit.requested", ".inflight")]
    )
    assert sorted(os.listdir(root / ".hoodie" / "archived")) == [archive_file_name(1)]
    assert sorted(_archived(root)) == sorted(i for t in instants[:3] for i in _done(t))
    assert hudi_rows(f"file://{root}") == keys(written)
    assert await amcommit_rows(store, "t") == keys(written)
    # amcommit reads the archive: time travel and incremental reads before the active timeline
    tl = await Timeline.open(store, "t")
    as_of = await tl.snapshot(instants[1])
    assert sorted({f.instant for f in as_of}) == instants[:2]
    changes = await tl.changes(instants[0], instants[4])
    assert [i.time for i in changes.instants] == instants[1:5]
    assert {f.instant for f in changes.visible()} == set(instants[1:5])
    assert len(changes.visible()) == 4 * 4  # each write: 2 tasks x 2 partitions
    assert [c.instant.time for c in await tl.commits()] == instants


async def test_a_label_archived_long_ago_still_counts(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    label = Label("app", 5)
    w = await begin(store, "t", config=SMALL)
    await write_tasks(store, w, rows(0, 4))
    from amcommit.api import commit_job

    assert (await commit_job(store, "t", w.instant, config=SMALL, label=label)).success
    for k in range(1, 7):
        await write(store, "t", rows(10 * k, 4), config=SMALL)
    assert w.instant in {i.time for i in _archived(tmp_path / "t")}
    assert await committed_by(store, "t", Label("app", 5)) == w.instant
    assert await committed_by(store, "t", Label("app", 6)) is None


def _hudi_keys(root: Path) -> list[str]:
    """The record keys hudi-rs reads from the generated table at ``root`` (a snapshot)."""
    from hudi import HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(f"file://{root}").build()
    return sorted(
        k for b in table.read(HudiReadOptions()) for k in b.column("_hoodie_record_key").to_pylist()
    )


def _generated(tmp_path: Path, n: int = 12) -> tuple[Path, list[str]]:
    gen = generate([Write(files={"a": 1, "b": 1}) for _ in range(n)])
    root = write_local(gen, tmp_path / "t")
    return root, gen.completed


def test_cli_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, done = _generated(tmp_path)
    before = _hudi_keys(root)
    assert cli_main(["archive", str(root), "--keep-max", "8", "--keep-min", "5"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"archived 7 instants ({done[0]} .. {done[6]}) into .hoodie/archived/{archive_file_name(1)}; 5 completed writes stay active"
    ]
    assert _hoodie(root) == sorted(
        ["hoodie.properties"]
        + [f"{t}{s}" for t in done[7:] for s in (".commit", ".commit.requested", ".commit.inflight")]
    )
    assert _hudi_keys(root) == before
    assert len(open_timeline(str(root)).snapshot()) == 24
    assert cli_main(["archive", str(root), "--keep-max", "8", "--keep-min", "5"]) == 0
    assert capsys.readouterr().out.strip() == "nothing to archive (5 completed writes active)"
    assert cli_main(["archive", str(root), "--keep-max", "5", "--keep-min", "5"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "keep_max (5) must be greater than keep_min (5)" in err[0]


def test_archival_stops_at_a_pending_write(tmp_path: Path) -> None:
    gen = generate([Write(files={"a": 1}, failed=(n == 3)) for n in range(12)])
    root = write_local(gen, tmp_path / "t")
    assert cli_main(["archive", str(root), "--keep-max", "4", "--keep-min", "2"]) == 0
    failed = gen.instants[3]
    assert [i.time for i in _archived(root) if i.completed] == gen.instants[:3]
    assert f"{failed}.commit.inflight" in _hoodie(root)


CHILD = textwrap.dedent(
    """
    import sys, anyio
    from amcommit.committer.config import CommitterConfig
    from amcommit.store.local import LocalStore
    from amcommit.table.commit.archive import archive
    from tests.table.killstore import KillStore

    root, nth = sys.argv[1], int(sys.argv[2])

    async def main():
        store = KillStore(LocalStore(root, fsync=False), None, nth)
        await archive(store, "t", config=CommitterConfig(io_threads=1), keep_max=8, keep_min=5)

    anyio.run(main)
    """
)


@pytest.mark.parametrize("kill_at", [1, 2, 3, 6, 12, 22, 23, 24])
def test_archival_killed_between_requests_is_finished_by_the_next(tmp_path: Path, kill_at: int) -> None:
    """SIGKILL before the ``kill_at``-th mutating request (1: the lock's put, 2: the archive
    file's, 3-23: the 21 deletions of 7 instants, each requested, inflight, completed; 24: the
    lock's release), then archive again: the same listing as an archival never killed,
    every committed row readable by hudi-rs and amcommit at every point."""
    ref_root, done = _generated(tmp_path / "ref")
    assert cli_main(["archive", str(ref_root), "--keep-max", "8", "--keep-min", "5"]) == 0
    root, _ = _generated(tmp_path / "k")
    expected_rows = _hudi_keys(ref_root)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "k"), str(kill_at)], env=env, timeout=60
    )
    assert proc.returncode == -9
    mid = _hoodie(root)
    # killed: no instant is left pending (requested/inflight without its completed file)
    for name in mid:
        if name.endswith((".requested", ".inflight")):
            assert f"{name.split('.')[0]}.commit" in mid
    assert _hudi_keys(root) == expected_rows
    assert len(open_timeline(str(root)).snapshot()) == 24

    async def again() -> ArchiveReport:
        store = LocalStore(str(tmp_path / "k"), fsync=False)
        return await archive(store, "t", config=CommitterConfig(lock_wait=10.0), keep_max=8, keep_min=5)

    report = anyio.run(again)
    assert _hoodie(root) == _hoodie(ref_root)
    assert sorted(set(_archived(root))) == sorted(set(_archived(ref_root)))
    assert _hudi_keys(root) == expected_rows
    assert len(open_timeline(str(root)).snapshot()) == 24
    if report.archived:  # killed before the archive file was written: this run archives
        assert report.archived == done[:7] and not report.finished
    else:  # the archive file was written: this run finishes its deletions
        assert report.finished == done[7 - len(report.finished) : 7]
        assert bool(report.finished) == (3 <= kill_at <= 23)
        assert kill_at >= 3


async def test_archival_and_writers_at_once_lose_nothing(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path), fsync=False)
    for k in range(6):
        await write(store, "t", rows(10 * k, 2), config=CommitterConfig())
    written = [r for k in range(6) for r in rows(10 * k, 2)]

    async def writer(n: int) -> None:
        for j in range(3):
            await write(store, "t", rows(1000 + 10 * (3 * n + j), 2), config=SMALL)

    async def archiver() -> None:
        for _ in range(4):
            await archive(store, "t", keep_max=3, keep_min=2)

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer, 0)
        tg.start_soon(writer, 1)
        tg.start_soon(archiver)
    written += [r for n in range(2) for j in range(3) for r in rows(1000 + 10 * (3 * n + j), 2)]
    root = tmp_path / "t"
    assert hudi_rows(f"file://{root}") == keys(written)
    assert await amcommit_rows(store, "t") == keys(written)
    assert len(await (await Timeline.open(store, "t")).commits()) == 12
    assert _archived(root)  # the archiver did move instants while the writers wrote


async def test_a_handle_listed_before_an_archival_still_loads_every_commit(tmp_path: Path) -> None:
    """A writer's timeline handle listed the active timeline; another writer's archival then
    moved some of those instants into .hoodie/archived/: the handle's load of their
    metadata reads them from the archive instead of failing with NotFound (seen in the
    concurrent-upsert test on fake-gcs-server)."""
    store = LocalStore(str(tmp_path), fsync=False)
    no_auto = SMALL.with_options(archive=False)
    instants = []
    for k in range(6):
        w, report = await write(store, "t", rows(10 * k, 4, tag=f"w{k}"), config=no_auto)
        assert report.success
        instants.append(w.instant)
    handle = Timeline(store, "t", config=no_auto)
    await handle.current()  # listed: all six active
    assert (await archive(store, "t", config=no_auto, keep_max=4, keep_min=2)).archived
    assert not (tmp_path / "t" / ".hoodie" / f"{instants[0]}.commit").exists()
    held = await handle.commits_held()
    assert [c.instant.time for c in held] == instants


def test_cli_timeline_archived_lists_the_archived_instants_marked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``amcommit timeline --archived``: the archived instants first (with what each write did,
    from the archive's metadata), marked; without it, only the active timeline."""
    import json

    root, done = _generated(tmp_path)
    assert cli_main(["timeline", str(root), "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert cli_main(["archive", str(root), "--keep-max", "8", "--keep-min", "5"]) == 0
    capsys.readouterr()
    assert cli_main(["timeline", str(root), "--json"]) == 0
    active = json.loads(capsys.readouterr().out)
    assert [d["time"] for d in active] == done[7:] and not any(d["archived"] for d in active)
    assert cli_main(["timeline", str(root), "--archived", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert [d["time"] for d in both] == done
    assert [d["archived"] for d in both] == [True] * 7 + [False] * 5
    keys = (
        "time",
        "action",
        "state",
        "operation",
        "files",
        "bytes",
        "rows",
        "inserted",
        "updated",
        "deleted",
    )
    assert [{k: d[k] for k in keys} for d in both] == [{k: d[k] for k in keys} for d in full]
    assert all(d["duration"] is None for d in both[:7])
    assert cli_main(["timeline", str(root), "--archived"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 13 and "STATE" in lines[0]
    assert all("completed (archived)" in line for line in lines[1:8])
    assert not any("archived" in line for line in lines[8:])
