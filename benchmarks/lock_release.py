"""Back-to-back table commits into one destination on the GCS double with GCS's per-object
limit on (about one change per second of one object name): the table lock released by a
create-only marker (``lock_release="marker"``) and by a conditional rewrite
(``lock_release="rewrite"``) against the default delete-based release, same run.

Each round, each contender gets a fresh bucket on one in-process
:class:`~amcommit.testing.gcs_double.GcsDouble` (``object_rate=OBJECT_RATE``, bursts of
``OBJECT_BURST``) and makes ``--commits`` table writes one after the other, each
``begin_write`` + one task of one file + ``commit_job``, through a store with the default
retry policy (a refused change waits out GCS's window, 1 s):

* ``marker``: released by creating ``<lock>.released.<token>`` (a new name each commit),
  acquired by a conditional rewrite: the lock object changes once per commit;
* ``rewrite``: the lock acquired and released by conditional rewrites (``ifGenerationMatch``);
* ``delete``: the default release (read, then delete), re-created by the next commit;
* ``unlimited`` / ``unlimited-delete``: ``marker`` / ``delete`` with the per-object limit
  off (what the limit costs, and what each release costs without it).

Printed and saved: commits/s (commits / the whole loop's seconds), median seconds per
commit, changes of the lock object per commit, requests to the double per commit (429s
included), refusals (429) of each name, load average.
``rewrite`` and ``delete`` change the lock twice per commit (acquire, release): under one
change per second of one name neither can pass ~0.5 commits/s in the steady state;
``marker`` changes it once (~1 commit/s).

    python -m benchmarks.lock_release [--commits 20] [--rounds 2] [--save]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio

from amcommit.api import commit_job
from amcommit.committer import CommitterConfig, commit_task, setup_task
from amcommit.committer.lock import lock_path
from amcommit.paths import join
from amcommit.store.gcs import GcsStore
from amcommit.store.limits import Limiter
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import STAGING_DIR, base_file_name, new_file_id, write_token
from amcommit.table.write import TableSpec, begin_write
from amcommit.testing.gcs_double import OBJECT_BURST, OBJECT_RATE, GcsDouble
from benchmarks.common import add_save_arg, alternate, load_average, table, write_json

SPEC = TableSpec(name="bench", partition_fields=("day",))
AVRO = json.dumps(
    {
        "type": "record",
        "name": "bench_record",
        "namespace": "hoodie.bench",
        "fields": [{"name": "day", "type": ["null", "string"], "default": None}],
    }
)
CONTENDERS = ("marker", "rewrite", "delete", "unlimited", "unlimited-delete")


async def _one_write(store: GcsStore, dest: str, config: CommitterConfig) -> None:
    w = await begin_write(store, dest, operation=Operation.INSERT, spec=SPEC, avro_schema=AVRO, config=config)
    ta = f"attempt_{w.instant}_m_000000_0"
    work = await setup_task(store, w.layout, ta)
    rel = f"day=1/{base_file_name(new_file_id(), write_token(0, 0, 0), w.instant)}"
    await store.put(join(work, rel), b"x" * 1024)
    await commit_task(
        store, w.layout, f"task_{w.instant}_m_000000", ta, extra_data={"hudi.rows": json.dumps({rel: 1})}
    )
    report = await commit_job(store, dest, w.instant, config=config)
    assert report.success


async def run_contender(double: GcsDouble, kind: str, commits: int, round_: int) -> dict[str, Any]:
    bucket = f"lock-{kind}-{round_}"
    double.create_bucket(bucket)
    double.object_rate = None if kind.startswith("unlimited") else OBJECT_RATE
    store = GcsStore(
        bucket,
        endpoint=double.url,
        use_move=True,
        verify_preconditions=False,
        limiter=Limiter(max_concurrency=64),
        write_limiter=Limiter(max_concurrency=None, rate=1000.0, burst=100.0),
    )
    release = {"delete": "delete", "rewrite": "rewrite", "unlimited-delete": "delete"}.get(kind, "marker")
    config = CommitterConfig(lock_release=release)  # type: ignore[arg-type]
    seconds: list[float] = []
    calls0 = sum(double.calls.values())
    async with store:
        t0 = time.monotonic()
        for _ in range(commits):
            t = time.monotonic()
            await _one_write(store, "tbl", config)
            seconds.append(time.monotonic() - t)
        total = time.monotonic() - t0
    name = f"{bucket}/{lock_path('tbl', staging=STAGING_DIR)}"
    refused = {k.split("/", 1)[1]: v for k, v in double.rate_limited.items() if k.startswith(bucket + "/")}
    return {
        "contender": kind,
        "round": round_,
        "commits": commits,
        "commits_per_s": round(commits / total, 3),
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(max(seconds), 3),
        "lock_changes_per_commit": round(double.changes[name] / commits, 2),
        "requests_per_commit": round((sum(double.calls.values()) - calls0) / commits, 1),
        "refused_429": sum(refused.values()),
        "refused_names": sorted(refused),
        "load": load_average(),
    }


async def run(commits: int, rounds: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with GcsDouble(object_rate=OBJECT_RATE, object_burst=OBJECT_BURST) as double:
        for round_, kind in alternate(rounds, CONTENDERS):
            out.append(await run_contender(double, kind, commits, round_))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    add_save_arg(ap)
    a = ap.parse_args()
    rows = anyio.run(run, a.commits, a.rounds)
    cols = [
        "contender",
        "round",
        "commits_per_s",
        "median_s",
        "max_s",
        "lock_changes_per_commit",
        "requests_per_commit",
        "refused_429",
        "load",
    ]
    print(
        table(
            rows,
            cols,
            f"{a.commits} back-to-back table commits into one destination, GCS double, per-object limit",
        )
    )
    best = {k: max(r["commits_per_s"] for r in rows if r["contender"] == k) for k in CONTENDERS}
    ratios = {k: round(best[k] / best["delete"], 2) for k in ("marker", "rewrite")}
    print(f"\nbest commits/s: {best}; / delete: {ratios}")
    path = write_json("lock_release", {"rows": rows, "best": best, "ratio_to_delete": ratios}, save=a.save)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
