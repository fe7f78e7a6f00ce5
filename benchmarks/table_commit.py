"""Table commit vs plain commit: the cost of the Hudi timeline, same files, same run.

Each round prepares a fresh destination holding one earlier commit, then a new job of
``--tasks`` task attempts x ``--files`` files (task commits done through amcommit; 10
partitions), and commits it in a fresh process (CPU time and peak RSS are its own):

* ``plain``: ``commit_job`` into a plain destination (``_temporary`` staging, ``_SUCCESS``);
* ``table``: ``commit_job`` of a table write (``begin_write`` done while preparing): staging in
  ``.hoodie/.temp/<instant>``, order check against the timeline, commit metadata with write
  stats, ``.hoodie_partition_metadata`` per partition, the completed instant published last.

Rounds alternate between contenders; both destinations are verified after every round.
The files are small stand-ins (the commit never reads them: row counts come from the
task manifests, as the Spark writer provides them).

``--backend local`` (default: a scratch folder, ``/dev/shm`` where writable), ``azurite``,
``gcs`` (fake-gcs-server) or ``all``: on an emulator, one fresh emulator per backend serves
every round (a fresh destination per round); each row also counts the commit's requests
by operation, so a fixed cost shows as requests.

    python -m benchmarks.table_commit --tasks 20 --files 100 --rounds 3 [--backend all] [--save]

Results: ``benchmarks/results/tmp/table_commit[_<backend>].json`` (``--save``:
``benchmarks/results/``, tracked).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

import anyio

from amcommit import loop as amcommit_loop
from amcommit.api import commit_job, setup_job
from amcommit.committer import CommitterConfig, commit_task, setup_task
from amcommit.paths import join
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.format.model import Operation
from amcommit.table.format.naming import base_file_name, new_file_id, write_token
from amcommit.table.write.task import TableSpec, begin_write
from benchmarks.clients import Target, amcommit_store, emulator
from benchmarks.common import (
    Measure,
    add_save_arg,
    alternate,
    best_of,
    peak_rss_mb,
    run_isolated,
    scratch_dir,
    table,
    write_json,
)

JOB = "202611230200_0001"
SPEC = TableSpec(name="bench", partition_fields=("day",))
AVRO = json.dumps(
    {
        "type": "record",
        "name": "bench_record",
        "namespace": "hoodie.bench",
        "fields": [{"name": "day", "type": ["null", "string"], "default": None}],
    }
)


BACKENDS = ("local", "azurite", "gcs")


def open_store(backend: str, where: str) -> Store:
    """The store of a round: ``where`` is a local root, or a :class:`Target` as JSON."""
    if backend == "local":
        return LocalStore(where, fsync=False)
    return amcommit_store(Target.from_json(json.loads(where)), CommitterConfig().io_threads)  # type: ignore[no-any-return]


async def _task_files(
    store: Store, work: str, t: int, files: int, instant: str | None, round_: int
) -> dict[str, int]:
    rows: dict[str, int] = {}
    for i in range(files):
        name = (
            base_file_name(new_file_id(), write_token(t, 1, 0), instant)
            if instant
            else f"part-{round_}-{t:05d}-{i:04d}.parquet"
        )
        rel = f"day={i % 10}/{name}"
        await store.put(join(work, rel), b"x" * 1024)
        rows[rel] = 100
    return rows


async def prepare(
    root: str, kind: str, tasks: int, files: int, backend: str = "local", dest: str = "dest"
) -> str:
    """Destination with one earlier commit, and a job ready to commit; returns the job id."""
    store = open_store(backend, root)
    async with store:
        return await _prepare(store, kind, tasks, files, dest)


async def _prepare(store: Store, kind: str, tasks: int, files: int, dest: str) -> str:
    config = CommitterConfig()
    for round_ in range(2):
        if kind == "table":
            w = await begin_write(store, dest, operation=Operation.INSERT, spec=SPEC, avro_schema=AVRO)
            layout, job, instant = w.layout, w.instant, w.instant
        else:
            job = f"{JOB}{round_}"
            layout, instant = await setup_job(store, dest, job), None
        n = tasks if round_ == 1 else 2
        for t in range(n):
            ta = f"attempt_{job}_m_{t:06d}_0"
            work = await setup_task(store, layout, ta)
            rows = await _task_files(store, work, t, files if round_ == 1 else 5, instant, round_)
            await commit_task(
                store, layout, f"task_{job}_m_{t:06d}", ta, extra_data={"hudi.rows": json.dumps(rows)}
            )
        if round_ == 0:
            await commit_job(store, dest, job, config=config)
    return job


def contender(kind: str, root: str, job: str, backend: str = "local", dest: str = "dest") -> dict[str, Any]:
    async def run() -> tuple[Any, dict[str, int]]:
        store = open_store(backend, root)
        async with store:
            report = await commit_job(store, dest, job, config=CommitterConfig())
            return report, store.iostats.snapshot().counters

    # the table commit's modules are imported lazily by commit_job: import them before
    # measuring, as the plain commit's are (at the top of this module)
    import amcommit.table.commit.table_commit  # noqa: F401

    with Measure() as m:
        report, counters = amcommit_loop.run(run)
    # requests sent per store operation, failed ones (e.g. a stat of a missing file) included
    requests = {
        k[3:]: v + counters.get(f"{k}.failures", 0)
        for k, v in sorted(counters.items())
        if k.startswith("op_") and "." not in k and v + counters.get(f"{k}.failures", 0)
    }
    return {
        "contender": kind,
        "backend": backend,
        "stage_ms": {k: round(v * 1000, 1) for k, v in report.stage_seconds.items()},
        "requests": requests,
        "requests_not_rename": sum(v for k, v in requests.items() if k != "rename"),
        "files": report.files,
        "seconds": m.wall,
        "files_per_s": report.files / m.wall,
        "cpu_ms_per_file": m.cpu * 1000 / report.files,
        "peak_rss_mb": peak_rss_mb(),
    }


async def verify_store(backend: str, where: str, dest: str, kind: str, expected: int) -> None:
    """The same check as :func:`verify`, by listing the emulator's store."""
    store = open_store(backend, where)
    async with store:
        names = [i.path[len(dest) + 1 :] async for i in store.list(dest, recursive=True) if not i.is_dir]
    data = [n for n in names if n.endswith(".parquet") and not n.startswith((".", "_temporary/"))]
    marker = (
        "_SUCCESS" in names
        if kind == "plain"
        else any(n.startswith(".hoodie/") and n.count("/") == 1 and n.endswith(".commit") for n in names)
    )
    if len(data) != expected or not marker or any(n.startswith("_temporary/") for n in names):
        raise SystemExit(f"verification failed ({kind}): {len(data)} files, expected {expected}")


async def remove_round(backend: str, where: str, prefix: str) -> None:
    """Delete everything a round wrote on the emulator."""
    store = open_store(backend, where)
    async with store:
        await store.delete(prefix, recursive=True)


def verify(root: str, kind: str, expected: int) -> None:
    dest = os.path.join(root, "dest")
    data = [
        f
        for d, dirs, fs in os.walk(dest)
        if "/." not in d and "_temporary" not in d
        for f in fs
        if f.endswith(".parquet")
    ]
    marker = (
        os.path.exists(os.path.join(dest, "_SUCCESS"))
        if kind == "plain"
        else any(n.endswith(".commit") for n in os.listdir(os.path.join(dest, ".hoodie")))
    )
    if len(data) != expected or not marker or os.path.exists(os.path.join(dest, "_temporary")):
        raise SystemExit(f"verification failed ({kind}): {len(data)} files, expected {expected}")


def run_backend(backend: str, a: argparse.Namespace) -> dict[str, Any]:
    """The alternating rounds on one backend; returns its rows, best rows and ratios."""
    rows: list[dict[str, Any]] = []
    expected = 2 * 5 + a.tasks * a.files
    with contextlib.ExitStack() as stack:
        where = ""
        if backend != "local":
            target, _ = stack.enter_context(emulator(backend))
            where = json.dumps(target.to_json())
        for r, kind in alternate(a.rounds, ("plain", "table")):
            with scratch_dir("amc-table-") as root:
                if backend == "local":
                    where, dest = root, "dest"
                else:
                    dest = f"r{r}-{kind}/dest"
                job = anyio.run(prepare, where, kind, a.tasks, a.files, backend, dest)
                row = run_isolated("benchmarks.table_commit", ["--worker", kind, where, job, backend, dest])
                if backend == "local":
                    verify(root, kind, expected)
                else:
                    anyio.run(verify_store, backend, where, dest, kind, expected)
                    # an ephemeral bucket's listing and lookups slow down as it fills:
                    # every round starts from the same, empty one
                    anyio.run(remove_round, backend, where, dest.partition("/")[0])
            rows.append(row | {"round": r})
            print(f"{backend} round {r} {kind}: {row['seconds']:.3f} s", file=sys.stderr)
    summary = best_of(rows, ("plain", "table"))
    best = {x["contender"]: x for x in summary}
    return {
        "rows": rows,
        "best": summary,
        "table_vs_plain_seconds": best["table"]["seconds"] / best["plain"]["seconds"],
        "table_vs_plain_cpu": best["table"]["cpu_ms_per_file"] / best["plain"]["cpu_ms_per_file"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=20)
    p.add_argument("--files", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backend", choices=(*BACKENDS, "all"), default="local")
    p.add_argument(
        "--quick",
        action="store_true",
        help="4 tasks x 25 files, 1 round, no JSON written (smoke test)",
    )
    p.add_argument(
        "--worker", nargs=5, metavar=("KIND", "WHERE", "JOB", "BACKEND", "DEST"), help=argparse.SUPPRESS
    )
    add_save_arg(p)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(contender(*a.worker)))
        return
    if a.quick:
        a.tasks, a.files, a.rounds = 4, 25, 1
    backends = BACKENDS if a.backend == "all" else (a.backend,)
    results: dict[str, dict[str, Any]] = {}
    for backend in backends:
        res = results[backend] = run_backend(backend, a)
        for row in res["best"]:
            row["backend"] = backend
        print(
            table(
                res["best"],
                ["contender", "files", "seconds", "files_per_s", "cpu_ms_per_file", "requests_not_rename"],
                f"{backend}: job commit, {a.tasks * a.files:,} files in {a.tasks} manifests: table vs "
                f"plain (best of {a.rounds})",
            )
        )
        for row in res["best"]:
            print(f"\n{row['contender']} requests: {row['requests']}\n  stage ms: {row['stage_ms']}")
        print(
            f"\n{backend}: table commit {res['table_vs_plain_seconds']:.3f}x the plain commit's time, "
            f"{res['table_vs_plain_cpu']:.3f}x its CPU (target <= 1.10x)\n"
        )
    if a.quick:
        return  # a smoke run: not a measurement, results/ keeps the last full run
    if a.backend != "all" and a.backend != "local":
        name = f"table_commit_{a.backend}"
    else:
        name = "table_commit"
    local = results.get("local")
    write_json(
        name,
        {
            "backends": results,
            # the local figures at the top level, as before
            **(
                {k: local[k] for k in ("rows", "best", "table_vs_plain_seconds", "table_vs_plain_cpu")}
                if local
                else {}
            ),
            "files": a.tasks * a.files,
            "rounds": a.rounds,
        },
        save=a.save,
    )


if __name__ == "__main__":
    main()
