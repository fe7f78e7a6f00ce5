"""Child process for tests/table/test_clean_cloud.py: a clean (keeping ``retain`` commits) that
SIGKILLs its own process just before its ``n``-th mutating request matching ``pattern``
(tests/table/killstore.py). Forked from a fork server; the spec is JSON
``{"backend": INFO, "dest": D, "retain": R, "pattern": RE, "n": N}`` (INFO: tests.matrix.stores)."""

from __future__ import annotations

import json
import sys

import anyio

from amcommit.committer.config import CommitterConfig
from amcommit.table.commit.clean import clean
from tests.matrix.stores import open_store
from tests.table.killstore import KillStore


def run_spec(text: str) -> None:
    spec = json.loads(text)

    async def run() -> None:
        inner = open_store(spec["backend"])
        async with inner:
            store = KillStore(inner, spec["pattern"], int(spec["n"]))
            await clean(
                store, spec["dest"], retain_commits=int(spec["retain"]), config=CommitterConfig(io_threads=1)
            )  # type: ignore[arg-type]

    anyio.run(run)
    print("completed")
    sys.exit(0)
