"""`amcommit timeline`, `amcommit changes`, `amcommit clean`: output and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amcommit.cli import main
from amcommit.cli.table import format_instants
from amcommit.table.format.model import Operation
from amcommit.table.timeline.reader import open_timeline
from amcommit.testing.tablegen import Write, generate, write_local
from tests.backends import StoreUnderTest

WRITES = [
    Write(files={"a": 2}),
    Write(files={"a": 1}, label="q1/batch-7"),
    Write(Operation.INSERT_OVERWRITE, files={"a": 1}),
    Write(files={"b": 1}, failed=True),
    Write(files={"b": 1}),
]


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, list[str]]:
    gen = generate(WRITES)
    return write_local(gen, tmp_path / "t"), gen.instants


def test_timeline_table_and_json(table: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    root, times = table
    assert main(["timeline", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "TIME",
        "ACTION",
        "STATE",
        "FILES",
        "BYTES",
        "ROWS",
        "INSERTED",
        "UPDATED",
        "DELETED",
        "DURATION",
        "LABEL",
    ]
    assert [ln.split()[0] for ln in lines[1:]] == times  # newest last
    assert (
        "q1/batch-7" in lines[2] and "inflight" in lines[4] and "replacecommit (INSERT_OVERWRITE)" in lines[3]
    )
    assert main(["timeline", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["time"] for d in data] == times
    assert data[0] | {"bytes": 0} == {
        "time": times[0],
        "action": "commit",
        "state": "completed",
        "operation": "INSERT",
        "files": 2,
        "bytes": 0,
        "rows": 6,
        "replaced": None,
        "duration": 0.25,
        "label": None,
        "inserted": 6,
        "updated": 0,
        "deleted": 0,
        "compacted": False,
        "archived": False,
    }


def test_plain_text_table_without_rich(table: tuple[Path, list[str]]) -> None:
    root, times = table
    text = format_instants(open_timeline(str(root)).instants(), use_rich=False)
    assert text.splitlines()[0].split() == [
        "TIME",
        "ACTION",
        "STATE",
        "FILES",
        "BYTES",
        "ROWS",
        "INSERTED",
        "UPDATED",
        "DELETED",
        "DURATION",
        "LABEL",
    ]
    assert text.splitlines()[-1].startswith(times[-1])


def test_changes(table: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    root, t = table
    assert main(["changes", str(root), "--since", t[0], "--until", t[2]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"changes in ({t[0]}, {t[2]}]: 2 instants, 2 files added, 3 file groups replaced"
    assert sum(ln.startswith("+ p=a/") for ln in out) == 2 and sum(ln.startswith("- p=a/") for ln in out) == 3
    assert main(["changes", str(root), "--since", t[2], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [i["time"] for i in data["instants"]] == [t[4]] and data["until"] is None
    assert [f["instant"] for f in data["added"]] == [t[4]] and data["replaced"] == []


def test_clean_dry_run_then_clean(table: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    root, t = table
    assert main(["clean", str(root), "--retain-commits", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"would delete 3 files (keeping from instant {t[2]} on):" and len(out) == 4
    assert main(["clean", str(root), "--retain-commits", "2"]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("clean ")
        and f"deleted 3 files (0 already gone); time travel and incremental reads start at {t[2]}" in out
    )
    assert main(["clean", str(root), "--retain-commits", "2"]) == 0
    assert capsys.readouterr().out.strip() == "nothing to clean (keeping the latest 2 commits)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["changes", "{root}", "--since", "{t0}", "--until", "{t1}x"], "invalid instant time"),
        (
            ["changes", "{root}", "--since", "{t2}", "--until", "{t1}"],
            "range reversed: since {t2} is later than until {t1}",
        ),
        (
            ["changes", "{root}", "--since", "{t3}"],
            "unknown instant {t3} in table '{root}': the commit is inflight",
        ),
        (["changes", "{root}", "--since", "20991231000000000"], "unknown instant 20991231000000000"),
        (["timeline", "{root}/a"], "'{root}/a' does not exist (nothing is stored there)"),
        (["timeline", "{root}/.hoodie"], "'{root}/.hoodie' is not a table: no .hoodie/hoodie.properties"),
        (
            ["rollback", "{root}", "--instant", "20991231000000000"],
            "instant 20991231000000000 is no pending instant of '{root}': nothing of it was found "
            "(a mistyped time, or rolled back already; `amcommit timeline` lists the instants)",
        ),
        (["clean", "{root}", "--retain-commits", "0"], "--retain-commits must be an integer >= 1, got 0"),
    ],
)
def test_errors_are_one_line(
    table: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    root, t = table
    fmt = {"root": str(root), "t0": t[0], "t1": t[1], "t2": t[2], "t3": t[3]}
    assert main([a.format(**fmt) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("amcommit: error: ") and "Traceback" not in err
    assert message.format(**fmt) in err


def test_cleaned_past_is_one_line(table: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    root, t = table
    assert main(["clean", str(root), "--retain-commits", "1"]) == 0
    capsys.readouterr()
    assert main(["changes", str(root), "--since", t[0]]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the earliest instant still readable is {t[4]}" in err


async def test_list_jobs_of_a_table_on_every_backend(engine_sut: StoreUnderTest) -> None:
    """`amcommit jobs` reads a table's pending instants the same way on every store (flat
    namespaces too); a destination where nothing exists is NotFound. Reads only."""
    from amcommit.api import list_jobs
    from amcommit.errors import NotFound
    from amcommit.paths import join
    from amcommit.table.commit.jobs import TableJobs
    from amcommit.table.timeline.heartbeat import stop_beat
    from tests.table.writehelpers import begin, listing, rows, write, write_tasks

    store = engine_sut.store
    dest = join(engine_sut.base, "tbl")
    with pytest.raises(NotFound, match="nothing exists at this destination"):
        await list_jobs(store, dest)
    w1, _ = await write(store, dest, rows(0, 4))
    alive = await begin(store, dest)
    await write_tasks(store, alive, rows(10, 4))
    stopped = await begin(store, dest)
    await stop_beat(store, dest, stopped.instant)
    before = await listing(store, dest)
    got = await list_jobs(store, dest)
    assert await listing(store, dest) == before  # nothing written (no clock probe)
    assert isinstance(got, TableJobs) and got.lock is None and got.jobs == []
    assert got.last_instant is not None and (got.last_instant.instant, got.last_instant.action) == (
        w1.instant,
        "commit",
    )
    by = {w.instant: w for w in got.table_writes}
    assert list(by) == [alive.instant, stopped.instant]
    assert (by[alive.instant].state, by[alive.instant].heartbeat) == ("inflight", "alive")
    assert by[alive.instant].staging is not None and by[alive.instant].staging.manifests == 2
    assert by[alive.instant].staging.operation == "INSERT"
    assert by[stopped.instant].heartbeat == "stopped"
