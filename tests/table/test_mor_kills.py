"""Merge-on-Read crash safety on the emulators (issue 34): a deltacommit (the MoR upsert
through the engine API: begin, log and base files, markers, task commit, job commit), a
compaction, and the rollback of a failed deltacommit, each SIGKILLed before a spread of its
mutating requests on Azurite (Blob) and fake-gcs-server, in a child forked from the suite's
fork server, then resumed or rolled back here. After every kill hudi-rs and amcommit's reader
see the whole instant or nothing; after the resume or rollback the table's listing is exact.
The same on local files, before every request: test_mor_write, test_compaction,
test_mor_rollback."""

from __future__ import annotations

import json as _json
import multiprocessing as _mp
import re
import signal as _signal
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.errors import AmcommitError
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.table.commit.compaction import compact_store, pending_compactions
from amcommit.table.commit.table_commit import staged_times
from amcommit.table.format.compaction import decode_compaction_plan
from amcommit.table.format.model import Action, Instant, State, decode_commit_metadata
from amcommit.table.format.naming import HOODIE_DIR
from amcommit.table.format.rollback_meta import decode_rollback_metadata
from amcommit.table.mutate import engine as mutate
from amcommit.table.query.read import read_store
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants
from tests.forkrun import PRELOAD
from tests.matrix import table_runner as _tr
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.kill_child import KillAt
from tests.table.mor_emu_child import CHILD_CFG
from tests.table.test_mor_write import FIRST, LATER, MOR, UPSERT, hudi_read_optimized
from tests.table.test_mutate import _t, hudi_snapshot, model_upsert, rows_of

CFG = TableConfig(**CHILD_CFG | {"io_threads": 4, "load_threads": 4})
W = MOR | {"config": CFG, "precombine_field": "ts"}
BEFORE = rows_of(model_upsert({}, FIRST))
AFTER = rows_of(model_upsert(model_upsert({}, FIRST), UPSERT))
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_FORKS = _mp.get_context("forkserver")


def _fork(target: Any, spec: dict[str, Any]) -> bool:
    """``target(json spec)`` in a child forked from the fork server; True if it completed,
    False if it SIGKILLed itself."""
    _FORKS.set_forkserver_preload(PRELOAD)
    proc = _FORKS.Process(target=target, args=(_json.dumps(spec),), name="mor-kill")
    proc.start()
    proc.join(120)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    assert proc.exitcode in (0, -_signal.SIGKILL), f"child failed (exit {proc.exitcode})"
    return proc.exitcode == 0


def _child(
    info: dict[str, Any], dest: str, op: str, n: int, rows: list[dict[str, Any]] | None = None
) -> bool:
    from tests.table import mor_emu_child

    return _fork(mor_emu_child.run_spec, {"backend": info, "dest": dest, "op": op, "n": n, "rows": rows})


def _abort_child(info: dict[str, Any], dest: str, instant: str, n: int) -> bool:
    from tests.table import kill_child

    # (kill_child.run_spec takes the committer's options: a table's come from its properties)
    cfg = {k: CHILD_CFG[k] for k in ("io_threads", "load_threads", "retry_base_delay", "retry_max_delay")}
    spec = {"backend": info, "dest": dest, "instant": instant, "what": "abort", "n": n, "config": cfg}
    return _fork(kill_child.run_spec, spec)


def _hudi(backend: str, info: dict[str, Any], dest: str, ro: bool = False) -> list[tuple[Any, ...]]:
    where = _tr.hudi_location(cast(Any, SimpleNamespace(backend=backend, info=info, dest=dest)))
    assert where is not None
    uri, opts = where
    return hudi_read_optimized(uri, opts) if ro else hudi_snapshot(uri, storage=opts)


async def _ours(store: Store, dest: str, **kw: Any) -> list[tuple[Any, ...]]:
    t = await read_store(store, dest, **kw)
    return sorted(zip(*(t[c].to_pylist() for c in ("id", "p", "v", "ts")), strict=True))


async def _files(store: Store, dest: str) -> list[str]:
    return sorted([i.path[len(dest) + 1 :] async for i in store.list(dest, recursive=True) if not i.is_dir])


def _norm(names: list[str], times: dict[str, str]) -> list[str]:
    out = []
    for n in names:
        n = _UUID.sub("F", n)
        for t, name in times.items():
            n = n.replace(t, name)
        out.append(n)
    return sorted(out)


def _spread(total: int, k: int) -> list[int]:
    return sorted({max(1, round(total * (i + 1) / (k + 1))) for i in range(k)} | {1, total})


async def _count(store: Store, run: Any) -> int:
    """How many mutating requests an uninterrupted ``run(store)`` makes."""
    counter = KillAt(store, 10**9)
    await run(counter)
    return counter.count


BACKENDS = pytest.mark.parametrize("backend", ["blob", "gcs-fake"])


@pytest.mark.timeout(300)
@BACKENDS
def test_mor_upsert_killed_on_emulators(backend: str, request: pytest.FixtureRequest) -> None:
    """A deltacommit (updates to log files of two slices, an insert to a new base file)
    killed before the n-th mutating request of the whole write, for a spread of n; hudi-rs
    and amcommit see the table before or after it, never a mix. Then resumed (``commit_job``,
    refused and rolled back if its task had not committed) or rolled back (``abort_job``),
    alternately: rolled back, the listing is exactly the one before plus the rollback
    instant's three files when the deltacommit had reached the timeline; completed, it is
    exactly that of the uninterrupted write (names up to file ids and instant times). A
    later deltacommit into the same slices reads right."""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))

    async def go() -> None:
        store = open_store(info)
        async with store:
            await mutate.upsert(store, "ref", _t(FIRST), **W)
            first = (await list_instants(store, "ref"))[-1].time
            total = await _count(store, lambda s: mutate.upsert(s, "ref", _t(UPSERT), **W))
            second = (await list_instants(store, "ref"))[-1].time
            committed = _norm(await _files(store, "ref"), {first: "I1", second: "I2"})
            assert total > 10, total
            outcomes: set[str] = set()
            for k, n in enumerate(_spread(total, 4)):
                dest = f"k{n}"
                await mutate.upsert(store, dest, _t(FIRST), **W)
                first = (await list_instants(store, dest))[-1].time
                was = await _files(store, dest)
                done = await anyio.to_thread.run_sync(_child, info, dest, "upsert", n, UPSERT)
                assert not done, n
                seen = await anyio.to_thread.run_sync(_hudi, backend, info, dest)
                assert seen in (BEFORE, AFTER), n  # the whole instant or nothing
                assert await _ours(store, dest) == seen, n
                # the killed write's instant (the job id its user resumes or aborts), on the
                # timeline (pending or completed) or only in its staging
                pending = {i.time for i in await list_instants(store, dest)} | await staged_times(store, dest)
                pending -= {first}
                assert len(pending) <= 1, (n, first, pending, await _files(store, dest))
                for t in pending:
                    if k % 2:
                        try:
                            await commit_job(store, dest, t, config=CFG)
                        except AmcommitError:
                            await abort_job(store, dest, t, config=CFG)
                    else:
                        await abort_job(store, dest, t, config=CFG)
                seen = await anyio.to_thread.run_sync(_hudi, backend, info, dest)
                assert await _ours(store, dest) == seen, n
                now = await _files(store, dest)
                deltas = [
                    i.time
                    for i in await list_instants(store, dest)
                    if i.completed and i.action == "deltacommit"
                ]
                if seen == BEFORE:
                    outcomes.add("rolled back")
                    extra = sorted(set(now) - set(was))
                    assert not set(was) - set(now) and deltas == [first], (n, sorted(set(now) ^ set(was)))
                    if extra:
                        r = extra[0].split("/")[1].split(".")[0]
                        want = [f".hoodie/{r}.rollback{s}" for s in ("", ".inflight", ".requested")]
                        assert extra == want, (n, extra)
                        meta = decode_rollback_metadata(
                            await store.get(f"{dest}/{extra[0]}"), root_uri=join(store.root_uri, dest)
                        )
                        assert meta.target in pending and meta.action == "deltacommit", n
                        assert not {d for ds in meta.deleted.values() for d in ds} & set(was), n
                        outcomes.add("rollback recorded")
                else:
                    outcomes.add("completed")
                    assert seen == AFTER and len(deltas) == 2, n
                    got = _norm(now, {first: "I1", deltas[1]: "I2"})
                    assert got == committed, (n, k, total, sorted(set(got) ^ set(committed)), now)
                # the table goes on
                await mutate.upsert(store, dest, _t(LATER), **W)
                want = (
                    model_upsert(model_upsert({}, FIRST), UPSERT)
                    if seen == AFTER
                    else model_upsert({}, FIRST)
                )
                seen = await anyio.to_thread.run_sync(_hudi, backend, info, dest)
                assert seen == rows_of(model_upsert(want, LATER)) == await _ours(store, dest), n
            assert outcomes == {"rolled back", "completed", "rollback recorded"}, outcomes
            print(f"{backend}: {total} requests")

    anyio.run(go)


async def _data(store: Store, dest: str) -> set[str]:
    return {f for f in await _files(store, dest) if not f.startswith(".hoodie/")}


@pytest.mark.timeout(300)
@BACKENDS
def test_compaction_killed_on_emulators(backend: str, request: pytest.FixtureRequest) -> None:
    """A compaction of two slices with log files killed before the n-th of its mutating
    requests, for a spread of n: hudi-rs and amcommit read the same records throughout, the
    read-optimized view is the whole compaction or none of it. Then the next compaction
    (alternately) or the next deltacommit completes it with its stored plan: the data files
    are exactly those before plus the plan's base files (none when killed before the plan
    existed) and the write's, every compaction instant is requested/inflight/commit, no lock
    is left, and the snapshot is every write's."""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    m = model_upsert(model_upsert({}, FIRST), UPSERT)

    async def table(store: Store, dest: str) -> None:
        await mutate.upsert(store, dest, _t(FIRST), **W)
        await mutate.upsert(store, dest, _t(UPSERT), **W)

    async def go() -> None:
        store = open_store(info)
        async with store:
            await table(store, "ref")
            total = await _count(store, lambda s: compact_store(s, "ref", config=CFG))
            assert total >= 5, total
            outcomes: set[str] = set()
            for k, n in enumerate(_spread(total, 4)):
                dest = f"c{n}"
                want = m
                await table(store, dest)
                was = await _data(store, dest)
                ro_before = await anyio.to_thread.run_sync(_hudi, backend, info, dest, True)
                assert not await anyio.to_thread.run_sync(_child, info, dest, "compact", n), n
                assert await anyio.to_thread.run_sync(_hudi, backend, info, dest) == rows_of(m), n
                assert await _ours(store, dest) == rows_of(m), n
                ro = await anyio.to_thread.run_sync(_hudi, backend, info, dest, True)
                assert ro in (ro_before, rows_of(m)), n  # the whole compaction or none of it
                assert await _ours(store, dest, query_type="read_optimized") == ro, n
                instants = await list_instants(store, dest)
                planned = {i.time for i in instants if i.action == Action.COMPACTION.value}
                added: set[str] = set()
                if k % 2:
                    rep = await compact_store(store, dest, config=CFG)
                    assert rep.resumed == sorted(pending_compactions(instants)), n
                else:
                    r = await mutate.upsert(store, dest, _t(LATER), **W)
                    want = model_upsert(m, LATER)
                    meta = decode_commit_metadata(
                        await store.get(join(dest, HOODIE_DIR, f"{r.instant}.deltacommit"))
                    )
                    added = {s.path for s in meta.write_stats()}
                instants = await list_instants(store, dest)
                assert pending_compactions(instants) == [], n
                tcs = sorted({i.time for i in instants if i.action == Action.COMPACTION.value})
                for tc in tcs:
                    plan = decode_compaction_plan(
                        await store.get(
                            join(dest, HOODIE_DIR, Instant(tc, "compaction", State.REQUESTED).file_name)
                        )
                    )
                    added |= {
                        (f"{op.partition}/" if op.partition else "") + f"{op.file_id}_{j}-0-0_{tc}.parquet"
                        for j, op in enumerate(plan.operations)
                    }
                    names = {i.file_name for i in instants if i.time == tc}
                    assert names == {
                        f"{tc}.compaction.requested",
                        f"{tc}.compaction.inflight",
                        f"{tc}.commit",
                    }, n
                got = await _data(store, dest)
                assert got == was | added, (n, sorted(got ^ (was | added)))
                outcomes.add("resumed" if planned else ("fresh" if tcs else "none"))
                assert not [p for p in await _files(store, dest) if p.endswith("_commit.lock")], n
                assert await anyio.to_thread.run_sync(_hudi, backend, info, dest) == rows_of(want), n
                assert await _ours(store, dest) == rows_of(want), n
                if tcs and k % 2:
                    assert await anyio.to_thread.run_sync(_hudi, backend, info, dest, True) == rows_of(
                        want
                    ), n
            assert "resumed" in outcomes, outcomes
            print(f"{backend}: {total} requests, {sorted(outcomes)}")

    anyio.run(go)


@pytest.mark.timeout(300)
@BACKENDS
def test_rollback_killed_on_emulators(backend: str, request: pytest.FixtureRequest) -> None:
    """The rollback (``abort_job``) of a prepared deltacommit with base and log files killed
    before the n-th of its mutating requests, for a spread of n: both readers see the table
    as before the write; then ``abort_job`` here resumes it: the listing is exactly the one
    before the write plus one rollback instant (three files) whose metadata names the
    target and exactly the write's data files; a later deltacommit into the same slices
    reads right."""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))

    async def prepared(store: Store, dest: str) -> tuple[list[str], list[str], str]:
        await mutate.upsert(store, dest, _t(FIRST), **W)
        was = await _files(store, dest)
        prep = await mutate.prepare(store, dest, _t(UPSERT), operation="UPSERT", **W)
        written = sorted(f for f in set(await _files(store, dest)) - set(was) if not f.startswith(".hoodie/"))
        assert [f for f in written if ".log." in f] and [f for f in written if f.endswith(".parquet")]
        return was, written, prep.report.instant

    async def go() -> None:
        store = open_store(info)
        async with store:
            _, _, t = await prepared(store, "ref")
            total = await _count(store, lambda s: abort_job(s, "ref", t, config=CFG))
            assert total >= 5, total
            for n in _spread(total, 3):
                dest = f"r{n}"
                was, written, t = await prepared(store, dest)
                assert not await anyio.to_thread.run_sync(_abort_child, info, dest, t, n), n
                assert await anyio.to_thread.run_sync(_hudi, backend, info, dest) == BEFORE, n
                assert await _ours(store, dest) == BEFORE, n
                await abort_job(store, dest, t, config=CFG)  # resume the rollback
                now = await _files(store, dest)
                extra = sorted(set(now) - set(was))
                assert not set(was) - set(now), n
                rb = extra[0].split("/")[1].split(".")[0]
                assert extra == [f".hoodie/{rb}.rollback{s}" for s in ("", ".inflight", ".requested")], (
                    n,
                    extra,
                )
                assert rb > t
                meta = decode_rollback_metadata(
                    await store.get(f"{dest}/.hoodie/{rb}.rollback"), root_uri=join(store.root_uri, dest)
                )
                assert (meta.instant, meta.target, meta.action) == (rb, t, "deltacommit")
                assert sorted(f for fs in meta.deleted.values() for f in fs) == written, n
                assert await anyio.to_thread.run_sync(_hudi, backend, info, dest) == BEFORE, n
                assert await _ours(store, dest) == BEFORE, n
                rep = await mutate.upsert(store, dest, _t(LATER), **W)
                assert rep.files_logged == 1
                want = rows_of(model_upsert(model_upsert({}, FIRST), LATER))
                assert await anyio.to_thread.run_sync(_hudi, backend, info, dest) == want, n
                assert await _ours(store, dest) == want, n
            print(f"{backend}: {total} requests")

    anyio.run(go)
