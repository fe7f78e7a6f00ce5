"""Child process for test_concurrent_commits: commits a job holding the destination lock
with a short ttl, and SIGKILLs itself at a given point (``stage:phase[:count]``).

argv: ``root dest job_id mode point ttl`` (a local store), or ``--spec JSON`` with
``{"backend": INFO, "dest", "job", "mode", "point", "ttl", "hold"}`` (any backend of
``tests.matrix.stores``): with ``hold`` (a file path) the child does not kill itself at the
point but creates that file and stays there, alive and holding the lock (its event loop
blocked: no heartbeat), until the test kills it."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from amcommit.api import commit_job
from amcommit.committer import CommitterConfig, Progress
from amcommit.store.base import Store
from amcommit.store.local import LocalStore


def run(store: Store, dest: str, job_id: str, mode: str, point: str, ttl: float, hold: str | None) -> None:
    stage, phase, *rest = point.split(":")
    at = int(rest[0]) if rest else 0

    def progress(p: Progress) -> None:
        if p.stage == stage and p.phase == phase and (phase != "progress" or p.done >= at):
            if hold is None:
                os.kill(os.getpid(), signal.SIGKILL)
            Path(hold).touch()
            time.sleep(3600)  # until killed

    async def go() -> None:
        cfg = CommitterConfig(conflict_mode=mode, io_threads=1, lock_ttl=ttl)  # type: ignore[arg-type]
        async with store:
            await commit_job(store, dest, job_id, config=cfg, progress=progress)

    anyio.run(go)
    print("completed without being killed")


def main() -> None:
    if sys.argv[1] == "--spec":
        from tests.matrix.stores import open_store

        spec: dict[str, Any] = json.loads(sys.argv[2])
        store = open_store(spec["backend"])
        run(
            store,
            spec["dest"],
            spec["job"],
            spec["mode"],
            spec["point"],
            float(spec["ttl"]),
            spec.get("hold"),
        )
        return
    root, dest, job_id, mode, point, ttl = sys.argv[1:7]
    run(LocalStore(root), dest, job_id, mode, point, float(ttl), None)


if __name__ == "__main__":
    main()
