"""Rename throughput and client CPU per rename on Azurite: BlobStore vs the official
azure-storage-blob client, in the same run, interleaved.

    .venv/bin/python -m benchmarks.azure_rename [--n 1000] [--rounds 2] [--size 1024]

Workload: ``n`` blobs of ``size`` bytes are uploaded (not measured), then each is renamed
``src/i -> dst/i`` the way a job commit does it: never overwriting (``If-None-Match: *``),
copying only the version the manifest saw (``x-ms-source-if-match``), marking the copy with
``amcommitrenameid``, then deleting the source only if unchanged (``If-Match``). Measured:
wall time and *process* CPU time of the rename phase (Azurite runs in its own process; its
CPU is reported separately). Rows:

* ``BlobStore (3 req)``: the default: Get Properties (to re-send the source's metadata) +
  Copy Blob + Delete Blob;
* ``BlobStore (2 req)``: ``preserve_metadata=False`` with the etag known: Copy + Delete;
* ``azure-storage-blob (3 req)`` / ``(2 req)``: the same requests with
  ``get_blob_properties`` / ``start_copy_from_url`` / ``delete_blob`` from a thread pool
  with as many threads as the concurrency.

Every configuration runs at concurrency 8 and 32, ``rounds`` times, interleaved (the order
alternates), each run on a fresh Azurite; the table shows medians. Azurite's own cost per
copy/delete grows with the number of blobs it holds (measured: 4.5 ms server CPU per rename
with 300 blobs, 10.5 ms with 3,300), so renames/s are emulator-bound and fall with ``--n``;
client CPU per rename is the figure that carries over to the real service. Results:
``benchmarks/results/azure_rename.json``.

``--per-request``: Azurite's own CPU per request of each kind a job commit's rename sends
(Get Properties, Copy Blob as the rename sends it, conditional Delete Blob, and a Blob
Batch of conditional deletes, per deleted blob), with ``n`` blobs in the container,
``--concurrency`` requests at once by amcommit's store, each kind on a fresh Azurite; and the
ceiling it sets: renames per second with one core of emulator CPU, for amcommit's rename
(Copy Blob + 1/20 of a Blob Batch of 20: one manifest's) and for the SDK's (Copy Blob +
Delete Blob). Results: ``benchmarks/results/azure_requests.json``.
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

from amcommit.emulators.azurite import Azurite
from amcommit.store.azure import BlobStore
from amcommit.store.base import RenameResult
from amcommit.store.limits import Limiter
from benchmarks.clients import server_cpu
from benchmarks.common import add_save_arg, load_average, table, timed_renames, write_json

SDK_API_VERSION = "2026-06-06"  # the newest Azurite 3.37 accepts

Run = Callable[[Azurite, str, list[str], int], dict[str, float]]


def _store(az: Azurite, container: str, concurrency: int, **options: Any) -> BlobStore:
    return BlobStore(container, limiter=Limiter(max_concurrency=concurrency), **az.store_options(), **options)


async def _prepare(az: Azurite, container: str, n: int, size: int) -> list[str]:
    """Create the container and n source blobs; return their etags."""
    store = _store(az, container, 32)
    await store.create_container()
    data = os.urandom(size)
    etags = [""] * n
    it = iter(range(n))

    async def worker() -> None:
        for i in it:
            etags[i] = (await store.put(f"src/{i:06d}", data)).etag or ""

    async with anyio.create_task_group() as tg:
        for _ in range(32):
            tg.start_soon(worker)
    await store.aclose()
    return etags


def run_store(
    az: Azurite, container: str, etags: list[str], concurrency: int, *, preserve: bool
) -> dict[str, float]:
    async def main() -> dict[str, float]:
        store = _store(az, container, concurrency, preserve_metadata=preserve)
        await store.stat("src/000000")  # open the session outside the measurement
        warm = sum(store.iostats.count(op) + store.iostats.failures(op) for op in ("stat", "rename"))
        wall, cpu = await timed_renames(store, etags, concurrency)
        requests = (
            sum(store.iostats.count(op) + store.iostats.failures(op) for op in ("stat", "rename")) - warm
        )
        await store.aclose()
        return {"wall": wall, "cpu": cpu, "requests": requests}

    return anyio.run(main)


def run_sdk(
    az: Azurite, container: str, etags: list[str], concurrency: int, *, preserve: bool
) -> dict[str, float]:
    import requests
    from azure.core import MatchConditions
    from azure.core.pipeline.transport import RequestsTransport
    from azure.storage.blob import ContainerClient

    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=concurrency * 2)
    session.mount("http://", adapter)
    cc = ContainerClient(
        az.endpoint,
        container,
        credential={"account_name": az.account, "account_key": az.account_key},
        api_version=SDK_API_VERSION,
        transport=RequestsTransport(session=session, session_owner=False),
    )
    cc.get_blob_client("src/000000").get_blob_properties()  # warm up

    def one(i: int) -> None:
        src = cc.get_blob_client(f"src/{i:06d}")
        dst = cc.get_blob_client(f"dst/{i:06d}")
        etag, meta = etags[i], {}
        if preserve:
            props = src.get_blob_properties()
            etag, meta = props.etag, dict(props.metadata)
        meta["amcommitrenameid"] = f"bench-{i}"
        r = dst.start_copy_from_url(
            src.url,
            metadata=meta,
            match_condition=MatchConditions.IfMissing,
            source_etag=etag,
            source_match_condition=MatchConditions.IfNotModified,
        )
        while r["copy_status"] == "pending":
            time.sleep(0.05)
            r = {"copy_status": dst.get_blob_properties().copy.status}
        src.delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)

    with ThreadPoolExecutor(concurrency) as pool:
        w0, c0 = time.perf_counter(), time.process_time()
        list(pool.map(one, range(len(etags))))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    cc.close()
    session.close()
    return {"wall": wall, "cpu": cpu, "requests": (3 if preserve else 2) * len(etags)}


CLIENTS: dict[str, Callable[..., dict[str, float]]] = {
    "BlobStore (3 req)": partial(run_store, preserve=True),
    "BlobStore (2 req)": partial(run_store, preserve=False),
    "azure-storage-blob (3 req)": partial(run_sdk, preserve=True),
    "azure-storage-blob (2 req)": partial(run_sdk, preserve=False),
}


async def _per_request(az: Azurite, container: str, etags: list[str], kind: str, conc: int) -> float:
    """Send ``len(etags)`` requests of ``kind`` on the blobs ``src/i`` by ``conc`` workers
    (the store's own request path: signing, limiter, retries); return the wall seconds."""
    store = _store(az, container, conc)
    await store.stat("src/000000")  # open the session outside the measurement
    n = len(etags)
    if kind == "batch delete":
        groups = [list(range(i, min(n, i + 20))) for i in range(0, n, 20)]
    else:
        groups = [[i] for i in range(n)]
    it = iter(groups)

    async def one(g: list[int]) -> None:
        i = g[0]
        if kind == "get properties":
            await store.stat(f"src/{i:06d}")
        elif kind == "copy blob":
            plan = await store._plan_rename(f"src/{i:06d}", f"dst/{i:06d}", etags[i], f"bench-{i}", False)
            assert not isinstance(plan, RenameResult)
            await store._copy(plan)
        elif kind == "delete blob":
            await store.request(
                "delete", "DELETE", store.url(f"src/{i:06d}"), path="", headers={"If-Match": etags[i]}
            )
        else:  # batch delete: one Blob Batch of 20 conditional deletes (one manifest's)
            failed = await store._batch_deletes("rename", [(f"src/{j:06d}", etags[j]) for j in g])
            assert not any(failed), failed

    async def worker() -> None:
        for g in it:
            await one(g)

    w0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(conc):
            tg.start_soon(worker)
    wall = time.perf_counter() - w0
    await store.aclose()
    return wall


REQUEST_KINDS = ("get properties", "copy blob", "delete blob", "batch delete")


def per_request(n: int, size: int, rounds: int, conc: int, save: bool) -> int:
    """The ``--per-request`` scenario (see the module docstring)."""
    samples: dict[str, list[tuple[float, float, float]]] = {}
    for rnd in range(rounds):
        for kind in REQUEST_KINDS if rnd % 2 == 0 else tuple(reversed(REQUEST_KINDS)):
            with Azurite() as az:
                container = f"bench{uuid.uuid4().hex[:12]}"
                etags = anyio.run(_prepare, az, container, n, size)
                pid = az._proc.pid if az._proc is not None else None
                s0 = server_cpu(pid)
                wall = anyio.run(_per_request, az, container, etags, kind, conc)
                s1 = server_cpu(pid)
            cpu = (s1 - s0) if s0 is not None and s1 is not None else float("nan")
            samples.setdefault(kind, []).append((cpu / n * 1000, n / wall, load_average()[0]))
            print(
                f"  round {rnd + 1} {kind}: {cpu / n * 1000:.3f} emulator CPU ms per blob, "
                f"{n / wall:,.0f} blobs/s, load {load_average()[0]:.1f}",
                file=sys.stderr,
            )
    rows = []
    for kind in REQUEST_KINDS:
        runs = samples[kind]
        ms = [r[0] for r in runs]
        rows.append(
            {
                "request": kind + (" (per blob, 20 a batch)" if kind == "batch delete" else ""),
                "emulator_cpu_ms_per_blob": round(statistics.median(ms), 3),
                "spread_ms": f"{min(ms):.3f}-{max(ms):.3f}",
                "blobs_per_s": round(statistics.median(r[1] for r in runs), 1),
                "load": f"{min(r[2] for r in runs):.1f}-{max(r[2] for r in runs):.1f}",
            }
        )
    cost = {r["request"].split(" (")[0]: r["emulator_cpu_ms_per_blob"] for r in rows}
    ours = cost["copy blob"] + cost["batch delete"]
    sdk = cost["copy blob"] + cost["delete blob"]
    ceiling = {
        "amcommit_rename_ms": round(ours, 3),
        "sdk_rename_ms": round(sdk, 3),
        "amcommit_renames_per_core_s": round(1000 / ours, 1),
        "sdk_renames_per_core_s": round(1000 / sdk, 1),
        "ratio_at_the_ceiling": round(sdk / ours, 2),
    }
    title = (
        f"Azurite 3.37 (in memory): emulator CPU per request, {n} blobs of {size} B, "
        f"c={conc}, median of {rounds} interleaved rounds"
    )
    print()
    print(table(rows, ["request", "emulator_cpu_ms_per_blob", "spread_ms", "blobs_per_s", "load"], title))
    print("\nceiling with one core of emulator CPU: " + ", ".join(f"{k} {v}" for k, v in ceiling.items()))
    out = write_json(
        "azure_requests",
        {
            "benchmark": "azure_requests",
            "params": {"n": n, "rounds": rounds, "size": size, "concurrency": conc},
            "emulator": "Azurite 3.37 (azurite-blob --silent --inMemoryPersistence --disableTelemetry)",
            "rows": rows,
            "ceiling": ceiling,
        },
        save=save,
    )
    print(f"\nwrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=1000, help="renames per run")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per configuration")
    ap.add_argument("--size", type=int, default=1024, help="blob size in bytes")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    ap.add_argument(
        "--per-request", action="store_true", help="Azurite's CPU per request kind (first --concurrency)"
    )
    add_save_arg(ap)
    args = ap.parse_args(argv)
    if args.per_request:
        return per_request(args.n, args.size, args.rounds, args.concurrency[0], args.save)

    plan = [(label, conc) for conc in args.concurrency for label in CLIENTS]
    samples: dict[tuple[str, int], list[dict[str, float]]] = {}
    for rnd in range(args.rounds):
        for label, conc in plan if rnd % 2 == 0 else list(reversed(plan)):
            with Azurite() as az:
                container = f"bench{uuid.uuid4().hex[:12]}"
                etags = anyio.run(_prepare, az, container, args.n, args.size)
                pid = az._proc.pid if az._proc is not None else None
                s0 = server_cpu(pid)
                r = CLIENTS[label](az, container, etags, conc)
                s1 = server_cpu(pid)
            r["server_cpu"] = (s1 - s0) if s0 is not None and s1 is not None else float("nan")
            samples.setdefault((label, conc), []).append(r)
            print(
                f"  round {rnd + 1} {label} c={conc}: {args.n / r['wall']:,.0f} renames/s, "
                f"{r['cpu'] / args.n * 1000:.3f} client CPU ms/rename",
                file=sys.stderr,
            )

    rows = []
    for (label, conc), runs in sorted(
        samples.items(), key=lambda kv: (kv[0][1], list(CLIENTS).index(kv[0][0]))
    ):
        rows.append(
            {
                "client": label,
                "concurrency": conc,
                "renames_per_s": round(statistics.median(args.n / r["wall"] for r in runs), 1),
                "client_cpu_ms_per_rename": round(
                    statistics.median(r["cpu"] for r in runs) / args.n * 1000, 3
                ),
                "server_cpu_ms_per_rename": round(
                    statistics.median(r["server_cpu"] for r in runs) / args.n * 1000, 3
                ),
                "requests_per_rename": round(statistics.median(r["requests"] for r in runs) / args.n, 2),
                "runs": [{k: round(v, 4) for k, v in r.items()} for r in runs],
            }
        )
    cols = [
        "client",
        "concurrency",
        "renames_per_s",
        "client_cpu_ms_per_rename",
        "server_cpu_ms_per_rename",
        "requests_per_rename",
    ]
    title = (
        f"Blob renames on Azurite 3.37 (in memory), {args.n} x {args.size} B blobs, "
        f"median of {args.rounds} interleaved rounds"
    )
    print()
    print(table(rows, cols, title))
    out = write_json(
        "azure_rename",
        {
            "benchmark": "azure_rename",
            "params": {
                "n": args.n,
                "rounds": args.rounds,
                "size": args.size,
                "concurrency": args.concurrency,
            },
            "emulator": "Azurite 3.37 (azurite-blob --silent --inMemoryPersistence --disableTelemetry)",
            "rows": rows,
        },
        save=args.save,
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
