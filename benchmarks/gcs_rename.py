"""Rename throughput and client CPU per rename on fake-gcs-server: GcsStore vs the official
google-cloud-storage client, in the same run, interleaved.

    .venv/bin/python -m benchmarks.gcs_rename [--n 2000] [--rounds 2] [--size 1024]

Workload: ``n`` objects of ``size`` bytes are uploaded (not measured), then each is renamed
``src/i -> dst/i`` without overwriting, guarded by the source generation. Measured: wall
time and *process* CPU time of the rename phase (the emulator runs in its own process; its
CPU is reported separately). Rows:

* ``GcsStore emulator-safe``: GcsStore as configured for an emulator by default (reads the
  source and checks the destination on the client, because fake-gcs-server ignores
  preconditions on rewrite): GET src, GET dst, rewrite, delete = 4 requests;
* ``GcsStore default (real GCS, no move)``: GET src (carries metadata), rewrite, delete =
  3 requests, preconditions left to the service;
* ``GcsStore minimal``: ``preserve_metadata=False`` with the source generation known:
  rewrite + delete = 2 requests, the same requests as the SDK row;
* ``google-cloud-storage``: ``Blob.rewrite(if_generation_match=0,
  if_source_generation_match=g)`` + ``Blob.delete(if_generation_match=g)`` from a thread
  pool of 16 (2 requests).

GcsStore runs at concurrency 8 and 32 (limiter slots), without the write gate (the default
gate, 1,000 writes/s like a new GCS bucket, would cap this at ~500 renames/s). Each
configuration runs ``rounds`` times, interleaved; the table shows the median round.
Results: ``benchmarks/results/tmp/gcs_rename.json`` (``--save``: ``benchmarks/results/``, tracked).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import anyio

from amcommit.emulators.fakegcs import FakeGcsServer
from amcommit.store.gcs import GcsStore
from amcommit.store.limits import Limiter
from benchmarks.clients import server_cpu
from benchmarks.common import add_save_arg, timed_renames, write_json

STORE_CONFIGS: dict[str, dict[str, Any]] = {
    "GcsStore emulator-safe (4 req)": {"verify_preconditions": True, "preserve_metadata": True},
    "GcsStore default, real GCS w/o move (3 req)": {"verify_preconditions": False, "preserve_metadata": True},
    "GcsStore minimal (2 req)": {"verify_preconditions": False, "preserve_metadata": False},
}
SDK_THREADS = 16


def _store(url: str, bucket: str, concurrency: int, **options: Any) -> GcsStore:
    return GcsStore(
        bucket,
        endpoint=url,
        limiter=Limiter(max_concurrency=concurrency),
        write_rate=None,
        use_move=False,  # fake-gcs-server has no objects.move (skip the probe)
        **options,
    )


async def _prepare(url: str, bucket: str, n: int, size: int) -> list[str]:
    """Upload n objects; return their generations (the etags)."""
    store = _store(url, bucket, 32)
    data = os.urandom(size)
    gens: list[str] = [""] * n

    async def put(i: int) -> None:
        info = await store.put(f"src/{i:06d}", data)
        gens[i] = info.etag or ""

    sem = anyio.Semaphore(64)

    async def bounded(i: int) -> None:
        async with sem:
            await put(i)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(bounded, i)
    await store.aclose()
    return gens


def run_store(
    url: str, bucket: str, gens: list[str], concurrency: int, options: dict[str, Any]
) -> dict[str, float]:
    async def main() -> dict[str, float]:
        store = _store(url, bucket, concurrency, **options)
        await store.stat(f"src/{0:06d}")  # open the session outside the measurement
        wall, cpu = await timed_renames(store, gens, concurrency)
        ops = ("gcs_get", "gcs_rewrite", "gcs_delete")
        requests = sum(store.iostats.count(op) + store.iostats.failures(op) for op in ops)
        await store.aclose()
        return {"wall": wall, "cpu": cpu, "requests": requests - 1}

    return anyio.run(main)


def run_sdk(url: str, bucket: str, gens: list[str]) -> dict[str, float]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    from requests.adapters import HTTPAdapter

    client = storage.Client(
        project="bench", credentials=AnonymousCredentials(), client_options={"api_endpoint": url}
    )
    client._http.mount("http://", HTTPAdapter(pool_connections=4, pool_maxsize=SDK_THREADS * 2))
    b = client.bucket(bucket)
    b.get_blob(f"src/{0:06d}")  # warm up

    def one(i: int) -> None:
        src = b.blob(f"src/{i:06d}")
        dst = b.blob(f"dst/{i:06d}")
        g = int(gens[i])
        token, _, _ = dst.rewrite(src, if_generation_match=0, if_source_generation_match=g)
        while token is not None:
            token, _, _ = dst.rewrite(src, token=token, if_generation_match=0, if_source_generation_match=g)
        src.delete(if_generation_match=g)

    with ThreadPoolExecutor(SDK_THREADS) as pool:
        w0, c0 = time.perf_counter(), time.process_time()
        list(pool.map(one, range(len(gens))))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    client.close()
    return {"wall": wall, "cpu": cpu, "requests": 2 * len(gens)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=2000, help="renames per run")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per configuration")
    ap.add_argument("--size", type=int, default=1024, help="object size in bytes")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    add_save_arg(ap)
    args = ap.parse_args(argv)

    plan: list[tuple[str, int, Callable[[str, str, list[str]], dict[str, float]]]] = []
    for conc in args.concurrency:
        for label, opts in STORE_CONFIGS.items():
            plan.append((label, conc, partial(run_store, concurrency=conc, options=opts)))
    plan.append(("google-cloud-storage", SDK_THREADS, run_sdk))

    samples: dict[tuple[str, int], list[dict[str, float]]] = {}
    with FakeGcsServer() as srv:
        pid = srv._proc.pid if srv._proc else None
        for rnd in range(args.rounds):
            order = plan if rnd % 2 == 0 else list(reversed(plan))
            for label, conc, fn in order:
                bucket = f"bench-{uuid.uuid4().hex[:12]}"
                srv.create_bucket(bucket)
                gens = anyio.run(_prepare, srv.url, bucket, args.n, args.size)
                s0 = server_cpu(pid)
                r = fn(srv.url, bucket, gens)
                s1 = server_cpu(pid)
                r["server_cpu"] = (s1 - s0) if s0 is not None and s1 is not None else float("nan")
                samples.setdefault((label, conc), []).append(r)
                print(
                    f"  round {rnd + 1} {label} c={conc}: {args.n / r['wall']:,.0f} renames/s, "
                    f"{r['cpu'] / args.n * 1000:.3f} CPU ms/rename",
                    file=sys.stderr,
                )

    rows = []
    for (label, conc), runs in samples.items():
        rates = [args.n / r["wall"] for r in runs]
        med = sorted(runs, key=lambda r: args.n / r["wall"])[len(runs) // 2]
        rows.append(
            {
                "client": label,
                "concurrency": conc,
                "renames_per_s": round(statistics.median(rates), 1),
                "client_cpu_ms_per_rename": round(
                    statistics.median(r["cpu"] for r in runs) / args.n * 1000, 3
                ),
                "server_cpu_ms_per_rename": round(
                    statistics.median(r["server_cpu"] for r in runs) / args.n * 1000, 3
                ),
                "requests_per_rename": round(med["requests"] / args.n, 2),
                "runs": [{k: round(v, 4) for k, v in r.items()} for r in runs],
            }
        )
    row_order = [*STORE_CONFIGS, "google-cloud-storage"]
    rows.sort(
        key=lambda r: (r["client"].startswith("google"), r["concurrency"], row_order.index(r["client"]))
    )

    cols = [
        "client",
        "concurrency",
        "renames_per_s",
        "client_cpu_ms_per_rename",
        "server_cpu_ms_per_rename",
        "requests_per_rename",
    ]
    print(
        f"\nGCS renames on fake-gcs-server (filesystem backend), {args.n} x {args.size} B objects, "
        f"median of {args.rounds} interleaved rounds\n"
    )
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for r in rows:
        print(
            "| "
            + " | ".join(f"{r[c]:,}" if isinstance(r[c], (int, float)) else str(r[c]) for c in cols)
            + " |"
        )

    payload = {
        "benchmark": "gcs_rename",
        "params": {"n": args.n, "rounds": args.rounds, "size": args.size, "sdk_threads": SDK_THREADS},
        "emulator": "fake-gcs-server 1.54 (filesystem backend on /dev/shm)",
        "rows": rows,
    }
    print(f"\nwrote {write_json('gcs_rename', payload, save=args.save)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
