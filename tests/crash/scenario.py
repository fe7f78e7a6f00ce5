"""The rename-kind crash scenario shared by the per-backend crash tests.

Destination before the job: ``OLD``. The job (two tasks) writes ``NEW`` in ``replace``
mode: ``p=1/same.bin`` exists in both, so the commit moves the old one aside to the job's
trash (copy + delete on flat stores), renames the new files in (copy + delete), and deletes
``p=1/old.bin`` (a victim). Expected results: after a completed commit, ``COMMITTED``;
after an abort, ``OLD`` exactly.
"""

from __future__ import annotations

from typing import Any

from amcommit.api import setup_job
from amcommit.paths import join
from amcommit.store.base import Store
from tests.engine.helpers import run_task, snapshot, temp_files

JOB = "202611230001_0007"
OLD = {"p=1/same.bin": b"old same", "p=1/old.bin": b"old 1", "p=2/keep.bin": b"keep 2"}
NEW = {"p=1/same.bin": b"new same!", "p=1/new.bin": b"new 1"}
COMMITTED = {"p=1/same.bin": b"new same!", "p=1/new.bin": b"new 1", "p=2/keep.bin": b"keep 2"}
CONFIG = {"conflict_mode": "replace", "io_threads": 1, "load_threads": 1}
"""One manifest loaded at a time: the renames then run in manifest order (task 0's
``same.bin``, then task 1's ``new.bin``), which the kill points below rely on. With
manifests loaded in parallel, task 1's could be spooled first, and a kill after
``new.bin``'s rename would no longer be after the job's last rename."""

COMPLETES_ON_ABORT = frozenset({"forward_delete", "forward_move"})
"""Kill points after the job's *last* rename (``p=1/new.bin``, io_threads=1) finished:
every file is in place, so ``abort_job`` completes the commit instead of rolling it back
(a commit whose renames are all done never turns into a rollback)."""


async def prepare(store: Store, dest: str) -> None:
    """Old files in place, the job set up, both tasks committed."""
    for p, d in OLD.items():
        await store.put(join(dest, p), d)
    layout = await setup_job(store, dest, JOB)
    await run_task(store, layout, 0, {"p=1/same.bin": NEW["p=1/same.bin"]})
    await run_task(store, layout, 1, {"p=1/new.bin": NEW["p=1/new.bin"]})


def spec(store: dict[str, Any], dest: str, action: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "store": store,
        "action": action,
        "dest": dest,
        "job_id": JOB,
        "config": CONFIG,
        "kill": {"requests": rules},
    }


async def final_state(store: Store, dest: str) -> tuple[dict[str, bytes], list[str]]:
    """(destination files, files left under ``_temporary``)."""
    return await snapshot(store, dest), await temp_files(store, dest)
