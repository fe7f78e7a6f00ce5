"""The engine's own bookkeeping (journal, listings, manifests, victims, ``_SUCCESS``,
cleanup) survives transient errors, throttling and lost answers; one layer retries each
request; a commit whose renames are all done never turns into a rollback."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.committer.task import commit_task, setup_task
from amcommit.errors import Throttled, Transient
from amcommit.paths import join, path_to_uri
from amcommit.store.base import Store
from amcommit.store.gcs import GcsStore
from amcommit.store.local import LocalStore
from amcommit.testing.faults import FaultyStore
from amcommit.testing.gcs_double import GcsDouble
from tests.engine.helpers import run_task, snapshot, task_ids, temp_files
from tests.plugins.gcs_backends import FAST_RETRY, make_store, new_bucket_name

JOB = "202611230001_0001"
OLD = {"p=1/same.bin": b"old same", "p=1/old.bin": b"old 1", "p=2/old.bin": b"old 2", "top.bin": b"t"}
TASKS = [
    {"p=1/same.bin": b"new same"} | {f"p=1/a{i}.bin": f"a{i}".encode() * (i + 1) for i in range(6)},
    {f"p=2/b{i}.bin": f"b{i}".encode() for i in range(6)},
    {f"p=3/q/c{i}.bin": f"c{i}".encode() * 3 for i in range(6)},
]
NEW = {k: v for t in TASKS for k, v in t.items()}
FAST = CommitterConfig(conflict_mode="overwrite", retry_base_delay=0.001, retry_max_delay=0.005, io_threads=8)


async def prepare(tmp_path: Path, name: str = "root") -> tuple[LocalStore, str]:
    store = LocalStore(str(tmp_path / name), fsync=False)
    dest = "warehouse/tbl"
    for p, d in OLD.items():
        await store.put(join(dest, p), d)
    layout = await setup_job(store, dest, JOB)
    for n, files in enumerate(TASKS):
        await run_task(store, layout, n, files)
    return store, dest


async def success_of(store: Store, dest: str) -> dict[str, object]:
    return json.loads(await store.get(join(dest, "_SUCCESS")))  # type: ignore[no-any-return]


async def check_exact(store: LocalStore, dest: str, *, recovered: int = 0) -> dict[str, object]:
    """The destination is exactly NEW, nothing left in _temporary, the report is exact."""
    assert await snapshot(store, dest) == NEW
    assert await temp_files(store, dest) == []
    success = await success_of(store, dest)
    m = success["metrics"]
    assert isinstance(m, dict)
    assert success["success"] is True
    assert m["files"] == m["renamed"] == len(NEW)
    assert m["bytes"] == sum(len(v) for v in NEW.values())
    assert m["manifests"] == len(TASKS)
    assert m["recovered_renames"] == recovered
    assert m["moved_aside"] == 1  # p=1/same.bin
    assert m["victims_deleted"] == len(OLD) - 1
    assert success["filenames"] == sorted(path_to_uri(store.root_uri, join(dest, p)) for p in NEW)
    return success


def lost_forward_renames(faulty: FaultyStore) -> int:
    """Distinct files whose forward rename lost its answer (each then counts as recovered)."""
    return len(
        {
            paths[1]
            for kind, op, paths in faulty.events
            if kind == "lost_response" and op == "rename" and "/tasks/" in paths[0]
        }
    )


# -- storms over every operation -------------------------------------------------------------

ALL_BUT_RENAME = ["stat", "list", "get", "put", "delete", "mkdirs"]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", ["throttle", "transient", "lost_response"])
async def test_storm_on_every_operation(tmp_path: Path, kind: str, seed: int) -> None:
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=seed)
    if kind == "throttle":
        faulty.throttle(None, retry_after=0.001, probability=0.2)
    elif kind == "transient":
        faulty.fail(None, error=Transient, probability=0.2)
    else:
        faulty.lose_response(ALL_BUT_RENAME, probability=0.2)
        # forward renames and _SUCCESS; lost move-aside answers are rename_files' business
        faulty.lose_response("rename", path=f"{dest}/_temporary/*/tasks/*", probability=0.2)
        faulty.lose_response("rename", path=f"{dest}/_SUCCESS", probability=0.5)
    t0 = time.perf_counter()
    report = await commit_job(faulty, dest, JOB, config=FAST)
    assert report.success
    assert sum(faulty.injected.values()) > 5, faulty.injected
    recovered = lost_forward_renames(faulty) if kind == "lost_response" else 0
    await check_exact(store, dest, recovered=recovered)
    assert time.perf_counter() - t0 < 20


# -- each kind of bookkeeping operation alone --------------------------------------------------

# name -> rule installer (the commit runs with rename_attempts=4)
CASES = {
    "journal get throttled": lambda f, d: f.throttle("get", path="*/journal.json", count=3),
    "journal put throttled": lambda f, d: f.throttle("put", path="*/journal.json", count=3),
    "journal put answer lost": lambda f, d: f.lose_response("put", path="*/journal.json", count=3),
    "manifest listing fails": lambda f, d: f.fail("list", path="*/manifests", count=3),
    "manifest get answer lost": lambda f, d: f.lose_response("get", path="*-manifest.json", count=3),
    "victim listing fails": lambda f, d: f.fail("list", path=d, count=3),
    "victim listing of a partition fails": lambda f, d: f.throttle("list", path=f"{d}/p=1", count=3),
    "victim chunk put answer lost": lambda f, d: f.lose_response("put", path="*/victims-*", count=2),
    "victim chunk get throttled": lambda f, d: f.throttle("get", path="*/victims-*", count=3),
    "_SUCCESS.tmp put throttled": lambda f, d: f.throttle("put", path="*_SUCCESS*", count=3),
    "_SUCCESS rename answer lost": lambda f, d: f.lose_response("rename", path=f"{d}/_SUCCESS", count=1),
    "_SUCCESS rename answer lost twice": lambda f, d: f.lose_response(
        "rename", path=f"{d}/_SUCCESS", count=2
    ),
    "trash delete answer lost": lambda f, d: f.lose_response("delete", path="*/trash", count=2),
    # local files: the cleanup deletes the task directories in one request (no listing)
    "cleanup tasks delete fails": lambda f, d: f.fail("delete", path="*/tasks", count=3),
    "cleanup delete throttled": lambda f, d: f.throttle("delete", path="*/_temporary/*", count=3),
    "mkdirs answer lost": lambda f, d: f.lose_response("mkdirs", count=1),
    # the journal's "renamed" write (the 2nd put) and "committed" write (the 3rd), throttled
    # more often than the normal policy (4 attempts here) allows: the patient one survives
    "renamed journal write throttled 10 times": lambda f, d: f.throttle(
        "put", path="*/journal.json", after=1, count=10
    ),
    "committed journal write throttled 10 times": lambda f, d: f.throttle(
        "put", path="*/journal.json", after=2, count=10
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_each_bookkeeping_operation_survives(tmp_path: Path, case: str) -> None:
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=7)
    rule = CASES[case](faulty, dest)
    report = await commit_job(faulty, dest, JOB, config=FAST.with_options(rename_attempts=4))
    assert report.success
    assert rule.fired == rule.count, (rule.fired, faulty.events)  # the fault really happened
    await check_exact(store, dest)


async def test_task_commit_survives_lost_answers_and_throttling(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path / "root"), fsync=False)
    dest = "out"
    layout = await setup_job(store, dest, JOB)
    faulty = FaultyStore(store, seed=4)
    faulty.lose_response(["put", "rename", "delete", "get"], path="*/manifests/*", probability=0.3)
    faulty.throttle(
        ["put", "rename", "delete", "get"], path="*/manifests/*", retry_after=0.001, probability=0.2
    )
    cfg = CommitterConfig(retry_base_delay=0.001, retry_max_delay=0.005)
    for n, files in enumerate(TASKS):
        task, ta = task_ids(JOB, n)
        work = await setup_task(store, layout, ta)
        for rel, data in files.items():
            await store.put(join(work, rel), data)
        await commit_task(faulty, layout, task, ta, config=cfg)
    assert faulty.injected["lost_response:rename"] > 0, faulty.injected
    report = await commit_job(store, dest, JOB)
    assert report.success and report.files == len(NEW)
    assert await snapshot(store, dest) == NEW


# -- a commit whose renames are all done is never rolled back ----------------------------------


async def test_journal_write_failing_after_all_renames_is_completed_by_abort(tmp_path: Path) -> None:
    """The 'renamed' journal write fails for good (every later journal put fails): the commit
    raises, but every file is in place; abort_job must complete it, not roll it back."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=1)
    faulty.fail("put", error=Throttled, path="*/journal.json", after=1)
    with pytest.raises(Throttled):
        await commit_job(faulty, dest, JOB, config=FAST.with_options(rename_attempts=2))
    journal = json.loads(await store.get(join(dest, f"_temporary/manifest_{JOB}/journal.json")))
    assert journal["state"] == "renaming"  # the store never heard about the point of no return
    report = await abort_job(store, dest, JOB)
    assert report.success
    assert await snapshot(store, dest) == NEW
    assert await temp_files(store, dest) == []
    m = (await success_of(store, dest))["metrics"]
    assert isinstance(m, dict) and m["files"] == m["renamed"] == len(NEW)


async def test_abort_after_partial_renames_still_rolls_back(tmp_path: Path) -> None:
    """The check above must not complete a commit with a file not yet renamed."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=1)
    faulty.fail("rename", error=Transient, path=f"{dest}/_temporary/*/tasks/*", after=10)
    with pytest.raises(Transient):
        await commit_job(faulty, dest, JOB, config=FAST.with_options(rename_attempts=1, io_threads=1))
    await abort_job(store, dest, JOB)
    assert await snapshot(store, dest) == OLD
    assert await temp_files(store, dest) == []


# -- one retry layer per request ---------------------------------------------------------------


@pytest.mark.parametrize("lock", [False, True], ids=["unlocked", "locked"])
async def test_engine_layer_retries_exactly_its_policy(tmp_path: Path, lock: bool) -> None:
    """A store without its own retries: the engine makes rename_attempts requests per
    operation, once. Without the destination lock one operation reads the journal (the
    commit's); with it, a second one: after the failure the lock reads the journal to
    decide whether the commit left it unfinished (then the lock is kept, as it is here:
    that read fails too, so it cannot tell). Each costs exactly 5 requests, not 5 x 5."""
    store, dest = await prepare(tmp_path)
    faulty = FaultyStore(store, seed=1)
    assert not faulty.capabilities.retries
    rule = faulty.throttle("get", path="*/journal.json", retry_after=0.001)  # always
    config = FAST.with_options(rename_attempts=5, destination_lock=lock)
    with pytest.raises(Throttled):
        await commit_job(faulty, dest, JOB, config=config)
    assert rule.matched == (2 if lock else 1) * 5
    assert (tmp_path / "root" / dest / "_temporary/_commit.lock").exists() is lock


@pytest.fixture
async def gcs_job(gcs_double: GcsDouble) -> AsyncIterator[tuple[GcsStore, str, GcsDouble]]:
    """A job with NEW's tasks on a GcsStore (the project's GCS double, 6 attempts per
    request: tests.plugins.gcs_backends.FAST_RETRY)."""
    bucket = new_bucket_name()
    gcs_double.create_bucket(bucket)
    gcs_double.clear_faults()
    store = make_store(gcs_double.url, bucket, use_move=True, verify_preconditions=False)
    assert store.capabilities.retries
    dest = "warehouse/tbl"
    for p, d in OLD.items():
        await store.put(join(dest, p), d)
    layout = await setup_job(store, dest, JOB)
    for n, files in enumerate(TASKS):
        await run_task(store, layout, n, files)
    yield store, dest, gcs_double
    gcs_double.clear_faults()
    await store.aclose()


@pytest.mark.parametrize("wrapped", [False, True], ids=["gcs", "faulty(gcs)"])
@pytest.mark.parametrize(
    ("op", "status", "name", "after"),
    [("media", 503, "*m_000000-manifest.json", 0), ("insert", 429, None, 1)],
    ids=["manifest-get-503", "victims-put-429"],
)
async def test_http_store_requests_are_retried_by_one_layer(
    gcs_job: tuple[GcsStore, str, GcsDouble],
    wrapped: bool,
    op: str,
    status: int,
    name: str | None,
    after: int,
) -> None:
    """A bookkeeping request refused for good (a manifest read; the commit's first put, the
    victims chunk, which GCS repeats after 429 only): the store's own loop sends it
    FAST_RETRY's 6 times and the engine does not retry it again (before: 6 x
    rename_attempts = 30 requests), also through a FaultyStore (whose own faults the engine
    does retry). The insert fault lets the first insert through: the destination lock's
    create (multipart inserts carry no name to select by)."""
    store, dest, double = gcs_job
    fault = double.inject(op, status=status, name=name, count=None, after=after)
    target: Store = FaultyStore(store) if wrapped else store
    with pytest.raises(Throttled):
        await commit_job(target, dest, JOB, config=FAST.with_options(rename_attempts=5))
    assert fault.fired == FAST_RETRY.max_attempts == 6


async def test_request_a_store_declines_to_repeat_is_retried_by_the_engine(
    gcs_job: tuple[GcsStore, str, GcsDouble],
) -> None:
    """GCS does not repeat put(OVERWRITE) after a 503 (it cannot know whether it happened);
    the engine's puts (the victims chunk, the journal: the first two of the commit) are
    safe to repeat, so the engine retries them: the commit succeeds."""
    store, dest, double = gcs_job
    fault = double.inject("insert", status=503, count=2)  # multipart inserts carry no name
    report = await commit_job(store, dest, JOB, config=FAST)
    assert report.success and fault.fired == 2
    assert await snapshot(store, dest) == NEW and await temp_files(store, dest) == []


@pytest.mark.parametrize("kind", ["throttle", "transient", "lost_response"])
async def test_storm_above_an_http_store(gcs_job: tuple[GcsStore, str, GcsDouble], kind: str) -> None:
    """The same storms injected above a store that retries itself (GCS double, objects.move):
    the engine retries the injected faults, the store its own requests."""
    store, dest, _ = gcs_job
    faulty = FaultyStore(store, seed=5)
    if kind == "throttle":
        faulty.throttle(None, retry_after=0.001, probability=0.2)
    elif kind == "transient":
        faulty.fail(None, error=Transient, probability=0.2)
    else:
        faulty.lose_response(ALL_BUT_RENAME, probability=0.2)
        faulty.lose_response("rename", path=f"{dest}/_temporary/*/tasks/*", probability=0.2)
        faulty.lose_response("rename", path=f"{dest}/_SUCCESS", probability=0.5)
    report = await commit_job(faulty, dest, JOB, config=FAST)
    assert report.success and sum(faulty.injected.values()) > 5
    assert await snapshot(store, dest) == NEW and await temp_files(store, dest) == []
    m = (await success_of(store, dest))["metrics"]
    assert isinstance(m, dict)
    assert m["files"] == m["renamed"] == len(NEW) and m["victims_deleted"] == len(OLD) - 1
    assert m["recovered_renames"] == (lost_forward_renames(faulty) if kind == "lost_response" else 0)
