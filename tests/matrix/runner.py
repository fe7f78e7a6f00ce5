"""Run one scenario on one backend and check the destination against the oracle.

The setup (old files, task attempts) and every check run in the test process through a
store opened from the backend's JSON info; commits that must be killed run in a child
process (tests.matrix.kill_child) opened from the same info. Checks, for every scenario:

* the destination's exact listing and bytes (``_SUCCESS`` and ``_temporary`` aside);
* ``_SUCCESS`` present (and this job's) exactly when the commit succeeded;
* nothing under ``_temporary`` after a success or an abort; after a refused commit the job
  is kept (its manifests and the winning attempts' files, byte for byte) until abort_job,
  which then leaves the old data and no ``_temporary``;
* the files next to the destination (``outside``) untouched.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from amcommit import errors
from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig, JobLayout, Progress
from amcommit.committer.lock import held_by, unfinished_journal
from amcommit.committer.report import JobReport
from amcommit.committer.task import abort_task, commit_task, setup_task
from amcommit.errors import AmcommitError
from amcommit.manifest import decode_success
from amcommit.paths import join, path_to_uri, relative_to
from amcommit.store.base import Store
from amcommit.testing.faults import FaultRule, FaultyStore
from tests.forkrun import PRELOAD
from tests.matrix import kill_child, oracle
from tests.matrix.chaos_proxy import ChaosProxy
from tests.matrix.oracle import Job
from tests.matrix.scenarios import OUTSIDE, Scenario
from tests.matrix.stores import COPY_RENAME_BACKENDS, BackendInfo, open_store, via

CONFIG = {"io_threads": 4, "retry_base_delay": 0.005, "retry_max_delay": 0.1}
"""Committer options of every commit/abort of the matrix (small pools, fast retries)."""


def config(mode: str, **more: Any) -> CommitterConfig:
    return CommitterConfig(conflict_mode=mode, **(CONFIG | more))  # type: ignore[arg-type]


@dataclass
class Cell:
    """One scenario on one backend: paths and stores of this run."""

    sc: Scenario
    backend: str
    info: BackendInfo
    store: Store
    sdk_list: Callable[[str], dict[str, int]] | None = None
    """Independent oracle: every file below a directory (store path -> size), read with the
    official SDK (os.walk for local files); blocking, called in a worker thread."""
    base: str = field(default_factory=lambda: f"m-{uuid.uuid4().hex[:10]}")

    @property
    def dest(self) -> str:
        return f"{self.base}/table one"

    @property
    def outside(self) -> str:
        return f"{self.base}/outside"

    def layout(self, job: Job) -> JobLayout:
        return JobLayout(self.dest, job.job_id)

    @property
    def directories(self) -> bool:
        """The store has real directories (an old file can be in the way of a new one)."""
        return self.store.capabilities.directories

    def fill(self, rule: Any) -> Any:
        """A kill rule template for this run (see scenarios.py)."""
        if rule is None:
            return None
        if "type" not in rule:
            rule = rule.get(self.backend, rule["*"])
        return {k: self.path(v) if isinstance(v, str) else v for k, v in rule.items()}

    def path(self, template: str) -> str:
        """A path template of scenarios.py for this run."""
        if "{" not in template:
            return template
        if not self.sc.jobs:  # a table scenario: only {dest}
            return template.replace("{dest}", self.dest)
        lay = self.layout(self.sc.jobs[0])
        subst = {
            "{dest}": self.dest,
            "{trash}": lay.trash_dir,
            "{task0}": lay.task_attempt_dir(task_ids(lay.job_id, 0, 0)[1]),
            "{job}": lay.job_id,
        }
        for a, b in subst.items():
            template = template.replace(a, b)
        return template


# -- setup ------------------------------------------------------------------------------------
def task_ids(job_id: str, t: int, a: int) -> tuple[str, str]:
    return f"task_{job_id}_m_{t:06d}", f"attempt_{job_id}_m_{t:06d}_{a}"


async def put_all(store: Store, files: dict[str, bytes]) -> None:
    async with anyio.create_task_group() as tg:
        for path, data in files.items():
            tg.start_soon(store.put, path, data)


async def setup(cell: Cell) -> None:
    s = cell.store
    await put_all(
        s,
        {join(cell.dest, rel): d for rel, d in cell.sc.old.items()}
        | {join(cell.outside, rel): d for rel, d in OUTSIDE.items()},
    )
    for job in cell.sc.jobs:
        layout = await setup_job(s, cell.dest, job.job_id)
        for t, attempts in enumerate(job.tasks):
            for a, attempt in enumerate(attempts):
                task, ta = task_ids(job.job_id, t, a)
                work = await setup_task(s, layout, ta)
                await put_all(s, {join(work, rel): data for rel, data in attempt.files.items()})
                if attempt.outcome == "commit":
                    await commit_task(s, layout, task, ta)
                elif attempt.outcome == "abort":
                    await abort_task(s, layout, ta)


# -- observation --------------------------------------------------------------------------------
async def files_below(store: Store, prefix: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    paths = [i.path async for i in store.list(prefix, recursive=True) if not i.is_dir]

    async def get(path: str) -> None:
        out[relative_to(path, prefix)] = await store.get(path)

    async with anyio.create_task_group() as tg:
        for p in paths:
            tg.start_soon(get, p)
    return out


async def dest_files(cell: Cell) -> dict[str, bytes]:
    every = await files_below(cell.store, cell.dest)
    return {k: v for k, v in every.items() if k != "_SUCCESS" and not k.startswith("_temporary/")}


async def temp_leftovers(cell: Cell) -> list[str]:
    return [i.path async for i in cell.store.list(join(cell.dest, "_temporary"), recursive=True)]


async def success_job(cell: Cell) -> str | None:
    """Job id in a successful ``_SUCCESS`` (None: absent or not successful)."""
    try:
        data = await cell.store.get(join(cell.dest, "_SUCCESS"))
    except AmcommitError:
        return None
    s = decode_success(data, name="_SUCCESS")
    return s.job_id if s.success else None


async def check_outside(cell: Cell) -> None:
    assert await files_below(cell.store, cell.outside) == dict(OUTSIDE), (
        "files outside the destination changed"
    )


async def check_final(cell: Cell, want: oracle.Expected, job: Job) -> None:
    """After a success or an abort: exact destination, no _temporary, _SUCCESS iff success."""
    got = await dest_files(cell)
    assert_listing(got, want.dest)
    left = await temp_leftovers(cell)
    assert left == [], f"_temporary leftovers: {[relative_to(p, cell.dest) for p in left[:5]]}"
    assert (await success_job(cell)) == (job.job_id if want.success else None), "_SUCCESS"
    if want.success:
        await check_success_report(cell, job)
    await check_outside(cell)
    await check_with_sdk(cell, want.dest, want.success)


async def check_success_report(cell: Cell, job: Job) -> None:
    """``_SUCCESS`` lists the job's files and counts them as an uninterrupted commit's does
    (also after a resume: issue 11 item 12)."""
    s = decode_success(await cell.store.get(join(cell.dest, "_SUCCESS")), name="_SUCCESS")
    new = oracle.new_files(job)
    want = sorted(path_to_uri(cell.store.root_uri, join(cell.dest, rel)) for rel in new)
    assert sorted(s.filenames) == want, f"_SUCCESS filenames {len(s.filenames)} of {len(want)}"
    assert s.metrics.get("files") == len(new), (
        f"_SUCCESS metrics.files {s.metrics.get('files')} != {len(new)}"
    )


async def check_with_sdk(cell: Cell, want: dict[str, bytes], success: bool) -> None:
    """The destination as the official SDK lists it: exactly the expected names and sizes
    (plus ``_SUCCESS``), nothing under ``_temporary``."""
    if cell.sdk_list is None:
        return
    listed = await anyio.to_thread.run_sync(cell.sdk_list, cell.dest)
    got = {relative_to(p, cell.dest): size for p, size in listed.items()}
    expected = {rel: len(d) for rel, d in want.items()}
    if success:
        expected["_SUCCESS"] = got.get("_SUCCESS", -1)
    assert got == expected, f"SDK listing differs: {sorted(set(got) ^ set(expected))} or sizes"


def assert_listing(got: dict[str, bytes], want: dict[str, bytes]) -> None:
    lost = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    assert not (lost or extra or wrong), f"lost {lost}, extra {extra}, wrong bytes {wrong}"


async def check_job_kept(cell: Cell, job: Job) -> None:
    """The refused job's manifests and winning task output are all still there."""
    layout = cell.layout(job)
    manifests = [i.path async for i in cell.store.list(layout.manifests_dir, recursive=False) if not i.is_dir]
    assert manifests, "the job's manifests are gone after a failed commit (issue 11 item 4)"
    for t, a, files in oracle.winners(job):
        _, ta = task_ids(job.job_id, t, a)
        got = await files_below(cell.store, layout.task_attempt_dir(ta))
        assert got == dict(files), f"task output of {ta} changed or gone after a failed commit"


# -- actions ------------------------------------------------------------------------------------
_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(PRELOAD)  # one fork server per process: every kill test's list


def run_child(cell: Cell, op: str, job: Job, kill: Any, **more: Any) -> None:
    """Run commit/abort of ``job`` in a child process (forked from a fork server that has
    imported everything) that must die by SIGKILL at ``kill``; ``more``: committer options."""
    killed = child_killed(cell, op, job, kill, **more)
    assert killed, f"{op} child was not killed at {kill} (it completed)"


def child_killed(cell: Cell, op: str, job: Job, kill: Any, **more: Any) -> bool:
    """:func:`run_child`, but the child may also complete (False; it must not fail)."""
    spec = {
        "backend": cell.info,
        "op": op,
        "dest": cell.dest,
        "job_id": job.job_id,
        "mode": job.mode,
        "kill": kill,
        # one manifest and one file operation at a time: a kill at a progress event is then
        # a clean boundary (no other rename half done) and the renames run in spool order
        # (task 0's files sorted, then task 1's); the rename-kind rules cut inside one rename on
        # purpose. Local renames one by one too (not in batches: a progress event then follows
        # each file; cuts inside a batch are tests/engine/test_kill_resume.py's)
        "config": CONFIG
        | {
            "io_threads": 1,
            "load_threads": 1,
            "rename_batch_size": 1,
            "delete_target_files": job.delete_target_files,
        }
        | more,
    }
    proc = _FORKS.Process(target=kill_child.run_spec, args=(json.dumps(spec),), name=f"matrix-{op}")
    proc.start()
    proc.join(120)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    assert proc.exitcode in (0, -signal.SIGKILL), f"{op} child failed at {kill} (exit {proc.exitcode})"
    return proc.exitcode == -signal.SIGKILL


async def commit(
    cell: Cell,
    job: Job,
    store: Store | None = None,
    progress: Callable[[Progress], None] | None = None,
    **more: Any,
) -> JobReport:
    cfg = config(job.mode, delete_target_files=job.delete_target_files, **more)
    return await commit_job(store or cell.store, cell.dest, job.job_id, config=cfg, progress=progress)


async def abort(cell: Cell, job: Job, **more: Any) -> None:
    await abort_job(cell.store, cell.dest, job.job_id, config=config(job.mode, **more))


async def expect_commit(cell: Cell, job: Job, store: Store | None = None, **more: Any) -> None:
    """Commit (maybe through a faulty store) and check the outcome against the oracle."""
    old = dict(cell.sc.old)
    want = oracle.expect_commit(old, job, cell.directories)
    err: AmcommitError | None = None
    try:
        report = await commit(cell, job, store, **more)
        assert report.success
    except AmcommitError as e:
        err = e
    if want.refused is None:
        assert err is None, f"commit failed: {type(err).__name__}: {err}"
        await check_final(cell, want, job)
        return
    assert err is not None, f"commit succeeded although {want.refused}"
    assert "\n" not in str(err), "error message is not one line"
    assert_listing(await dest_files(cell), old)
    assert await success_job(cell) is None
    await check_outside(cell)
    await check_job_kept(cell, job)
    await abort(cell, job)
    await check_final(cell, oracle.Expected(old, False), job)


class PeriodicRule(FaultRule):
    """Fires on every ``period``-th matching call: a deterministic 1/period storm."""

    period: int = 5

    def fire(self, rng: Any) -> bool:
        self.matched += 1
        if self.matched % self.period == 0:
            self.fired += 1
            return True
        return False


async def run_store_faults(cell: Cell, job: Job) -> None:
    faulty = FaultyStore(cell.store, seed=7)
    if cell.sc.fault.rule == "throttle":
        faulty.add(PeriodicRule("throttle", retry_after=0.0))
    else:
        faulty.add(PeriodicRule("lost_response", frozenset({"put", "rename", "delete", "mkdirs"})))
    await expect_commit(cell, job, faulty, io_threads=1, load_threads=1)
    assert sum(faulty.injected.values()) > 0, "no fault was injected"


async def run_http_faults(cell: Cell, job: Job) -> None:
    statuses = (503,) if cell.backend in ("blob", "dfs") else (429, 503)
    with ChaosProxy(cell.info["endpoint"], cell.sc.fault.rule, statuses=statuses) as proxy:
        store = open_store(via(cell.info, proxy.url))
        try:
            proxy.armed = True
            # one request at a time: the seeded storm hits the same requests on every run
            await expect_commit(cell, job, store, io_threads=1, load_threads=1)
            proxy.armed = False
        finally:
            proxy.armed = False
            await store.aclose()
        assert sum(proxy.counts.values()) > 0, "no fault was injected"


def lock_options(cell: Cell) -> dict[str, Any]:
    ttl = cell.sc.fault.lock_ttl
    return {} if ttl is None else {"lock_ttl": ttl}


async def kill_job(cell: Cell, job: Job) -> None:
    """The fault's commit child (then its abort child, if any), each killed at its rule;
    the rename-kind proof; with ``lock_ttl``: the dead job still holds the lock."""
    f = cell.sc.fault
    run_child(cell, "commit", job, cell.fill(f.kill), **lock_options(cell))
    if f.abort_kill is not None:
        run_child(cell, "abort", job, cell.fill(f.abort_kill), **lock_options(cell))
    if f.copied is not None and cell.backend in COPY_RENAME_BACKENDS:
        for template in f.copied:  # the cut fell between the copy and the delete
            await cell.store.stat(cell.path(template))
    if f.lock_ttl is not None:
        assert await held_by(cell.store, cell.dest, job.job_id), "the killed job does not hold the lock"


async def run_kill(cell: Cell, job: Job) -> None:
    f, sc = cell.sc.fault, cell.sc
    await kill_job(cell, job)
    old = dict(sc.old)
    more = lock_options(cell)
    t0 = time.monotonic()
    if sc.then == "resume":
        report = await commit(cell, job, **more)
        assert report.success
        want = oracle.expect_commit(old, job, cell.directories)
    else:
        await abort(cell, job, **more)
        want = oracle.expect_abort(old, job, f.past_no_return, cell.directories)
    took = time.monotonic() - t0
    if f.lock_ttl is not None:  # its own stale lock: taken back at once, not after the ttl
        assert took < f.lock_ttl / 3, f"{sc.then} took {took:.1f} s: it waited for its own lock"
    await check_final(cell, want, job)
    if sc.then == "abort":
        await abort(cell, job, **more)  # idempotent
        await check_final(cell, want, job)


async def run_takeover(cell: Cell) -> None:
    """Job A is killed holding the destination lock; job B's commit takes it over at once
    (A's process is provably gone on this host: no wait for the ttl), completes what A was
    doing (its commit, or its abort: a rollback), then commits B. The destination must be "A then B" (B alone
    after a rollback), exactly, with B's ``_SUCCESS`` and nothing left of A's job."""
    a, b = cell.sc.jobs
    f = cell.sc.fault
    assert f.lock_ttl is not None
    await kill_job(cell, a)
    t0 = time.monotonic()
    report = await commit(cell, b, **lock_options(cell))
    took = time.monotonic() - t0
    assert report.success
    assert took < f.lock_ttl / 3, f"B committed after {took:.1f} s: it waited for a dead holder's lock"
    old = dict(cell.sc.old)
    after_a = old if f.abort_kill is not None else oracle.apply(old, a, cell.directories)
    # (check_final: nothing under _temporary, so A's job directory went with its commit/abort)
    await check_final(cell, oracle.expect_commit(after_a, b, cell.directories), b)


# -- a commit that fails for good, then commit-job / abort-job (issue 23 item 4) -------------------
def failing_store(cell: Cell) -> FaultyStore:
    """The fault's FaultyStore rules (scenarios.py ``Fault.fail``) around the cell's store."""
    faulty = FaultyStore(cell.store, seed=7)
    for r in cell.sc.fault.fail:
        kind, op = r.get("kind", "error"), r["op"]
        ops = frozenset([op] if isinstance(op, str) else op)
        path = cell.path(r["path"]) if "path" in r else None
        after, count = r.get("after", 0), r.get("count")
        if kind == "error":
            error = getattr(errors, r["error"])
            faulty.add(FaultRule("error", ops, path, after=after, count=count, error=error))
        elif kind == "throttle":
            faulty.add(FaultRule("throttle", ops, path, after=after, retry_after=0.0))
        else:
            faulty.add(FaultRule("latency", ops, path, after=after, seconds=r["seconds"]))
    return faulty


async def run_error(cell: Cell, job: Job) -> None:
    """The commit fails for good (the error ``Fault.raises``, in one line); a failure that
    left no half-done commit (no unfinished journal) published nothing, released the lock
    and kept the job. Then, without the fault, ``commit-job`` again (``then="resume"``)
    completes exactly, or ``abort-job`` rolls back exactly (completes the commit when it
    had passed its point of no return); either way the lock is released and the job
    directory gone (nothing under ``_temporary``)."""
    f, sc = cell.sc.fault, cell.sc
    old = dict(sc.old)
    more = lock_options(cell)
    faulty = failing_store(cell)
    manifest, original = cell.layout(job).manifest_path(task_ids(job.job_id, 0, 0)[0]), b""
    if f.rule == "manifest":
        original = await cell.store.get(manifest)
        await tamper(cell, job, "corrupt")
    try:
        if f.rule == "outage":
            await _commit_into_outage(cell, job, **more)
        else:
            await commit(cell, job, faulty, io_threads=1, load_threads=1, **more)
    except AmcommitError as e:
        err = e
    else:
        raise AssertionError("the commit did not fail")
    assert isinstance(err, getattr(errors, f.raises)), f"{type(err).__name__}: {err}"
    assert "\n" not in str(err), "error message is not one line"
    if f.fail and f.rule != "lock-lost":
        assert sum(faulty.injected.values()) > 0, "no fault was injected"
    if not f.past_no_return and await unfinished_journal(cell.store, cell.dest, job.job_id) is None:
        assert not await held_by(cell.store, cell.dest, job.job_id), "the lock outlived a finished failure"
        assert_listing(await dest_files(cell), old)
        await check_job_kept(cell, job)
    if sc.then == "resume":
        if f.rule == "manifest":
            await cell.store.put(manifest, original)
        job = job if f.retry_mode is None else replace(job, mode=f.retry_mode)
        report = await commit(cell, job, **more)
        assert report.success
        want = oracle.expect_commit(old, job, cell.directories)
    else:
        await abort(cell, job, **more)
        want = oracle.expect_abort(old, job, f.past_no_return, cell.directories)
    await check_final(cell, want, job)  # includes: no lock, no job directory
    if sc.then == "abort":
        await abort(cell, job, **more)  # idempotent
        await check_final(cell, want, job)


async def _commit_into_outage(cell: Cell, job: Job, **more: Any) -> None:
    """Commit through a ChaosProxy that answers every request with 503 from the fault's
    progress point on (``Fault.kill``, e.g. mid-rename): a store outage the HTTP store's own
    retries give up on; the lock cannot be released either."""
    point = cell.fill(cell.sc.fault.kill)
    with ChaosProxy(cell.info["endpoint"], "throttle", rate=1.0, statuses=(503,)) as proxy:
        store = open_store(via(cell.info, proxy.url))

        def arm(p: Progress) -> None:
            if p.stage == point["stage"] and p.phase == point["phase"] and p.done >= point.get("at", 0):
                proxy.armed = True

        try:
            await commit(cell, job, store, arm, io_threads=1, load_threads=1, **more)
        finally:
            proxy.armed = False
            await store.aclose()
        assert sum(proxy.counts.values()) > 0, "no fault was injected"


# -- hostile manifests --------------------------------------------------------------------------
async def tamper(cell: Cell, job: Job, rule: str | None = None) -> None:
    s, layout = cell.store, cell.layout(job)
    rule = rule or cell.sc.fault.rule
    task, _ = task_ids(job.job_id, 0, 0)
    path = layout.manifest_path(task)
    raw = await s.get(path)
    m = json.loads(raw)
    f0 = next(f for f in m["files"] if f["d"].endswith("/p=1/a.bin"))
    d_root = f0["d"][: -len("p=1/a.bin")]
    if rule == "corrupt":
        data = raw[: len(raw) // 2]
    else:
        if rule == "foreign":
            m["jobId"] = "202611239999_0099"
        elif rule == "traversing":
            f0["d"] = d_root + "../outside/secret.bin"
        elif rule == "outside-source":
            f0["s"] = path_to_uri(s.root_uri, join(cell.outside, "secret.bin"))
            f0["z"] = len(OUTSIDE["secret.bin"])
            f0["e"] = ""
        elif rule == "nul":
            f0["d"] = d_root + "p=1/a%00b.bin"
        elif rule == "huge-size":
            f0["z"] = 10**30
        elif rule == "dir-source":
            f0["s"] = f0["s"][: -len("/a.bin")]
            f0["e"] = ""
        elif rule == "trailing-slash":
            f0["d"] = d_root + "p=1/"
        data = json.dumps(m, ensure_ascii=False).encode()
        if rule == "deep":
            data = data[:-1] + b', "deep": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    await s.put(path, data)


# -- concurrent jobs ----------------------------------------------------------------------------
async def run_concurrent(cell: Cell) -> None:
    """Job B commits in a thread (own loop and store, one rename at a time) and pauses
    after its first rename until job A's commit (in this loop) has finished, or A made no
    progress for 2 s (A waits for a lock that B holds: B must go on); then both results must equal one serial order."""
    a, b = cell.sc.jobs
    paused, a_done = threading.Event(), threading.Event()
    results: dict[str, BaseException | None] = {}

    held = threading.Event()
    a_seen = [time.monotonic()]

    def progress_a(p: Progress) -> None:
        a_seen[0] = time.monotonic()

    def progress(p: Progress) -> None:
        if p.stage == "rename_files" and p.phase == "progress" and p.done >= 1 and not paused.is_set():
            held.set()
            paused.set()
            # wait for A to finish; if A stops making progress (it waits for a lock that B
            # holds) for 2 s, go on so that B can finish and release it
            while not a_done.wait(0.05):
                if time.monotonic() - a_seen[0] > 2.0:
                    break

    def thread_b() -> None:
        async def go() -> None:
            store = open_store(cell.info)
            async with store:
                await commit_job(
                    store, cell.dest, b.job_id, config=config(b.mode, io_threads=1), progress=progress
                )

        try:
            anyio.run(go)
            results[b.job_id] = None
        except BaseException as e:
            results[b.job_id] = e
        finally:
            paused.set()

    th = threading.Thread(target=thread_b, name="matrix-job-b")
    th.start()
    await anyio.to_thread.run_sync(paused.wait, 30.0)
    a_seen[0] = time.monotonic()
    try:
        await commit(cell, a, progress=progress_a)
        results[a.job_id] = None
    except AmcommitError as e:
        results[a.job_id] = e
    finally:
        a_done.set()
    await anyio.to_thread.run_sync(th.join, 60.0)
    assert held.is_set() or results.get(b.job_id) is not None, "job B never reached its pause"
    ok = [j for j in (a, b) if results.get(j.job_id) is None]
    failed = [j for j in (a, b) if results.get(j.job_id) is not None]
    assert ok, f"both concurrent commits failed: {results}"
    for j in failed:
        assert isinstance(results[j.job_id], AmcommitError), f"{j.job_id}: {results[j.job_id]!r}"
        await abort(cell, j)
    got = await dest_files(cell)
    allowed = oracle.serial_outcomes(cell.sc.old, ok, cell.directories)
    assert got in allowed, f"not the result of a serial order of {[j.job_id for j in ok]}: " + "; ".join(
        f"vs order {i}: {_diff(got, w)}" for i, w in enumerate(allowed)
    )
    left = await temp_leftovers(cell)
    assert left == [], f"_temporary leftovers: {[relative_to(p, cell.dest) for p in left[:5]]}"
    await check_outside(cell)


def _diff(got: dict[str, bytes], want: dict[str, bytes]) -> str:
    return (
        f"lost {sorted(set(want) - set(got))} extra {sorted(set(got) - set(want))} "
        f"wrong {sorted(k for k in set(got) & set(want) if got[k] != want[k])}"
    )


# -- entry point --------------------------------------------------------------------------------
async def run_cell(cell: Cell) -> None:
    if cell.sc.tables:
        from tests.matrix.table_runner import run_table_cell

        await run_table_cell(cell)
        return
    await setup(cell)
    kind = cell.sc.fault.kind
    job = cell.sc.jobs[0]
    if kind == "none":
        await expect_commit(cell, job)
    elif kind == "kill":
        await run_kill(cell, job)
    elif kind == "store":
        await run_store_faults(cell, job)
    elif kind == "http":
        await run_http_faults(cell, job)
    elif kind == "manifest":
        await tamper(cell, job)
        old = dict(cell.sc.old)
        try:
            await commit(cell, job)
        except AmcommitError as e:
            assert "\n" not in str(e), "error message is not one line"
        else:
            raise AssertionError("a hostile manifest was committed")
        assert_listing(await dest_files(cell), old)
        await check_outside(cell)
        await check_job_kept(cell, job)
        await abort(cell, job)
        await check_final(cell, oracle.Expected(old, False), job)
    elif kind == "concurrent":
        await run_concurrent(cell)
    elif kind == "takeover":
        await run_takeover(cell)
    elif kind == "error":
        await run_error(cell, job)
    else:
        raise ValueError(kind)


__all__ = ["Cell", "run_cell"]
