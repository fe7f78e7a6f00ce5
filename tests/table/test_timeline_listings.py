"""One timeline handle per operation (issue 33): a write lists ``.hoodie/`` at most twice.

An engine-API write, an upsert and a labelled write each list the timeline folder once when
they begin and once when they commit, however many stages read instants: the stages read
the instants they need from the listing their operation holds. Counted through a real
local store that records every listing of ``.hoodie/`` itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pytest

from amcommit.api import commit_job
from amcommit.paths import join
from amcommit.store.base import ObjectInfo
from amcommit.store.local import LocalStore
from amcommit.table.commit.labels import Label
from amcommit.table.mutate.engine import upsert
from amcommit.table.timeline.reader import Timeline
from tests.table.writehelpers import begin, rows, write, write_tasks

pytestmark = pytest.mark.timeout(60)


class ListingCounter(LocalStore):
    """A local store that counts the listings of ``<dest>/.hoodie`` itself (not its folders)."""

    def __init__(self, root: str, dest: str) -> None:
        super().__init__(root, fsync=False)
        self.hoodie = join(dest, ".hoodie")
        self.listings = 0

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        if prefix.rstrip("/") == self.hoodie:
            self.listings += 1
        return super().list(prefix, recursive=recursive)


async def test_an_engine_api_write_lists_the_timeline_twice(tmp_path: Path) -> None:
    store = ListingCounter(str(tmp_path), "t")
    for k in range(4):  # a table with some history
        await write(store, "t", rows(10 * k, 10))
    store.listings = 0
    w = await begin(store, "t")
    assert store.listings == 1  # begin: schema, error-if-exists and the instant's floor
    await write_tasks(store, w, rows(100, 10))
    report = await commit_job(store, "t", w.instant)
    assert report.success
    assert store.listings == 2  # commit: order, plan and publish from one listing
    assert len(await (await Timeline.open(store, "t")).commits()) == 5


async def test_a_labelled_write_lists_the_timeline_twice(tmp_path: Path) -> None:
    store = ListingCounter(str(tmp_path), "t")
    await write(store, "t", rows(0, 10))
    store.listings = 0
    w = await begin(store, "t")
    await write_tasks(store, w, rows(100, 10))
    report = await commit_job(store, "t", w.instant, label=Label("app", 3))
    assert report.success and report.label == "app:3"  # type: ignore[attr-defined]
    assert store.listings == 2  # the label is looked up in the commit's listing


async def test_an_upsert_lists_the_timeline_twice(tmp_path: Path) -> None:
    store = ListingCounter(str(tmp_path), "t")
    data = pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"], "v": ["x", "y", "z"]})
    await upsert(store, "t", data, record_key="id", partition_by="p")
    await upsert(
        store, "t", data.set_column(2, "v", pa.array(["x2", "y", "z"])), record_key="id", partition_by="p"
    )
    store.listings = 0
    report = await upsert(
        store,
        "t",
        pa.table({"id": [2, 4], "p": ["a", "b"], "v": ["y3", "w"]}),
        record_key="id",
        partition_by="p",
    )
    assert report.instant
    assert store.listings == 2  # plan + begin from one listing, the commit from another
    snap = await (await Timeline.open(store, "t")).snapshot()
    assert {f.partition for f in snap} == {"p=a", "p=b"}
