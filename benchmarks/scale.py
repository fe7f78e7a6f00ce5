"""Scale: a job commit of N files in M task manifests on a store with no I/O cost.

The synthetic store generates each manifest on request (so the store holds no data and
the peak RSS measured is the engine's own) and answers renames, deletes and mkdirs at once.
Measured: manifest load rate (entries/s; ``entries_per_s`` includes generating the JSON,
``engine_entries_per_s`` excludes the generator's own time),
rename rate (engine overhead only), client CPU, and the peak RSS of the process.

    python -m benchmarks.scale --files 1000000 --manifests 10000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Self

from amcommit import loop as amcommit_loop
from amcommit.committer import CommitterConfig, commit_job
from amcommit.committer.layout import JobLayout
from amcommit.errors import NotFound
from amcommit.iostats import IOStatistics
from amcommit.manifest import TASK_MANIFEST_TYPE, FileEntry, TaskManifest, encode_json
from amcommit.paths import basename
from amcommit.store.base import Capabilities, ObjectInfo, PutMode, RenameResult, WriteMode
from benchmarks.common import Measure, peak_rss_mb

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
        self.gen_seconds = 0.0
        """Time spent generating manifests (the benchmark's cost, not the engine's)."""

    @property
    def root_uri(self) -> str:
        return ROOT

    def _template(self) -> bytes:
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
        return encode_json(m)

    def manifest_bytes(self, t: int) -> bytes:
        """Task ``t``'s manifest: the template with the task number filled in (cheap, so
        the benchmark measures the engine, not the generator)."""
        t0 = time.perf_counter()
        if self._tpl is None:
            self._tpl = self._template()
        data = self._tpl.replace(b"@T6@", b"%06d" % t).replace(b"@T5@", b"%05d" % t)
        data = data.replace(b"@T8@", b"%08X" % t)
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
    per = files // manifests
    layout = JobLayout("warehouse/events", JOB)
    store = SyntheticStore(layout, manifests, per)
    store.small[layout.job_marker] = b"{}"
    cfg = CommitterConfig(io_threads=io_threads, load_threads=load_threads)
    with Measure() as m:
        report = await commit_job(store, layout.dest, JOB, config=cfg)  # type: ignore[arg-type]
    load_s = report.stage_seconds["load_manifests"]
    rename_s = report.stage_seconds["rename_files"]
    return {
        "files": report.files,
        "manifests": report.manifests,
        "load_s": round(load_s, 2),
        "entries_per_s": round(report.files / load_s),
        "generate_s": round(store.gen_seconds, 2),
        "engine_entries_per_s": round(report.files / (load_s - store.gen_seconds)),
        "rename_s": round(rename_s, 2),
        "renames_per_s": round(report.files / rename_s),
        "total_s": round(m.wall, 2),
        "cpu_ms_per_file": round(m.cpu * 1000 / report.files, 4),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "success_bytes": len(store.small.get(layout.success_path, b"")),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=1_000_000)
    p.add_argument("--manifests", type=int, default=10_000)
    p.add_argument("--io-threads", type=int, default=64)
    p.add_argument("--load-threads", type=int, default=16)
    a = p.parse_args()
    result = amcommit_loop.run(run, a.files, a.manifests, a.io_threads, a.load_threads)
    print(json.dumps(result), file=sys.stdout)


if __name__ == "__main__":
    main()
