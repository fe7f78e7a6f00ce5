"""Orphans (issue 32, item 4): a late zombie's file stamped with a completed instant that its
commit does not name (its marker already removed: nothing but a listing finds it) shows in
hudi-rs until the next ``clean``, which removes it once it is older than ``writer_ttl``
(by the store's clock; a young one stays). Files of a rolled-back instant too; never files
of a pending instant, of an instant later than the timeline, or a committed file. ``amcommit
rollback`` of a completed instant is refused and changes nothing. On local files, Azurite
and fake-gcs-server; the orphan scan's cost (requests, time) measured for 200 partitions."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
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
from amcommit.table.format.model import Instant, State
from amcommit.table.format.naming import base_file_name, new_file_id, next_instant, write_token
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants
from tests.matrix.conftest import (  # noqa: F401 (fixtures)
    matrix_blob,
    matrix_gcs_fake,
    matrix_local,
    matrix_sdk_list,
)
from tests.matrix.stores import open_store
from tests.table.directhelpers import direct_tasks
from tests.table.test_direct_cloud import _hudi
from tests.table.writehelpers import amcommit_rows, begin, hudi_rows, keys, parquet_bytes, rows, write

CFG = TableConfig(writer_ttl=600.0)
SHORT = TableConfig(writer_ttl=1.0)
"""For the clean that removes what the tests made old: nothing else is running."""
FIRST = rows(0, 6)
SECOND = rows(10, 4, tag="s")


def test_is_orphan_pure() -> None:
    from amcommit.table.commit.orphans import is_orphan

    c = lambda t: Instant(t, "commit", State.COMPLETED)  # noqa: E731
    i = lambda t: Instant(t, "commit", State.INFLIGHT)  # noqa: E731
    t1, t2, t3, t4 = "20260101000000100", "20260101000000200", "20260101000000300", "20260101000000400"
    tl = [c(t1), i(t2), c(t4)]
    named = {t1: {f"p=a/f1-0_0-1-0_{t1}.parquet"}, t4: set()}
    f = lambda t, fid="f1-0": f"p=a/{fid}_0-1-0_{t}.parquet"  # noqa: E731
    assert is_orphan(f(t1), tl, named, set()) is False  # named by its commit
    assert is_orphan(f(t1, "f2-0"), tl, named, set()) is True  # not named: a zombie's
    assert is_orphan(f(t2), tl, named, set()) is False  # pending: never
    assert is_orphan(f(t3), tl, named, None) is None  # off the timeline: staging decides
    assert is_orphan(f(t3), tl, named, {t3}) is False  # a write beginning
    assert is_orphan(f(t3), tl, named, set()) is True  # rolled back
    assert is_orphan(f("20260101000000050"), tl, named, set()) is False  # before the timeline: archived?
    assert is_orphan(f("20260101000000500"), tl, named, set()) is False  # later than the listing
    assert is_orphan("p=a/.hoodie_partition_metadata", tl, named, set()) is False


async def _zombie(store: Store, dest: str, instant: str, part: str = "a") -> str:
    """A late attempt's upload stamped with ``instant`` (no marker). Returns it (relative)."""
    name = base_file_name(new_file_id(), write_token(0, 1, 7), instant)
    rel = f"p={part}/{name}"
    data = parquet_bytes(rows(900, 2, parts=(part,), tag="z"), meta=(instant, f"p={part}", name, 0))
    await store.put(join(dest, rel), data, mode=PutMode.OVERWRITE)
    return rel


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["local", "blob", "gcs-fake"])
def test_late_zombie_removed_by_next_clean(backend: str, request: pytest.FixtureRequest) -> None:
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    sdk_list = request.getfixturevalue("matrix_sdk_list")(backend, info)
    dest = "z/tbl"

    def sdk() -> dict[str, int]:
        return {k[k.index(dest + "/") + len(dest) + 1 :]: v for k, v in sdk_list(dest).items()}

    def hudi() -> list[tuple[Any, ...]]:
        if backend == "local":
            return hudi_rows(str(Path(info["root"]) / dest))
        uri, opts = _hudi(backend, info, dest)
        return hudi_rows(uri, storage=opts)

    async def go() -> None:
        store = open_store(info)
        async with store:
            await write(store, dest, FIRST, config=CFG)
            w = await begin(store, dest, config=CFG)
            await direct_tasks(store, w, SECOND)
            await commit_job(store, dest, w.instant, config=CFG)
            zombie = await _zombie(store, dest, w.instant)
            # a rolled-back write's late upload, and a later commit (its instant is then
            # between the first and the last of the timeline)
            gone = await begin(store, dest, config=CFG)
            assert (await abort_job(store, dest, gone.instant, config=CFG)).rolled_back
            late = await _zombie(store, dest, gone.instant, "b")
            w3, _ = await write(store, dest, rows(40, 2, tag="t"), config=CFG)
            before = sdk()
            expect = keys(FIRST + SECOND + rows(40, 2, tag="t"))
            assert zombie in before and late in before
            assert len(hudi()) == len(expect) + 2  # hudi-rs shows the zombie's rows
            assert await amcommit_rows(store, dest) == expect  # amcommit's reader never does
            # young: kept (writer_ttl 600 s)
            kept = await clean(store, dest, retain_commits=5, config=CFG)
            assert sdk() == before
            await anyio.sleep(2.5)  # older than writer_ttl 1 s by the store's clock
            report = await clean(store, dest, retain_commits=5, config=SHORT)
            after = sdk()
            assert after == {k: v for k, v in before.items() if k not in (zombie, late)}
            assert hudi() == expect
            assert await amcommit_rows(store, dest) == expect
            assert w3.instant in {i.time for i in await list_instants(store, dest)}
            assert kept.orphans == [] and kept.orphan_scan is not None and kept.orphan_scan.young == 2
            assert report.orphans == sorted([zombie, late])
            # rollback of a completed instant: refused, nothing changed, clean named
            late = await _zombie(store, dest, w.instant)
            before = sdk()
            with pytest.raises(CommitError) as got:
                await rollback_instant(store, dest, w.instant, config=SHORT, force=True)
            assert "is completed" in str(got.value) and "amcommit clean" in str(got.value)
            assert sdk() == before

    anyio.run(go)


async def test_orphan_scan_leaves_pending_and_new_instants_alone(tmp_path: Path) -> None:
    """Files stamped with a pending write's instant, or with a time later than every
    instant (a write that may be beginning), old or not, are no orphans."""
    root = tmp_path / "root"
    root.mkdir()
    from amcommit.store.local import LocalStore

    store = LocalStore(str(root), fsync=False)
    await write(store, "tbl", FIRST, config=CFG)
    await write(store, "tbl", rows(40, 2, tag="t"), config=CFG)
    pending = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, pending, SECOND)
    future = next_instant(datetime.now(UTC), after=(await list_instants(store, "tbl"))[-1].time)
    new = await _zombie(store, "tbl", future)
    old = time.time() - 3600
    for d, _, files in os.walk(root / "tbl"):
        for f in files:
            os.utime(os.path.join(d, f), (old, old))
    report = await clean(store, "tbl", retain_commits=5, config=CFG)
    assert report.orphans == [] and report.orphan_scan is not None and report.orphan_scan.young == 0
    assert (root / "tbl" / new).exists()
    assert (await commit_job(store, "tbl", pending.instant, config=CFG)).success


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["local", "gcs-fake"])
def test_orphan_scan_cost(backend: str, request: pytest.FixtureRequest) -> None:
    """The scan lists each partition the recent instants touched once (nothing else while
    no candidate is found): 200 partitions, 200 listings. Prints the figures."""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    parts = [f"{i:03d}" for i in range(200)]

    async def go() -> None:
        store = open_store(info)
        async with store:
            await write(store, "m/tbl", rows(0, 400, parts=parts), config=CFG)
            await write(store, "m/tbl", rows(1000, 20, parts=parts[:10]), config=CFG)
            zombie = await _zombie(store, "m/tbl", (await list_instants(store, "m/tbl"))[-1].time, "005")
            before = store.iostats.snapshot().counters
            t0 = time.monotonic()
            report = await clean(store, "m/tbl", retain_commits=5, config=CFG)
            seconds = time.monotonic() - t0
            after = store.iostats.snapshot().counters
            scan = report.orphan_scan
            assert scan is not None and scan.partitions == 200 and scan.young == 1
            data = [i async for i in store.list("m/tbl", recursive=True) if "/.hoodie/" not in i.path]
            assert scan.listed == len(data)  # every partition listed once, nothing else
            total = sum(v for k, v in after.items() if not k.endswith(".failures")) - sum(
                v for k, v in before.items() if not k.endswith(".failures")
            )
            print(
                f"\norphan scan {backend}: {scan.partitions} partitions, {scan.listed} objects, "
                f"{scan.requests} requests, {scan.seconds * 1000:.0f} ms; whole clean {total} "
                f"requests, {seconds * 1000:.0f} ms"
            )
            assert scan.requests == 200 + 3  # the listings, the store's clock (a young candidate)
            assert zombie  # kept: younger than writer_ttl

    anyio.run(go)


async def test_clean_command_lists_then_removes_orphans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``amcommit clean --dry-run`` names an old orphan and keeps it; ``amcommit clean``
    removes it and says so."""
    from amcommit.cli import main
    from amcommit.store.local import LocalStore

    root = tmp_path / "root"
    root.mkdir()
    store = LocalStore(str(root), fsync=False)
    w, _ = await write(store, "tbl", FIRST, config=CFG)
    await write(store, "tbl", SECOND, config=CFG)
    zombie = await _zombie(store, "tbl", w.instant)
    old = time.time() - 3600
    os.utime(root / "tbl" / zombie, (old, old))
    uri = str(root / "tbl")
    assert await anyio.to_thread.run_sync(main, ["clean", uri, "--retain-commits", "5", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [
        "would remove 1 orphan files (stamped with a decided instant that does not name them):",
        f"  {zombie}",
    ], out
    assert (root / "tbl" / zombie).exists()
    assert await anyio.to_thread.run_sync(main, ["clean", uri, "--retain-commits", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "removed 1 orphan files (stamped with a decided instant that does not name them):", out
    assert not (root / "tbl" / zombie).exists()
    assert hudi_rows(uri) == keys(FIRST + SECOND)
