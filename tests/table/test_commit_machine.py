"""The table's commit runs on the engine's journal state machine
(:mod:`amcommit.committer.machine`): a table commit that failed during its renames (a store
error, the journal left ``renaming``) resumes from the frame's journal, and the resumed run
reports what the first run's checks took (the journal records the stage times of a fresh
commit for every kind), as a plain commit always did."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amcommit.api import commit_job
from amcommit.errors import PermissionDenied
from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table.settings import TableConfig
from amcommit.testing.faults import FaultyStore
from tests.table.writehelpers import begin, hudi_rows, keys, listing, rows, write_tasks

CFG = TableConfig(writer_ttl=600.0, table_commit="staged")


async def test_a_resumed_table_commit_reports_the_first_runs_checks(tmp_path: Path) -> None:
    inner = LocalStore(str(tmp_path), fsync=False)
    store = FaultyStore(inner)
    dest = join(inner.root, "t")
    data = rows(0, 8)
    w = await begin(store, dest, config=CFG)  # type: ignore[arg-type]
    await write_tasks(store, w, data)  # type: ignore[arg-type]
    # every base-file rename refused: the commit fails after its journal said "renaming"
    store.fail("rename", path="*.parquet", error=PermissionDenied)
    with pytest.raises(PermissionDenied):
        await commit_job(store, dest, w.instant, config=CFG)
    staging = f".hoodie/.aux/amcommit/{w.instant}"
    before = await listing(inner, dest)
    assert f"{staging}/journal.json" in before and f"{staging}/commit-plan.json" in before
    assert not [n for n in before if n.startswith("p=")]  # nothing renamed into the table
    assert f".hoodie/{w.instant}.commit" not in before

    store.clear()
    report = await commit_job(store, dest, w.instant, config=CFG)
    assert report.success and report.resumed and report.renamed == 4
    # plan_commit ran in the first run only: its time comes from the journal
    assert "plan_commit" in report.stage_seconds and "rename_files" in report.stage_seconds
    after = await listing(inner, dest)
    assert f".hoodie/{w.instant}.commit" in after
    assert not [n for n in after if n.startswith(staging)]
    assert len([n for n in after if n.endswith(".parquet")]) == 4
    assert hudi_rows(os.path.join(inner.root, dest)) == keys(data)
