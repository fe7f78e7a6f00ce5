"""What making 20,000 renames durable costs, by method, on one file system (issue 35 item 4).

Each round writes ``--tasks`` x ``--files`` files of 1 KiB into ``--tasks`` x ``--dirs``
source directories (as a job's task attempts do), flushes everything (``os.sync``), renames
every file into ``--dirs`` destination directories with a bare ``os.rename`` loop, then makes
the renames durable one way (timed apart from the renames):

* ``each``: fsync every directory the renames changed (sources and destinations), 16
  threads at once (the local store's rule for file systems that write each directory back
  on its own, and the only rule before issue 35);
* ``dest``: fsync the destination directories only (the rule for journaling file systems);
* ``syncfs``: one ``syncfs(2)`` of the file system (the rule for ext4 without a journal).

Methods alternate from round to round. On a file system where a method is not enough
(``dest`` on ext4 without a journal) the figure is only its cost.

    python -m benchmarks.dir_sync_cost --where /var/tmp --rounds 2
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from amcommit.store.local import dir_sync_rule

METHODS = ("each", "dest", "syncfs")


def _fsync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def one_round(where: str, method: str, tasks: int, files: int, dirs: int) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix="amc-dirsync-", dir=where)
    try:
        srcs = [os.path.join(root, "src", str(t), f"d{i}") for t in range(tasks) for i in range(dirs)]
        dsts = [os.path.join(root, "dst", f"d{i}") for i in range(dirs)]
        for d in srcs + dsts:
            os.makedirs(d)
        for t in range(tasks):
            for i in range(files):
                with open(os.path.join(root, "src", str(t), f"d{i % dirs}", f"f{i}"), "wb") as f:
                    f.write(b"x" * 1024)
        os.sync()
        t0 = time.perf_counter()
        for t in range(tasks):
            for i in range(files):
                d = f"d{i % dirs}"
                os.rename(
                    os.path.join(root, "src", str(t), d, f"f{i}"), os.path.join(root, "dst", d, f"{t}-{i}")
                )
        t1 = time.perf_counter()
        if method == "syncfs":
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = os.open(dsts[0], os.O_RDONLY | os.O_DIRECTORY)
            try:
                if libc.syncfs(fd) != 0:
                    raise OSError(ctypes.get_errno(), "syncfs failed")
            finally:
                os.close(fd)
        else:
            todo = srcs + dsts if method == "each" else dsts
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(_fsync_dir, todo))
        t2 = time.perf_counter()
        return {"renames_s": t1 - t0, "sync_s": t2 - t1, "load_before": os.getloadavg()[0]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--where", required=True, help="a directory on the file system to measure")
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--files", type=int, default=100)
    p.add_argument("--dirs", type=int, default=10, help="directories per task (and destination directories)")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    rows = []
    for r in range(a.rounds):
        for m in METHODS if r % 2 == 0 else tuple(reversed(METHODS)):
            row = one_round(a.where, m, a.tasks, a.files, a.dirs) | {"method": m, "round": r}
            rows.append(row)
            print(
                f"round {r} {m}: renames {row['renames_s']:.3f} s, sync {row['sync_s']:.3f} s "
                f"(load {row['load_before']:.1f})",
                flush=True,
            )
    summary = {
        m: {
            "sync_s_median": statistics.median(x["sync_s"] for x in rows if x["method"] == m),
            "renames_s_median": statistics.median(x["renames_s"] for x in rows if x["method"] == m),
        }
        for m in METHODS
    }
    out = {"where": a.where, "rule": dir_sync_rule(a.where), "rows": rows, "summary": summary}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
