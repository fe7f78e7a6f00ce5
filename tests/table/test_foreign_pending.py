"""Another writer's pending instant (issue 32, item 3): a requested/inflight instant on the
timeline with Hudi direct markers and no ``.hoodie/.aux/amcommit/<X>/`` (Hudi's own writer,
or a write whose staging was lost). It is judged one way everywhere, by Hudi's heartbeat
rules: with a fresh heartbeat (``.hoodie/.heartbeat/<X>``, its modification time), neither
``clean``, nor the marker sweep after a commit, nor a later commit deletes anything of it
(the later commit waits for it, and says what it waits on); expired, ``clean`` and a
later commit roll it back (its files, markers, heartbeat and instant files). Local files;
the clock is the test's: ages are set with ``os.utime`` far beyond ``writer_ttl``."""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from amcommit.api import commit_job
from amcommit.errors import ConflictError
from amcommit.paths import join
from amcommit.store.base import PutMode, Store
from amcommit.store.local import LocalStore
from amcommit.table.commit.clean import clean
from amcommit.table.format.naming import (
    base_file_name,
    heartbeat_path,
    new_file_id,
    next_instant,
    write_token,
)
from amcommit.table.settings import TableConfig
from amcommit.table.timeline.instants import list_instants
from amcommit.table.write.direct import marker_dir, sweep_late_markers
from tests.matrix.conftest import matrix_blob, matrix_gcs_fake, matrix_sdk_list  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.directhelpers import direct_tasks
from tests.table.test_direct_cloud import _hudi
from tests.table.writehelpers import begin, hudi_rows, keys, listing, parquet_bytes, rows, write

CFG = TableConfig(writer_ttl=120.0, lock_wait=1.0)
OLD = 10 * 120.0
"""How old an expired heartbeat is made: ten times writer_ttl."""
FIRST = rows(0, 6)
SECOND = rows(10, 4, tag="s")


async def _table(tmp_path: Path) -> tuple[LocalStore, Path]:
    root = tmp_path / "root"
    root.mkdir()
    store = LocalStore(str(root), fsync=False)
    await write(store, "tbl", FIRST, config=CFG)
    return store, root / "tbl"


async def _foreign(store: Store, dest: str, *, heartbeat: bool, age: float) -> tuple[str, list[str]]:
    """A Hudi writer's pending commit: requested, inflight, a direct marker and its base
    file, and (``heartbeat``) a Hudi heartbeat file; every one of them ``age`` seconds old.
    Returns the instant and its objects (relative to the table)."""
    latest = (await list_instants(store, dest))[-1].time
    t = next_instant(datetime.now(UTC), after=latest)
    name = base_file_name(new_file_id(), write_token(0, 1, 0), t)
    rel = f"p=a/{name}"
    objs = {
        f".hoodie/{t}.commit.requested": b"",
        f".hoodie/{t}.inflight": b"",
        join(".hoodie/.temp", t, f"{rel}.marker.CREATE"): b"",
        rel: parquet_bytes(rows(100, 2, parts=("a",)), meta=(t, "p=a", name, 0)),
    }
    if heartbeat:
        objs[heartbeat_path(t)] = b""  # Hudi's heartbeat: empty, its mtime is the beat
    for path, data in objs.items():
        await store.put(join(dest, path), data, mode=PutMode.OVERWRITE)
    if age:
        when = time.time() - age
        for path in objs:
            assert isinstance(store, LocalStore)
            os.utime(os.path.join(store.root, dest, path), (when, when))
    return t, sorted(objs)


@pytest.mark.parametrize("heartbeat", [True, False], ids=["fresh heartbeat", "young, no heartbeat"])
async def test_live_foreign_instant_is_left_alone(tmp_path: Path, heartbeat: bool) -> None:
    store, uri = await _table(tmp_path)
    # a write that began before the foreign one commits; its sweep runs after
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND)
    t, objs = await _foreign(store, "tbl", heartbeat=heartbeat, age=0.0)
    await commit_job(store, "tbl", w.instant, config=CFG)
    names = await listing(store, "tbl")
    assert set(objs) <= set(names), sorted(set(objs) - set(names))
    assert await sweep_late_markers(store, "tbl", grace=0.0) == {}
    report = await clean(store, "tbl", retain_commits=1, config=CFG)
    assert report.pending_alive == [t] and report.rolled_back == [] and report.late_files == {}
    assert await listing(store, "tbl") == names  # nothing of it deleted, nothing else either
    assert hudi_rows(str(uri)) == keys(FIRST + SECOND)


async def test_commit_after_a_live_foreign_instant_waits_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = await _table(tmp_path)
    t, objs = await _foreign(store, "tbl", heartbeat=False, age=0.0)
    w = await begin(store, "tbl", config=CFG)
    await direct_tasks(store, w, SECOND)
    with caplog.at_level(logging.WARNING, logger="amcommit"), pytest.raises(ConflictError) as got:
        await commit_job(store, "tbl", w.instant, config=CFG)
    assert t in str(got.value) and "no heartbeat file" in str(got.value), got.value
    assert "fresh heartbeat" not in caplog.text and "no heartbeat file" in caplog.text, caplog.text
    assert set(objs) <= set(await listing(store, "tbl"))


@pytest.mark.parametrize("heartbeat", [True, False], ids=["expired heartbeat", "old, no heartbeat"])
@pytest.mark.parametrize("by", ["clean", "commit"])
async def test_expired_foreign_instant_is_rolled_back(tmp_path: Path, heartbeat: bool, by: str) -> None:
    store, uri = await _table(tmp_path)
    before = await listing(store, "tbl")
    t, _ = await _foreign(store, "tbl", heartbeat=heartbeat, age=OLD)
    if by == "clean":
        report = await clean(store, "tbl", retain_commits=1, config=CFG)
        assert report.rolled_back == [t] and report.pending_alive == []
        # exactly the table before the foreign write (its marker folder emptied and removed)
        assert await listing(store, "tbl") == before
        assert hudi_rows(str(uri)) == keys(FIRST)
    else:
        w = await begin(store, "tbl", config=CFG)
        await direct_tasks(store, w, SECOND)
        report = await commit_job(store, "tbl", w.instant, config=CFG)
        assert report.success
        names = await listing(store, "tbl")
        assert not [n for n in names if t in n], names
        assert hudi_rows(str(uri)) == keys(FIRST + SECOND)
    assert t not in {i.time for i in await list_instants(store, "tbl")}
    temp = [i.path async for i in store.list("tbl/.hoodie/.temp", recursive=False)]
    assert join("tbl", marker_dir("", t)) not in temp, temp


async def test_scheduled_replacecommit_is_not_rolled_back(tmp_path: Path) -> None:
    """A replacecommit only requested, however old (a scheduled plan: Hudi's clustering),
    is left alone by clean, as Hudi's own rollback of failed writes leaves it."""
    store, _ = await _table(tmp_path)
    latest = (await list_instants(store, "tbl"))[-1].time
    t = next_instant(datetime.now(UTC), after=latest)
    plan = join("tbl", ".hoodie", f"{t}.replacecommit.requested")
    await store.put(plan, b"plan", mode=PutMode.OVERWRITE)
    when = time.time() - OLD
    os.utime(os.path.join(store.root, plan), (when, when))
    names = await listing(store, "tbl")
    report = await clean(store, "tbl", retain_commits=1, config=CFG)
    assert report.pending_alive == [t] and report.rolled_back == []
    assert await listing(store, "tbl") == names


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["blob", "gcs-fake"])
def test_foreign_instant_on_emulators(backend: str, request: pytest.FixtureRequest) -> None:
    """On Azurite and fake-gcs-server (the store's own clock): a Hudi writer's pending
    commit with a fresh heartbeat survives a commit's sweep and a clean; once its heartbeat
    is older than writer_ttl (1 s here, after 2.5 s) a clean rolls it back: the objects
    (SDK listing, sizes) are exactly those before it, hudi-rs reads the same rows."""
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    sdk_list = request.getfixturevalue("matrix_sdk_list")(backend, info)
    dest = "f/tbl"
    uri, opts = _hudi(backend, info, dest)

    def sdk() -> dict[str, int]:
        return {k[k.index(dest + "/") + len(dest) + 1 :]: v for k, v in sdk_list(dest).items()}

    async def go() -> None:
        store = open_store(info)
        async with store:
            await write(store, dest, FIRST, config=CFG)
            w = await begin(store, dest, config=CFG)
            await direct_tasks(store, w, SECOND)
            t, objs = await _foreign(store, dest, heartbeat=True, age=0.0)
            await commit_job(store, dest, w.instant, config=CFG)  # its sweep runs after it
            live = sdk()
            assert set(objs) <= set(live)
            report = await clean(store, dest, retain_commits=5, config=CFG)
            assert report.pending_alive == [t] and sdk() == live
            await anyio.sleep(2.5)
            report = await clean(store, dest, retain_commits=5, config=TableConfig(writer_ttl=1.0))
            assert report.rolled_back == [t]
            after = sdk()
            assert after == {k: v for k, v in live.items() if k not in objs}
            assert hudi_rows(uri, storage=opts) == keys(FIRST + SECOND)

    anyio.run(go)
