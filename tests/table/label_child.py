"""Child process for test_label_kills: one labelled write the way an ingestion tool retries it
(ask ``committed_by``, else begin, write, commit with the label), SIGKILLed just before the
first mutating store request matching a regex (``"-"``: never).

argv: root dest app version first_row n_rows kill_regex ttl [nocheck]. Prints one JSON line:
``{"instant": ..., "skipped": ..., "label": ...}`` when it was not killed."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio

from amcommit.committer import CommitterConfig
from amcommit.committer.job import commit_job
from amcommit.store.base import ObjectInfo, RenameResult, Store
from amcommit.store.local import LocalStore
from amcommit.table.labels import Label, committed_by
from amcommit.table.model import Operation
from amcommit.table.schema import avro_schema
from amcommit.table.write import begin_write
from tests.table.writehelpers import SCHEMA, SPEC, rows, write_tasks


class KillOn:
    """A store that SIGKILLs the process before the ``nth`` mutating request whose
    ``"<op> <path>[ -> <dst>]"`` matches ``pattern``."""

    def __init__(self, inner: Store, pattern: str, nth: int = 1) -> None:
        self.inner = inner
        self.pattern = None if pattern == "-" else re.compile(pattern)
        self.nth = nth
        self.capabilities = inner.capabilities
        self.iostats = inner.iostats

    def _check(self, what: str) -> None:
        if self.pattern is not None and self.pattern.search(what):
            self.nth -= 1
            if self.nth <= 0:
                os.kill(os.getpid(), signal.SIGKILL)

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    async def stat(self, path: str) -> ObjectInfo:
        return await self.inner.stat(path)

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        return self.inner.list(prefix, recursive=recursive)

    async def get(self, path: str) -> bytes:
        return await self.inner.get(path)

    async def put(self, path: str, data: bytes, **kw: Any) -> ObjectInfo:
        self._check(f"put {path}")
        return await self.inner.put(path, data, **kw)

    async def rename(self, src: str, dst: str, **kw: Any) -> RenameResult:
        self._check(f"rename {src} -> {dst}")
        return await self.inner.rename(src, dst, **kw)

    async def delete(self, path: str, **kw: Any) -> bool:
        self._check(f"delete {path}")
        return await self.inner.delete(path, **kw)

    async def mkdirs(self, path: str) -> None:
        self._check(f"mkdirs {path}")
        await self.inner.mkdirs(path)

    async def aclose(self) -> None:
        await self.inner.aclose()


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


def main() -> None:
    root, dest, app, version, first, n, pattern, ttl = sys.argv[1:9]
    precheck = sys.argv[9:] != ["nocheck"]

    async def run() -> None:
        store = KillOn(LocalStore(root, fsync=False), pattern)
        t = float(ttl)
        cfg = CommitterConfig(io_threads=2, writer_ttl=t, lock_ttl=t, lock_wait=60.0)
        out = await ingest_once(
            store, dest, Label(app, int(version)), rows(int(first), int(n)), cfg, precheck=precheck
        )  # type: ignore[arg-type]
        print(json.dumps(out), flush=True)

    anyio.run(run)


if __name__ == "__main__":
    main()
