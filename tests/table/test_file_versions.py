"""Readers on tables whose file groups have several versions (upserts and deletes, built by
hand to Hudi's rules: amcommit.testing.tablegen), against the generator's model and hudi-rs.

The model (Hudi's definitions): a snapshot as of T holds every record's latest value as of
T; an incremental read of ``(A, B]`` returns exactly the records of the snapshot as of B whose
latest change (``_hoodie_commit_time``) lies in ``(A, B]``, each key once.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import hudi
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from amcommit.store.schemes import open_location
from amcommit.table.file_group.model import FileVersion
from amcommit.table.format.model import Operation
from amcommit.table.timeline.instants import LoadedCommit
from amcommit.table.timeline.reader import Timeline, open_timeline
from amcommit.testing.tablegen import DELETE, UPSERT, GeneratedTable, Write, generate, write_local

# file groups: a: g0 (k0-k4), g1 (k5-k9); b: g2 (k10-k14), g3 (k15-k19); c: g4 (k20-k23)
VERSIONED = [
    Write(files={"a": 2, "b": 2}, rows=5),  # I0: k0..k19
    Write(UPSERT, files={"c": 1}, rows=4, updates=(0, 7, 12, 13)),  # I1: g0 g1 g2 rewritten, g4 new
    Write(DELETE, files={}, deletes=(1, 13, 20)),  # I2: g0 g2 g4 rewritten
    Write(UPSERT, files={}, updates=(0, 21), grow={"b": 2}),  # I3: g0 g4; k24 k25 into g2 (smallest of b)
    Write(UPSERT, files={}, updates=(2, 3), failed=True),  # I4: inflight; its version of g0 on disk
    Write(DELETE, files={}, deletes=(15, 16, 17, 18, 19)),  # I5: g3's version is empty
    Write(UPSERT, files={"d": 1}, rows=2, updates=(10, 22)),  # I6: g2 g4; new group in d (k26 k27)
    Write(Operation.INSERT_OVERWRITE, files={"a": 1}, rows=3),  # I7: replaces g0 g1, every version (k28-k30)
    Write(UPSERT, files={}, updates=(28, 11)),  # I8: the new a-group, g2
]


def versioned(**kw: Any) -> GeneratedTable:
    return generate(VERSIONED, **kw)


Row = tuple[str, str, str]
"""(record key, value, _hoodie_commit_time)"""


def model_rows(records: dict[str, Any]) -> list[Row]:
    return sorted((k, r.value, r.commit_time) for k, r in records.items())


def read_files(root: Path, files: Iterable[FileVersion], since: str | None, until: str | None) -> list[Row]:
    """The rows of ``files`` whose ``_hoodie_commit_time`` lies in ``(since, until]`` (None: open)."""
    out: list[Row] = []
    for f in files:
        t = pq.read_table(root / f.path, columns=["_hoodie_record_key", "value", "_hoodie_commit_time"])
        ct = t.column("_hoodie_commit_time")
        if since is not None:
            t = t.filter(pc.greater(ct, since))
            ct = t.column("_hoodie_commit_time")
        if until is not None:
            t = t.filter(pc.less_equal(ct, until))
        d = t.to_pydict()
        out.extend(zip(d["_hoodie_record_key"], d["value"], d["_hoodie_commit_time"], strict=True))
    return sorted(out)


def hudi_read(table: hudi.HudiTable, opts: hudi.HudiReadOptions) -> list[Row]:
    out: list[Row] = []
    for b in table.read(opts):
        d = b.to_pydict()
        out.extend(zip(d["_hoodie_record_key"], d["value"], d["_hoodie_commit_time"], strict=True))
    return sorted(out)


def hudi_slices(table: hudi.HudiTable, opts: hudi.HudiReadOptions) -> list[str]:
    return sorted(s.base_file_relative_path() for s in table.get_file_slices(opts))


def incremental(since: str | None, until: str) -> hudi.HudiReadOptions:
    o = hudi.HudiReadOptions().with_query_type(hudi.HudiQueryType.Incremental).with_end_timestamp(until)
    return o.with_start_timestamp(since) if since else o


def pairs(gen: GeneratedTable) -> list[tuple[str | None, str]]:
    return [(a, b) for a, b in itertools.combinations([None, *gen.completed], 2) if b is not None]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[GeneratedTable, Path]:
    gen = versioned()
    return gen, write_local(gen, tmp_path_factory.mktemp("versions") / "t")


def test_generated_table_follows_hudis_rules(table: tuple[GeneratedTable, Path]) -> None:
    """The hand-built table is what Hudi's merge writes: versions with ``prevCommit``,
    unchanged records keep their meta columns, counts in the write stats."""
    gen, root = table
    assert len(gen.completed) == 8 and gen.instants[4] not in gen.completed
    i0, i1, i2, i3 = gen.completed[:4]
    g0 = next(g for g in gen.versions if g[0] == "p=a")
    assert [t for t, _ in gen.versions[g0]] == [i0, i1, i2, i3]
    new = pq.read_table(root / gen.versions[g0][1][1]).to_pydict()
    old = pq.read_table(root / gen.versions[g0][0][1]).to_pydict()
    assert new["_hoodie_record_key"] == old["_hoodie_record_key"] == [f"k{i}" for i in range(5)]
    for n in range(1, 5):  # unchanged: meta columns as they were, only the file name is the new one
        assert new["_hoodie_commit_time"][n] == old["_hoodie_commit_time"][n] == i0
        assert new["_hoodie_commit_seqno"][n] == old["_hoodie_commit_seqno"][n]
    assert new["_hoodie_commit_time"][0] == i1 and new["_hoodie_commit_seqno"][0].startswith(f"{i1}_")
    assert set(new["_hoodie_file_name"]) == {gen.versions[g0][1][1].rsplit("/", 1)[1]}
    meta = json.loads((root / ".hoodie" / f"{i2}.commit").read_bytes())
    assert meta["operationType"] == "DELETE"
    stat = next(s for s in meta["partitionToWriteStats"]["p=a"] if s["fileId"] == g0[1])
    assert (stat["prevCommit"], stat["numWrites"], stat["numDeletes"], stat["numUpdateWrites"]) == (
        i1,
        4,
        1,
        0,
    )
    meta = json.loads((root / ".hoodie" / f"{i3}.commit").read_bytes())
    grown = [s for s in meta["partitionToWriteStats"]["p=b"] if s["numInserts"]]
    assert [(s["numInserts"], s["numWrites"], s["prevCommit"]) for s in grown] == [(2, 6, i2)]
    empty = gen.versions[next(g for g in gen.versions if g[0] == "p=b" and len(gen.versions[g]) == 2)]
    assert pq.read_metadata(root / empty[-1][1]).num_rows == 0  # every record deleted: empty version


def test_hudi_rs_reads_the_model(table: tuple[GeneratedTable, Path]) -> None:
    """hudi-rs (the oracle) agrees with the model: snapshot and time travel at every instant,
    incremental reads between every pair (it follows Hudi's definition here)."""
    gen, root = table
    t = hudi.HudiTable(str(root))
    assert hudi_read(t, hudi.HudiReadOptions()) == model_rows(gen.snapshot(gen.completed[-1]))
    for c in gen.completed:
        assert hudi_read(t, hudi.HudiReadOptions().with_as_of_timestamp(c)) == model_rows(gen.snapshot(c)), c
    for a, b in pairs(gen):
        assert hudi_read(t, incremental(a, b)) == model_rows(gen.incremental(a, b)), (a, b)
    for a, b in between(gen):  # bounds that are no instant: the latest commit at or before them
        want = model_rows(gen.incremental(down(gen, a), down(gen, b) or "")) if down(gen, b) else []
        assert hudi_read(t, incremental(a, b)) == want, (a, b)
    for x in (mid(gen.completed[2]), gen.instants[4]):  # the failed write's time: as of the one before
        assert hudi_read(t, hudi.HudiReadOptions().with_as_of_timestamp(x)) == model_rows(
            gen.snapshot(down(gen, x) or "")
        )


def mid(t: str) -> str:
    """A time between instant ``t`` and the next one (instants are a second apart)."""
    return t[:-3] + "500"


def down(gen: GeneratedTable, t: str | None) -> str | None:
    """The latest completed instant at or before ``t``."""
    if t is None:
        return None
    done = [c for c in gen.completed if c <= t]
    return done[-1] if done else None


def between(gen: GeneratedTable) -> list[tuple[str | None, str]]:
    """Ranges whose bounds are not instants (one the failed write's time)."""
    i = gen.instants
    return [
        (mid(i[0]), i[2]),
        (None, i[4]),
        (i[3], i[4]),
        (mid(i[1]), mid(i[6])),
        (i[4], i[6]),
        (mid(i[8]), mid(i[8])),
    ]


def test_timeline_takes_the_newest_version_of_each_file_group(table: tuple[GeneratedTable, Path]) -> None:
    """``Timeline.snapshot`` / ``Timeline.changes`` (and ``amcommit.table.timeline.instants``): per file
    group the newest version as of the instant / in the range; the planned files are
    hudi-rs's, and their rows (filtered by commit time for a range) are the model's."""
    gen, root = table
    tl = open_timeline(str(root))
    t = hudi.HudiTable(str(root))
    for c in gen.completed:
        files = tl.snapshot(c)
        assert [f.path for f in files] == hudi_slices(t, hudi.HudiReadOptions().with_as_of_timestamp(c)), c
        assert read_files(root, files, None, None) == model_rows(gen.snapshot(c)), c
    for a, b in pairs(gen):
        ch = tl.changes(a, b)
        files = ch.visible()
        assert len({(f.partition, f.file_id) for f in ch.added}) == len(ch.added), (a, b)
        assert sorted(f.path for f in files) == hudi_slices(t, incremental(a, b)), (a, b)
        assert read_files(root, files, a, b) == model_rows(gen.incremental(a, b)), (a, b)
        written = [
            rel for c in gen.completed if (a is None or c > a) and c <= b for rel in gen.files_by_instant[c]
        ]
        assert sorted(f.path for f in ch.added + ch.superseded) == sorted(written), (a, b)
    # the case: (start, I2] read every version of g0, g2 and g4 (each key once now)
    ch = tl.changes(None, gen.completed[2])
    assert sum(pq.read_metadata(root / f.path).num_rows for f in ch.added) == len(
        gen.snapshot(gen.completed[2])
    )


def test_spark_reader_plans_and_filters_the_newest_versions(table: tuple[GeneratedTable, Path]) -> None:
    """The Spark reader's pure planning (``plan_files``) and its row filter (``in_range``),
    as its executors run them, without a SparkSession (tests/spark has the real one)."""
    from amcommit.spark.reader import Query, in_range, plan_files, snap

    gen, root = table

    async def commits() -> list[LoadedCommit]:
        store, dest = open_location(str(root))
        async with store:
            return await (await Timeline.open(store, dest)).commits()

    loaded = anyio.run(commits)

    def rows(q: Query) -> list[Row]:
        out: list[Row] = []
        for f in plan_files(loaded, q):
            d = in_range(pq.read_table(root / f.path), q).to_pydict()
            out.extend(zip(d["_hoodie_record_key"], d["value"], d["_hoodie_commit_time"], strict=True))
        return sorted(out)

    for c in gen.completed:
        assert rows(Query(as_of=c)) == model_rows(gen.snapshot(c)), c
    for a, b in pairs(gen):
        assert rows(Query(incremental=True, since=a, until=b)) == model_rows(gen.incremental(a, b)), (a, b)
    for a, b in between(gen):  # the reader moves each bound down to a completed write (snap)
        q = snap(Query(incremental=True, since=a, until=b), gen.completed)
        want = model_rows(gen.incremental(down(gen, a), down(gen, b) or "")) if down(gen, b) else []
        assert rows(q) == want, (a, b)


def test_changes_command_lists_the_newest_versions(
    table: tuple[GeneratedTable, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``amcommit changes --json``: ``added`` is what to read (one version per file group)."""
    from amcommit.cli import main

    gen, root = table
    for a, b in pairs(gen):
        assert main(["changes", str(root), "--since", a or "000", "--until", b]) == 0
        text = capsys.readouterr().out.splitlines()
        assert main(["changes", str(root), "--since", a or "000", "--until", b, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        gone = {(r["partition"], r["file_id"]) for r in data["replaced"]}
        read = [FileVersion(**f) for f in data["added"] if (f["partition"], f["file_id"]) not in gone]
        assert read_files(root, read, a, b) == model_rows(gen.incremental(a, b)), (a, b)
        assert sorted(ln[2:].split()[0] for ln in text if ln.startswith("+ ")) == sorted(
            f["path"] for f in data["added"]
        )


def test_timeline_shows_inserted_updated_deleted(
    table: tuple[GeneratedTable, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``amcommit timeline`` (table and ``--json``): each write's inserted, updated and
    deleted records from its write stats; the failed write's are unknown."""
    from amcommit.cli import main

    gen, root = table
    want = {
        t: (sum(w.files.values()) * w.rows + sum(w.grow.values()), len(w.updates), len(w.deletes))
        for t, w in zip(gen.instants, VERSIONED, strict=True)
        if t in gen.completed
    }
    assert main(["timeline", str(root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {
        d["time"]: (d["inserted"], d["updated"], d["deleted"]) for d in data if d["state"] == "completed"
    } == want
    assert [(d["inserted"], d["updated"], d["deleted"]) for d in data if d["state"] != "completed"] == [
        (None, None, None)
    ]
    assert [d["operation"] for d in data][:3] == ["INSERT", "UPSERT", "DELETE"]
    assert main(["timeline", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    cols = [head.index(c) for c in ("INSERTED", "UPDATED", "DELETED")]
    for line in lines[1:]:
        cells = line.split()
        t = cells[0]
        if t in want:  # the action column is two words: "commit (UPSERT)"
            assert tuple(int(cells[c + 1].replace(",", "")) for c in cols) == want[t], line
        else:
            assert [cells[c] for c in cols] == ["-", "-", "-"], line


def test_daft_snapshots_of_rewritten_file_groups(tmp_path: Path) -> None:
    """Daft 0.7.26 (``daft.read_hudi``, snapshots only, in its own environment): reads the
    newest version of each rewritten file group; but, measured here, it also reads the base
    files of a write that never completed (an upsert's new versions, an insert's new groups:
    hudi-rs and amcommit do not), and fails on a table holding an empty version (a group whose
    records were all deleted)."""
    from tests.table.daftenv import DaftUnavailable, daft_python, daft_read

    try:
        python = daft_python()
    except DaftUnavailable as e:
        pytest.skip(f"Daft could not be installed here: {e}")

    def daft_rows(gen: GeneratedTable, name: str) -> list[Row]:
        root = write_local(gen, tmp_path / name)
        _, rows = daft_read(python, str(root))
        return sorted((r["_hoodie_record_key"], r["value"], r["_hoodie_commit_time"]) for r in rows)

    gen = generate(VERSIONED[:4])  # insert, upsert, delete, upsert with small-file inserts
    assert daft_rows(gen, "ok") == model_rows(gen.snapshot(gen.completed[-1]))
    gen = generate(VERSIONED[:5])  # ... and an upsert that never completed (its version of g0 on disk)
    got, want = daft_rows(gen, "failed"), model_rows(gen.snapshot(gen.completed[-1]))
    failed = gen.instants[4]
    assert sorted({r for r in got if r not in want}) == [(f"k{i}", f"v{i}@{failed}", failed) for i in (2, 3)]
    gen = generate([VERSIONED[0], Write(files={"a": 1}, failed=True)])  # the same for a failed insert
    got, want = daft_rows(gen, "failed-insert"), model_rows(gen.snapshot(gen.completed[-1]))
    assert len(got) == len(want) + 3 and set(want) < set(got)
    gen = generate([*VERSIONED[:4], VERSIONED[5]])  # g3's records all deleted: an empty version
    with pytest.raises(AssertionError, match="Schema and number of arrays unequal"):
        daft_rows(gen, "empty")
