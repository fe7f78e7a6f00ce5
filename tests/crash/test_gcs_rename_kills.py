"""GCS: a job commit killed (SIGKILL, real child process) right after each request of
each rename kind — the copy (``rewriteTo``) and the source delete of a forward rename and
of a move aside, the copy of a restore during abort, and the ``moveTo`` of an atomic
rename — then resumed, and separately aborted: the destination is exact every time.

Backends: fake-gcs-server (no ``objects.move``: copy + delete), the GCS double with move
disabled (copy + delete, server-side preconditions only) and with move (atomic)."""

from __future__ import annotations

from typing import Any

import pytest

from amcommit.api import abort_job, commit_job
from amcommit.committer import CommitterConfig
from amcommit.errors import CommitError
from amcommit.store.base import Store
from tests.crash import scenario as sc
from tests.crash.runner import kill_child
from tests.plugins.gcs_backends import make_store, new_bucket_name


def _copy_to(rel: str) -> dict[str, Any]:
    return {"method": "POST", "status": 200, "url": rf"/rewriteTo/b/[^/]+/o/[^?]*/{rel}\?"}


def _move_to(rel: str) -> dict[str, Any]:
    return {"method": "POST", "status": 200, "url": rf"/moveTo/o/[^?]*/{rel}\?"}


def _delete(rel: str) -> dict[str, Any]:
    return {"method": "DELETE", "url": rf"/o/[^?]*/{rel}(\?|$)"}


NEW, SAME, TRASH = r"table/p=1/new\.bin", r"table/p=1/same\.bin", r"trash/p=1/same\.bin"
COPY_RULES = {
    "forward_copy": _copy_to(NEW),
    "forward_same_copy": _copy_to(SAME),
    "move_aside_copy": _copy_to(TRASH),
    "forward_delete": _delete(r"tasks/.*/p=1/new\.bin"),
    "move_aside_delete": _delete(SAME),  # in a commit only the move aside deletes it
}
MOVE_RULES = {
    "forward_move": _move_to(NEW),
    "forward_same_move": _move_to(SAME),
    "move_aside_move": _move_to(TRASH),
}
BACKENDS = ["fake", "double-rewrite", "double-move"]


CASES = [(b, n) for b in BACKENDS for n in (MOVE_RULES if b == "double-move" else COPY_RULES)]


@pytest.fixture
async def gcs(request: pytest.FixtureRequest) -> Any:
    kind = request.param
    server = request.getfixturevalue("fake_gcs" if kind == "fake" else "gcs_double")
    bucket = new_bucket_name()
    server.create_bucket(bucket)
    opts: dict[str, Any] = {"bucket": bucket, "endpoint": server.url, "use_move": kind == "double-move"}
    if kind != "fake":
        opts["verify_preconditions"] = False
        server.clear_faults()
    store = make_store(
        server.url, bucket, **{k: v for k, v in opts.items() if k not in ("bucket", "endpoint")}
    )
    dest = "t/table"
    await sc.prepare(store, dest)
    yield kind, store, dest, {"kind": "gcs", "options": opts}
    await store.aclose()


CFG = CommitterConfig.from_mapping(sc.CONFIG)


def _rule(kind: str, name: str) -> dict[str, Any]:
    return (MOVE_RULES if kind == "double-move" else COPY_RULES)[name]


@pytest.mark.parametrize(("gcs", "name"), CASES, indirect=["gcs"])
async def test_commit_killed_then_resumed(gcs: Any, name: str) -> None:
    kind, store, dest, st = gcs
    kill_child(sc.spec(st, dest, "commit", [_rule(kind, name)]))
    report = await commit_job(store, dest, sc.JOB, config=CFG)
    assert report.success
    assert await sc.final_state(store, dest) == (sc.COMMITTED, [])


@pytest.mark.parametrize(("gcs", "name"), CASES, indirect=["gcs"])
async def test_commit_killed_then_aborted(gcs: Any, name: str) -> None:
    kind, store, dest, st = gcs
    kill_child(sc.spec(st, dest, "commit", [_rule(kind, name)]))
    await abort_job(store, dest, sc.JOB, config=CFG)
    expected = sc.COMMITTED if name in sc.COMPLETES_ON_ABORT else sc.OLD
    assert await sc.final_state(store, dest) == (expected, [])


async def _second(store: Store, dest: str, second: str) -> None:
    if second == "commit":
        try:
            report = await commit_job(store, dest, sc.JOB, config=CFG)
        except CommitError:
            pass
        else:
            assert report.success
            assert await sc.final_state(store, dest) == (sc.COMMITTED, [])
            return
    await abort_job(store, dest, sc.JOB, config=CFG)
    assert await sc.final_state(store, dest) == (sc.OLD, [])


RESTORE_CASES = [(b, at) for b in BACKENDS for at in (["move"] if b == "double-move" else ["copy", "delete"])]


@pytest.mark.parametrize(("gcs", "at"), RESTORE_CASES, indirect=["gcs"])
@pytest.mark.parametrize("second", ["abort", "commit"])
async def test_abort_killed_after_restore(gcs: Any, second: str, at: str) -> None:
    """The commit dies after renaming same.bin in (the old one is in the trash); the abort
    dies right after the restore's copy (or move) back onto p=1/same.bin, or after its
    delete of the trash entry; then abort again (or commit again): exact."""
    kind, store, dest, st = gcs
    onto_same = _move_to(SAME) if kind == "double-move" else _copy_to(SAME)
    kill_child(sc.spec(st, dest, "commit", [onto_same]))
    kill_child(sc.spec(st, dest, "abort", [_delete(TRASH) if at == "delete" else onto_same]))
    await _second(store, dest, second)
