"""Hostile input to table writes (issue 23, items 1 and 5).

A table commit publishes only base files named ``<fileId>_<writeToken>_<its own instant>.parquet``
in partition folders of the table's depth, and the write stats a task manifest carries name
exactly the files it publishes. A task manifest aimed inside ``.hoodie/`` (the write's own
completed instant, a far-future instant), at another instant's base file, at a hidden file, at
the wrong depth, or renamed to another name of its own instant is refused while the manifests
load, in one line naming the manifest and the path, with nothing published; ``abort-job`` then
ends the write (the table exactly as before it began, lock released) and the next write
commits and reads back. Table validation does not depend on the backend: local files (with
hudi-rs reading the table) and ADLS Gen2 (the test server) represent them.

Item 5: an instant file named ``99991231235959999.commit`` (or one naming no real moment) made
``begin_write`` raise a raw ``OverflowError``: now a typed error, one line, nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.errors import CommitError, ManifestError
from amcommit.manifest import decode_manifest, encode_json
from amcommit.paths import basename, join, parent
from amcommit.store.base import PutMode, Store
from amcommit.store.local import LocalStore
from amcommit.table.format.naming import new_file_id
from amcommit.table.settings import TableConfig
from amcommit.table.write.task import TableWrite
from tests.backends import StoreUnderTest
from tests.table.writehelpers import begin, hudi_rows, keys, listing, rows, write, write_tasks

FAST = TableConfig(lock_ttl=5.0, lock_wait=10.0, writer_ttl=3.0)

Spoil = Callable[[TableWrite, str], str]
"""(the write, the table-relative path of a file it publishes) -> the path it is aimed at."""

CASES: dict[str, tuple[Spoil, str]] = {
    "own_completed_instant": (lambda w, rel: f".hoodie/{w.instant}.commit", "folder '.hoodie'"),
    "far_future_instant": (lambda w, rel: ".hoodie/29991231000000000.commit", "folder '.hoodie'"),
    "other_instants_base_file": (
        lambda w, rel: rel.replace(w.instant, "20200101000000000"),
        "stamped with instant 20200101000000000",
    ),
    "base_file_in_timeline": (lambda w, rel: ".hoodie/" + basename(rel), "folder '.hoodie'"),
    "partition_metadata": (
        lambda w, rel: parent(rel) + "/.hoodie_partition_metadata",
        "hidden or '_' name",
    ),
    "too_deep": (lambda w, rel: parent(rel) + "/x=1/" + basename(rel), "2 folder(s) deep"),
    "table_root": (lambda w, rel: basename(rel), "0 folder(s) deep"),
    "not_a_base_file": (lambda w, rel: rel[: -len(".parquet")] + ".json", "not a base file name"),
    "renamed_within_own_instant": (
        lambda w, rel: f"{parent(rel)}/{new_file_id()}_0-0-0_{w.instant}.parquet",
        "write stats name",
    ),
}


@pytest.fixture
def table_sut(request: pytest.FixtureRequest) -> StoreUnderTest:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


PARAMS = [
    pytest.param(backend, case, id=f"{case}-{backend.removeprefix('backend_')}")
    for case in CASES
    for backend in ("backend_local", "backend_dfs_server")
]


async def _aim(store: Store, w: TableWrite, dest: str, spoil: Spoil) -> str:
    """Aim the last file of the last task manifest elsewhere; returns its new path."""
    path = (await manifest_paths(store, w))[-1]
    m = decode_manifest(await store.get(path))
    uri = m.files[-1].dest
    head = uri[: uri.rindex(f"/{basename(dest)}/") + len(basename(dest)) + 2]
    new = spoil(w, uri[len(head) :])
    m.files[-1].dest = head + new
    await store.put(path, encode_json(m), mode=PutMode.OVERWRITE)
    return new


async def manifest_paths(store: Store, w: TableWrite) -> list[str]:
    return sorted([i.path async for i in store.list(w.layout.manifests_dir) if i.path.endswith(".json")])


@pytest.mark.parametrize(("table_sut", "case"), PARAMS, indirect=["table_sut"])
async def test_table_manifest_aimed_elsewhere_refused_then_aborted(
    table_sut: StoreUnderTest, case: str
) -> None:
    s, dest = table_sut.store, join(table_sut.base, "tbl")
    first = rows(0, 6)
    await write(s, dest, first, config=FAST)
    table_before = await listing(s, dest)
    w = await begin(s, dest, config=FAST)
    await write_tasks(s, w, rows(100, 6, tag="x"))
    spoil, why = CASES[case]
    aimed = await _aim(s, w, dest, spoil)
    staged = await listing(s, dest)
    with pytest.raises(ManifestError) as ei:
        await commit_job(s, dest, w.instant, config=FAST)
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 500, msg
    assert "-manifest.json" in msg and why in msg, msg
    if why != "write stats name":
        assert repr(aimed) in msg, msg
    assert await listing(s, dest) == staged  # nothing published, lock released
    report = await abort_job(s, dest, w.instant, config=FAST)
    assert report.rolled_back and not report.success
    assert await listing(s, dest) == table_before  # the write is gone, lock and heartbeat too
    third = rows(200, 4, tag="z")
    _w, done = await write(s, dest, third, config=FAST)
    assert done.success
    if isinstance(s, LocalStore):
        assert hudi_rows(s.os_path(dest)) == keys(first + third)


async def test_manifests_of_the_write_itself_commit(backend_local: StoreUnderTest) -> None:
    """The check accepts what the task commits publish (also from a resumed load)."""
    s, dest = backend_local.store, join(backend_local.base, "tbl")
    w = await begin(s, dest, config=FAST)
    await write_tasks(s, w, rows(0, 8, parts=("a", "b", "c")), tasks=3)
    assert len(await manifest_paths(s, w)) == 3
    report = await commit_job(s, dest, w.instant, config=FAST)
    assert report.success and report.files == 8  # 3 tasks, 3 partitions, 8 rows
    assert hudi_rows(s.os_path(dest)) == keys(rows(0, 8, parts=("a", "b", "c")))


@pytest.mark.parametrize("last", ["99991231235959999", "20261399999999999"])
async def test_instant_at_end_of_time_refused_typed(backend_local: StoreUnderTest, last: str) -> None:
    s, dest = backend_local.store, join(backend_local.base, "tbl")
    await write(s, dest, rows(0, 4), config=FAST)
    await s.put(join(dest, ".hoodie", f"{last}.commit"), b"{}")
    before = {p: await s.get(join(dest, p)) for p in await listing(s, dest)}
    with pytest.raises(CommitError) as ei:
        await begin(s, dest, config=FAST)
    msg = str(ei.value)
    assert "\n" not in msg and f"no instant can follow {last}" in msg, msg
    assert {p: await s.get(join(dest, p)) for p in await listing(s, dest)} == before
