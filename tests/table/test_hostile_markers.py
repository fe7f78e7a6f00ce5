"""Markers are input (issue 32, item 1): a marker under ``.hoodie/.temp/<W>/`` naming a
committed base file of an earlier write, ``.hoodie/hoodie.properties`` or
``.hoodie/<earlier>.commit`` gets nothing deleted by W's commit (refused in one line before
anything is deleted), W's abort, ``amcommit rollback`` of W, the marker sweep or ``clean``.
On local files, Azurite and fake-gcs-server; afterwards the objects (listed with the
official SDK, with their sizes) are exactly what they would be without the hostile markers,
and hudi-rs and amcommit's reader read the same rows as before."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from amcommit.api import abort_job, commit_job
from amcommit.errors import CommitError
from amcommit.paths import join
from amcommit.store.base import PutMode, Store
from amcommit.table.commit.clean import clean
from amcommit.table.commit.rollback import rollback_instant
from amcommit.table.settings import TableConfig
from amcommit.table.write.direct import IOType, marker_dir, sweep_late_markers
from tests.matrix.conftest import (  # noqa: F401 (fixtures)
    matrix_blob,
    matrix_gcs_fake,
    matrix_local,
    matrix_sdk_list,
)
from tests.matrix.stores import open_store
from tests.table.directhelpers import direct_tasks
from tests.table.test_direct_cloud import _hudi
from tests.table.writehelpers import amcommit_rows, begin, hudi_rows, keys, rows, write

CFG = TableConfig(writer_ttl=600.0)
FIRST = rows(0, 6)
SECOND = rows(10, 5, parts=("a", "c"), tag="s")
OPS = ["commit", "abort", "rollback", "sweep", "clean"]


def test_marker_problem_names_what_a_marker_may_delete() -> None:
    from amcommit.table.write.direct import marker_problem

    t = "20261129101010123"
    ok = f"p=a/f1-0_1-0-0_{t}.parquet"
    assert marker_problem(ok, IOType.CREATE, t, 1) is None
    assert marker_problem(ok, IOType.MERGE, t, 1) is None
    assert marker_problem(ok, IOType.CREATE, t, None) is not None  # depth unknown: nothing
    assert "stamped with instant 20261129101010000" in (
        marker_problem(f"p=a/f1-0_1-0-0_{t[:-3]}000.parquet", IOType.CREATE, t, 1) or ""
    )
    for bad in (
        ".hoodie/hoodie.properties",
        f".hoodie/{t}.commit",
        f".hoodie/x/f1-0_1-0-0_{t}.parquet",
        f"f1-0_1-0-0_{t}.parquet",  # not as deep as the table's one partition field
        f"a/b/f1-0_1-0-0_{t}.parquet",
        f"_x/f1-0_1-0-0_{t}.parquet",
        f"p=a/.f1-0_1-0-0_{t}.parquet",
    ):
        assert marker_problem(bad, IOType.CREATE, t, 1) is not None, bad
    assert marker_problem(".hoodie/hoodie.properties", IOType.APPEND, t, 1) is None  # deletes nothing


async def _plant(store: Store, dest: str, instant: str, committed: str, earlier: str) -> list[str]:
    """Hostile markers in ``instant``'s marker folder: a committed base file of an earlier
    write, the table's properties, the earlier write's completed instant. Returns their
    targets (relative to the table)."""
    targets = [committed, ".hoodie/hoodie.properties", f".hoodie/{earlier}.commit"]
    for rel, io_type in zip(targets, ("CREATE", "CREATE", "MERGE"), strict=True):
        path = join(marker_dir(dest, instant), f"{rel}.marker.{io_type}")
        await store.put(path, b"", mode=PutMode.OVERWRITE)
    return targets


@pytest.mark.timeout(120)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend", ["local", "blob", "gcs-fake"])
def test_hostile_markers_delete_nothing(
    backend: str, op: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    sdk_list = request.getfixturevalue("matrix_sdk_list")(backend, info)
    dest = f"h/{op}"

    def sdk(d: str) -> dict[str, int]:
        listed = sdk_list(d)
        return {k[k.index(d + "/") + len(d) + 1 :]: v for k, v in listed.items()}

    def hudi(d: str) -> list[tuple[Any, ...]]:
        if backend == "local":
            return hudi_rows(str(Path(info["root"]) / d))
        uri, opts = _hudi(backend, info, d)
        return hudi_rows(uri, storage=opts)

    async def go() -> None:
        store = open_store(info)
        async with store:
            w1, _ = await write(store, dest, FIRST, config=CFG)
            committed = sorted(k for k in sdk(dest) if k.endswith(".parquet") and w1.instant in k)[0]
            before = sdk(dest)
            w = await begin(store, dest, config=CFG)
            await direct_tasks(store, w, SECOND, losers=1)
            expect_rows = keys(FIRST)
            if op in ("sweep", "clean"):  # W completed first; its folder written to afterwards
                await commit_job(store, dest, w.instant, config=CFG)
                await sweep_late_markers(store, dest, grace=0.0)
                before = sdk(dest)
                expect_rows = keys(FIRST + SECOND)
            targets = await _plant(store, dest, w.instant, committed, w1.instant)
            assert all(t in sdk(dest) for t in targets)
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="amcommit"):
                if op == "commit":
                    with pytest.raises(CommitError) as got:
                        await commit_job(store, dest, w.instant, config=CFG)
                    line = str(got.value)
                    assert "\n" not in line and "marker" in line and w.instant in line, line
                    assert "nothing was deleted" in line, line
                    mid = sdk(dest)
                    assert all(mid[t] == before[t] for t in targets)  # nothing deleted
                    assert hudi(dest) == keys(FIRST)
                    report = await abort_job(store, dest, w.instant, config=CFG)
                    assert report.rolled_back
                elif op == "abort":
                    assert (await abort_job(store, dest, w.instant, config=CFG)).rolled_back
                elif op == "rollback":
                    assert (
                        await rollback_instant(store, dest, w.instant, config=CFG, force=True)
                    ).rolled_back
                elif op == "sweep":
                    assert await sweep_late_markers(store, dest, grace=0.0) == {}
                else:
                    report = await clean(store, dest, retain_commits=1, config=CFG)
                    assert report.late_files == {} and report.files == []
            # exactly the objects without the hostile markers (the write's own files, markers
            # and staging gone), byte sizes equal; both readers read what they read before
            assert sdk(dest) == before
            assert hudi(dest) == expect_rows
            assert await amcommit_rows(store, dest) == expect_rows
            if op != "commit":
                assert any("not a file write" in r.getMessage() for r in caplog.records), caplog.records

    anyio.run(go)
