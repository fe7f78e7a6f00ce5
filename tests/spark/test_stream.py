"""Exactly-once streaming through ``writeStream.format("amcommit")`` (issue 14).

The driver is a real separate process (``tests/spark/stream_child.py``, its own session so
the kill takes the Python driver, its JVM and workers at once) killed with SIGKILL at a
point of each class by the sink's test hooks (:mod:`amcommit.testing.spark`; which point
stands for which class: test_stream_kill_chain); it is then restarted from the checkpoint.
One query per chain keeps Spark start-ups few (each costs ~10 s idle, ~30 s at load ~10).
After every run the table holds no duplicate and nothing that was not input; after the last
one exactly the input, read with ``spark.read.parquet``, amcommit's reader and hudi-rs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from amcommit.spark.stream import TIMINGS_ENV
from amcommit.testing.spark import DIR_ENV, RELEASE_ENV, SIGNAL_ENV
from amcommit.testing.spark import STREAM_ENV as ENV
from tests.spark.helpers import stray_files, unfinished

pytestmark = pytest.mark.spark

hudi = pytest.importorskip("hudi")

ROOT = Path(__file__).resolve().parents[2]
WRITER_TTL = 900
"""writer_ttl of the no-stall test: far above its bounds, so only a wait for it fails them."""


def drop(src: Path, first: int, files: int, per_file: int = 5) -> list[int]:
    """Drop ``files`` JSON files (ids from ``first``) into the source folder."""
    src.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(files):
        lines = []
        for j in range(per_file):
            i = first + f * per_file + j
            ids.append(i)
            lines.append(json.dumps({"id": i, "day": f"2026-11-0{i % 2 + 1}", "v": f"v{i}"}))
        tmp = src / f".f{first + f}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(src / f"f{first + f:06d}.json")
    return ids


def start(spec: dict[str, Any], fault: str | None = None) -> subprocess.Popen[str]:
    """Start the driver process (its own session: a kill takes its JVM and workers too)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    env.pop(ENV, None)
    env.pop(DIR_ENV, None)  # the child sets up its own (amcommit.testing.spark.configure)
    if fault:
        env[ENV] = fault
    if spec.get("signal"):
        env[SIGNAL_ENV] = spec["signal"]
    if spec.get("release"):
        env[RELEASE_ENV] = spec["release"]
    env.pop(TIMINGS_ENV, None)
    if spec.get("timings"):
        env[TIMINGS_ENV] = spec["timings"]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.stream_child", json.dumps(spec)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(p: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str]:
    """Wait for the driver's end (or its kill); (return code, output tail)."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"driver timed out: {err[-3000:]}") from None
    return p.returncode, (out + err)[-3000:]


def run(spec: dict[str, Any], fault: str | None = None, timeout: float = 240) -> tuple[int, str]:
    """Run the driver to its end (or its kill); (return code, output tail). Prints how
    long it took (shown by ``pytest -rP``: where a chain's time goes)."""
    t0 = time.monotonic()
    out = finish(start(spec, fault), timeout)
    print(f"driver run ({fault or 'to its end'}): {time.monotonic() - t0:.1f} s")
    return out


def query_spec(tmp_path: Path, t: Target) -> dict[str, Any]:
    """The driver's spec: JSON files from ``tmp_path/in``, one per micro-batch, into ``t``
    through ``t.sink``, checkpoint ``tmp_path/cp``, lease ttl 3 s."""
    return {
        "src": str(tmp_path / "in"),
        "dest": t.url,
        "checkpoint": str(tmp_path / "cp"),
        "max_files": 1,
        "sink": t.sink,
        "options": {"partitionBy": "day", "leaseTtl": "3", **t.options},
    }


def hudi_ids(dest: Path) -> list[int]:
    table = hudi.HudiTableBuilder.from_base_uri(str(dest.resolve())).build()
    return sorted(i for b in table.read(hudi.HudiReadOptions()) for i in b.to_pydict()["id"])


def labels(dest: Path) -> list[str]:
    """Labels of the completed instants that have one, in instant order."""
    out = []
    for name in sorted(os.listdir(dest / ".hoodie")):
        if name.endswith((".commit", ".replacecommit")):
            meta = json.loads((dest / ".hoodie" / name).read_text())
            if "amcommit.label" in meta["extraMetadata"]:
                out.append(meta["extraMetadata"]["amcommit.label"])
    return out


def commit_seconds(timings: Path, batch: int) -> float:
    """How long ``commit()`` of micro-batch ``batch`` took (its last call), from the sink's
    timings file (``AMCOMMIT_STREAM_TIMINGS``)."""
    lines = [json.loads(line) for line in timings.read_text().splitlines()]
    last = [t for t in lines if t["batch"] == batch][-1]
    return float(last["returned"] - last["entered"])


@dataclass
class Target:
    """Where the stream writes: ``url`` with store ``options``; :meth:`files` gives a local
    folder holding exactly the table's objects (the folder itself for local files, else a
    fresh download), for ``spark.read.parquet`` and hudi-rs: Spark has no connector for the
    emulators here, and hudi-rs none for fake-gcs-server's plain-HTTP endpoint."""

    url: str
    options: dict[str, str]
    local: Path | None
    scratch: Path
    sink: str = "amcommit"
    """``amcommit`` (``writeStream.format``) or ``foreach`` (``foreachBatch`` + ``write_batch``)."""
    copies: int = 0

    def files(self) -> Path:
        if self.local is not None:
            return self.local
        from tests.spark.test_cloud import download

        self.copies += 1
        to = self.scratch / f"copy{self.copies}"
        download(self.url, self.options, to)
        return to


def check(spark: Any, t: Target, input_ids: list[int], exact: bool, parquet: bool = True) -> list[int]:
    """No duplicate, nothing foreign; ``exact``: all the input. Three readers agree
    (``parquet=False``: a kill left files of an inflight instant in their partitions, as
    a direct write's tasks write them, or mid renames, that only Hudi readers skip, until
    the restart rolls it back); with ``parquet``, no data file that no completed instant
    names either (a replay or rollback left no stray file)."""
    t0 = time.monotonic()
    reader = spark.read.format("amcommit")
    for k, v in t.options.items():
        reader = reader.option(k, v)
    amc = sorted(r.id for r in reader.load(t.url).select("id").collect())
    files = t.files()
    rs = hudi_ids(files)
    assert amc == rs, (amc, rs)
    if parquet:
        par = sorted(r.id for r in spark.read.parquet(str(files)).select("id").collect())
        assert par == amc, (par, amc)
        assert stray_files(files) == []
    assert len(set(amc)) == len(amc), f"duplicates: {amc}"
    assert set(amc) <= set(input_ids)
    if exact:
        assert amc == sorted(input_ids)
    got = labels(files)
    assert len(set(got)) == len(got), f"a label committed twice: {got}"
    print(f"check: {time.monotonic() - t0:.1f} s")
    return amc


@pytest.fixture(params=["azurite", "local-foreach"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    """The table's place: one cloud store (Azurite's Blob API; emulators started only when
    asked for) for ``format("amcommit")``, local files for ``foreachBatch``. The sink's
    stream logic is one code path for every store (its chain on local files duplicated the
    Azurite one: ~2-4 min of the suite);
    what differs by store (the commit's requests, the lease's conditional writes) is killed at
    every request by the engine and table kill matrices on every backend, and the lease by
    tests/spark/test_stream_units.py on every backend, so fake-gcs-server runs no chain of its
    own (it took ~4 min of the suite). The ``foreachBatch`` sink shares every store request
    with ``format("amcommit")`` (both commit through ``commit_batch``), so it runs its chain on
    local files only."""
    if request.param == "local-foreach":
        return Target(str(tmp_path / "table"), {}, tmp_path / "table", tmp_path, "foreach")
    import anyio

    from amcommit.store.azure import BlobStore

    az = request.getfixturevalue("azurite")
    container = f"stream{uuid.uuid4().hex[:12]}"
    store = BlobStore(container, **az.store_options())
    anyio.run(store.create_container)
    anyio.run(store.aclose)
    url = f"wasb://{container}@{az.account}.blob.core.windows.net/warehouse/table"
    opts = {"endpoint": az.endpoint, "account": az.account, "account_key": az.account_key}
    return Target(url, opts, None, tmp_path)


@pytest.mark.timeout(600)
def test_stream_kill_chain(spark: Any, target: Target, tmp_path: Path) -> None:
    """One query, its driver killed at a point of each class in turn, restarted each time:
    ``format("amcommit")`` on Azurite (Blob API), ``foreachBatch`` on local files.

    Both sinks run one micro-batch through the same code (tasks: ``_watch``; driver:
    ``commit_batch``), so a kill point class is run once per class where its classes are the
    same, on one of the two targets:

    - *dead run before its commit* (the restart rolls the dead run's inflight instant back,
      ``_roll_back_dead``): ``task_write`` (tasks mid-write; Azurite) stands for it and for
      ``before_commit`` (tasks done; local ``foreachBatch``), each run on the other target;
      ``after_begin`` (no task ran) is test_no_stall_after_a_kill_at_begin_or_a_stop_mid_batch;
    - *inside the job commit* (``in_renames``) and *committed, before Spark's commits/N*
      (``after_commit``: the replay is skipped by its label): on both targets (the commit's
      requests differ by store);
    - *graceful stop() mid batch* (``abort()`` rolls the instant back): ``foreachBatch`` here,
      ``format("amcommit")`` in test_no_stall_after_a_kill_at_begin_or_a_stop_mid_batch;
    - then ``foreachBatch`` only: a second query (its own checkpoint, ``format("amcommit")``)
      writes into the same table: its batch 0 is not mistaken for the first query's.
    """
    src, cp = tmp_path / "in", tmp_path / "cp"
    spec = query_spec(tmp_path, target)
    foreach = target.sink == "foreach"
    ids = drop(src, 0, 2)  # batches 0 and 1
    if not foreach:
        # killed during the task writes of batch 1 (batch 0 committed; batch 1's tasks wrote
        # their files in place: only Hudi readers skip them)
        rc, log = run(spec, "task_write@1")
    else:
        # killed after batch 1's writes, before commit()
        rc, log = run(spec, "before_commit@1")
    assert rc == -signal.SIGKILL, log
    # one file: which one is Spark's choice
    assert len(check(spark, target, ids, exact=False, parquet=False)) == 5
    # killed inside the job commit, before it publishes (the dead run's instant rolled
    # back first)
    rc, log = run(spec, "in_renames@1")
    assert rc == -signal.SIGKILL, log
    check(spark, target, ids, exact=False, parquet=False)
    # batch 1 committed, killed before Spark records commits/1: commit() comes again
    rc, log = run(spec, "after_commit@1")
    assert rc == -signal.SIGKILL, log
    assert not (cp / "commits" / "1").exists()
    assert check(spark, target, ids, exact=True) == sorted(ids)
    if foreach:
        # the replay of batch 1 is skipped; a graceful stop() in the middle of batch 2
        ids += drop(src, 100, 1)
        flag = tmp_path / "mid-batch"
        rc, log = run({**spec, "stop_mid_batch": True, "signal": str(flag)}, "slow_task@2=30")
        assert rc == 0 and flag.exists(), log
        check(spark, target, ids, exact=False)
        assert unfinished(target.files()) == [], log  # the stopped batch's instant rolled back
        ids += drop(src, 200, 1)
    else:
        ids += drop(src, 100, 1) + drop(src, 200, 1)
    # restarted to the end (the replay of batch 1 is skipped)
    rc, log = run(spec)
    assert rc == 0, log
    check(spark, target, ids, exact=True)
    files = target.files()
    got = labels(files)
    app = got[0].rsplit(":", 1)[0]
    assert got == [f"{app}:{b}" for b in range(4)], got
    temp = files / ".hoodie" / ".aux" / "amcommit"
    assert not [n for n in (os.listdir(temp) if temp.exists() else []) if n[0].isdigit()]
    if not foreach:
        return
    # a second query (its own checkpoint) into the same table
    other = tmp_path / "in2"
    ids += drop(other, 500, 1)
    rc, log = run({**spec, "src": str(other), "checkpoint": str(tmp_path / "cp2"), "sink": "amcommit"})
    assert rc == 0, log
    check(spark, target, ids, exact=True)
    more = labels(files)
    assert more[:4] == got and len(more) == 5 and more[4].endswith(":0"), more
    assert more[4].rsplit(":", 1)[0] != app, more


@pytest.mark.timeout(600)
def test_two_runs_of_one_query_at_once(spark: Any, tmp_path: Path) -> None:
    """Run A of a query is in the middle of a batch (a slow task renewing the query's lease)
    when run B of the same query (same checkpoint) starts: B fails with one clear line and
    leaves nothing behind; A then finishes, and the table holds exactly the input once."""
    src, dest = tmp_path / "in", tmp_path / "table"
    t = Target(str(dest), {}, dest, tmp_path)
    spec = query_spec(tmp_path, t)
    ids = drop(src, 0, 2)
    flag, release = tmp_path / "a-mid-batch", tmp_path / "a-may-go-on"
    # A's task stays in its batch (renewing the lease) until B has ended: however long B's
    # start takes on a loaded machine, B meets A mid-batch (a fixed sleep of 25 s was once
    # over before B got there: B then failed on Spark's own offset log instead)
    a = start({**spec, "signal": str(flag), "release": str(release)}, "slow_task@0=400")
    try:
        deadline = time.monotonic() + 300  # ~200 s at load ~40
        while not flag.exists():
            assert a.poll() is None, finish(a)[1]
            assert time.monotonic() < deadline, "run A never reached its batch"
            time.sleep(0.2)
        rc_b, log_b = run(spec)
    finally:
        release.touch()
        rc_a, log_a = finish(a)
    assert rc_b != 0, log_b
    assert "is already running in another run" in log_b, log_b
    assert rc_a == 0, log_a
    check(spark, t, ids, exact=True)
    got = labels(dest)
    assert len(got) == 2 and got[0].endswith(":0") and got[1].endswith(":1"), got
    temp = dest / ".hoodie" / ".aux" / "amcommit"
    assert not [n for n in (os.listdir(temp) if temp.exists() else []) if n[0].isdigit()]


@pytest.mark.timeout(600)
def test_no_stall_after_a_kill_at_begin_or_a_stop_mid_batch(spark: Any, tmp_path: Path) -> None:
    """Issue 23 item 7. The driver is killed right after batch 1's instant was allocated,
    before any task ran (no task wrote the owner file): the restarted query commits batch 1
    at once (within ``leaseTtl``; it used to wait ``writer_ttl``, 95-115 s), then is
    stopped gracefully (``stop()``) in the middle of batch 2: that leaves nothing inflight,
    and another Spark application (this test's session) appends into the table at once (it
    used to wait 114 s)."""
    src, dest = tmp_path / "in", tmp_path / "table"
    t = Target(str(dest), {}, dest, tmp_path)
    spec = query_spec(tmp_path, t)
    # a writer_ttl far above every bound below: a wait for it cannot pass for a slow machine
    # (with the default 120 s, the plain append took 68 s at load ~40 against a bound of 60)
    spec["options"]["writer_ttl"] = str(WRITER_TTL)
    timings = tmp_path / "timings.jsonl"
    ids = drop(src, 0, 2)
    rc, log = run(spec, "after_begin@1")
    assert rc == -signal.SIGKILL, log
    left = unfinished(dest)
    staged = [n.split("/")[2] for n in left if n.startswith(".aux/amcommit/")]
    assert len(staged) == 1 and f"{staged[0]}.inflight" in left, left
    assert not (dest / ".hoodie" / ".aux" / "amcommit" / staged[0] / "_stream.json").exists()  # no task ran
    # the restart: batch 1's commit rolls the dead run's instant back and commits at once;
    # then a graceful stop() in the middle of batch 2: abort() rolls its instant back
    drop(src, 100, 1)  # batch 2 (batch 1 is replayed with its recorded offsets)
    flag = tmp_path / "mid-batch"
    rc, log = run(
        {**spec, "timings": str(timings), "stop_mid_batch": True, "signal": str(flag)}, "slow_task@2=30"
    )
    assert rc == 0 and flag.exists(), log
    assert commit_seconds(timings, 1) < 60.0, timings.read_text()  # a wait: writer_ttl 900 s
    assert unfinished(dest) == [], log
    check(spark, t, ids, exact=True)
    # the next writer, another Spark application, does not wait
    t0 = time.monotonic()
    more = spark.createDataFrame(
        [(900, "2026-11-01", "x"), (901, "2026-11-02", "y")], "id LONG, day STRING, v STRING"
    )
    more.write.format("amcommit").mode("append").option("partitionBy", "day").option(
        "writer_ttl", str(WRITER_TTL)
    ).save(str(dest))
    took = time.monotonic() - t0
    assert took < 240.0, took  # a wait for the stopped batch's writer takes writer_ttl (900 s)
    check(spark, t, [*ids, 900, 901], exact=True)
    assert unfinished(dest) == []
    got = labels(dest)
    assert len(got) == 2 and got[0].endswith(":0") and got[1].endswith(":1"), got
