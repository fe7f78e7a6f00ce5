"""Child process for test_label_kills: one labelled write the way an ingestion tool retries it
(ask ``committed_by``, else begin, write, commit with the label), SIGKILLed just before the
first mutating store request matching a regex (``"-"``: never).

argv: root dest app version first_row n_rows kill_regex ttl [nocheck] (a local store), or
``--spec JSON`` (any backend, :func:`run_spec`). Prints one JSON line:
``{"instant": ..., "skipped": ..., "label": ...}`` when it was not killed."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from amcommit.api import commit_job
from amcommit.committer import CommitterConfig
from amcommit.store.base import Store
from amcommit.store.local import LocalStore
from amcommit.table.labels import Label, committed_by
from amcommit.table.model import Operation
from amcommit.table.schema import avro_schema
from amcommit.table.settings import TableConfig
from amcommit.table.write import begin_write
from tests.table.killstore import KillStore
from tests.table.writehelpers import SCHEMA, SPEC, rows, write_tasks


def KillOn(inner: Store, pattern: str, nth: int = 1) -> KillStore:
    """A store that SIGKILLs the process before the ``nth`` mutating request whose
    ``"<op> <path>[ -> <dst>]"`` matches ``pattern`` (``"-"``: never)."""
    return KillStore(inner, "(?!)" if pattern == "-" else pattern, nth)


async def ingest_once(
    store: Store,
    dest: str,
    label: Label,
    data: list[dict[str, Any]],
    config: CommitterConfig,
    *,
    precheck: bool = True,
) -> dict[str, Any]:
    """What an ingestion tool does for one batch: skip it if its label is committed, else
    write it and commit it with its label (the commit skips it if it lost a race)."""
    by = await committed_by(store, dest, label, config=config) if precheck else None
    if by is not None:
        return {"instant": None, "skipped": by, "label": label.text()}
    w = await begin_write(
        store,
        dest,
        operation=Operation.INSERT,
        spec=SPEC,
        avro_schema=avro_schema(SCHEMA, SPEC.name),
        config=config,
        label=label,
    )
    await write_tasks(store, w, data)
    r = await commit_job(store, dest, w.instant, config=config)
    return {"instant": w.instant, "skipped": r.skipped_label, "label": r.label}


def run_spec(text: str) -> None:
    """One labelled write on any backend of ``tests.matrix.stores``: JSON ``{"backend":
    INFO, "dest", "app", "version", "first", "n", "kill", "ttl"}``; prints the JSON answer."""
    from tests.matrix.stores import open_store

    spec = json.loads(text)

    async def run() -> None:
        inner = open_store(spec["backend"])
        t = float(spec["ttl"])
        cfg = TableConfig(io_threads=2, writer_ttl=t, lock_ttl=t, lock_wait=60.0)
        async with inner:
            store = KillOn(inner, spec["kill"])
            label = Label(spec["app"], int(spec["version"]))
            data = rows(int(spec["first"]), int(spec["n"]))
            out = await ingest_once(store, spec["dest"], label, data, cfg)  # type: ignore[arg-type]
        print(json.dumps(out), flush=True)

    anyio.run(run)


def main() -> None:
    if sys.argv[1] == "--spec":
        run_spec(sys.argv[2])
        return
    root, dest, app, version, first, n, pattern, ttl = sys.argv[1:9]
    precheck = sys.argv[9:] != ["nocheck"]

    async def run() -> None:
        store = KillOn(LocalStore(root, fsync=False), pattern)
        t = float(ttl)
        cfg = TableConfig(io_threads=2, writer_ttl=t, lock_ttl=t, lock_wait=60.0)
        out = await ingest_once(
            store, dest, Label(app, int(version)), rows(int(first), int(n)), cfg, precheck=precheck
        )  # type: ignore[arg-type]
        print(json.dumps(out), flush=True)

    anyio.run(run)


if __name__ == "__main__":
    main()
