"""The task side of a direct table write (``table_commit=direct``, the Spark data source's
default) killed on Azurite: a task attempt (``write_in_place`` for each base file, then
``commit_direct_task``: the calls :func:`amcommit.spark.task.run_task` makes) runs in a
forked child that SIGKILLs itself before its n-th mutating request (markers, uploads, the
manifest), for every n; then the attempt is retried as Spark retries it (attempt 1) and
the job is committed (every n) or aborted (the first and the last n).

Every write goes into one table, one after the other. Checked each time: hudi-rs sees
nothing of the write before its commit, then exactly the committed rows (or the old ones
after the abort); what the write added to the official SDK's listing of the table is
exactly what a clean run adds (names normalised: file ids, write tokens, the instant),
so the dead attempt left no file and no marker."""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import signal
import sys
from typing import Any

import anyio
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.table.settings import TableConfig
from amcommit.table.write.task import TableWrite
from tests.forkrun import PRELOAD
from tests.matrix.conftest import matrix_blob, matrix_sdk_list  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.directhelpers import direct_attempt
from tests.table.writehelpers import begin, hudi_rows, keys, rows, write

CFG = TableConfig(writer_ttl=600.0)
FIRST = rows(0, 6, parts=("a", "b", "c"))  # every partition of SECOND exists
SECOND = rows(10, 5, parts=("a", "c"), tag="s")
_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-0_\d+-\d+-\d+_")
_FORKS = mp.get_context("forkserver")
_FORKS.set_forkserver_preload(PRELOAD)  # one fork server per process: every kill test's list


def attempt_child(text: str) -> None:
    """Forked child: task 1's attempt 0 of the write in ``text`` (JSON: backend, dest,
    instant, kill), SIGKILLed before its ``kill``-th mutating request."""
    from amcommit.table.format.model import Operation
    from amcommit.table.write.staging import table_layout
    from amcommit.table.write.task import read_properties
    from tests.table.killstore import KillStore

    spec = json.loads(text)

    async def run() -> None:
        inner = open_store(spec["backend"])
        store = KillStore(inner, None, int(spec["kill"]))
        async with inner:
            props = await read_properties(store, spec["dest"])  # type: ignore[arg-type]
            assert props is not None
            w = TableWrite(
                dest=spec["dest"],
                instant=spec["instant"],
                operation=Operation.INSERT,
                layout=table_layout(spec["dest"], spec["instant"]),
                properties=props,
            )
            await direct_attempt(store, w, SECOND, 1, 2, 0)  # type: ignore[arg-type]

    anyio.run(run)
    sys.exit(0)


def _killed_attempt(info: dict[str, Any], dest: str, instant: str, kill: int) -> bool:
    """Run the attempt in a forked child killed before request ``kill``; True if it
    completed (``kill`` beyond its requests)."""
    spec = json.dumps({"backend": info, "dest": dest, "instant": instant, "kill": kill})
    proc = _FORKS.Process(target=attempt_child, args=(spec,), name="direct-task-kill")
    proc.start()
    proc.join(120)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    assert proc.exitcode in (0, -signal.SIGKILL), f"task child failed (exit {proc.exitcode})"
    return proc.exitcode == 0


def _added(before: dict[str, int], after: dict[str, int], dest: str, instant: str) -> list[str]:
    """What a write added to the table (the SDK's listings before and after), names
    normalised; nothing may have gone. A committed write keeps the young markers of losers
    whose files are gone (a later sweep removes them, past writer_ttl): left out, never a
    winner's."""
    assert set(before) <= set(after), sorted(set(before) - set(after))
    added = set(after) - set(before)
    temp = f"{dest}/.hoodie/.temp/{instant}/"
    young = {
        p
        for p in added
        if p.startswith(temp) and f"{dest}/{p.removeprefix(temp).partition('.marker.')[0]}" not in after
    }
    return sorted(_NAME.sub("F_", p.removeprefix(dest + "/")).replace(instant, "I") for p in added - young)


@pytest.mark.timeout(300)
def test_direct_task_killed_on_azurite_then_retried(request: pytest.FixtureRequest) -> None:
    info = request.getfixturevalue("matrix_blob")
    sdk = request.getfixturevalue("matrix_sdk_list")("blob", info)
    dest = "t/tbl"

    def read() -> list[Any]:
        uri = f"az://{info['container']}/{dest}"
        opts = {
            "azure_storage_account_name": info["account"],
            "azure_storage_account_key": info["account_key"],
            "azure_storage_endpoint": info["endpoint"],
            "allow_http": "true",
        }
        return hudi_rows(uri, storage=opts)

    async def go() -> None:
        store = open_store(info)
        async with store:
            await write(store, dest, FIRST, config=CFG)
            want_rows = keys(FIRST)

            async def cycle(kill: int | None, then: str) -> tuple[bool, list[str]]:
                """One write: task 0 committed; task 1's attempt 0 killed before request
                ``kill`` (None: not run), attempt 1 committed; then ``then``. (attempt 0
                completed, the write's additions)."""
                nonlocal want_rows
                before = sdk(dest)
                w = await begin(store, dest, config=CFG)
                await direct_attempt(store, w, SECOND, 0, 2)
                done = kill is None or _killed_attempt(info, dest, w.instant, kill)
                await direct_attempt(store, w, SECOND, 1, 2, attempt=1)  # Spark's retry
                assert read() == want_rows, kill  # nothing of the write is visible
                op = commit_job if then == "commit" else abort_job
                await op(store, dest, w.instant, config=CFG)
                if then == "commit":
                    want_rows = sorted(want_rows + keys(SECOND))
                assert read() == want_rows, (kill, then)
                return done, _added(before, sdk(dest), dest, w.instant)

            # the references: a clean run committed, and aborted
            _, committed = await cycle(None, "commit")
            _, aborted = await cycle(None, "abort")
            assert aborted == [] and committed, committed
            assert not any(".temp/" in x for x in committed)
            k = 1
            while True:
                for then in ("commit", "abort") if k == 1 else ("commit",):
                    done, got = await cycle(k, then)
                    want = committed if then == "commit" else aborted
                    assert got == want, (k, then, got)
                if done:
                    break
                k += 1
            # past the last request (the attempt completed: a loser that published its
            # manifest, replaced by the retry's), aborted too
            assert await cycle(k, "abort") == (True, aborted)
            assert k >= 5, k  # 2 markers, 2 uploads, the manifest
            print(f"task attempt killed before each of its {k - 1} mutating requests")

    anyio.run(go)
