"""Clean of a table whose file groups were rewritten (tests/table/test_file_versions.py), on
fake-gcs-server: a real child process SIGKILLed before the n-th delete of a base file (first,
middle, last) or before the completed ``.clean`` instant, then clean again here. Every time:
readers refuse what the pending clean is deleting, the resumed clean completes the plan, the
final objects (listed with the official SDK, with their sizes) are exactly the table less
Hudi's KEEP_LATEST_COMMITS set plus the clean instant, whose Avro plan lists exactly that set,
and time travel and incremental reads within retention read the model."""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing as mp
import signal
from collections.abc import Callable
from typing import Any

import anyio
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from amcommit.paths import join
from amcommit.table.commit.clean import clean
from amcommit.table.errors import CleanedPast
from amcommit.table.file_group.model import FileVersion
from amcommit.table.format import avro_meta
from amcommit.table.timeline.reader import Timeline, table_uri
from amcommit.testing.tablegen import generate
from tests.matrix.conftest import matrix_gcs_fake, matrix_sdk_list  # noqa: F401 (fixtures)
from tests.matrix.stores import open_store
from tests.table.test_clean import _expected_deleted
from tests.table.test_file_versions import VERSIONED, Row, model_rows

_FORKS = mp.get_context("forkserver")
_FORKS.set_forkserver_preload(["tests.table.clean_child"])
DEST = "tbl"
DATA_DELETE = r"^delete .*\.parquet$"
RETAIN = 3
"""E = I6, a version of two rewritten groups: Hudi keeps their versions just before it."""


def _child(info: dict[str, Any], pattern: str, n: int) -> bool:
    """A clean killed before its n-th request matching ``pattern``; True if it completed."""
    from tests.table import clean_child

    spec = {"backend": info, "dest": DEST, "retain": RETAIN, "pattern": pattern, "n": n}
    proc = _FORKS.Process(target=clean_child.run_spec, args=(json.dumps(spec),))
    proc.start()
    proc.join(120)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
    assert proc.exitcode in (0, -signal.SIGKILL), f"clean child failed (exit {proc.exitcode})"
    return proc.exitcode == 0


async def _read(store: Any, files: list[FileVersion], since: str | None, until: str | None) -> list[Row]:
    out: list[Row] = []
    for f in files:
        t = pq.read_table(io.BytesIO(await store.get(join(DEST, f.path))))
        if since is not None:
            t = t.filter(pc.greater(t.column("_hoodie_commit_time"), since))
        if until is not None:
            t = t.filter(pc.less_equal(t.column("_hoodie_commit_time"), until))
        d = t.to_pydict()
        out.extend(zip(d["_hoodie_record_key"], d["value"], d["_hoodie_commit_time"], strict=True))
    return sorted(out)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("pattern", "n"),
    [(None, 0), (DATA_DELETE, 1), (DATA_DELETE, 5), (DATA_DELETE, 10), (r"^put .*\.clean$", 1)],
    ids=["no-kill", "before-delete-1", "before-delete-5", "before-delete-10", "before-completed"],
)
def test_clean_of_rewritten_groups_killed_then_resumed_on_fake_gcs(
    matrix_gcs_fake: dict[str, Any],  # noqa: F811
    matrix_sdk_list: Callable[[str, dict[str, Any]], Callable[[str], dict[str, int]]],  # noqa: F811
    pattern: str | None,
    n: int,
) -> None:
    info = matrix_gcs_fake
    sdk_list = matrix_sdk_list("gcs-fake", info)
    gen = generate(VERSIONED)
    e = gen.completed[-RETAIN]
    doomed = _expected_deleted(gen, e)
    assert len(doomed) == 10

    async def go() -> None:
        store = open_store(info)
        async with store:
            for rel in sorted(gen.objects, key=lambda p: (p.startswith(".hoodie/"), p)):
                await store.put(join(DEST, rel), gen.objects[rel])
            before = {f"{DEST}/{rel}": len(data) for rel, data in gen.objects.items()}
            assert sdk_list(DEST) == before
            if pattern is not None:
                assert not _child(info, pattern, n)
                mid = sdk_list(DEST)
                gone = set(before) - set(mid)
                assert {p[len(DEST) + 1 :] for p in gone} <= doomed
                assert len(gone) == (n - 1 if pattern == DATA_DELETE else len(doomed))
                with pytest.raises(CleanedPast):  # readers refuse what the pending clean deletes
                    await (await Timeline.open(store, DEST)).snapshot(gen.completed[0])
            report = await clean(store, DEST, retain_commits=RETAIN)
            assert sorted(report.files) == sorted(doomed)
            assert report.already_gone == (
                0 if pattern is None else (n - 1 if pattern == DATA_DELETE else len(doomed))
            )
            t = report.instant if pattern is None else report.resumed[0]
            assert t is not None and (report.instant is None) == (pattern is not None)
            after = sdk_list(DEST)
            clean_files = {f"{DEST}/.hoodie/{t}.clean{s}" for s in ("", ".inflight", ".requested")}
            assert set(after) == (set(before) - {f"{DEST}/{d}" for d in doomed}) | clean_files
            assert all(after[p] == size for p, size in before.items() if p in after)  # bytes unchanged
            plan = avro_meta.decode_cleaner_plan(
                await store.get(f"{DEST}/.hoodie/{t}.clean.requested"), root_uri=table_uri(store, DEST)
            )
            assert plan.earliest_retained == e
            assert sorted(r for rs in plan.files.values() for r in rs) == sorted(doomed)
            deleted = avro_meta.decode_clean_metadata(await store.get(f"{DEST}/.hoodie/{t}.clean"))
            assert sorted(f for p in deleted.partitions for f in p.deleted) == sorted(
                d.rsplit("/", 1)[1] for d in doomed
            )
            tl = await Timeline.open(store, DEST)
            kept = [c for c in gen.completed if c >= e]
            for c in kept:
                assert await _read(store, await tl.snapshot(c), None, None) == model_rows(gen.snapshot(c))
            for a, b in itertools.combinations(kept, 2):
                got = await _read(store, (await tl.changes(a, b)).visible(), a, b)
                assert got == model_rows(gen.incremental(a, b))
            with pytest.raises(CleanedPast):
                await tl.snapshot(gen.completed[-RETAIN - 1])

    anyio.run(go)
