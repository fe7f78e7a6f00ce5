"""Helpers for the tests of table writes that copy nothing (amcommit.table.write.direct): task
attempts that write their base files in place under markers, as a writer using the direct
path does."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.paths import join, relative_to
from amcommit.store.base import Store
from amcommit.table.format.naming import base_file_name, new_file_id, write_token
from amcommit.table.write.direct import (
    MARKER_TYPE_FILE,
    TIMELINE_SERVER_BASED,
    AttemptMarkers,
    IOType,
    attempt_markers_name,
    commit_direct_task,
    encode_markers,
    marker_dir,
    marker_name,
    write_in_place,
)
from amcommit.table.write.task import TableWrite
from tests.table.writehelpers import by_partition, parquet_bytes


def attempt_id_of(w: TableWrite, n: int, attempt: int = 0) -> str:
    """The attempt id :func:`direct_attempt` gives attempt ``attempt`` of task ``n``."""
    return f"attempt_{w.instant}_m_{n:06d}_{attempt}"


def expected_markers(
    instant: str, attempts: dict[str, Sequence[str]], io: IOType = IOType.CREATE
) -> dict[str, bytes]:
    """The marker folder of ``instant`` (paths relative to the table -> bytes) holding the
    ``MARKERS<n>`` files of ``attempts`` (attempt id -> the files it marked), and
    ``MARKERS.type``; {} for no attempt."""
    if not attempts:
        return {}
    folder = marker_dir("", instant).lstrip("/")
    out = {join(folder, MARKER_TYPE_FILE): TIMELINE_SERVER_BASED.encode()}
    for a, rels in attempts.items():
        out[join(folder, attempt_markers_name(a))] = encode_markers(marker_name(r, io) for r in rels)
    return out


async def marker_folder(store: Store, dest: str, instant: str) -> dict[str, bytes]:
    """What the marker folder of ``instant`` holds (paths relative to the table -> bytes)."""
    from amcommit.errors import NotFound

    out: dict[str, bytes] = {}
    try:
        async for info in store.list(marker_dir(dest, instant), recursive=True):
            if not info.is_dir:
                out[relative_to(info.path, dest)] = await store.get(info.path)
    except NotFound:
        pass
    return out


async def direct_attempt(
    store: Store,
    w: TableWrite,
    rows: Sequence[dict[str, Any]],
    n: int,
    tasks: int,
    attempt: int = 0,
    *,
    commit: bool = True,
    config: CommitterConfig = DEFAULT_CONFIG,
) -> list[str]:
    """Attempt ``attempt`` of task ``n`` (of ``tasks``): one base file per partition of its
    share of ``rows``, written in place; its manifest published if ``commit``. Returns the
    files it wrote (relative to the table)."""
    files: list[tuple[str, int, str | None, int]] = []
    attempt_id = attempt_id_of(w, n, attempt)
    markers = AttemptMarkers(store, w.layout.dest, w.instant, attempt_id, config)
    for part, prow in sorted(by_partition(rows).items()):
        mine = prow[n::tasks]
        if not mine:
            continue
        name = base_file_name(new_file_id(), write_token(n, 0, attempt), w.instant)
        rel = f"{part}/{name}"
        data = parquet_bytes(mine, meta=(w.instant, part, name, n))
        info = await write_in_place(
            store, w.layout.dest, w.instant, rel, data, config=config, markers=markers
        )
        if info is not None:
            files.append((rel, info.size, info.etag, len(mine)))
    if commit:
        await commit_direct_task(
            store,
            w.layout,
            f"task_{w.instant}_m_{n:06d}",
            attempt_id,
            files,
            config=config,
        )
    return [f[0] for f in files]


async def direct_tasks(
    store: Store, w: TableWrite, rows: Sequence[dict[str, Any]], *, tasks: int = 2, losers: int = 0
) -> list[str]:
    """Every task of the write, each committed once; before them, ``losers`` attempts
    (attempt 9, of task 0..) that wrote their files and never committed (a failed or
    speculative attempt). Returns the losers' files."""
    lost: list[str] = []
    for k in range(losers):
        lost += await direct_attempt(store, w, rows, k % tasks, tasks, attempt=9 - k, commit=False)
    for n in range(tasks):
        await direct_attempt(store, w, rows, n, tasks)
    return lost


def main() -> None:
    """Child process for the task-side kill tests: ``python -m tests.table.directhelpers
    SPEC`` (JSON: root, dest, instant, rows, n, tasks, attempt, kill): one direct task
    attempt on a local store that SIGKILLs itself before its ``kill``-th mutating request.
    Prints ``completed`` if it finished."""
    from amcommit.store.local import LocalStore
    from amcommit.table.format.model import Operation
    from amcommit.table.write.staging import table_layout
    from amcommit.table.write.task import read_properties
    from tests.table.killstore import KillStore

    spec = json.loads(sys.argv[1])

    async def run() -> None:
        store = KillStore(LocalStore(spec["root"], fsync=False), None, int(spec["kill"]))
        props = await read_properties(store, spec["dest"])  # type: ignore[arg-type]
        assert props is not None
        w = TableWrite(
            dest=spec["dest"],
            instant=spec["instant"],
            operation=Operation.INSERT,
            layout=table_layout(spec["dest"], spec["instant"]),
            properties=props,
        )
        await direct_attempt(store, w, spec["rows"], spec["n"], spec["tasks"], spec["attempt"])  # type: ignore[arg-type]

    anyio.run(run)
    print("completed")


if __name__ == "__main__":
    main()
