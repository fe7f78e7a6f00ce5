"""Run one table scenario of the fault matrix on one backend (see tests/matrix/table_oracle.py).

Setup: the old table's objects are put directly; the scenario's write is begun with
``begin_write`` (the real API: instant, marker, heartbeat, ``.requested``/inflight files) and
its tasks committed. Then the fault (a commit child SIGKILLed at a stage of the table commit,
a permanent store error, a dead writer taken over) and what follows. Checks:

* after the fault, before any recovery: hudi-rs (where it reaches the backend) sees the
  whole instant or nothing: snapshot = the rows before or after, incremental read of
  (old instant, ∞) = nothing or exactly the instant's rows, and the two agree;
* after the resume / abort / takeover: the table's exact objects and bytes (data files,
  ``.hoodie/`` files, the completed instant's metadata, partition metadata; nothing left
  under ``.hoodie/.temp``, ``.hoodie/.aux/amcommit`` or ``.hoodie/.heartbeat``), the SDK's listing (names, sizes), the
  files next to the table untouched, and hudi-rs's snapshot and incremental rows.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from amcommit import errors
from amcommit.api import abort_job, commit_job
from amcommit.committer.lock import held_by, unfinished_journal
from amcommit.committer.task import commit_task, setup_task
from amcommit.errors import AmcommitError, PermissionDenied
from amcommit.paths import join, relative_to
from amcommit.table.commit.rollback import rollback_instant
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import STAGING_DIR
from amcommit.table.format.properties import encode_properties, new_properties
from amcommit.table.format.schema import avro_schema
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import completed_instant
from amcommit.table.write.direct import commit_direct_task, write_in_place
from amcommit.table.write.task import TableSpec, begin_write
from amcommit.testing.faults import FaultRule, FaultyStore
from tests.matrix import table_oracle as to
from tests.matrix.oracle import Job
from tests.matrix.runner import (
    CONFIG,
    Cell,
    StallingStore,
    check_outside,
    failing_store,
    files_below,
    put_all,
    run_child,
)
from tests.matrix.scenarios import OUTSIDE

SPEC = TableSpec(to.TABLE_NAME, partition_fields=("p",))
AVRO = avro_schema(to.SCHEMA, to.TABLE_NAME)
PROPERTIES = encode_properties(new_properties(to.TABLE_NAME, partition_fields=("p",), create_schema=AVRO))
OLD = to.old_table(AVRO, PROPERTIES)

HUDI_UNREACHABLE = {
    "dfs": "hudi-rs cannot read from the ADLS Gen2 test server: its storage layer (object_store's "
    "Azure client) lists and reads through the Blob API (List Blobs, XML), which the server does "
    "not implement (DFS API only; probed: 403 on the Blob list request)",
    "gcs-double": "hudi-rs cannot read from the GCS double: object_store reads objects through "
    "GCS's XML API (GET /<bucket>/<object>), the double serves the JSON API only (probed: 404)",
}
"""Backends whose tables hudi-rs cannot read; the exact-object checks still run there."""


@dataclass
class Write:
    """A begun write of the scenario: its instant and the base files its tasks wrote."""

    job: to.TableJob
    instant: str
    files: dict[str, tuple[bytes, int]]

    @property
    def data(self) -> dict[str, bytes]:
        return {rel: d for rel, (d, _) in self.files.items()}


def config(**more: Any) -> TableConfig:
    return TableConfig(**(CONFIG | more))  # type: ignore[arg-type]


async def setup_table(cell: Cell) -> None:
    await put_all(
        cell.store,
        {join(cell.dest, rel): d for rel, d in OLD.items()}
        | {join(cell.outside, rel): d for rel, d in OUTSIDE.items()},
    )


async def begin(cell: Cell, job: to.TableJob, nth: int = 1, **more: Any) -> Write:
    """``begin_write`` + the tasks (each committed with its row counts); ``nth``: the
    scenario's n-th write (file ids ``nth``*0x100 + k: file groups never collide).

    Direct writes (the scenario's ``table_commit``, the default): each task attempt writes
    its files in place under Hudi's markers (``write_in_place``) and commits with
    ``commit_direct_task``; before them a loser attempt (attempt 9 of task 0) wrote one file
    in the first task's first partition and never committed (a failed or speculative attempt
    whose file the job commit must delete). Staged: files put into the attempt directories,
    ``commit_task``."""
    s = cell.store
    w = await begin_write(
        s,
        cell.dest,
        operation=Operation(to.OPERATION_TYPE[job.operation]),
        spec=SPEC,
        avro_schema=AVRO,
        config=config(**more),
    )
    every: dict[str, tuple[bytes, int]] = {}
    tasks = to.task_files(w.instant, job, first_id=0x100 * nth)
    direct = cell.sc.table_commit == "direct"
    if direct:
        part = to.partition_of(job.tasks[0][0])
        loser = f"{to.file_id(0x100 * nth + 0xFF)}_0-0-9_{w.instant}.parquet"
        data = to.parquet([r for r in job.tasks[0] if to.partition_of(r) == part], w.instant, part, loser, 0)
        assert await write_in_place(s, cell.dest, w.instant, f"{part}/{loser}", data) is not None
    for t, files in enumerate(tasks):
        ta = f"attempt_{w.instant}_m_{t:06d}_0"
        task = f"task_{w.instant}_m_{t:06d}"
        rows = {rel: n for rel, (_, n) in files.items()}
        if direct:
            placed = []
            for rel, (d, n) in sorted(files.items()):
                info = await write_in_place(s, cell.dest, w.instant, rel, d)
                assert info is not None
                placed.append((rel, info.size, info.etag, n))
            await commit_direct_task(s, w.layout, task, ta, placed)
        else:
            work = await setup_task(s, w.layout, ta)
            await put_all(s, {join(work, rel): d for rel, (d, _) in files.items()})
            await commit_task(s, w.layout, task, ta, extra_data={"hudi.rows": json.dumps(rows)})
        every |= files
    return Write(job, w.instant, every)


# -- hudi-rs ------------------------------------------------------------------------------------
def hudi_location(cell: Cell) -> tuple[str, dict[str, str]] | None:
    """hudi-rs's URI and storage options for the table (None: hudi-rs cannot reach it)."""
    info = cell.info
    if cell.backend == "local":
        return os.path.join(info["root"], cell.dest), {}
    if cell.backend == "blob":
        return f"az://{info['container']}/{cell.dest}", {
            "azure_storage_account_name": info["account"],
            "azure_storage_account_key": info["account_key"],
            "azure_storage_endpoint": info["endpoint"],
            "allow_http": "true",
        }
    if cell.backend == "gcs-fake":
        return f"gs://{info['bucket']}/{cell.dest}", {
            "google_base_url": info["endpoint"],
            "google_skip_signature": "true",
            "allow_http": "true",
        }
    return None


def hudi_view(cell: Cell, since: str) -> tuple[list[to.Row], list[to.Row]] | None:
    """(snapshot rows, incremental rows of (since, ∞)) as hudi-rs reads them (one table
    object: it loads the timeline once)."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    where = hudi_location(cell)
    if where is None:
        return None
    uri, opts = where
    table = HudiTableBuilder.from_base_uri(uri).with_storage_options(opts).build()

    def rows(options: Any) -> list[to.Row]:
        return sorted((r["id"], r["p"], r["v"]) for b in table.read(options) for r in b.to_pylist())

    incremental = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_start_timestamp(since)
    return rows(HudiReadOptions()), rows(incremental)


async def amcommit_view(cell: Cell, since: str) -> tuple[list[to.Row], list[to.Row]]:
    """(snapshot rows, incremental rows of (since, ∞)) as amcommit's reader plans them
    (:class:`~amcommit.table.timeline.reader.Timeline`: the completed instants' metadata, never a
    listing of the partitions), each planned file read with pyarrow: for the backends hudi-rs
    cannot reach (:data:`HUDI_UNREACHABLE`)."""
    import io

    import pyarrow.parquet as pq

    from amcommit.table.timeline.reader import Timeline

    timeline = Timeline(cell.store, cell.dest, config=config())

    async def rows(files: Any, after: str | None = None) -> list[to.Row]:
        out: list[to.Row] = []
        for f in files:
            table = pq.read_table(io.BytesIO(await cell.store.get(join(cell.dest, f.path))))
            out += [
                (r["id"], r["p"], r["v"])
                for r in table.to_pylist()
                if after is None or r["_hoodie_commit_time"] > after
            ]
        return sorted(out)

    return await rows(await timeline.snapshot()), await rows((await timeline.changes(since)).visible(), since)


async def table_view(cell: Cell, since: str) -> tuple[list[to.Row], list[to.Row]]:
    """hudi-rs's view of the table, or amcommit's reader's where hudi-rs cannot reach it."""
    seen = hudi_view(cell, since)
    return seen if seen is not None else await amcommit_view(cell, since)


async def check_all_or_nothing(cell: Cell, before: list[to.Row], w: Write) -> None:
    """hudi-rs (amcommit's reader where hudi-rs cannot reach the backend) sees the whole
    instant of ``w`` or nothing of it."""
    snap, inc = await table_view(cell, to.OLD_INSTANT)
    after = to.rows_after(w.job, before)
    assert snap in (before, after), f"snapshot is neither before nor after the instant: {snap}"
    assert inc == (to.new_rows(w.job) if snap == after else []), f"incremental read: {inc}"


# -- exact objects ----------------------------------------------------------------------------
async def table_objects(cell: Cell) -> dict[str, bytes]:
    return await files_below(cell.store, cell.dest)


def _diff(got: dict[str, bytes], want: dict[str, bytes | None]) -> str:
    lost = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(got) & set(want) if want[k] is not None and got[k] != want[k])
    return "" if not (lost or extra or wrong) else f"lost {lost}, extra {extra}, wrong bytes {wrong}"


def _young_loser_marker(name: str, got: dict[str, bytes], done: set[str]) -> bool:
    """``name`` is a direct marker under a committed instant's marker folder whose file is
    not in the table (a loser's, deleted by the commit): a per-file marker
    (``<file>.marker.<IO>``), or an attempt's ``MARKERS<n>`` file every line of which names
    such a file, or the folder's ``MARKERS.type`` beside such a kept ``MARKERS<n>`` file."""
    if not name.startswith(to.TEMP):
        return False
    instant, _, rel = name.removeprefix(to.TEMP).partition("/")
    if instant not in done:
        return False
    if ".marker." in rel and "/" in rel:
        return rel[: rel.index(".marker.")] not in got
    if rel.startswith("MARKERS") and rel != "MARKERS.type":
        lines = [ln for ln in got[name].decode().split("\n") if ln]
        return bool(lines) and all(".marker." in ln and ln[: ln.index(".marker.")] not in got for ln in lines)
    if rel == "MARKERS.type":
        folder = f"{to.TEMP}{instant}/"
        return any(
            k.startswith(folder + "MARKERS") and k != name and _young_loser_marker(k, got, done) for k in got
        )
    return False


async def check_table(
    cell: Cell, base: dict[str, bytes], committed: list[Write], rows: list[to.Row], hudi: bool = True
) -> None:
    """The table holds exactly ``base`` plus each of ``committed`` (in order), hudi-rs reads
    ``rows`` (if ``hudi``); the outside is untouched, the SDK lists the same names and sizes."""
    want: dict[str, bytes | None] = dict(base)
    state = dict(base)
    metas = []
    for w in committed:
        metas.append((w, to.expected_metadata(state, w.instant, w.job, w.files, AVRO)))
        want = to.expected_committed(want, w.instant, w.job, w.data)  # type: ignore[arg-type]
        state |= w.data
    got = await table_objects(cell)
    # a direct write's commit keeps the markers of losers whose files are gone while they
    # are young (writer_ttl: an upload of theirs may still land; a later sweep removes
    # them): allowed only under a committed instant's marker folder, never a winner's
    done = {w.instant for w in committed}
    young = [k for k in got if _young_loser_marker(k, got, done)]
    sizes = {rel: len(d) for rel, d in got.items()}
    got = {k: v for k, v in got.items() if k not in young}
    problem = _diff(got, want)
    assert not problem, problem
    for w, meta in metas:
        name = f".hoodie/{w.instant}.{to.ACTION[w.job.operation]}"
        assert to.actual_metadata(got[name]) == meta, f"{name}: metadata differs from the oracle's"
    for rel, data in want.items():
        if data is None and rel.endswith(".hoodie_partition_metadata"):
            creator = next(
                w for w in committed if any(f.startswith(rel.rpartition("/")[0] + "/") for f in w.files)
            )
            assert to.partition_metadata_lines(got[rel]) == to.partition_metadata_lines(
                to.partition_metadata_text(creator.instant).encode()
            ), f"{rel}: {got[rel]!r}"
    await check_outside(cell)
    if cell.sdk_list is not None:
        import anyio

        listed = await anyio.to_thread.run_sync(cell.sdk_list, cell.dest)
        sdk = {relative_to(p, cell.dest): size for p, size in listed.items()}
        assert sdk == sizes, "the SDK lists other names or sizes"
    if hudi:
        snap, inc = await table_view(cell, to.OLD_INSTANT)
        assert snap == rows, f"snapshot {snap} != {rows}"
        want_inc = sorted(r for w in committed for r in to.new_rows(w.job) if r in rows)
        assert inc == want_inc, f"incremental {inc} != {want_inc}"


# -- scenarios ------------------------------------------------------------------------------------
def _child_job(w: Write) -> Job:
    return Job(w.instant, "append", ())


def _ttl(cell: Cell) -> dict[str, Any]:
    ttl = cell.sc.fault.lock_ttl
    return {} if ttl is None else {"lock_ttl": ttl, "writer_ttl": ttl}


async def run_table_kill(cell: Cell) -> None:
    f, sc = cell.sc.fault, cell.sc
    w = await begin(cell, sc.tables[0])
    run_child(cell, "commit", _child_job(w), cell.fill(f.kill))
    await check_all_or_nothing(cell, to.OLD_ROWS, w)
    # The end state is checked object by object against the oracle; hudi-rs reads it again on
    # local files only (on emulators a read costs ~0.2 s: the no-fault, failed and takeover
    # scenarios read end states that are the same objects up to the instant's time)
    hudi = cell.backend == "local" or cell.backend in HUDI_UNREACHABLE
    if sc.then == "resume":
        report = await commit_job(cell.store, cell.dest, w.instant, config=config())
        assert report.success and report.instant == w.instant
        await check_table(cell, OLD, [w], to.rows_after(w.job, to.OLD_ROWS), hudi=hudi)
        return
    for again in (False, True):  # abort, and abort again (idempotent: same objects)
        await abort_job(cell.store, cell.dest, w.instant, config=config())
        if f.past_no_return:
            await check_table(cell, OLD, [w], to.rows_after(w.job, to.OLD_ROWS), hudi=hudi and not again)
        else:
            await check_table(cell, OLD, [], to.OLD_ROWS, hudi=hudi and not again)


WAIT_LOGGERS = ("amcommit.lock", "amcommit.table.commit.table_commit")
"""The loggers of the two waits of a table commit: for the table's lock (its holder alive, or
its lock not yet unrenewed for its ttl) and for an earlier instant whose writer is alive."""


@contextmanager
def waits_logged() -> Iterator[list[str]]:
    """The WARNING lines saying that a commit waits (:data:`WAIT_LOGGERS`), as they come."""
    seen: list[str] = []

    class Waits(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if " waits for " in record.getMessage():
                seen.append(record.getMessage())

    handler = Waits(logging.WARNING)
    loggers = [logging.getLogger(name) for name in WAIT_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        if lg.getEffectiveLevel() > logging.WARNING:
            lg.setLevel(logging.WARNING)
    try:
        yield seen
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


async def run_table_takeover(cell: Cell) -> None:
    """Writer A is killed holding the table lock with a fresh heartbeat (ttl 30 s); writer
    B begins later and commits: it takes the lock over at once (A's process is provably
    gone on this host, and so is the keeper of A's write), completes A (past its point of no
    return) or rolls A's instant back, then commits its own. Result: A then B, or B alone."""
    f, sc = cell.sc.fault, cell.sc
    a_job, b_job = sc.tables
    a = await begin(cell, a_job, **_ttl(cell))
    run_child(cell, "commit", _child_job(a), cell.fill(f.kill), **_ttl(cell))
    b = await begin(cell, b_job, 2, **_ttl(cell))
    t0 = time.monotonic()
    with waits_logged() as waits:
        report = await commit_job(
            cell.store, cell.dest, b.instant, config=config(lock_wait=60.0, **_ttl(cell))
        )
    assert report.success
    took = time.monotonic() - t0
    # B never waited, for A's lock or for A's heartbeat: either wait says so first, in one
    # line; the time is only a backstop (a wait for either ttl takes the whole ttl), so a
    # busy machine's slow commit is no failure
    assert waits == [], f"B waited for a dead writer: {waits}"
    assert f.lock_ttl is not None and took < f.lock_ttl, f"B took {took:.1f} s: it waited for a dead writer"
    if f.past_no_return:
        rows = to.rows_after(b_job, to.rows_after(a_job, to.OLD_ROWS))
        await check_table(cell, OLD, [a, b], rows)
    else:
        await check_table(cell, OLD, [b], to.rows_after(b_job, to.OLD_ROWS))


async def run_table_failed(cell: Cell) -> None:
    """The commit fails for good at its second rename into the table, or (direct) saving
    its plan (permission denied);
    hudi-rs sees nothing of it; ``rollback_instant`` (``amcommit rollback DEST --instant I``)
    leaves exactly the old table."""
    w = await begin(cell, cell.sc.tables[0])
    faulty = FaultyStore(cell.store)
    if cell.sc.table_commit == "direct":
        # every winning file is in place once the journal is saved (right after the plan):
        # the failure must come before it for a rollback to leave the old table
        plan = f"{cell.dest}/.hoodie/*/commit-plan.json"
        rule = FaultRule("error", frozenset({"put"}), path=plan, error=PermissionDenied)
    else:
        rule = FaultRule(
            "error", frozenset({"rename"}), path=f"{cell.dest}/p=*", after=1, count=1, error=PermissionDenied
        )
    faulty.add(rule)
    try:
        await commit_job(faulty, cell.dest, w.instant, config=config(io_threads=1))  # type: ignore[arg-type]
    except AmcommitError as e:
        assert "\n" not in str(e), "error message is not one line"
    else:
        raise AssertionError("the commit succeeded despite a permanent store error")
    assert sum(faulty.injected.values()) >= 1, "no fault was injected"
    await check_all_or_nothing(cell, to.OLD_ROWS, w)
    report = await rollback_instant(cell.store, cell.dest, w.instant, config=config())
    assert report.rolled_back
    await check_table(cell, OLD, [], to.OLD_ROWS)


async def run_table_error(cell: Cell) -> None:
    """The commit fails for good (``Fault.raises``, one line; hudi-rs sees all or nothing of
    it); then, without the fault, ``commit-job`` again completes it exactly, or
    ``abort-job`` (twice) leaves exactly the old table (the committed one past the point
    of no return): nothing under ``.hoodie/.temp`` or ``.hoodie/.aux/amcommit`` (no lock, no staging, no
    marker) either way."""
    f, sc = cell.sc.fault, cell.sc
    w = await begin(cell, sc.tables[0])
    faulty = failing_store(cell)
    try:
        cfg = config(io_threads=1, load_threads=1, **_ttl(cell))
        with anyio.fail_after(60):  # a stall ends when the lock is lost: 0.75 * lock_ttl
            await commit_job(faulty, cell.dest, w.instant, config=cfg)  # type: ignore[arg-type]
    except AmcommitError as e:
        assert isinstance(e, getattr(errors, f.raises)), f"{type(e).__name__}: {e}"
        assert "\n" not in str(e), "error message is not one line"
    else:
        raise AssertionError("the commit did not fail")
    assert sum(faulty.injected.values()) > 0, "no fault was injected"
    await check_all_or_nothing(cell, to.OLD_ROWS, w)
    if f.rule == "lock-lost":
        await check_lock_lost(cell, w, faulty)
    hudi = cell.backend == "local" or cell.backend in HUDI_UNREACHABLE
    # what follows runs with the default ttls (a loaded machine renews them): it takes its
    # own lock, left by the failed commit, back at once
    if sc.then == "resume":
        report = await commit_job(cell.store, cell.dest, w.instant, config=config())
        assert report.success and report.instant == w.instant
        await check_table(cell, OLD, [w], to.rows_after(w.job, to.OLD_ROWS), hudi=hudi)
        return
    for again in (False, True):
        await abort_job(cell.store, cell.dest, w.instant, config=config())
        if f.past_no_return:
            await check_table(cell, OLD, [w], to.rows_after(w.job, to.OLD_ROWS), hudi=hudi and not again)
        else:
            await check_table(cell, OLD, [], to.OLD_ROWS, hudi=hudi and not again)


async def check_lock_lost(cell: Cell, w: Write, faulty: StallingStore) -> None:
    """After a commit that lost its lock at its stall (rule ``lock-lost``): the stall was the
    one the fault names, nothing was published (no completed instant), the lock still names
    the write (a lost lock is never released) and the journal is there exactly when the
    fault says the commit had passed its point of no return (what follows completes the
    write then, else rolls it back). A premise that fails here fails the cell as such, never
    as a lost commit further on."""
    f = cell.sc.fault
    stall = next(r for r in f.fail if r.get("kind") == "stall")
    assert faulty.stalled is not None and fnmatch.fnmatchcase(faulty.stalled, cell.path(stall["path"])), (
        f"stalled at {faulty.stalled!r}"
    )
    assert await completed_instant(cell.store, cell.dest, w.instant) is None, "the lost-lock commit published"
    assert await held_by(cell.store, cell.dest, w.instant, staging=STAGING_DIR), "the lost lock was released"
    journal = await unfinished_journal(cell.store, cell.dest, w.instant, staging=STAGING_DIR)
    assert (journal is not None) == f.past_no_return, f"journal {journal}"


async def run_table_plain(cell: Cell) -> None:
    w = await begin(cell, cell.sc.tables[0])
    report = await commit_job(cell.store, cell.dest, w.instant, config=config())
    assert report.success
    await check_table(cell, OLD, [w], to.rows_after(w.job, to.OLD_ROWS))


async def run_table_cell(cell: Cell) -> None:
    await setup_table(cell)
    kind = cell.sc.fault.kind
    if kind == "none":
        await run_table_plain(cell)
    elif kind == "kill":
        await run_table_kill(cell)
    elif kind == "takeover":
        await run_table_takeover(cell)
    elif kind == "store":
        await run_table_failed(cell)
    elif kind == "error":
        await run_table_error(cell)
    else:
        raise ValueError(kind)
