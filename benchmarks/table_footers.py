"""Base files sized to their data (issue 36, item 3): bloom filters sized to each file's keys
against the fixed 60,000-entry filter every file carried before, in the same run.

Contenders (``amcommit.table.format.bloom.BloomSettings``):

* ``fixed``: ``BloomSettings(sized=False)``, the filter Hudi's writers build (and amcommit
  before): 60,000 entries at fpp 1e-9, 2,587,966 bits (~431 KB of Base64) in every file;
* ``sized``: the default: each file's filter built for its own key count (same format, same
  fpp; a file with more keys than 60,000 gets the fixed filter's rows).

Measured:

1. **File sizes**: a 1-row file and a 5,000-row file (the schema of
   ``benchmarks/table_upsert.py``: id, p, v, x, ts plus Hudi's meta columns), written by an
   upsert into an empty table: the file's bytes, its footer's bytes, the filter's Base64
   bytes; and the whole table of ``--rows`` rows in ``--files`` files.
2. **Upsert index reads**: the table of ``--rows`` rows (default 200,000 in 40 files of
   5,000 rows, 4 partitions) built with each contender, then, per run, a fresh copy and the
   ``late`` batch of ``benchmarks/table_upsert.py`` (updates of keys in 10 files of 2
   partitions) upserted with the same contender. Reported: ``index_s`` (the index's footer
   pass alone: every file's footer of the 2 partitions read through
   :class:`amcommit.table.mutate.engine.IndexReader` with the engine's parallelism, filters decoded
   and every key of the batch probed, as :func:`amcommit.table.mutate.engine.plan_candidates` does;
   on a fresh reader), ``footer_bytes`` (what that pass read: on fake-gcs-server the ranged
   tail reads, locally 0: local footers are read in place), then the whole upsert:
   ``upsert_s``, ``index_bytes_read`` (footers and key columns, object stores only), footers
   and key columns read, files rewritten. Every upsert is verified (the snapshot's rows and
   files, exactly the 10 files rewritten). Rounds alternate the contenders' order; medians.

The fixed contender is read by the same (new) reader: 64 KB tails first, raised to the
longest footer met (``mutate.TAIL_GUESS``). The reader before this change read 576 KB from
every file's end in one request (for a 5,000-row fixed file, ~all of it): the footer pass is
also run that way on the fixed table in every run (``fixed, 576 KB tail (before)``: footer
pass only; before or after the new reader's pass, alternating by round).

    python -m benchmarks.table_footers                     # local and fake-gcs-server
    python -m benchmarks.table_footers --backends local --rounds 3
    python -m benchmarks.table_footers --quick              # 20,000 rows x 20 files, local
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import RESULTS, TMP, add_save_arg, load_average, run_info, table
from benchmarks.table_upsert import KW, Backend, base_rows, check, shape, updates

CONTENDERS = ("fixed", "sized")


def settings(name: str) -> Any:
    from amcommit.table.format.bloom import BloomSettings

    return BloomSettings(sized=name == "sized")


def file_facts(path: Path) -> dict[str, int]:
    """A base file's bytes, its footer's bytes and its filter's Base64 bytes."""
    from amcommit.table.format.bloom import BLOOM_FILTER_KEY

    body = path.read_bytes()
    md = pq.read_metadata(pa.BufferReader(body)).metadata
    return {
        "file_bytes": len(body),
        "footer_bytes": int.from_bytes(body[-8:-4], "little") + 8,
        "filter_bytes": len(md[BLOOM_FILTER_KEY.encode()]),
    }


def build(root: Path, data: pa.Table, per_file: int, name: str) -> list[Path]:
    """A table of ``data`` built by an upsert into an empty folder ``root/t``: its base files."""
    from amcommit.store.local import LocalStore
    from amcommit.table import mutate

    async def run() -> None:
        store = LocalStore(str(root), fsync=False)
        async with store:
            await mutate.upsert(
                store, "t", data, max_file_rows=per_file, small_file_limit=0, bloom=settings(name), **KW
            )

    anyio.run(run)
    return sorted((root / "t").rglob("*.parquet"))


def sizes(work: Path, rows: int, files: int) -> list[dict[str, Any]]:
    out = []
    _, per_file = shape(rows, files)
    for name in CONTENDERS:
        for n in (1, 5000):
            (f,) = build(work / f"size-{name}-{n}", base_rows(n, 1).slice(0, n), n, name)
            out.append({"contender": name, "rows": n, "files": 1, **file_facts(f)})
        paths = build(work / f"size-{name}-table", base_rows(rows, files), per_file, name)
        facts = [file_facts(p) for p in paths]
        out.append(
            {
                "contender": name,
                "rows": rows,
                "files": len(paths),
                **{k: sum(x[k] for x in facts) for k in facts[0]},
            }
        )
    return out


OLD_TAIL = 576 * 1024
"""The reader's tail read before filters were sized (``mutate.TAIL_GUESS`` was 576 KB)."""


async def footer_pass(
    store: Any, dest: str, batch: pa.Table, tail: int | None = None
) -> tuple[float, int, int]:
    """The index's footer pass over the files of the batch's partitions: (seconds, bytes
    read, candidate files); ``tail``: the reader's first tail read (default: today's)."""
    from amcommit.committer.config import DEFAULT_CONFIG
    from amcommit.parallel import run_parallel
    from amcommit.table import mutate
    from amcommit.table.timeline.instants import load_timeline, snapshot

    _, commits = await load_timeline(store, dest)
    keys = mutate.record_key_strings(batch, ("id",))
    parts = mutate.partition_paths(batch, ("p",))
    wanted: dict[str, list[str]] = {}
    for k, p in zip(keys, parts, strict=True):
        wanted.setdefault(p, []).append(k)
    files = [f for f in snapshot(commits) if f.partition in wanted]
    reader = mutate.IndexReader(store, dest, DEFAULT_CONFIG)
    if tail is not None:
        reader.tail_guess = tail
    footers: dict[str, Any] = {}
    t0 = time.perf_counter()

    async def one(f: Any) -> None:
        footers[f.path] = await reader.footer(f.path, f.size)

    await run_parallel(files, one, DEFAULT_CONFIG.io_threads)
    cands = mutate.plan_candidates(wanted, [(f, footers[f.path]) for f in files])
    return time.perf_counter() - t0, reader.bytes_read, len(cands)


def measure(
    backend: Backend, built: dict[str, Path], batch: pa.Table, rows: int, files: int, rounds: int
) -> list[dict[str, Any]]:
    from amcommit.table import mutate

    out = []
    for rnd in range(rounds):
        for name in CONTENDERS if rnd % 2 == 0 else tuple(reversed(CONTENDERS)):

            async def go(name: str = name, rnd: int = rnd) -> dict[str, Any]:
                from amcommit.table.timeline.instants import load_timeline, snapshot

                dest = await backend.fresh(built[name])
                store = backend.store()
                async with store:
                    _, commits = await load_timeline(store, dest)
                    before = {f.path for f in snapshot(commits)}
                    load = load_average()
                    old: tuple[float, int, int] | None = None
                    if name == "fixed" and rnd % 2 == 1:
                        old = await footer_pass(store, dest, batch, OLD_TAIL)
                    index_s, footer_bytes, cands = await footer_pass(store, dest, batch)
                    if name == "fixed" and rnd % 2 == 0:
                        old = await footer_pass(store, dest, batch, OLD_TAIL)
                    t0 = time.perf_counter()
                    r = await mutate.upsert(store, dest, batch, bloom=settings(name), **KW)
                    res: dict[str, Any] = {
                        "index_s": index_s,
                        "footer_bytes": footer_bytes,
                        "candidates": cands,
                        "upsert_s": time.perf_counter() - t0,
                        "index_bytes_read": r.index_bytes_read,
                        "footers_read": r.footers_read,
                        "key_columns_read": r.key_columns_read,
                        "files_rewritten": r.files_rewritten,
                        "instant": r.instant,
                    }
                    if old is not None:
                        res["before_index_s"], res["before_footer_bytes"] = old[:2]
                    if r.updated != batch.num_rows or r.inserted:
                        raise SystemExit(
                            f"{name}: updated {r.updated} of {batch.num_rows}, inserted {r.inserted}"
                        )
                    res["verified"] = await check(store, dest, rows, files, before, res)
                backend.drop(dest)
                res["load_1m"] = load[0] if load else None
                return res

            res = anyio.run(go)
            res.update(backend=backend.name, contender=name, round=rnd)
            print(
                f"  {backend.name} round {rnd + 1} {name}: index {res['index_s'] * 1000:.0f} ms "
                f"({res['footer_bytes']:,} B), upsert {res['upsert_s']:.2f} s "
                f"(index bytes {res['index_bytes_read']:,}) (load {res['load_1m']})",
                flush=True,
            )
            out.append(res)
    return out


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for be in dict.fromkeys(r["backend"] for r in runs):
        med: dict[str, dict[str, Any]] = {}
        for name in CONTENDERS:
            rs = [r for r in runs if r["backend"] == be and r["contender"] == name]
            med[name] = {
                "backend": be,
                "contender": name,
                "index_ms": 1000 * statistics.median(r["index_s"] for r in rs),
                "footer_bytes": rs[0]["footer_bytes"],
                "upsert_s": statistics.median(r["upsert_s"] for r in rs),
                "index_bytes_read": rs[0]["index_bytes_read"],
                "footers_read": rs[0]["footers_read"],
                "key_columns_read": rs[0]["key_columns_read"],
                "files_rewritten": rs[0]["files_rewritten"],
                "load_1m": statistics.median(r["load_1m"] or 0.0 for r in rs),
                "verified": "exact" if all(r["verified"] == "exact" for r in rs) else "WRONG",
            }
        olds = [r for r in runs if r["backend"] == be and "before_index_s" in r]
        med["before"] = {
            "backend": be,
            "contender": "fixed, 576 KB tail (before)",
            "index_ms": 1000 * statistics.median(r["before_index_s"] for r in olds),
            "footer_bytes": olds[0]["before_footer_bytes"],
        }
        fixed = med["fixed"]
        rows.append(med["before"])
        med["before"]["index_vs_fixed"] = med["before"]["index_ms"] / fixed["index_ms"]
        for name in CONTENDERS:
            m = med[name]
            m["index_vs_fixed"] = m["index_ms"] / fixed["index_ms"]
            m["upsert_vs_fixed"] = m["upsert_s"] / fixed["upsert_s"]
            rows.append(m)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--files", type=int, default=40)
    p.add_argument("--backends", default="local,gcs", help="local, gcs (fake-gcs-server), comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="20,000 rows x 20 files, local, 1 round (smoke test)")
    p.add_argument(
        "--out", type=Path, help="results directory (default benchmarks/results/tmp, --quick: results/quick)"
    )
    add_save_arg(p)
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.files, args.rounds, args.backends = 20_000, 20, 1, "local"
    out_dir: Path = args.out or (RESULTS / "quick" if args.quick else RESULTS if args.save else TMP)
    out_dir.mkdir(parents=True, exist_ok=True)
    base_dir = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    work = Path(tempfile.mkdtemp(prefix="amcommit-footers-bench-", dir=base_dir))
    runs: list[dict[str, Any]] = []
    try:
        size_rows = sizes(work, args.rows, args.files)
        print(
            table(
                size_rows,
                ["contender", "rows", "files", "file_bytes", "footer_bytes", "filter_bytes"],
                "file sizes",
            )
        )
        _, per_file = shape(args.rows, args.files)
        base = base_rows(args.rows, args.files)
        built = {}
        for name in CONTENDERS:
            build(work / f"built-{name}", base, per_file, name)
            built[name] = work / f"built-{name}" / "t"
        batch = updates(base, "late", args.rows, args.files)
        for be_name in args.backends.split(","):
            backend = Backend(be_name, work)
            try:
                runs += measure(backend, built, batch, args.rows, args.files, args.rounds)
            finally:
                backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = summarise(runs)
    cols = [
        "backend",
        "contender",
        "index_ms",
        "index_vs_fixed",
        "footer_bytes",
        "upsert_s",
        "upsert_vs_fixed",
        "index_bytes_read",
        "footers_read",
        "key_columns_read",
        "files_rewritten",
        "load_1m",
        "verified",
    ]
    print(
        table(
            rows, cols, f"upsert index reads, {args.rows:,} rows in {args.files} files, late batch (median)"
        )
    )
    path = out_dir / "table_footers.json"
    payload = {
        "run": run_info(),
        "rows_in_table": args.rows,
        "files": args.files,
        "sizes": size_rows,
        "summary": rows,
        "runs": runs,
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results: {path}")
    if any(r.get("verified", "exact") != "exact" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
