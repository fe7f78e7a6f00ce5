"""Child process for test_driver_keepalive: a Python driver that begins a table write as
``amcommit.spark.upsert`` or ``write_batch`` do in a driver started as ``python job.py``
(no ``java`` ancestor): ``begin_write``, its tasks, then the driver's keep-alive process
(:func:`amcommit.spark.driver.keep_write_alive`, the Spark writer's own call); prints
``instant driver_pid keeper_pid`` and waits until SIGKILLed.

argv: ``root dest ttl`` (a local store)."""

from __future__ import annotations

import os
import sys
import time

import anyio

from amcommit.liveness import proc_stat
from amcommit.spark.driver import keep_write_alive
from amcommit.spark.options import WritePlan
from amcommit.store.local import LocalStore
from amcommit.table.settings import TableConfig
from tests.table.writehelpers import begin, rows, write_tasks


def _keep_alive_pid() -> int:
    """This process's child running ``amcommit.table.timeline.beater`` (one scan of /proc)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or (st := proc_stat(int(name))) is None or st[2] != me:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if b"amcommit.table.timeline.beater" in f.read():
                    return int(name)
        except OSError:
            continue
    raise SystemExit("no keep-alive process")


def main() -> None:
    root, dest, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])

    async def go() -> str:
        store = LocalStore(root)
        async with store:
            w = await begin(store, dest, config=TableConfig(writer_ttl=ttl))
            await write_tasks(store, w, rows(100, 4, tag="k"))
            return w.instant

    instant = anyio.run(go)
    plan = WritePlan(
        url=os.path.join(root, dest),
        job_id=instant,
        overwrite=False,
        conflict_mode="append",
        partition_columns=(),
        data_columns=(),
        data_schema_json="{}",
        committer_options={"writer_ttl": ttl},
    )
    keep_write_alive(plan)
    print(instant, os.getpid(), _keep_alive_pid(), flush=True)
    time.sleep(3600)  # the rest of the job, until killed


if __name__ == "__main__":
    main()
