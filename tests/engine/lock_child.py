"""Child process for test_concurrent_commits: commits a job holding the destination lock
with a short ttl, and SIGKILLs itself at a given point (``stage:phase[:count]``)."""

from __future__ import annotations

import os
import signal
import sys

import anyio

from amcommit.committer import CommitterConfig, Progress, commit_job
from amcommit.store.local import LocalStore


def main() -> None:
    root, dest, job_id, mode, point, ttl = sys.argv[1:7]
    stage, phase, *rest = point.split(":")
    at = int(rest[0]) if rest else 0

    def progress(p: Progress) -> None:
        if p.stage == stage and p.phase == phase and (phase != "progress" or p.done >= at):
            os.kill(os.getpid(), signal.SIGKILL)

    async def run() -> None:
        store = LocalStore(root)
        cfg = CommitterConfig(conflict_mode=mode, io_threads=1, lock_ttl=float(ttl))  # type: ignore[arg-type]
        await commit_job(store, dest, job_id, config=cfg, progress=progress)

    anyio.run(run)
    print("completed without being killed")


if __name__ == "__main__":
    main()
