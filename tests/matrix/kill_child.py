"""Child process of the matrix: runs commit_job or abort_job on a store opened from JSON
connection info and SIGKILLs itself where a kill rule says (see tests.matrix.kill_rules).

Usage: ``python -m tests.matrix.kill_child JSON`` (or :func:`run_spec` as the target of a
process forked from a fork server, as the matrix runner does: a new interpreter per kill
costs ~0.5 s of CPU, a fork of a server with everything imported a few ms) with JSON =
``{"backend": INFO, "op": "commit"|"abort", "dest": PATH, "job_id": ID, "mode": MODE,
"kill": RULE, "config": {...TableConfig options}}`` (the engine's and the table's).
Exit status 0 and "completed without being killed" if the point was never reached; 3 and
the error's one line if the operation failed.
"""

from __future__ import annotations

import json
import sys

import anyio

from amcommit.api import abort_job, commit_job
from amcommit.table.settings import TableConfig
from tests.matrix.kill_rules import arm
from tests.matrix.stores import open_store


def run_spec(text: str) -> None:
    """Run one spec (JSON text) in this process; exits the process when done."""
    spec = json.loads(text)
    store, progress = arm(spec.get("kill"), lambda: open_store(spec["backend"]))
    cfg = TableConfig(conflict_mode=spec.get("mode", "append"), **spec.get("config", {}))

    async def run() -> None:
        async with store:
            if spec["op"] == "commit":
                await commit_job(store, spec["dest"], spec["job_id"], config=cfg, progress=progress)
            else:
                await abort_job(store, spec["dest"], spec["job_id"], config=cfg, progress=progress)

    try:
        anyio.run(run)
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
        sys.exit(3)
    print("completed without being killed")


def main() -> None:
    run_spec(sys.argv[1])


if __name__ == "__main__":
    main()
