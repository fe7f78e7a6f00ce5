"""Generic crash child: ``python -m tests.crash.child SPEC_JSON`` runs one ``commit_job``
or ``abort_job`` and SIGKILLs itself at the point the spec names.

SPEC (a JSON object)::

    {
      "store": {"kind": "local" | "blob" | "dfs" | "gcs", "options": {...}},
      "action": "commit" | "abort",
      "dest": "t-1234/table", "job_id": "job_1",
      "config": {"conflict_mode": "replace", "io_threads": 1},   # CommitterConfig.from_mapping
      "kill": {"requests": [<kill rule>, ...], "progress": "stage:phase[:N]"}
    }

``store.options`` are the store constructor's keyword arguments (JSON values only):
``local`` -> ``LocalStore(**options)`` (``root`` required); ``blob`` / ``dfs`` ->
``BlobStore`` / ``DfsStore(**options)`` (``container`` plus ``endpoint``, ``account``,
``account_key`` as ``Azurite.store_options()`` / ``AdlsTestServer.store_options()`` give
them); ``gcs`` -> ``GcsStore(**options)`` (``bucket``, ``endpoint``, ``use_move``, ...).
Kill rules: see :mod:`tests.crash.kill`.

When the child is *not* killed it prints one JSON line on stdout, ``{"outcome": "ok",
"success": bool}`` or ``{"outcome": "error", "type": "ConflictError", "message": "..."}``,
and exits 0 — the parent (:func:`tests.crash.runner.run_child`) tells "killed" (return code
``-SIGKILL``) from "finished" and from "crashed otherwise".
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from amcommit.api import abort_job, commit_job
from amcommit.committer import CommitterConfig
from amcommit.errors import AmcommitError
from amcommit.store.base import Store
from tests.crash.kill import install_request_killer, progress_killer


def open_spec_store(spec: dict[str, Any]) -> Store:
    """The store a spec's ``store`` entry describes (see the module docstring)."""
    kind, opts = spec["kind"], dict(spec.get("options") or {})
    if kind == "local":
        from amcommit.store.local import LocalStore

        return LocalStore(**opts)
    if kind == "blob":
        from amcommit.store.azure import BlobStore

        return BlobStore(**opts)
    if kind == "dfs":
        from amcommit.store.azure import DfsStore

        return DfsStore(**opts)
    if kind == "gcs":
        from amcommit.store.gcs.store import GcsStore

        opts.setdefault("write_rate", None)
        return GcsStore(**opts)
    raise ValueError(f"unknown store kind {kind!r}")


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    kill = spec.get("kill") or {}
    if kill.get("requests"):
        install_request_killer(kill["requests"])
    progress = progress_killer(kill.get("progress"))
    store = open_spec_store(spec["store"])
    config = CommitterConfig.from_mapping(spec.get("config") or {})
    async with store:
        try:
            if spec["action"] == "commit":
                report = await commit_job(
                    store, spec["dest"], spec["job_id"], config=config, progress=progress
                )
            elif spec["action"] == "abort":
                report = await abort_job(
                    store, spec["dest"], spec["job_id"], config=config, progress=progress
                )
            else:
                raise ValueError(f"unknown action {spec['action']!r}")
            return {"outcome": "ok", "success": report.success}
        except AmcommitError as e:
            return {"outcome": "error", "type": type(e).__name__, "message": str(e)}


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = anyio.run(run, spec)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
