"""Child process for the kill tests: runs a job commit and SIGKILLs itself at a given
point: ``stage:phase[:N]`` (a progress event; for ``progress`` once N files are done), or
``renameat2:N`` (right after the N-th rename system call of the local store returned: the
file was renamed, the engine never saw it; this cuts a batch of renames in the middle).

Usage: ``python -m tests.engine.kill_child ROOT DEST JOB MODE POINT [BATCH]`` with BATCH
the ``rename_batch_size`` (default: the config's)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

import anyio

import amcommit.store.local as local_store
from amcommit.api import commit_job
from amcommit.committer import CommitterConfig, Progress
from amcommit.store.base import TMP_PREFIX
from amcommit.store.local import LocalStore


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after_renames(n: int) -> None:
    """Wrap the local store's ``renameat2`` so the process dies right after the n-th call
    that renamed a file (a put's temporary file into place is not counted)."""
    real = local_store._renameat2
    assert real is not None, "renameat2 is needed for this test"
    done = 0
    tmp = TMP_PREFIX.encode()

    def counting(src: bytes, dst: bytes) -> int:
        nonlocal done
        rc = real(src, dst)
        if rc == 0 and not os.path.basename(src).startswith(tmp):
            done += 1
            if done >= n:
                die()
        return rc

    local_store._renameat2 = counting


def main() -> None:
    root, dest, job_id, mode, point = sys.argv[1:6]
    extra = {"rename_batch_size": int(sys.argv[6])} if len(sys.argv) > 6 else {}
    stage, phase, *rest = point.split(":")
    progress: Callable[[Progress], None] | None = None
    if stage == "renameat2":
        kill_after_renames(int(phase))
    else:
        at = int(rest[0]) if rest else 0

        def progress(p: Progress) -> None:
            if p.stage == stage and p.phase == phase and (phase != "progress" or p.done >= at):
                die()

    async def run() -> None:
        store = LocalStore(root)
        # one manifest loaded at a time: renames run in manifest order (task 0's 4 files, then
        # task 1's 5), which the progress kill points rely on (loaded in parallel, task 1's
        # manifest could come first: "5 renamed" would then cut the job in the middle)
        cfg = CommitterConfig(conflict_mode=mode, io_threads=1, load_threads=1, **extra)  # type: ignore[arg-type]
        await commit_job(store, dest, job_id, config=cfg, progress=progress)

    anyio.run(run)
    print("completed without being killed")


if __name__ == "__main__":
    main()
