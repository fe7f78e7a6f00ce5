"""Scale: a job commit of N files in M task manifests on a store with no I/O cost.

The synthetic store serves each task manifest as bytes made on request from one template
encoded once (one C-level bytes formatting per manifest: no data is kept, so the peak RSS
measured is the engine's own), and answers renames, deletes and mkdirs at once. It yields
to the event loop on every manifest read and every 256th rename, as a store with I/O
would (else nothing else runs for the whole stage: the destination lock's heartbeat
starves in a 10M-file commit).

Measured, per row:

* ``entries_per_s``: entries / wall time of the engine's ``load_manifests`` stage, end to
  end: listing, reading (the store formatting the bytes: ``generate_s``), decoding
  (msgspec), validating (``check_manifest_columns``), spooling, the exact duplicate check
  across manifests, the file/directory clash check.
* ``engine_entries_per_s``: the same, minus the store's ``generate_s``.
* ``load_cpu_entries_per_s``: entries / process CPU time of the stage (less sensitive to
  other processes on the machine).
* ``rename_s``/``renames_per_s``: the engine's own per-file overhead with a no-op rename;
  ``total_s``, ``cpu_ms_per_file``: the whole commit; ``peak_rss_mb``: the process's.

    python -m benchmarks.scale --files 1000000 --manifests 10000
    python -m benchmarks.scale --rows 1000000,3000000,10000000   # one fresh process each
    python -m benchmarks.scale --local --rounds 3   # load_manifests on 20,000 local files

``--rows`` and ``--local`` write ``benchmarks/results/tmp/scale*.json`` (``--save``:
``benchmarks/results/``, tracked).
"""

from __future__ import annotations

import argparse
import json
import operator
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Self

import anyio
import anyio.lowlevel

from amcommit import loop as amcommit_loop
from amcommit.api import commit_job
from amcommit.committer import CommitterConfig
from amcommit.committer import spool as spool_module
from amcommit.committer.layout import JobLayout
from amcommit.committer.report import Progress
from amcommit.committer.spool import DestIndex
from amcommit.errors import NotFound
from amcommit.iostats import IOStatistics
from amcommit.manifest import TASK_MANIFEST_TYPE, FileEntry, TaskManifest, encode_json
from amcommit.paths import basename
from amcommit.store.base import Capabilities, ObjectInfo, PutMode, RenameResult, WriteMode
from amcommit.store.local import LocalStore
from benchmarks import local_commit
from benchmarks.common import (
    Measure,
    add_save_arg,
    load_average,
    run_isolated,
    scratch_dir,
    table,
    write_json,
)
from benchmarks.job_commit import own_peak_rss_mb

LOCAL_JOB = local_commit.JOB

ROOT = "mem://bench/"
JOB = "202611220100_0001"


class SyntheticStore:
    """A Store whose task manifests are generated on demand; no data is kept."""

    capabilities = Capabilities(
        atomic_rename=True, directories=False, etag_kept_on_rename=True, name="synthetic"
    )

    def __init__(self, layout: JobLayout, manifests: int, files_per_manifest: int) -> None:
        self.layout = layout
        self.n = manifests
        self.per = files_per_manifest
        self.iostats = IOStatistics()
        self.small: dict[str, bytes] = {}
        self._tpl: bytes | None = None
        self._pick: Callable[[tuple[bytes, bytes, bytes]], tuple[bytes, ...]] = operator.itemgetter(0, 0)
        self.gen_seconds = 0.0
        self.renames = 0
        """Time spent generating manifests (the benchmark's cost, not the engine's)."""

    @property
    def root_uri(self) -> str:
        return ROOT

    def _template(self) -> bytes:
        """The manifest as a bytes %-format (its own ``%`` escaped): one ``%s`` per place
        the task number goes (``_pick`` orders the three forms of it for them)."""
        lay = self.layout
        ta = f"attempt_{JOB}_m_@T6@_0"
        tdir = f"{ROOT}{lay.tasks_dir}/{ta}"
        files = [
            FileEntry(
                f"{tdir}/day={i % 30:02d}/part-@T5@-{i:04d}-{JOB}.parquet",
                f"{ROOT}{lay.dest}/day={i % 30:02d}/part-@T5@-{i:04d}-{JOB}.parquet",
                1_048_576 + i,
                f"0x8DC@T8@{i:04X}",
            )
            for i in range(self.per)
        ]
        m = TaskManifest(
            type=TASK_MANIFEST_TYPE,
            version=1,
            job_id=JOB,
            job_attempt_number=0,
            task_id=f"task_{JOB}_m_@T6@",
            task_attempt_id=ta,
            task_attempt_dir=tdir,
            files=files,
        )
        tpl = encode_json(m).replace(b"%", b"%%")
        order = [k for k in re.findall(rb"@T[658]@", tpl)]
        self._pick = operator.itemgetter(*(b"@T6@@T5@@T8@".index(k) // 4 for k in order))
        return re.sub(rb"@T[658]@", b"%s", tpl)

    def manifest_bytes(self, t: int) -> bytes:
        """Task ``t``'s manifest: the template formatted with the task number (C calls
        only, so the benchmark measures the engine, not the generator)."""
        t0 = time.perf_counter()
        if self._tpl is None:
            self._tpl = self._template()
        data: bytes = self._tpl % self._pick((b"%06d" % t, b"%05d" % t, b"%08X" % t))
        self.gen_seconds += time.perf_counter() - t0
        return data

    async def stat(self, path: str) -> ObjectInfo:
        if path in self.small:
            return ObjectInfo(path, len(self.small[path]), "e")
        raise NotFound("synthetic", path=path)

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        if prefix == self.layout.manifests_dir:
            for t in range(self.n):
                yield ObjectInfo(f"{prefix}/task_{JOB}_m_{t:06d}-manifest.json", 1)
        elif prefix == self.layout.job_dir and not recursive:
            yield ObjectInfo(self.layout.job_marker, 1)
        elif prefix == self.layout.job_dir:
            for p in list(self.small):
                if p.startswith(prefix + "/"):
                    yield ObjectInfo(p, len(self.small[p]))

    async def get(self, path: str) -> bytes:
        await anyio.lowlevel.checkpoint()  # as a read with I/O would: the lock's heartbeat runs
        if path in self.small:
            return self.small[path]
        if path.endswith("-manifest.json"):
            t = int(basename(path).split("_m_")[1].split("-")[0])
            return self.manifest_bytes(t)
        raise NotFound("synthetic", path=path)

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        self.small[path] = data
        return ObjectInfo(path, len(data), "e")

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        self.renames += 1
        if not self.renames % 256:  # yield now and then, as a store with I/O would
            await anyio.lowlevel.checkpoint()
        if src in self.small:
            self.small[dst] = self.small.pop(src)
        return RenameResult(dst, src_etag)

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        return self.small.pop(path, None) is not None

    async def mkdirs(self, path: str) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def run(files: int, manifests: int, io_threads: int, load_threads: int) -> dict[str, object]:
    """One job commit of ``files`` files in ``manifests`` synthetic manifests."""
    per = files // manifests
    layout = JobLayout("warehouse/events", JOB)
    store = SyntheticStore(layout, manifests, per)
    store.small[layout.job_marker] = b"{}"
    cfg = CommitterConfig(io_threads=io_threads, load_threads=load_threads)
    cpu: dict[str, float] = {}

    def progress(p: Progress) -> None:  # the load stage's process CPU time
        if p.stage == "load_manifests" and p.phase in ("start", "end"):
            cpu[p.phase] = time.process_time()

    with Measure() as m:
        report = await commit_job(store, layout.dest, JOB, config=cfg, progress=progress)
    load_s = report.stage_seconds["load_manifests"]
    load_cpu = cpu["end"] - cpu["start"]
    rename_s = report.stage_seconds["rename_files"]
    return {
        "files": report.files,
        "manifests": report.manifests,
        "load_s": round(load_s, 2),
        "entries_per_s": round(report.files / load_s),
        "generate_s": round(store.gen_seconds, 2),
        "engine_entries_per_s": round(report.files / (load_s - store.gen_seconds)),
        "load_cpu_s": round(load_cpu, 2),
        "load_cpu_entries_per_s": round(report.files / load_cpu),
        "rename_s": round(rename_s, 2),
        "renames_per_s": round(report.files / rename_s),
        "total_s": round(m.wall, 2),
        "cpu_ms_per_file": round(m.cpu * 1000 / report.files, 4),
        "peak_rss_mb": round(own_peak_rss_mb(), 1),
        "success_bytes": len(store.small.get(layout.success_path, b"")),
        "numpy_index": report.files >= DestIndex.NUMPY_FROM and spool_module._numpy() is not None,
    }


async def run_local(root: str) -> dict[str, float]:
    """``commit_job`` of the job :func:`benchmarks.local_commit.prepare` made in ``root``:
    wall and process CPU milliseconds of its ``load_manifests`` stage, and of the whole."""
    cpu: dict[str, float] = {}

    def progress(p: Progress) -> None:
        if p.stage == "load_manifests" and p.phase in ("start", "end"):
            cpu[p.phase] = time.process_time()

    store = LocalStore(root, fsync=False)
    with Measure() as m:
        report = await commit_job(store, "dest", LOCAL_JOB, config=CommitterConfig(), progress=progress)
    return {
        "files": report.files,
        "load_manifests_ms": round(report.stage_seconds["load_manifests"] * 1000, 1),
        "load_manifests_cpu_ms": round((cpu["end"] - cpu["start"]) * 1000, 1),
        "commit_ms": round(m.wall * 1000, 1),
    }


ROW_COLUMNS = [
    "files",
    "manifests",
    "entries_per_s",
    "engine_entries_per_s",
    "load_cpu_entries_per_s",
    "load_s",
    "generate_s",
    "renames_per_s",
    "total_s",
    "cpu_ms_per_file",
    "peak_rss_mb",
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=1_000_000)
    p.add_argument("--manifests", type=int, default=10_000)
    p.add_argument("--io-threads", type=int, default=64)
    p.add_argument("--load-threads", type=int, default=16)
    p.add_argument("--rows", help="file counts, comma-separated: one fresh process each (100 per manifest)")
    p.add_argument("--local", action="store_true", help="load_manifests on local files instead")
    p.add_argument("--rounds", type=int, default=3, help="--local: rounds (best and all reported)")
    p.add_argument("--tasks", type=int, default=200, help="--local: manifests")
    p.add_argument("--per-task", type=int, default=100, help="--local: files per manifest")
    p.add_argument("--local-worker", help=argparse.SUPPRESS)
    p.add_argument("--no-numpy", action="store_true", help="the digest index without numpy (a set)")
    add_save_arg(p)
    a = p.parse_args()
    if a.no_numpy:
        spool_module._numpy = lambda: None  # type: ignore[assignment]
    if a.local_worker:
        print(json.dumps(amcommit_loop.run(run_local, a.local_worker)))
    elif a.local:
        rows, before = [], load_average()
        for r in range(a.rounds):
            with scratch_dir("amc-scale-local-") as root:
                anyio.run(local_commit.prepare, root, a.tasks, a.per_task)
                rows.append(run_isolated("benchmarks.scale", ["--local-worker", root]) | {"round": r})
                print(f"round {r}: {rows[-1]}", file=sys.stderr)
        best = min(rows, key=lambda x: x["load_manifests_ms"])
        print(table(rows, ["round", "files", "load_manifests_ms", "load_manifests_cpu_ms", "commit_ms"]))
        out = write_json(
            "scale_local",
            {"rows": rows, "best": best, "load_average_before_after": [before, load_average()]},
            save=a.save,
        )
        print(f"wrote {out}", file=sys.stderr)
    elif a.rows:
        rows, before = [], load_average()
        for n in (int(x) for x in a.rows.split(",")):
            args = ["--files", str(n), "--manifests", str(n // 100)] + (["--no-numpy"] if a.no_numpy else [])
            rows.append(run_isolated("benchmarks.scale", args, timeout=7200))
            print(f"{n:,} files: {rows[-1]}", file=sys.stderr)
        print(table(rows, ROW_COLUMNS, "Scale: synthetic manifests of 100 files, store with no I/O cost"))
        out = write_json(
            "scale_no_numpy" if a.no_numpy else "scale",
            {"rows": rows, "load_average_before_after": [before, load_average()]},
            save=a.save,
        )
        print(f"wrote {out}", file=sys.stderr)
    else:
        result = amcommit_loop.run(run, a.files, a.manifests, a.io_threads, a.load_threads)
        print(json.dumps(result), file=sys.stdout)


if __name__ == "__main__":
    main()
