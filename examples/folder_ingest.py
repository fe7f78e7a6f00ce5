"""Exactly-once ingestion of a folder of JSON-lines files into a Hudi table with amcommit.

    python examples/folder_ingest.py INBOX TABLE CHECKPOINT [--app-id ID] [--batch-files N] [--until-idle]

Every round picks up to N new ``*.jsonl`` files from INBOX, writes their rows as one Parquet
file and commits it into the table at TABLE (a path or a store URL) with the label
``(app_id, batch number)``. Kill it with ``kill -9`` at any point and start it again: every
input row ends up in the table exactly once.

How: the batch number is the state. ``CHECKPOINT/<n>.json`` records which files make batch
``n`` *before* it is written (atomic rename), so a replayed batch has the same files; the table
remembers which batches committed (the label in each commit's metadata), and a commit whose
label is already committed is skipped. At start, ``recover`` finishes or rolls back what the
killed run left in the table. One run per app id at a time.
"""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import anyio
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from amcommit import loop as amcommit_loop
from amcommit.api import commit_job
from amcommit.store.base import Store
from amcommit.store.schemes import open_location
from amcommit.table.commit.labels import Label, last_committed, recover
from amcommit.table.format.model import Operation
from amcommit.table.report import table_report
from amcommit.table.write.task import TableSpec, begin_write, setup_table_task

SPEC = TableSpec("events", meta_fields=False)  # unpartitioned; plain Parquet files


def plan_batch(checkpoint: Path, n: int, inbox: Path, batch_files: int) -> list[str]:
    """The files of batch ``n``: as recorded, else the next new files (recorded first)."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    path = checkpoint / f"{n}.json"
    if path.exists():
        return list(json.loads(path.read_text()))
    taken = {f for p in checkpoint.glob("*.json") for f in json.loads(p.read_text())}
    files = sorted(p.name for p in inbox.glob("*.jsonl") if p.name not in taken)[:batch_files]
    if files:
        tmp = checkpoint / f".{n}.json.tmp"
        tmp.write_text(json.dumps(files))
        os.replace(tmp, path)  # atomic: the batch is either recorded whole or not at all
    return files


async def commit_batch(store: Store, dest: str, label: Label, inbox: Path, files: list[str]) -> str:
    """Write ``files`` as one Parquet file and commit it with ``label``; what happened."""
    rows = pa.concat_tables([pj.read_json(inbox / f) for f in files])
    buf = io.BytesIO()
    pq.write_table(rows, buf)
    # one task (recorded: `amcommit commit-job` of a batch killed before its task commit is
    # refused, never published without its rows); its file staged, or written in place, as
    # the config's table_commit says
    write = await begin_write(
        store, dest, operation=Operation.INSERT, spec=SPEC, label=label, expected_tasks=1
    )
    task = await setup_table_task(
        store, write, f"task_{write.instant}_m_000000", f"attempt_{write.instant}_m_000000_0"
    )
    await task.put(task.new_file(""), buf.getvalue(), rows=rows.num_rows)
    await task.commit()
    report = table_report(await commit_job(store, dest, write.instant))  # a TableReport
    if report.skipped_label:
        return f"batch {label.version} was already committed by {report.skipped_label}: skipped"
    return f"batch {label.version}: {rows.num_rows} rows committed as instant {write.instant}"


async def run(
    store: Store, dest: str, inbox: Path, checkpoint: Path, app_id: str, batch_files: int, until_idle: bool
) -> None:
    for instant in await recover(store, dest, app_id):  # what a killed run left behind
        print(f"finished or rolled back instant {instant} of a previous run")
    last = await last_committed(store, dest, app_id)
    n = 0 if last is None else last[0] + 1
    while True:
        files = plan_batch(checkpoint, n, inbox, batch_files)
        if not files:
            if until_idle:
                return
            await anyio.sleep(1.0)
            continue
        print(await commit_batch(store, dest, Label(app_id, n), inbox, files), flush=True)
        n += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inbox", type=Path)
    ap.add_argument("table", help="table path or URL (file://, az://, gs://, ...)")
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--app-id", default="folder-ingest")
    ap.add_argument("--batch-files", type=int, default=10)
    ap.add_argument("--until-idle", action="store_true", help="stop when no new file is left")
    args = ap.parse_args()
    store, dest = open_location(str(args.table))

    async def go() -> None:
        try:
            await run(
                store, dest, args.inbox, args.checkpoint, args.app_id, args.batch_files, args.until_idle
            )
        finally:
            await store.aclose()

    amcommit_loop.run(go)  # uvloop where installed, like amcommit's own entry points


if __name__ == "__main__":
    main()
