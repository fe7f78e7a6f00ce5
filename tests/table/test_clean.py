"""Clean: pure planning, Avro instants, execution with exact listings, SIGKILL between the
deletes then clean again, CleanedPast, clean_after_commit."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import fastavro
import pytest

from amcommit.committer.config import CommitterConfig
from amcommit.errors import ConfigError
from amcommit.store.schemes import open_location
from amcommit.table.commit.clean import CleanReport, clean, clean_after_commit, plan_clean
from amcommit.table.errors import CleanedPast
from amcommit.table.format import avro_meta
from amcommit.table.format.model import CommitMetadata, Instant, Operation, State, WriteStat
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import LoadedCommit
from amcommit.table.timeline.reader import open_timeline
from amcommit.testing.tablegen import GeneratedTable, Write, generate, write_local
from tests.table.test_file_versions import VERSIONED, model_rows, read_files

ROOT = Path(__file__).resolve().parents[2]


def _c(t: str, files: dict[str, list[str]], replace: dict[str, list[str]] | None = None) -> LoadedCommit:
    """A commit at ``t`` adding file ids ``files[partition]`` (each at version ``t``)."""
    stats = {
        p: [
            WriteStat(file_id=f, path=f"{p}/{f}_0-1-0_{t}.parquet", num_writes=1, partition_path=p)
            for f in fids
        ]
        for p, fids in files.items()
    }
    action = "replacecommit" if replace is not None else "commit"
    meta = CommitMetadata(partition_to_write_stats=stats, partition_to_replace_file_ids=replace)
    return LoadedCommit(Instant(t, action, State.COMPLETED), meta)


T = [f"2026110100000{i}000" for i in range(10)]


def test_plan_nothing_to_clean_without_replacements_or_with_few_commits() -> None:
    appends = [_c(T[i], {"a": [f"f{i}"]}) for i in range(5)]
    assert plan_clean(appends, 1) is None
    with_overwrite = [_c(T[0], {"a": ["f0"]}), _c(T[1], {"a": ["f1"]}, {"a": ["f0"]})]
    assert plan_clean(with_overwrite, 2) is None  # both commits kept readable


def test_plan_deletes_groups_replaced_at_or_before_the_earliest_retained_commit() -> None:
    commits = [
        _c(T[0], {"a": ["f0"], "b": ["g0"]}),
        _c(T[1], {"a": ["f1"]}, {"a": ["f0"]}),  # overwrite of partition a
        _c(T[2], {"b": ["g2"]}),
        _c(T[3], {"c": ["h3"]}, {"a": ["f1"], "b": ["g0", "g2"]}),  # whole-table overwrite
        _c(T[4], {"c": ["h4"]}),
    ]
    # keep 3: T2..T4 readable; T1's replacement of f0 is before T2 -> f0 goes
    p3 = plan_clean(commits, 3)
    assert p3 is not None and p3.earliest_retained == T[2] and p3.earliest_action == "commit"
    assert p3.files == {"a": [f"a/f0_0-1-0_{T[0]}.parquet"]}
    assert p3.last_completed == T[4]
    # keep 2: T3..T4; T3 replaced f1, g0, g2 too
    p2 = plan_clean(commits, 2)
    assert p2 is not None and p2.earliest_retained == T[3] and p2.earliest_action == "replacecommit"
    assert p2.files == {
        "a": [f"a/f0_0-1-0_{T[0]}.parquet", f"a/f1_0-1-0_{T[1]}.parquet"],
        "b": [f"b/g0_0-1-0_{T[0]}.parquet", f"b/g2_0-1-0_{T[2]}.parquet"],
    }
    # after a clean that kept from T2 on, only T3's replacements are new
    inc = plan_clean(commits, 2, previous_earliest=T[2])
    assert inc is not None and sorted(inc.files) == ["a", "b"]
    assert f"a/f0_0-1-0_{T[0]}.parquet" not in inc.files["a"]
    assert plan_clean(commits, 2, previous_earliest=T[3]) is None


def test_plan_older_versions_of_a_file_group_as_hudi_keep_latest_commits() -> None:
    """Hudi's ``getFilesToCleanKeepingLatestCommits``: a version older than E goes unless it
    is the group's newest, or its newest older than E (a query begun before E reads it)."""
    f = [_c(T[0], {"a": ["f"]}), _c(T[1], {"a": ["f"]}), _c(T[2], {"a": ["g"]})]
    commits = [*f, _c(T[3], {"a": ["f"]}), _c(T[4], {"a": ["g"]})]  # f: T0 T1 T3; g: T2 T4

    def planned(n: int, prev: str | None = None) -> list[str] | None:
        p = plan_clean(commits, n, prev)
        return None if p is None else p.files["a"]

    def v(fid: str, t: int) -> str:
        return f"a/{fid}_0-1-0_{T[t]}.parquet"

    assert planned(4) is None  # E = T1: f@T0 is f's newest version before E
    assert planned(3) == [v("f", 0)]  # E = T2: f@T1 is the newest before E, f@T0 goes
    assert planned(2) == [v("f", 0)]  # E = T3: f@T1 stays (a snapshot as of T2 reads it)
    assert planned(1) == [v("f", 0), v("f", 1)]  # E = T4: g@T2 is g's newest before E
    assert planned(1, prev=T[3]) == [v("f", 1)]  # f@T0 went with the clean that kept from T3
    assert plan_clean(f, 2) is None and plan_clean(f, 1) is not None


@pytest.mark.parametrize("bad", [0, -1, True, "2"])
def test_plan_refuses_bad_retention(bad: object) -> None:
    with pytest.raises(ConfigError, match="retain_commits must be an integer >= 1"):
        plan_clean([], bad)  # type: ignore[arg-type]


def test_avro_instants_round_trip_with_hudi_field_names() -> None:
    plan = avro_meta.CleanerPlan(T[3], "replacecommit", {"p=a": ["p=a/x_1-1-1_" + T[0] + ".parquet"]}, T[4])
    data = avro_meta.encode_cleaner_plan(plan, root_uri="gs://b/t")
    assert data.startswith(b"Obj\x01")  # an Avro object container file, as Hudi's Java writes
    reader = fastavro.reader(io.BytesIO(data))
    assert (
        reader.writer_schema is not None
        and reader.writer_schema["name"] == "org.apache.hudi.avro.model.HoodieCleanerPlan"
    )
    [rec] = list(reader)
    assert set(rec) == {
        "earliestInstantToRetain",
        "policy",
        "filesToBeDeletedPerPartition",
        "version",
        "filePathsToBeDeletedPerPartition",
        "partitionsToBeDeleted",
    }
    assert (
        rec["filePathsToBeDeletedPerPartition"]["p=a"][0]["filePath"]
        == f"gs://b/t/p=a/x_1-1-1_{T[0]}.parquet"
    )
    back = avro_meta.decode_cleaner_plan(data, root_uri="gs://b/t")
    assert back.files == plan.files and back.earliest_retained == T[3]
    meta = avro_meta.CleanMetadata(T[5], 12, T[3], T[4], [avro_meta.CleanPartition("p=a", ["x.parquet"])])
    [m] = list(fastavro.reader(io.BytesIO(avro_meta.encode_clean_metadata(meta))))
    assert set(m) == {
        "policy",
        "startCleanTime",
        "timeTakenInMillis",
        "totalFilesDeleted",
        "earliestCommitToRetain",
        "lastCompletedCommitTimestamp",
        "partitionMetadata",
        "version",
        "bootstrapPartitionMetadata",
    }
    assert m["totalFilesDeleted"] == 1 and m["partitionMetadata"]["p=a"]["successDeleteFiles"] == [
        "x.parquet"
    ]
    assert avro_meta.decode_clean_metadata(avro_meta.encode_clean_metadata(meta)) == meta


WRITES = [
    Write(files={"a": 2, "b": 1}),
    Write(files={"a": 1}),
    Write(Operation.INSERT_OVERWRITE, files={"a": 1}),
    Write(files={"c": 1}),
    Write(Operation.INSERT_OVERWRITE_TABLE, files={"d": 1}),
    Write(files={"d": 1}),
]


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _run_clean(root: Path, n: int, **kw: object) -> CleanReport:
    async def main() -> CleanReport:
        store, dest = open_location(str(root))
        try:
            return await clean(store, dest, retain_commits=n, **kw)  # type: ignore[arg-type]
        finally:
            await store.aclose()

    return anyio.run(main)


def _expected_deleted(gen: GeneratedTable, earliest: str) -> set[str]:
    """What a clean keeping from ``earliest`` (E) on deletes, from the generator's facts: every
    version of the groups replaced at or before E; of every other group, Hudi's
    ``KEEP_LATEST_COMMITS`` loop: each version older than E that is neither the group's newest
    version nor its newest version older than E."""
    out = {rel for t in gen.completed if t <= earliest for rel in gen.replaced_by_instant[t]}
    for vs in gen.versions.values():
        if any(rel in out for _, rel in vs):
            continue
        last = vs[-1][0]
        before = [t for t, _ in vs if t < earliest]
        last_before = before[-1] if before else None
        out |= {rel for t, rel in vs if t < earliest and t not in (last, last_before)}
    return out


def _clean_files(root: Path) -> set[str]:
    return {p.name for p in (root / ".hoodie").iterdir() if ".clean" in p.name}


def test_clean_deletes_exactly_the_planned_files_and_records_a_clean_instant(tmp_path: Path) -> None:
    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")
    before = _listing(root)
    dry = _run_clean(root, 2, dry_run=True)
    assert _listing(root) == before and dry.instant is None
    report = _run_clean(root, 2)
    assert report.earliest_retained == gen.completed[-2]
    doomed = _expected_deleted(gen, gen.completed[-2])
    assert len(doomed) == 6 and sorted(report.files) == sorted(doomed) == sorted(dry.files)
    t = report.instant
    assert t is not None and t > gen.instants[-1]
    assert _listing(root) == (before - doomed) | {
        f".hoodie/{t}.clean{s}" for s in ("", ".inflight", ".requested")
    }
    assert not (root / "_temporary").exists() or not any((root / "_temporary").iterdir())
    again = _run_clean(root, 2)
    assert again.instant is None and again.files == [] and not again.resumed
    info = open_timeline(str(root)).instants()[-1]
    assert (info.time, info.action, info.state, info.files) == (t, "clean", "completed", 6)


CHILD = textwrap.dedent(
    """
    import os, signal, sys, anyio
    from amcommit.committer.config import CommitterConfig
    from amcommit.store.schemes import open_location
    from amcommit.table.commit.clean import clean

    kill_at = int(sys.argv[2])

    def progress(p):
        if p.done == kill_at and p.phase in ("start", "progress") and (kill_at > 0 or p.phase == "start"):
            os.kill(os.getpid(), signal.SIGKILL)

    async def main():
        store, dest = open_location(sys.argv[1])
        config = CommitterConfig(io_threads=1)
        await clean(store, dest, retain_commits=2, config=config, progress=progress)

    anyio.run(main)
    """
)


@pytest.mark.parametrize(
    ("table", "kill_at"),
    [
        ("overwrites", 0),
        ("overwrites", 1),
        ("overwrites", 4),
        ("versions", 0),
        ("versions", 7),
        ("versions", 14),
    ],
)
def test_clean_killed_between_deletes_completes_when_run_again(
    tmp_path: Path, table: str, kill_at: int
) -> None:
    """SIGKILL after ``kill_at`` deletes (io_threads=1), then clean again: the pending clean
    is completed from its plan, exactly. ``versions``: the table of rewritten file groups
    (tests/table/test_file_versions.py), 14 files to delete (replaced groups' versions and
    older versions of rewritten groups); killed before the first, mid-way, after the last."""
    gen = generate(WRITES) if table == "overwrites" else generate(VERSIONED)
    root = write_local(gen, tmp_path / "t")
    before = _listing(root)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(kill_at)], env=env, timeout=60)
    assert proc.returncode == -9
    doomed = _expected_deleted(gen, gen.completed[-2])
    mid = _listing(root)
    pending = {n for n in _clean_files(root)}
    assert len(pending) == 2 and all(n.endswith((".clean.requested", ".clean.inflight")) for n in pending)
    assert len(before - mid) == kill_at and (before - mid) <= doomed
    # readers already refuse what the pending clean is deleting
    with pytest.raises(CleanedPast):
        open_timeline(str(root)).snapshot(gen.completed[0])
    report = _run_clean(
        root, 2, config=CommitterConfig(lock_wait=5.0)
    )  # the dead clean's lock: taken back at once
    t = pending.pop().split(".")[0]
    assert report.resumed == [t] and report.instant is None
    assert sorted(report.files) == sorted(doomed) and report.already_gone == kill_at
    assert _listing(root) == (before - doomed) | {
        f".hoodie/{t}.clean{s}" for s in ("", ".inflight", ".requested")
    }
    assert open_timeline(str(root)).instants()[-1].state == "completed"


def test_clean_after_commit_follows_the_option(tmp_path: Path) -> None:
    gen = generate(WRITES)
    root = write_local(gen, tmp_path / "t")

    async def main(config: CommitterConfig) -> CleanReport | None:
        store, dest = open_location(str(root))
        try:
            return await clean_after_commit(store, dest, config)
        finally:
            await store.aclose()

    assert anyio.run(main, CommitterConfig()) is None
    assert not _clean_files(root)
    config = TableConfig.from_mapping({"clean_retain_commits": "1"})
    report = anyio.run(main, config)
    assert report is not None and report.instant is not None and report.earliest_retained == gen.completed[-1]
    tl = open_timeline(str(root))
    assert [f.path for f in tl.snapshot(gen.completed[-1])] == [f.path for f in tl.snapshot()]
    with pytest.raises(CleanedPast, match=f"earliest instant still readable is {gen.completed[-1]}"):
        tl.changes(gen.completed[-3], gen.completed[-1])


def _plan_files(root: Path, t: str, state: str) -> dict[str, list[str]]:
    data = (root / ".hoodie" / f"{t}.clean.{state}").read_bytes()
    return avro_meta.decode_cleaner_plan(data, root_uri=f"file:{root}").files


def test_clean_of_rewritten_file_groups_keeps_what_retained_reads_need(tmp_path: Path) -> None:
    """On the table of rewritten file groups: a clean keeping 4 commits (E = I5) and then 2
    (E = I7) deletes exactly Hudi's KEEP_LATEST_COMMITS set (the Avro plan lists exactly those
    files, the second clean none the first deleted); time travel and incremental reads within
    retention still read the model (amcommit and hudi-rs), reads before E are refused."""
    import hudi

    from tests.table.test_file_versions import hudi_read, incremental

    gen = generate(VERSIONED)
    root = write_local(gen, tmp_path / "t")
    done = gen.completed
    before = _listing(root)
    first = _run_clean(root, 4)
    e1 = done[-4]
    assert first.earliest_retained == e1 and first.instant is not None
    doomed1 = _expected_deleted(gen, e1)
    # Hudi keeps the newest version older than E: g3's first version (its only other one is at E)
    g3 = next(vs for vs in gen.versions.values() if [t for t, _ in vs] == [done[0], e1])
    assert g3[0][1] not in doomed1 and len(doomed1) == 9
    assert sorted(first.files) == sorted(doomed1) and first.already_gone == 0
    for state in ("requested", "inflight"):
        assert sorted(r for rs in _plan_files(root, first.instant, state).values() for r in rs) == sorted(
            doomed1
        )
    second = _run_clean(root, 2)
    e2 = done[-2]
    doomed2 = _expected_deleted(gen, e2)
    assert doomed1 < doomed2 and len(doomed2) == 14
    assert sorted(second.files) == sorted(doomed2 - doomed1) and second.already_gone == 0
    assert second.instant is not None
    planned = _plan_files(root, second.instant, "requested")
    assert sorted(r for rs in planned.values() for r in rs) == sorted(doomed2 - doomed1)
    assert _listing(root) == (before - doomed2) | {
        f".hoodie/{t}.clean{s}"
        for t in (first.instant, second.instant)
        for s in ("", ".inflight", ".requested")
    }
    tl = open_timeline(str(root))
    table = hudi.HudiTable(str(root))
    kept = [t for t in done if t >= e2]
    for t in kept:
        assert read_files(root, tl.snapshot(t), None, None) == model_rows(gen.snapshot(t)), t
        assert hudi_read(table, hudi.HudiReadOptions().with_as_of_timestamp(t)) == model_rows(gen.snapshot(t))
    for a, b in itertools.combinations(kept, 2):
        assert read_files(root, tl.changes(a, b).visible(), a, b) == model_rows(gen.incremental(a, b))
        assert hudi_read(table, incremental(a, b)) == model_rows(gen.incremental(a, b))
    for t in done:
        if t < e2:
            with pytest.raises(CleanedPast):
                tl.snapshot(t)
