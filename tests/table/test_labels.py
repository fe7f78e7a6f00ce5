"""Write labels (issue 14): each (app_id, version) commits once into a table.

Engine backends (local files, faulty local, Azurite, fake-gcs-server): exact listings, the
three extraMetadata keys, the report; pure parts (validation, newest-first scan cost).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from amcommit.api import commit_job, setup_job
from amcommit.committer.config import CommitterConfig
from amcommit.committer.report import JobReport
from amcommit.errors import ConfigError
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.table.commit.labels import (
    EXTRA_APP,
    EXTRA_LABEL,
    EXTRA_VERSION,
    Label,
    committed_by,
    find_last,
    label_metadata,
    label_of,
    last_committed,
)
from amcommit.table.format.model import Action, Instant, Operation, State, decode_commit_metadata
from amcommit.table.format.naming import HOODIE_DIR
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import load_timeline, snapshot
from amcommit.table.timeline.reader import Timeline
from amcommit.table.write.task import begin_write
from tests.backends import StoreUnderTest
from tests.table.writehelpers import SCHEMA, SPEC, keys, listing, rows, write_tasks

BACKENDS = ["backend_local", "backend_blob_azurite", "backend_gcs_fake"]
"""The issue's three stores (the faulty and double variants add time, not label coverage)."""


@pytest.fixture(params=BACKENDS)
def label_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


FAST = TableConfig(lock_ttl=5.0, lock_wait=20.0, writer_ttl=3.0)


async def labelled(
    store: Store,
    dest: str,
    data: list[dict[str, Any]],
    label: Label | None,
    *,
    at_commit: bool = False,
    op: Operation = Operation.INSERT,
    config: CommitterConfig = FAST,
) -> tuple[str, JobReport]:
    """One labelled write: the label given to begin_write, or (``at_commit``) to commit_job."""
    from amcommit.table.format.schema import avro_schema

    w = await begin_write(
        store,
        dest,
        operation=op,
        spec=SPEC,
        avro_schema=avro_schema(SCHEMA, SPEC.name),
        config=config,
        label=None if at_commit else label,
    )
    await write_tasks(store, w, data)
    report = await commit_job(store, dest, w.instant, config=config, label=label if at_commit else None)
    return w.instant, report


async def _rows(store: Store, dest: str) -> list[tuple[Any, ...]]:
    """Every row of the snapshot, read with pyarrow from the files our planner lists."""
    import io

    import pyarrow.parquet as pq

    _, commits = await load_timeline(store, dest)
    out: list[tuple[Any, ...]] = []
    for f in snapshot(commits):
        t = pq.read_table(io.BytesIO(await store.get(join(dest, f.path))))
        out.extend((r["id"], r["p"], r["v"]) for r in t.to_pylist())
    return sorted(out)


# -- pure parts ---------------------------------------------------------------------------


def test_label_validation_and_metadata() -> None:
    label = Label("query-1", 7)
    assert label.text() == "query-1:7"
    extra = label_metadata(label)
    assert extra == {EXTRA_LABEL: "query-1:7", EXTRA_APP: "query-1", EXTRA_VERSION: "7"}
    assert label_of(extra) == label
    assert label_of({"schema": "{}"}) is None
    assert label_of({EXTRA_APP: "a", EXTRA_VERSION: "x"}) is None
    assert Label("a:b", 0).text() == "a:b:0"
    for app, version in [("", 1), ("x" * 257, 1), ("tab\there", 1), ("ok", -1), ("ok", True)]:
        with pytest.raises(ConfigError, match="invalid label"):
            Label(app, version)  # type: ignore[arg-type]


async def test_scan_stops_at_the_apps_newest_instant() -> None:
    """Newest first; metadata read only down to the app's newest instant."""
    apps = ["a", "b", "a", "c", "b", "c"]  # oldest first
    instants = [Instant(f"2026010100000{i}000", Action.COMMIT.value, State.COMPLETED) for i in range(6)]
    meta = {
        i.time: label_metadata(Label(app, n)) for n, (i, app) in enumerate(zip(instants, apps, strict=True))
    }
    read: list[str] = []

    async def read_extra(i: Instant) -> Mapping[str, str]:
        read.append(i.time)
        return meta[i.time]

    newest = instants[::-1]
    assert await find_last(newest, "b", read_extra) == (4, instants[4].time)
    assert read == [instants[5].time, instants[4].time]
    read.clear()
    assert await find_last(newest, "a", read_extra) == (2, instants[2].time)
    assert len(read) == 4
    read.clear()
    assert await find_last(newest, "zzz", read_extra) is None
    assert len(read) == 6  # an app that never committed reads every instant once


# -- engine backends ------------------------------------------------------------------------


async def test_same_label_twice_commits_once(label_sut: StoreUnderTest) -> None:
    store, dest = label_sut.store, join(label_sut.base, "tbl")
    label = Label("app-1", 0)
    assert await committed_by(store, dest, label) is None  # no table yet
    first, r1 = await labelled(store, dest, rows(0, 6), label)
    assert r1.success and r1.label == "app-1:0" and r1.skipped_label is None and r1.files > 0
    before = await listing(store, dest)
    second, r2 = await labelled(store, dest, rows(100, 4, tag="dup"), label)
    assert second > first
    assert r2.success and r2.skipped_label == first and r2.instant == second
    assert r2.label == "app-1:0" and r2.files == 0 and r2.filenames == []
    assert await listing(store, dest) == before  # the skipped write's files, instant, staging: gone
    assert await _rows(store, dest) == keys(rows(0, 6))
    assert await committed_by(store, dest, label) == first
    assert await last_committed(store, dest, "app-1") == (0, first)
    meta = decode_commit_metadata(await store.get(join(dest, HOODIE_DIR, f"{first}.commit")))
    assert {k: meta.extra_metadata[k] for k in (EXTRA_LABEL, EXTRA_APP, EXTRA_VERSION)} == label_metadata(
        label
    )
    # committing the skipped instant again says the same
    r3 = await commit_job(store, dest, second, config=FAST, label=label)
    assert (r3.success, r3.skipped_label, r3.files) == (True, first, 0)
    assert await listing(store, dest) == before
    # and the committed one again: already committed, with its label
    r4 = await commit_job(store, dest, first, config=FAST)
    assert r4.already_committed and r4.label == "app-1:0"
    timeline = await (await Timeline.open(store, dest)).instants()
    assert [(i.time, i.label) for i in timeline if i.state == "completed"] == [(first, "app-1:0")]


async def test_versions_in_order_and_apps_apart(backend_local: StoreUnderTest) -> None:
    """Store-independent rules (the three stores run the same code via the tests above)."""
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    t5, r = await labelled(store, dest, rows(0, 4), Label("a", 5))
    assert r.skipped_label is None
    _, r = await labelled(store, dest, rows(10, 4), Label("a", 3), at_commit=True)  # lower: skipped
    assert r.skipped_label == t5 and r.label == "a:3"
    tb, r = await labelled(store, dest, rows(20, 4), Label("b", 3))  # another app: its own versions
    assert r.skipped_label is None
    t6, r = await labelled(store, dest, rows(30, 4), Label("a", 6), at_commit=True)
    assert r.skipped_label is None and r.label == "a:6"
    _, r = await labelled(store, dest, rows(40, 4), Label("b", 3))
    assert r.skipped_label == tb
    t_none, r = await labelled(store, dest, rows(50, 2), None)  # unlabelled writes are never skipped
    assert r.label is None and r.skipped_label is None
    assert await last_committed(store, dest, "a") == (6, t6)
    assert await last_committed(store, dest, "b") == (3, tb)
    assert await last_committed(store, dest, "c") is None
    assert await _rows(store, dest) == keys(rows(0, 4) + rows(20, 4) + rows(30, 4) + rows(50, 2))
    labels = {
        i.time: i.label for i in await (await Timeline.open(store, dest)).instants() if i.state == "completed"
    }
    assert labels == {t5: "a:5", tb: "b:3", t6: "a:6", t_none: None}


async def test_label_override_at_commit_and_refusals(backend_local: StoreUnderTest) -> None:
    store, dest = backend_local.store, join(backend_local.base, "tbl")
    t1, _ = await labelled(store, dest, rows(0, 3), Label("q", 1))
    # begun with label q:1 (committed), committed with q:2: the commit's label wins
    from amcommit.table.format.schema import avro_schema

    w = await begin_write(
        store, dest, operation=Operation.INSERT, avro_schema=avro_schema(SCHEMA, "t1"), label=Label("q", 1)
    )
    await write_tasks(store, w, rows(10, 3))
    r = await commit_job(store, dest, w.instant, config=FAST, label=Label("q", 2))
    assert r.skipped_label is None and r.label == "q:2"
    assert await last_committed(store, dest, "q") == (2, w.instant)
    plain = join(backend_local.base, "plain")
    await setup_job(store, plain, "job1")
    with pytest.raises(ConfigError, match="not a Hudi table"):
        await commit_job(store, plain, "job1", label=Label("q", 3))
    with pytest.raises(ConfigError, match="label must be"):
        await begin_write(store, dest, operation=Operation.INSERT, label=("q", 3))  # type: ignore[arg-type]
    assert t1 < w.instant


async def test_concurrent_commits_of_one_label(label_sut: StoreUnderTest) -> None:
    """Two writers with the same label begin and commit at once: one commits, one is skipped."""
    store, dest = label_sut.store, join(label_sut.base, "tbl")
    await labelled(store, dest, rows(0, 2), Label("other", 0))  # the table exists
    label = Label("race", 4)
    reports: list[tuple[str, JobReport]] = []

    async def one(n: int) -> None:
        reports.append(await labelled(store, dest, rows(100 * (n + 1), 3, tag=str(n)), label))

    async with anyio.create_task_group() as tg:
        for n in range(2):
            tg.start_soon(one, n)
    committed = [(t, r) for t, r in reports if r.skipped_label is None]
    skipped = [(t, r) for t, r in reports if r.skipped_label is not None]
    assert len(committed) == 1 and len(skipped) == 1
    winner = committed[0][0]
    assert skipped[0][1].skipped_label == winner
    n = 0 if committed[0][1].files and (100, "a", "0") in keys(rows(100, 3, tag="0")) else 1
    got = await _rows(store, dest)
    assert got in (keys(rows(0, 2) + rows(100, 3, tag="0")), keys(rows(0, 2) + rows(200, 3, tag="1"))), n
    assert not [
        p for p in await listing(store, dest) if p.startswith((".hoodie/.aux/amcommit/2", ".hoodie/.temp/2"))
    ]


async def test_timeline_and_changes_show_labels(
    backend_local: StoreUnderTest, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`amcommit timeline` shows each instant's label; a downstream job follows the stream
    with `amcommit changes --since <last seen> --json` and gets each batch once, labelled."""
    import json
    import os

    from amcommit.cli import main

    store, dest = backend_local.store, join(backend_local.base, "tbl")
    t0, _ = await labelled(store, dest, rows(0, 2), Label("q", 0))
    await labelled(store, dest, rows(5, 2), Label("q", 0))  # replay: skipped
    t1, _ = await labelled(store, dest, rows(10, 2), Label("q", 1))
    uri = os.path.join(tmp_path, "store root", dest)
    assert await anyio.to_thread.run_sync(main, ["timeline", uri]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [(ln.split()[0], ln.split()[-1]) for ln in lines[1:]] == [(t0, "q:0"), (t1, "q:1")]
    seen: list[tuple[str, str | None, int]] = []
    since = t0
    for _ in range(2):
        assert await anyio.to_thread.run_sync(main, ["changes", uri, "--since", since, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        for i in data["instants"]:
            seen.append(
                (i["time"], i["label"], sum(f["rows"] for f in data["added"] if f["instant"] == i["time"]))
            )
            since = i["time"]
    assert seen == [(t1, "q:1", 2)]


async def test_pending_of_finds_a_published_write_left_staged(
    label_sut: StoreUnderTest,
) -> None:
    """A write whose label was given to commit_job only, published and then cut short in
    its cleanup (staging folder back in place, no commit plan in it: on stores with atomic
    renames the plan *became* the completed instant): pending_of reads the label from the
    completed instant, so ``recover`` finishes that cleanup; another app's is not touched."""
    from amcommit.table.commit.labels import pending_of, recover
    from amcommit.table.write.staging import table_layout

    store, dest = label_sut.store, join(label_sut.base, "t")
    label = Label("q-left", 1)
    from amcommit.table.format.schema import avro_schema

    w = await begin_write(
        store,
        dest,
        operation=Operation.INSERT,
        spec=SPEC,
        avro_schema=avro_schema(SCHEMA, SPEC.name),
        config=FAST,
    )
    marker = await store.get(table_layout(dest, w.instant).job_marker)
    await write_tasks(store, w, rows(0, 4))
    report = await commit_job(store, dest, w.instant, config=FAST, label=label)
    assert report.success and report.label == label.text()
    done = await listing(store, dest)
    # the cleanup cut short: the staging folder (job marker) is still there
    await store.put(table_layout(dest, w.instant).job_marker, marker)
    assert await pending_of(store, dest, "another-app", config=FAST) == []
    assert await pending_of(store, dest, label.app_id, config=FAST) == [w.instant]
    assert await recover(store, dest, label.app_id, config=FAST) == [w.instant]
    assert await listing(store, dest) == done
    assert await pending_of(store, dest, label.app_id, config=FAST) == []
