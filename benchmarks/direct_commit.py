"""Table commits that copy nothing (issue 26): the direct table commit against the staged one
and against the plain commit of the same files, same run.

    python -m benchmarks.direct_commit commit [--backends local,azurite,gcs] [--tasks 20]
        [--files 100] [--count-files 10] [--rounds 3] [--save]
    python -m benchmarks.direct_commit latency [--files 20000] [--staged-files 1000,4000]
        [--delay 0.05] [--rounds 3] [--save]
    python -m benchmarks.direct_commit spark [--tasks 20] [--days 100] [--rows 200000]
        [--backends local,gcs] [--rounds 3] [--save]

Contenders (each job written by amcommit's own task side, then committed by
``amcommit.api.commit_job`` in a fresh process: CPU time and peak RSS are its own):

* ``plain``: a plain destination (``_temporary`` staging; the job commit renames every file,
  writes ``_SUCCESS``);
* ``staged``: a Hudi table write (``begin_write``; tasks ``setup_task`` / put into the
  attempt directory / ``commit_task``): the job commit renames every base file from the
  staging folder into the table, then publishes the instant;
* ``direct``: the same table write with its base files written in place by the tasks
  (``amcommit.table.write.direct.create_marker``, then the file at its final name: the requests of
  ``write_in_place`` without its closing instant check, which only a zombie attempt needs
  and which costs three lookups of missing objects per file, each a GET plus a prefix
  listing on GCS, quadratic on fake-gcs-server; ``commit_direct_task``): the job commit
  reconciles against the markers, publishes, then removes the markers. The task side with
  the check is measured by the ``spark`` scenario.

Scenarios:

* ``commit`` (issue 26, item 1): ``--tasks`` x ``--files`` (20 x 100: 2,000 files, 10
  partitions, 1 KiB each) on each backend (local files in ``/dev/shm``, Azurite,
  fake-gcs-server; one emulator per backend, a fresh destination per round, rounds
  alternating the order), ``--rounds`` rounds, medians; ratios direct / staged and direct /
  plain of the job commit's wall time. Every *mutating* request of the job commit (put,
  rename, delete, mkdirs, and the batch calls) is counted by a store wrapper
  (:class:`CountingStore`) at two file counts (``--count-files`` per task, one round each,
  and the full size): a batch call (Blob Batch delete, local batch rename) counts as **one
  request** and, separately, as its **sub-requests** (one per path); requests that delete
  a marker (``*.marker.CREATE``...) are counted apart ("marker removal"), so the rest can
  be seen not to grow with the files. ``to_visible_s``: from the start of the commit to the
  request that published it (the completed instant; ``_SUCCESS`` for plain);
* ``latency`` (item 3): fake-gcs-server (``--backends azurite``: Azurite) behind ``benchmarks.latency_proxy`` adding
  ``--delay`` to every request of the job commit (the tasks go straight to the emulator):
  direct at ``--files`` files in 20 tasks and at the largest staged size, staged at
  ``--staged-files`` (each size its own rounds); when staged is not measured at ``--files``, its time there is extrapolated
  from a least-squares line through its sizes, and marked so;
* ``spark`` (item 2): one Spark session (``local[2]``), ``--rows`` rows in ``--tasks``
  partitions, partitioned by ``day`` (``--days`` values: every task writes one file per
  day, 2,000 files), ``df.write.format("amcommit")`` into a new Hudi table with
  ``table_commit=staged`` and ``=direct``, alternating, ``--rounds`` each after a warm-up:
  the wall time of the whole ``save()`` (tasks plus commit) and its job commit (end of the
  Spark job to ``save()`` returning), on local files and (``--backends``) fake-gcs-server.

Every output is checked after every round (table: the base files of the instant in the
table, the completed instant, no staging or marker left; plain: the files and
``_SUCCESS``). Results: ``benchmarks/results/tmp/direct_<scenario>.json`` (``--save``:
``benchmarks/results/``, tracked), with the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import anyio

from benchmarks.common import (
    Measure,
    add_save_arg,
    alternate,
    load_average,
    run_isolated,
    scratch_dir,
    table,
    write_json,
)

CONTENDERS = ("plain", "staged", "direct")
BACKENDS = ("local", "azurite", "gcs")
PARTITIONS = 10
FILE_SIZE = 1024
JOB = "202611270300_0001"
AVRO = json.dumps(
    {
        "type": "record",
        "name": "bench_record",
        "namespace": "hoodie.bench",
        "fields": [{"name": "day", "type": ["null", "string"], "default": None}],
    }
)
GCS_MUTATING = ("gcs_insert", "gcs_delete", "gcs_rewrite", "gcs_patch", "gcs_move", "gcs_compose")
"""The GCS store's IO statistics operations that are mutating HTTP requests."""
_MARKER = re.compile(r"\.marker\.(CREATE|MERGE|APPEND)$|/\.hoodie/\.temp/[^/]+/MARKERS[^/]*$")
_PUBLISH = re.compile(r"(^|/)(\.hoodie/\d{17}\.(commit|replacecommit)|_SUCCESS)$")


def is_marker(path: str) -> bool:
    """A Hudi write marker (``<base file>.marker.<IOType>``, wherever its folder is), or a
    marker folder's ``MARKERS<n>`` / ``MARKERS.type`` file (timeline-server format)."""
    return _MARKER.search(path) is not None


# -- the counting store ----------------------------------------------------------------


class CountingStore:
    """Delegates to a store and counts its mutating calls (put, rename, delete, mkdirs,
    ``rename_batch``, ``delete_batch``): ``requests`` counts a batch call once,
    ``sub_requests`` counts each of its paths; both also split out the calls that delete
    markers (``marker_*``: a batch is a marker removal if any of its paths is a marker; its
    sub-requests are split path by path). Reads pass through uncounted. ``published_at``:
    the ``perf_counter`` time the call that published the commit returned (a put or rename
    onto a completed instant file or ``_SUCCESS``).

    A ``delete(recursive=True)`` is one call here (one request on local files and ADLS
    Gen2; the flat stores' cleanup lists and deletes object by object through ``delete``
    or ``delete_batch``, which are counted)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.requests: dict[str, int] = {}
        self.sub_requests: dict[str, int] = {}
        self.published_at: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> CountingStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.aclose()

    def _count(self, op: str, paths: Sequence[str]) -> None:
        markers = sum(1 for p in paths if is_marker(p))
        key = f"marker_{op}" if markers else op
        self.requests[key] = self.requests.get(key, 0) + 1
        if markers:
            self.sub_requests[f"marker_{op}"] = self.sub_requests.get(f"marker_{op}", 0) + markers
        if len(paths) - markers:
            self.sub_requests[op] = self.sub_requests.get(op, 0) + len(paths) - markers

    def _published(self, path: str) -> None:
        if _PUBLISH.search(path):
            self.published_at = time.perf_counter()

    async def put(self, path: str, data: bytes, **kw: Any) -> Any:
        self._count("put", [path])
        got = await self._inner.put(path, data, **kw)
        self._published(path)
        return got

    async def rename(self, src: str, dst: str, **kw: Any) -> Any:
        self._count("rename", [src])
        got = await self._inner.rename(src, dst, **kw)
        self._published(dst)
        return got

    async def delete(self, path: str, **kw: Any) -> bool:
        self._count("delete_recursive" if kw.get("recursive") else "delete", [path])
        return await self._inner.delete(path, **kw)  # type: ignore[no-any-return]

    async def mkdirs(self, path: str) -> None:
        self._count("mkdirs", [path])
        await self._inner.mkdirs(path)

    async def rename_batch(self, requests: Sequence[Any]) -> Any:
        self._count("rename_batch", [r.src for r in requests])
        got = await self._inner.rename_batch(requests)
        for r in requests:
            self._published(r.dst)
        return got

    async def delete_batch(self, paths: Sequence[str]) -> Any:
        self._count("delete_batch", list(paths))
        return await self._inner.delete_batch(paths)

    def summary(self) -> dict[str, Any]:
        """Totals: requests and sub-requests, each with its marker removal and the rest."""
        req, sub = self.requests, self.sub_requests
        out: dict[str, Any] = {
            "mutating_requests": sum(req.values()),
            "marker_requests": sum(v for k, v in req.items() if k.startswith("marker_")),
            "mutating_sub_requests": sum(sub.values()),
            "marker_sub_requests": sum(v for k, v in sub.items() if k.startswith("marker_")),
            "requests_by_op": dict(sorted(req.items())),
            "sub_requests_by_op": dict(sorted(sub.items())),
        }
        out["other_requests"] = out["mutating_requests"] - out["marker_requests"]
        out["other_sub_requests"] = out["mutating_sub_requests"] - out["marker_sub_requests"]
        return out


# -- stores and jobs -------------------------------------------------------------------


def open_store(backend: str, where: str) -> Any:
    """The store of a round: ``where`` is a local root, or a ``benchmarks.clients.Target``
    as JSON (amcommit's store with its defaults, limiter sized to ``io_threads``)."""
    from amcommit.committer import CommitterConfig
    from amcommit.store.local import LocalStore
    from benchmarks.clients import Target, amcommit_store

    if backend == "local":
        return LocalStore(where, fsync=False)
    return amcommit_store(Target.from_json(json.loads(where)), CommitterConfig().io_threads)


async def _write_job(
    store: Any, kind: str, dest: str, tasks: int, files: int, tag: str, check: bool = False
) -> str:
    """One job of ``tasks`` x ``files`` files of 1 KiB (``PARTITIONS`` partitions) written
    by amcommit's task side as ``kind``; returns the id to commit (a table's instant).
    ``direct``: each file's marker, then the file at its final name
    (``amcommit.table.write.direct.create_marker``, ``put``), then ``commit_direct_task``; with
    ``check`` the whole ``write_in_place`` (also the instant check after each upload)."""
    from amcommit import api
    from amcommit.committer import CommitterConfig, commit_task, setup_task
    from amcommit.table.format.model import Operation
    from amcommit.table.format.naming import base_file_name, new_file_id, write_token
    from amcommit.table.write.direct import AttemptMarkers, IOType, commit_direct_task, write_in_place
    from amcommit.table.write.task import TableSpec, begin_write

    data = b"x" * FILE_SIZE
    if kind == "plain":
        job = f"{JOB}{tag}"
        layout = await api.setup_job(store, dest, job, kind="files")
    else:
        w = await begin_write(
            store,
            dest,
            operation=Operation.INSERT,
            spec=TableSpec(name="bench", partition_fields=("day",)),
            avro_schema=AVRO,
        )
        job, layout = w.instant, w.layout
    limit = anyio.Semaphore(128)

    async def task(t: int) -> None:
        ta, tid = f"attempt_{job}_m_{t:06d}_0", f"task_{job}_m_{t:06d}"
        names = [
            f"day={i % PARTITIONS}/"
            + (
                base_file_name(new_file_id(), write_token(t, 1, 0), job)
                if kind != "plain"
                else f"part-{tag}-{t:05d}-{i:05d}.parquet"
            )
            for i in range(files)
        ]
        placed: list[tuple[str, int, str | None, int]] = []
        work = "" if kind == "direct" else await setup_task(store, layout, ta)
        # the attempt's one marker file (MARKERS<n>), rewritten before each upload
        markers = AttemptMarkers(store, dest, job, ta, CommitterConfig())

        async def one(rel: str) -> None:
            async with limit:
                if kind == "direct" and check:
                    info = await write_in_place(store, dest, job, rel, data, markers=markers)
                    assert info is not None, "the write was decided while its tasks ran"
                    placed.append((rel, info.size, info.etag, 100))
                elif kind == "direct":
                    # write_in_place's requests up to its closing instant check (which
                    # only a zombie needs, and which costs 3 stats of missing objects,
                    # each a GET plus a prefix listing on GCS: quadratic on the emulator)
                    await markers.mark(rel, IOType.CREATE)
                    info = await store.put(f"{dest}/{rel}", data)
                    placed.append((rel, info.size, info.etag, 100))
                else:
                    await store.put(f"{work}/{rel}", data)

        async with anyio.create_task_group() as tg:
            for rel in names:
                tg.start_soon(one, rel)
        if kind == "direct":
            await commit_direct_task(store, layout, tid, ta, placed)
        else:
            extra = {"hudi.rows": json.dumps(dict.fromkeys(names, 100))} if kind == "staged" else None
            await commit_task(store, layout, tid, ta, extra_data=extra)

    tsem = anyio.Semaphore(20)

    async def bounded(t: int) -> None:
        async with tsem:
            await task(t)

    async with anyio.create_task_group() as tg:
        for t in range(tasks):
            tg.start_soon(bounded, t)
    return job


async def prepare(backend: str, where: str, kind: str, dest: str, tasks: int, files: int) -> str:
    """A destination holding one earlier commit of the same kind (5 files), and a job of
    ``tasks`` x ``files`` ready to commit; returns its id."""
    from amcommit import api

    store = open_store(backend, where)
    async with store:
        first = await _write_job(store, kind, dest, 1, 5, "0")
        await api.commit_job(store, dest, first)
        return await _write_job(store, kind, dest, tasks, files, "1")


def contender(kind: str, backend: str, where: str, dest: str, job: str) -> dict[str, Any]:
    """The job commit of ``job`` in this (fresh) process, through a :class:`CountingStore`."""
    # the table commit's modules are imported lazily by commit_job: import them before
    # measuring, as the plain commit's are (amcommit.table.format.schema: pyarrow, ~100 ms)
    import importlib

    from amcommit import api
    from amcommit import loop as amcommit_loop
    from amcommit.committer import CommitterConfig
    from benchmarks.job_commit import own_peak_rss_mb, store_requests

    for module in ("amcommit.table.commit.table_commit", "amcommit.table.format.schema"):
        importlib.import_module(module)

    counting = CountingStore(open_store(backend, where))
    started = 0.0

    async def run() -> Any:
        nonlocal started
        async with counting:
            started = time.perf_counter()
            return await api.commit_job(counting, dest, job, config=CommitterConfig())

    with Measure() as m:
        report = amcommit_loop.run(run)
    inner = counting._inner
    ops = {op: st.count + st.fail_count for op, st in sorted(inner.iostats._ops.items())}
    return {
        "contender": kind,
        "backend": backend,
        "files": report.files,
        "seconds": m.wall,
        "to_visible_s": (counting.published_at - started) if counting.published_at else None,
        "cpu_ms_per_file": m.cpu * 1000 / max(report.files, 1),
        "peak_rss_mb": round(own_peak_rss_mb(), 1),
        "stage_ms": {k: round(v * 1000, 1) for k, v in report.stage_seconds.items()},
        # every request the store sent, reads included (HTTP requests on the emulators)
        "all_requests": store_requests(inner) if backend != "local" else None,
        "store_ops": ops,
        # GCS: the mutating HTTP requests themselves (a rename is rewrite + delete there)
        "http_mutating": sum(v for k, v in ops.items() if k in GCS_MUTATING) if backend == "gcs" else None,
        **counting.summary(),
    }


async def verify(backend: str, where: str, dest: str, kind: str, expected: int) -> str:
    """``exact`` if ``dest`` holds exactly ``expected`` data files, the commit's marker
    (the completed instant, ``_SUCCESS``) and no staging, marker or ``_temporary`` left."""
    store = open_store(backend, where)
    async with store:
        names = []
        with contextlib.suppress(Exception):
            names = [i.path[len(dest) + 1 :] async for i in store.list(dest, recursive=True) if not i.is_dir]
    data = [n for n in names if n.endswith(".parquet") and not n.startswith((".", "_temporary/"))]
    problems = []
    if len(data) != expected:
        problems.append(f"{len(data)} data files, expected {expected}")
    if kind == "plain":
        if "_SUCCESS" not in names:
            problems.append("no _SUCCESS")
        if any(n.startswith("_temporary/") for n in names):
            problems.append("_temporary left")
    else:
        if not any(re.fullmatch(r"\.hoodie/\d{17}\.commit", n) for n in names):
            problems.append("no completed instant")
        left = [n for n in names if is_marker(n) or n.endswith("-manifest.json") or "/tasks/" in n]
        if left:
            problems.append(f"{len(left)} staging files or markers left")
    return "exact" if not problems else "; ".join(problems)


async def remove_prefix(backend: str, where: str, prefix: str) -> None:
    store = open_store(backend, where)
    async with store:
        await store.delete(prefix, recursive=True)


def one_round(
    backend: str, where: str, kind: str, tasks: int, files: int, r: int, proxy: Any = None
) -> dict[str, Any]:
    """Prepare (straight to the store), commit in a fresh process (through ``proxy``:
    ``proxy(target) -> context manager`` yielding (proxied target, stats), see
    ``benchmarks.latency_proxy.proxied``), verify, remove. One row."""
    from benchmarks.clients import Target

    with scratch_dir("amc-direct-") as root:
        if backend == "local":
            where, dest = root, "dest"
        else:
            dest = f"r{r}-{kind}-{files}/dest"
        t0 = time.perf_counter()
        job = anyio.run(prepare, backend, where, kind, dest, tasks, files)
        setup_s = time.perf_counter() - t0
        commit_where, stats = where, None
        with contextlib.ExitStack() as stack:
            if proxy is not None:
                via, stats = stack.enter_context(proxy(Target.from_json(json.loads(where))))
                commit_where = json.dumps(via.to_json())
            try:
                row = run_isolated(
                    "benchmarks.direct_commit",
                    ["--worker", kind, backend, commit_where, dest, job],
                    timeout=7200,
                )
            except Exception as e:  # a failed commit is a finding: record it, keep going
                lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
                row = {"contender": kind, "backend": backend, "error": lines[-1][:400] if lines else repr(e)}
            if stats is not None:
                row["proxy"] = stats()
        row["verified"] = (
            anyio.run(verify, backend, where, dest, kind, 5 + tasks * files)
            if "error" not in row
            else f"FAILED: {row['error']}"
        )
        if backend != "local":
            anyio.run(remove_prefix, backend, where, dest.partition("/")[0])
    row.update(round=r, setup_s=round(setup_s, 1), job_files=tasks * files, load_average=load_average())
    if "error" in row:
        print(f"  {backend} {tasks * files:>6} files round {r} {kind:<7} {row['verified']}", file=sys.stderr)
        return row
    print(
        f"  {backend} {tasks * files:>6} files round {r} {kind:<7} {row['seconds']:8.3f} s "
        f"(visible {row['to_visible_s'] or 0:.3f} s) mutating {row['mutating_requests']} "
        f"(markers {row['marker_requests']}) {row['verified']}",
        file=sys.stderr,
        flush=True,
    )
    return row


def median_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (backend, files, contender): medians of time and CPU, the spread, the
    request counts of the median run (identical in every run of a contender)."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    failed: dict[tuple[str, int, str], list[str]] = {}
    for r in rows:
        if "error" in r:  # counted as failed runs of the contender, kept out of the medians
            failed.setdefault((r["backend"], r["job_files"], r["contender"]), []).append(r["verified"])
            continue
        groups.setdefault((r["backend"], r["job_files"], r["contender"]), []).append(r)
    out = []
    for (backend, files, kind), rs in groups.items():
        med = sorted(rs, key=lambda x: x["seconds"])[len(rs) // 2]
        vis = [x["to_visible_s"] for x in rs if x.get("to_visible_s") is not None]
        out.append(
            {
                "backend": backend,
                "files": files,
                "contender": kind,
                "runs": len(rs),
                "seconds": statistics.median(x["seconds"] for x in rs),
                "min_s": min(x["seconds"] for x in rs),
                "max_s": max(x["seconds"] for x in rs),
                "to_visible_s": statistics.median(vis) if vis else None,
                "cpu_ms_per_file": statistics.median(x["cpu_ms_per_file"] for x in rs),
                "stage_ms": med["stage_ms"],
                **{
                    k: med[k]
                    for k in (
                        "mutating_requests",
                        "marker_requests",
                        "other_requests",
                        "mutating_sub_requests",
                        "marker_sub_requests",
                        "other_sub_requests",
                        "requests_by_op",
                        "sub_requests_by_op",
                        "all_requests",
                        "http_mutating",
                    )
                },
                "verified": "exact" if all(x["verified"] == "exact" for x in rs) else med["verified"],
                "failed_runs": failed.get((backend, files, kind), []),
            }
        )
    for (backend, files, kind), fails in failed.items():
        if (backend, files, kind) not in groups:  # every run failed: no figures, the failures
            out.append(
                {"backend": backend, "files": files, "contender": kind, "runs": 0, "failed_runs": fails}
            )
    order = {b: i for i, b in enumerate(BACKENDS)}
    out.sort(key=lambda r: (order.get(r["backend"], 9), r["files"], CONTENDERS.index(r["contender"])))
    return out


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (backend, files): direct / staged and direct / plain of the median times."""
    out = []
    by = {(r["backend"], r["files"], r["contender"]): r for r in rows if r.get("seconds")}
    for backend, files in dict.fromkeys((r["backend"], r["files"]) for r in rows):
        d, s, p = (by.get((backend, files, k)) for k in ("direct", "staged", "plain"))
        if d is None:
            continue
        row: dict[str, Any] = {"backend": backend, "files": files}
        if s:
            row["direct_vs_staged"] = d["seconds"] / s["seconds"]
            if d.get("to_visible_s") and s.get("to_visible_s"):
                row["visible_direct_vs_staged"] = d["to_visible_s"] / s["to_visible_s"]
        if p:
            row["direct_vs_plain"] = d["seconds"] / p["seconds"]
        out.append(row)
    return out


COMMIT_COLUMNS = [
    "backend",
    "files",
    "contender",
    "seconds",
    "min_s",
    "max_s",
    "to_visible_s",
    "cpu_ms_per_file",
    "mutating_requests",
    "marker_requests",
    "other_requests",
    "mutating_sub_requests",
    "marker_sub_requests",
    "other_sub_requests",
    "http_mutating",
    "all_requests",
    "verified",
]
RATIO_COLUMNS = ["backend", "files", "direct_vs_staged", "direct_vs_plain", "visible_direct_vs_staged"]


def run_commit(
    backends: Sequence[str], tasks: int, files: int, count_files: int, rounds: int
) -> dict[str, Any]:
    """Item 1: every backend, the three contenders, ``rounds`` alternating rounds at
    ``tasks`` x ``files``, one round at ``tasks`` x ``count_files`` (request counts)."""
    from benchmarks.clients import emulator

    load_before = load_average()
    rows: list[dict[str, Any]] = []
    for backend in backends:
        with contextlib.ExitStack() as stack:
            where = ""
            if backend != "local":
                target, _ = stack.enter_context(emulator(backend))
                where = json.dumps(target.to_json())
            if count_files and count_files != files:
                for r, kind in alternate(1, CONTENDERS):
                    rows.append(one_round(backend, where, kind, tasks, count_files, r))
            for r, kind in alternate(rounds, CONTENDERS):
                rows.append(one_round(backend, where, kind, tasks, files, r))
    summary = median_rows(rows)
    return {
        "scenario": "commit",
        "tasks": tasks,
        "files_per_task": files,
        "count_files_per_task": count_files,
        "rounds": rounds,
        "load_average": {"before": load_before, "after": load_average()},
        "rows": summary,
        "ratios": add_ratios(summary),
        "runs": rows,
        "table": table(summary, COMMIT_COLUMNS) + "\n\n" + table(add_ratios(summary), RATIO_COLUMNS),
    }


# -- item 3: 50 ms per request ---------------------------------------------------------


def extrapolate(points: Sequence[tuple[int, float]], at: int) -> float:
    """The least-squares line through ``points`` (files, seconds) at ``at`` files (one
    point: proportional)."""
    if len(points) == 1:
        n, s = points[0]
        return s * at / n
    xs, ys = [float(n) for n, _ in points], [s for _, s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my + slope * (at - mx)


LATENCY_COLUMNS = [
    "contender",
    "files",
    "seconds",
    "min_s",
    "max_s",
    "to_visible_s",
    "cpu_ms_per_file",
    "mutating_requests",
    "marker_requests",
    "all_requests",
    "verified",
]


def run_latency_scenario(
    files: int,
    staged_files: Sequence[int],
    tasks: int,
    delay: float,
    rounds: int,
    plain: bool = False,
    backend: str = "gcs",
) -> dict[str, Any]:
    """Item 3: direct at ``files``, staged at each of ``staged_files`` (and direct at the
    largest of them too, for a ratio measured at one size), fake-gcs-server (``backend``
    ``azurite``: Azurite) with ``delay`` per request; ``plain``: the plain commit of the same
    ``files`` too, same run (issue 35 item 2: ``direct_vs_plain``)."""
    from functools import partial

    from benchmarks.clients import emulator
    from benchmarks.latency_proxy import proxied

    proxy = partial(proxied, delay=delay)
    load_before = load_average()
    rows: list[dict[str, Any]] = []
    sizes = sorted({files, *staged_files})
    with emulator(backend) as (target, _):
        where = json.dumps(target.to_json())
        for n in sizes:
            # direct at ``files`` and at the largest staged size (a ratio measured at one size)
            direct_at = n in (files, max(staged_files, default=files))
            kinds = [
                k
                for k in ("plain", "staged", "direct")
                if (k == "direct" and direct_at)
                or (k == "staged" and n in staged_files)
                or (k == "plain" and plain and n == files)
            ]
            for r, kind in alternate(rounds, kinds):
                rows.append(one_round(backend, where, kind, tasks, max(1, n // tasks), r, proxy=proxy))
    summary = median_rows(rows)
    for r in summary:
        r["backend"] = f"{backend}+latency"
    staged = [(r["files"], r["seconds"]) for r in summary if r["contender"] == "staged"]
    direct = {r["files"]: r for r in summary if r["contender"] == "direct"}
    big = direct[max(direct)]
    staged_big = next((r for r in summary if r["contender"] == "staged" and r["files"] == big["files"]), None)
    result: dict[str, Any] = {"files": big["files"], "direct_s": big["seconds"]}
    if staged_big is not None:
        result.update(staged_s=staged_big["seconds"], staged_measured=True)
    elif staged:
        result.update(staged_s=extrapolate(staged, big["files"]), staged_measured=False, staged_from=staged)
    if "staged_s" in result:
        result["speedup"] = result["staged_s"] / result["direct_s"]
    plain_row = next((r for r in summary if r["contender"] == "plain" and r["files"] == files), None)
    if plain_row is not None and files in direct:
        result.update(
            plain_s=plain_row["seconds"], direct_vs_plain=direct[files]["seconds"] / plain_row["seconds"]
        )
    same = [
        {"files": n, "speedup": s / direct[n]["seconds"]}
        for n, s in staged
        if n in direct and direct[n]["seconds"]
    ]
    text = table(summary, LATENCY_COLUMNS)
    if "speedup" in result:
        how = (
            "measured"
            if result["staged_measured"]
            else "extrapolated (least squares over " + ", ".join(f"{n:,}" for n, _ in staged) + " files)"
        )
        text += (
            f"\n\n{result['files']:,} files: direct {result['direct_s']:.1f} s, staged {result['staged_s']:.1f} s "
            f"({how}): {result['speedup']:.1f}x"
        )
    if "direct_vs_plain" in result:
        text += (
            f"\n\n{files:,} files in {tasks} tasks: direct {direct[files]['seconds']:.2f} s, plain "
            f"{result['plain_s']:.2f} s: direct / plain {result['direct_vs_plain']:.2f}x"
        )
    return {
        "scenario": "latency",
        "delay_s": delay,
        "tasks": tasks,
        "rounds": rounds,
        "load_average": {"before": load_before, "after": load_average()},
        "rows": summary,
        "result": result,
        "same_size_speedups": same,
        "runs": rows,
        "table": text,
    }


# -- item 2: whole Spark writes --------------------------------------------------------


def run_spark(
    backends: Sequence[str],
    rows_n: int,
    tasks: int,
    days: int,
    rounds: int,
    sizes: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Item 2: ``save()`` of the same DataFrame into a new table, staged vs direct;
    ``sizes``: (rows, days) of a backend other than ``rows_n`` and ``days``."""
    import tempfile
    import uuid
    from pathlib import Path

    from benchmarks.clients import emulator
    from benchmarks.spark_write import dataset, last_job_end, start

    load_before = load_average()
    spark = start(2)
    runs: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="amcommit-bench-direct-"))
    try:
        for backend in backends:
            b_rows, b_days = (sizes or {}).get(backend, (rows_n, days))
            df = dataset(spark, b_rows, tasks, b_days).cache()
            df.count()
            with contextlib.ExitStack() as stack:
                opts: dict[str, str] = {}
                if backend == "gcs":
                    target, _ = stack.enter_context(emulator("gcs"))
                    opts["endpoint"] = target.endpoint

                bucket = target.container if backend == "gcs" else ""

                def url(name: str, backend: str = backend, bucket: str = bucket) -> str:
                    return str(work / name) if backend == "local" else f"gs://{bucket}/{name}"

                def save(
                    commit: str, dest: str, frame: Any, opts: dict[str, str] = opts
                ) -> tuple[float, float, float]:
                    w = frame.write.format("amcommit").mode("append").option("tableFormat", "hudi")
                    w = w.option("partitionBy", "day").option("table_commit", commit)
                    for k, v in opts.items():
                        w = w.option(k, v)
                    t0 = time.perf_counter()
                    w.save(dest)
                    wall = time.perf_counter() - t0
                    end = last_job_end(spark)
                    return wall, (time.time() - end) * 1000, end

                warm = dataset(spark, 2_000, tasks, b_days)
                for commit in ("staged", "direct"):
                    save(commit, url(f"warm-{commit}-{uuid.uuid4().hex[:6]}"), warm)
                for r, commit in alternate(rounds, ("staged", "direct")):
                    name = f"t-{commit}-{r}-{uuid.uuid4().hex[:6]}"
                    wall, commit_ms, job_end = save(commit, url(name), df)
                    files = _count_table_files(backend, url(name), opts)
                    moved = _moved_after(url(name), job_end) if backend == "local" else None
                    if commit == "direct" and moved:
                        raise RuntimeError(f"direct write: {moved} base files were moved by the job commit")
                    runs.append(
                        {
                            "backend": backend,
                            "contender": commit,
                            "round": r,
                            "wall_s": wall,
                            "job_commit_ms": commit_ms,
                            "files": files,
                            "rows": b_rows,
                            # local: base files whose inode changed after the tasks ended
                            # (a staged commit renames every one; a direct commit none)
                            "moved_by_commit": moved,
                            "load_average": load_average(),
                        }
                    )
                    print(
                        f"  spark {backend} round {r} {commit}: {wall:.2f} s, commit {commit_ms:.0f} ms, "
                        f"{files} files",
                        file=sys.stderr,
                        flush=True,
                    )
            df.unpersist()
    finally:
        spark.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    summary = []
    for backend in backends:
        for commit in ("staged", "direct"):
            rs = [x for x in runs if x["backend"] == backend and x["contender"] == commit]
            summary.append(
                {
                    "backend": backend,
                    "contender": commit,
                    "files": rs[0]["files"],
                    "rows": rs[0]["rows"],
                    "runs": len(rs),
                    "wall_s": statistics.median(x["wall_s"] for x in rs),
                    "min_s": min(x["wall_s"] for x in rs),
                    "max_s": max(x["wall_s"] for x in rs),
                    "job_commit_ms": statistics.median(x["job_commit_ms"] for x in rs),
                }
            )
    ratios = []
    for backend in backends:
        s, d = (
            next(x for x in summary if x["backend"] == backend and x["contender"] == c)
            for c in ("staged", "direct")
        )
        ratios.append(
            {
                "backend": backend,
                "wall_direct_vs_staged": d["wall_s"] / s["wall_s"],
                "commit_direct_vs_staged": d["job_commit_ms"] / s["job_commit_ms"],
            }
        )
    cols = ["backend", "contender", "files", "rows", "wall_s", "min_s", "max_s", "job_commit_ms"]
    return {
        "scenario": "spark",
        "tasks": tasks,
        "days": days,
        "rounds": rounds,
        "load_average": {"before": load_before, "after": load_average()},
        "rows": summary,
        "ratios": ratios,
        "runs": runs,
        "table": table(summary, cols)
        + "\n\n"
        + table(ratios, ["backend", "wall_direct_vs_staged", "commit_direct_vs_staged"]),
    }


def _moved_after(root: str, when: float) -> int:
    """Base files below ``root`` whose inode changed (a rename sets ctime) after ``when``."""
    return sum(
        1
        for d, _, fs in os.walk(root)
        if "/.hoodie" not in d
        for f in fs
        if f.endswith(".parquet") and os.stat(os.path.join(d, f)).st_ctime > when
    )


def _count_table_files(backend: str, url: str, opts: dict[str, str]) -> int:
    """Base files in the table at ``url`` (its data files outside ``.hoodie``)."""
    if backend == "local":
        return sum(
            1 for d, _, fs in os.walk(url) if "/.hoodie" not in d for f in fs if f.endswith(".parquet")
        )
    from amcommit.store.schemes import open_location

    async def count() -> int:
        store, dest = open_location(url, **opts)
        async with store:
            names = [i.path async for i in store.list(dest, recursive=True) if not i.is_dir]
        return sum(1 for n in names if n.endswith(".parquet") and "/.hoodie/" not in n)

    return anyio.run(count)


# -- entry point -----------------------------------------------------------------------

NAMES = {"commit": "direct_commit", "latency": "direct_latency", "spark": "direct_spark"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="benchmarks.direct_commit", description=(__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument("scenario", nargs="?", choices=("commit", "latency", "spark"))
    ap.add_argument(
        "--worker", nargs=5, metavar=("KIND", "BACKEND", "WHERE", "DEST", "JOB"), help=argparse.SUPPRESS
    )
    ap.add_argument(
        "--backends",
        default=None,
        help="commit: local,azurite,gcs; latency: gcs or azurite; spark: local,gcs",
    )
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument(
        "--files", type=int, default=None, help="commit: files per task (100); latency: files (20000)"
    )
    ap.add_argument("--count-files", type=int, default=10, help="commit: files per task of the second count")
    ap.add_argument("--staged-files", default="1000,4000", help="latency: sizes the staged commit runs at")
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--plain", action="store_true", help="latency: the plain commit of --files too")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--days", type=int, default=100)
    ap.add_argument(
        "--gcs-size",
        default=None,
        help="spark: ROWS,DAYS on fake-gcs-server when they differ (its direct task side is slow there)",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the JSON into this directory instead")
    add_save_arg(ap)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(contender(*a.worker)))
        return 0
    if a.scenario is None:
        ap.error("name a scenario: commit, latency or spark")
    if a.scenario == "commit":
        res = run_commit(
            (a.backends or ",".join(BACKENDS)).split(","), a.tasks, a.files or 100, a.count_files, a.rounds
        )
    elif a.scenario == "latency":
        staged = [int(x) for x in a.staged_files.split(",") if x]
        res = run_latency_scenario(
            a.files or 20_000,
            staged,
            a.tasks,
            a.delay,
            a.rounds,
            a.plain,
            (a.backends or "gcs").split(",")[0],
        )
    else:
        sizes = None
        if a.gcs_size:
            g_rows, g_days = (int(x) for x in a.gcs_size.split(","))
            sizes = {"gcs": (g_rows, g_days)}
        res = run_spark((a.backends or "local").split(","), a.rows, a.tasks, a.days, a.rounds, sizes)
    print(res["table"])
    name = NAMES[a.scenario]
    if a.out:
        from pathlib import Path

        from benchmarks.common import run_info

        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{name}.json"
        path.write_text(json.dumps({"run": run_info(), **res}, indent=2, default=str) + "\n")
    else:
        path = write_json(name, res, save=a.save)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
