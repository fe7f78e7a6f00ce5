"""Blob Batch deletes (``BlobStore.delete_batch``) on Azurite: sub-requests signed one by
one (Shared Key, SAS), per-blob answers honoured (a leased blob fails alone, a missing one
is not a failure), the batch request retried as a whole after throttling or a lost answer,
and sub-answers that say "busy" or say nothing returned as retryable failures."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from amcommit.api import abort_job, commit_job, setup_job
from amcommit.committer import CommitterConfig
from amcommit.errors import (
    CommitError,
    InvalidInput,
    NotSupported,
    PermissionDenied,
    PreconditionFailed,
    StoreError,
    Throttled,
    Transient,
    Unauthenticated,
)
from amcommit.store.azure import BlobStore
from amcommit.store.azure.blob import BATCH_MAX, parse_batch_response
from amcommit.store.base import RenameRequest, batch_deleter, batch_renamer
from amcommit.store.http import HttpResponse
from amcommit.store.retry import RetryPolicy
from amcommit.testing.faults import FaultyStore
from tests.azure.conftest import BlobEnv
from tests.engine.helpers import run_task

FAST = RetryPolicy(max_attempts=6, base_delay=0.001, max_delay=0.01)


async def names(env: BlobEnv) -> list[str]:
    return sorted(b.name for b in await anyio.to_thread.run_sync(lambda: list(env.sdk.list_blobs())))


async def test_capability_and_one_request_per_batch(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    assert s.capabilities.delete_batch_max == BATCH_MAX == 256 and batch_deleter(s) is s
    paths = [f"d/{i:03d} é#%+" for i in range(300)]
    async with anyio.create_task_group() as tg:
        for p in paths:
            tg.start_soon(s.put, p, b"x")
    assert await s.delete_batch(paths[:256]) == {}
    assert await s.delete_batch(paths[256:]) == {}
    assert await names(blob_env) == []
    assert s.iostats.count("delete_batch") == 2 and s.iostats.count("delete") == 0
    with pytest.raises(InvalidInput):
        await s.delete_batch(paths[:257])


async def test_sas_signed_batch(azurite: Any, blob_env: BlobEnv) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(
        azurite.account,
        blob_env.container,
        account_key=azurite.account_key,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    s = blob_env.store(account_key=None, sas_token=sas)
    for p in ("a/1", "a/2", "b"):
        await s.put(p, b"x")
    assert await s.delete_batch(["a/1", "a/2", "a/missing"]) == {}
    assert await names(blob_env) == ["b"]


async def test_a_leased_blob_fails_alone(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    for p in ("x/0", "x/1", "x/2"):
        await s.put(p, b"x")
    lease = await anyio.to_thread.run_sync(lambda: blob_env.sdk.get_blob_client("x/1").acquire_lease(-1))
    try:
        failed = await s.delete_batch(["x/0", "x/1", "x/2"])
        assert sorted(failed) == [1]
        err = failed[1]
        assert isinstance(err, PreconditionFailed) and not err.retryable
        assert err.path == "x/1" and err.op == "delete" and err.code == "LeaseIdMissing"
        assert await names(blob_env) == ["x/1"]
    finally:
        await anyio.to_thread.run_sync(lease.release)


async def test_throttled_batch_request_is_retried_whole(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=FAST)
    for p in ("t/0", "t/1"):
        await s.put(p, b"x")
    rule = blob_env.proxy.add("throttle", method="POST", count=2)
    assert await s.delete_batch(["t/0", "t/1"]) == {}
    assert rule.fired == 2 and await names(blob_env) == []
    assert s.iostats.counters.get("store_io_throttled") == 2


async def test_lost_batch_answer_is_retried_and_finds_them_gone(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=FAST)
    for p in ("l/0", "l/1"):
        await s.put(p, b"x")
    rule = blob_env.proxy.add("lose", method="POST", count=1)
    assert await s.delete_batch(["l/0", "l/1"]) == {}  # the retry's answers: 404, gone
    assert rule.fired == 1 and await names(blob_env) == []
    # without retries the lost answer is raised (typed); the deletes happened
    once = blob_env.store(via_proxy=True, retry=RetryPolicy(max_attempts=1))
    await once.put("l/2", b"x")
    blob_env.proxy.add("lose", method="POST", count=1)
    with pytest.raises(Transient):
        await once.delete_batch(["l/2"])
    assert await names(blob_env) == []


# -- sub-answers the emulator never gives: a canned batch answer ------------------------------

BOUNDARY = "batchresponse_x"


def part(cid: int | None, status: str, *headers: str, body: str = "") -> str:
    lines = [f"--{BOUNDARY}", "Content-Type: application/http"]
    if cid is not None:
        lines.append(f"Content-ID: {cid}")
    lines += ["", f"HTTP/1.1 {status}", *headers]
    if body:
        lines += ["", body]
    return "\r\n".join(lines) + "\r\n\r\n"


def canned(*parts: str) -> HttpResponse:
    h: CIMultiDict[str] = CIMultiDict({"Content-Type": f"multipart/mixed; boundary={BOUNDARY}"})
    body = ("".join(parts) + f"--{BOUNDARY}--").encode()
    return HttpResponse(202, CIMultiDictProxy(h), body)


async def test_busy_and_unanswered_sub_requests_are_retryable_failures(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    answer = canned(
        part(0, "202 Accepted", "x-ms-delete-type-permanent: true"),
        part(1, "503 Server Busy", "x-ms-error-code: ServerBusy", "Retry-After: 2"),
        part(2, "404 The specified blob does not exist.", "x-ms-error-code: BlobNotFound"),
        part(3, "503 Server Busy", "x-ms-error-code: ServerBusy"),
        part(
            5,
            "403 Forbidden",
            "x-ms-error-code: AuthorizationPermissionMismatch",
            "content-type: application/xml",
            body="<?xml version='1.0'?><Error><Code>AuthorizationPermissionMismatch</Code>"
            "<Message>no\nRequestId:1</Message></Error>",
        ),
    )
    sent: list[bytes] = []

    async def fake_request(op: str, method: str, url: Any, **kw: Any) -> HttpResponse:
        assert (op, method) == ("delete_batch", "POST") and "comp=batch" in str(url)
        sent.append(kw["data"])
        return answer

    s.request = fake_request  # type: ignore[method-assign,assignment]
    before = s.limiter.throttle_events
    failed = await s.delete_batch(["a", "b", "c", "d", "e", "f"])
    assert sorted(failed) == [1, 3, 4, 5]
    assert isinstance(failed[1], Throttled) and failed[1].retry_after == 2 and failed[1].path == "b"
    assert isinstance(failed[3], Throttled) and failed[3].throttle_reported
    assert isinstance(failed[4], Transient) and failed[4].retryable  # no answer for it
    assert failed[5].code == "AuthorizationPermissionMismatch" and not failed[5].retryable
    assert s.limiter.throttle_events == before + 1  # one busy batch slows the limiter once
    body = sent[0].decode()
    assert body.count("Content-ID: ") == 6 and body.count("Authorization: SharedKey ") == 6
    assert f"DELETE /{blob_env.az.account}/{blob_env.container}/f HTTP/1.1" in body
    assert blob_env.az.account_key not in body


def test_parse_batch_response_edge_cases() -> None:
    with pytest.raises(Transient):
        parse_batch_response("application/xml", b"<Error/>")
    # an error about the whole batch: one part without Content-ID -> nothing answered
    whole = canned(part(None, "400 One of the request inputs is not valid.", "x-ms-error-code: InvalidInput"))
    assert parse_batch_response(whole.headers["Content-Type"], whole.body) == {}
    # LF-only line ends and a quoted boundary are read too
    lf = part(7, "202 Accepted").replace("\r\n", "\n") + f"--{BOUNDARY}--"
    got = parse_batch_response(f'multipart/mixed; boundary="{BOUNDARY}"', lf.encode())
    assert list(got) == [7] and got[7].status == 202


# -- the job commit's cleanup in batches ----------------------------------------------------------

JOB = "202611240001_0015"
FAST_CFG = CommitterConfig(retry_base_delay=0.001, retry_max_delay=0.005, rename_attempts=4)
TASK_FILES = [{f"p={t}/f{i}.bin": f"t{t} f{i}".encode() for i in range(3)} for t in range(4)]

# name -> rule installer on the FaultyStore around the Blob store; the commit must end exact
CLEANUP_CASES = {
    "sub-deletes throttled": lambda f: f.throttle("delete", path="*/manifests/*", retry_after=0.001, count=3),
    "sub-delete answers lost": lambda f: f.lose_response("delete", path="*/task-attempts/*", count=2),
    "sub-deletes fail transiently": lambda f: f.fail("delete", path="*/_job.json", count=3),
    "batch answer lost": lambda f: f.lose_response("delete_batch", count=1),
    "batch fails twice": lambda f: f.fail("delete_batch", count=2),
    "batch throttled": lambda f: f.throttle("delete_batch", retry_after=0.001, count=2),
}


async def _blob_job(env: BlobEnv, dest: str) -> tuple[BlobStore, dict[str, bytes]]:
    store = env.store()
    layout = await setup_job(store, dest, JOB)
    for t, files in enumerate(TASK_FILES):
        await run_task(store, layout, t, files)
    return store, {k: v for files in TASK_FILES for k, v in files.items()}


async def _exact(env: BlobEnv, store: BlobStore, dest: str, expected: dict[str, bytes]) -> None:
    listed = await names(env)
    assert sorted(p for p in listed if p != f"{dest}/_SUCCESS") == sorted(f"{dest}/{k}" for k in expected)
    for k, v in expected.items():
        assert await store.get(f"{dest}/{k}") == v


@pytest.mark.parametrize("case", list(CLEANUP_CASES))
async def test_cleanup_in_batches_survives_faults(blob_env: BlobEnv, case: str) -> None:
    dest = "out"
    store, expected = await _blob_job(blob_env, dest)
    faulty = FaultyStore(store, seed=3)
    assert batch_deleter(faulty) is faulty
    rule = CLEANUP_CASES[case](faulty)
    report = await commit_job(faulty, dest, JOB, config=FAST_CFG)
    assert report.success and rule.fired == rule.count, (rule.fired, faulty.events)
    await _exact(blob_env, store, dest, expected)
    assert store.iostats.count("delete_batch") >= 1


async def test_cleanup_failing_for_good_in_a_batch_is_reported_then_finished(blob_env: BlobEnv) -> None:
    """A sub-delete that keeps failing (not retryable) fails the cleanup exactly as a single
    delete would (the output is committed; CommitError names the cleanup); the next
    commit_job finishes it."""
    dest = "out"
    store, expected = await _blob_job(blob_env, dest)
    faulty = FaultyStore(store, seed=3)
    faulty.fail("delete", error=PermissionDenied, path="*/manifests/*", count=1)
    with pytest.raises(CommitError, match="cleaning up") as ei:
        await commit_job(faulty, dest, JOB, config=FAST_CFG)
    assert ei.value.stage == "cleanup" and "injected fault" in str(ei.value)
    leftovers = [p for p in await names(blob_env) if "/_temporary/" in p]
    assert leftovers and any("journal" in p for p in leftovers)  # the journal goes last
    report = await commit_job(store, dest, JOB, config=FAST_CFG)
    assert report.success
    await _exact(blob_env, store, dest, expected)


async def test_abort_cleans_up_in_batches(blob_env: BlobEnv) -> None:
    dest = "out"
    store, _ = await _blob_job(blob_env, dest)
    await store.put(f"{dest}/old.bin", b"old")
    await abort_job(store, dest, JOB)
    assert await names(blob_env) == [f"{dest}/old.bin"]
    assert store.iostats.count("delete_batch") == 1


# -- renames in batches: the copies, then the sources' deletes in one Blob Batch ----------------


async def _sources(s: BlobStore, n: int, prefix: str = "src") -> list[RenameRequest]:
    reqs = []
    for i in range(n):
        info = await s.put(f"{prefix}/f{i}", f"data {i}".encode())
        reqs.append(RenameRequest(f"{prefix}/f{i}", f"dst/f{i}", info.etag, f"rid-{i}", False))
    return reqs


async def test_rename_batch_sends_one_copy_each_and_one_batch_of_deletes(blob_env: BlobEnv) -> None:
    s = blob_env.store()
    assert s.capabilities.batch_rename and batch_renamer(s) is s
    reqs = await _sources(s, 300)
    assert await s.rename_batch(reqs) == {}
    assert await names(blob_env) == sorted(f"dst/f{i}" for i in range(300))
    assert s.iostats.count("rename") == 300  # the copies
    assert s.iostats.count("rename_batch") == 2  # 256 + 44 conditional deletes
    assert s.iostats.count("delete") == 0
    for i in (0, 299):
        info = await s.stat(f"dst/f{i}")
        assert info.rename_id == f"rid-{i}" and await s.get(f"dst/f{i}") == f"data {i}".encode()


async def test_rename_batch_judges_sub_deletes_as_rename_does(blob_env: BlobEnv) -> None:
    """Between the copies and the batch of deletes one source is rewritten (its delete's
    If-Match fails: the copy is taken back, PreconditionFailed) and one is deleted by
    someone else (not found: the rename stands)."""
    s = blob_env.store(via_proxy=True)
    reqs = await _sources(s, 4)
    sdk = blob_env.sdk

    def meddle() -> None:
        sdk.get_blob_client("src/f1").upload_blob(b"rewritten", overwrite=True)
        sdk.get_blob_client("src/f2").delete_blob()

    rule = blob_env.proxy.add("before", method="POST", hook=meddle, count=1)
    failed = await s.rename_batch(reqs)
    assert rule.fired == 1
    assert sorted(failed) == [1] and isinstance(failed[1], PreconditionFailed)
    assert "copy was removed" in str(failed[1])
    assert await names(blob_env) == ["dst/f0", "dst/f2", "dst/f3", "src/f1"]
    assert await s.get("src/f1") == b"rewritten"


async def test_rename_batch_lost_or_throttled_batch_is_retried(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=FAST)
    reqs = await _sources(s, 5)
    lost = blob_env.proxy.add("lose", method="POST", count=1)
    busy = blob_env.proxy.add("throttle", method="POST", after=0, count=1)
    assert await s.rename_batch(reqs) == {}
    assert lost.fired == 1 and busy.fired == 1
    assert await names(blob_env) == sorted(f"dst/f{i}" for i in range(5))


async def test_rename_batch_failing_whole_is_returned_per_rename_and_repeatable(blob_env: BlobEnv) -> None:
    s = blob_env.store(via_proxy=True, retry=RetryPolicy(max_attempts=1))
    reqs = await _sources(s, 3)
    blob_env.proxy.add("throttle", method="POST", count=1)
    failed = await s.rename_batch(reqs)
    assert sorted(failed) == [0, 1, 2] and all(isinstance(e, Throttled) for e in failed.values())
    # copied, sources kept: each repeated rename proves its copy and deletes the source
    assert len(await names(blob_env)) == 6
    for q in reqs:
        res = await s.rename(q.src, q.dst, src_etag=q.src_etag, rename_id=q.rename_id, src_meta=False)
        assert res.recovered
    assert await names(blob_env) == ["dst/f0", "dst/f1", "dst/f2"]


REFUSALS = [
    InvalidInput("batch not supported here", op="delete_batch", path="", status=400),
    NotSupported("not implemented", op="delete_batch", path="", status=501),
    StoreError("FeatureNotSupported", op="delete_batch", path="", status=409),
    PermissionDenied("not for this account type", op="delete_batch", path="", status=403),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda e: str(e.status))
async def test_refused_batches_fall_back_to_single_deletes(blob_env: BlobEnv, refusal: StoreError) -> None:
    """A batch refused as a whole for a reason a single delete might not share (not
    throttling, not a transient failure): single deletes from then on, which say for
    themselves whether they can be done."""
    s = blob_env.store()
    real = s.request

    def refusing(op: str, method: str, url: Any, **kw: Any) -> Any:
        if method == "POST":
            raise refusal
        return real(op, method, url, **kw)

    s.request = refusing  # type: ignore[method-assign]
    reqs = await _sources(s, 3)
    assert await s.rename_batch(reqs) == {}
    await s.put("x/a", b"a")
    assert await s.delete_batch(["x/a", "x/missing"]) == {}
    assert await names(blob_env) == ["dst/f0", "dst/f1", "dst/f2"]
    assert s.iostats.counters.get("blob_batch_refused") == 1  # asked once, then never again
    assert s.iostats.count("rename") == 3 + 3  # copies, then single deletes


async def test_a_batch_refused_for_bad_credentials_is_not_sent_again_alone(blob_env: BlobEnv) -> None:
    """An authentication failure of the batch request is the error: single deletes would
    fail the same way, so none is sent and the store keeps batching."""
    s = blob_env.store()
    real = s.request
    posts = 0

    def unauthenticated(op: str, method: str, url: Any, **kw: Any) -> Any:
        nonlocal posts
        if method == "POST":
            posts += 1
            raise Unauthenticated("bad key", op=op, path="", status=401)
        return real(op, method, url, **kw)

    s.request = unauthenticated  # type: ignore[method-assign]
    await s.put("x/a", b"a")
    with pytest.raises(Unauthenticated):
        await s.delete_batch(["x/a"])
    assert await names(blob_env) == ["x/a"] and posts == 1
    assert not s.iostats.counters.get("blob_batch_refused")


async def test_cancelled_rename_batch_leaves_no_copy_without_its_delete(blob_env: BlobEnv) -> None:
    """The caller is cancelled while the batch of deletes is on its way (held back 0.5 s
    by the proxy): the call still waits for it, so no copy is left next to its source."""
    s = blob_env.store(via_proxy=True)
    reqs = await _sources(s, 6)
    blob_env.proxy.add("before", method="POST", hook=lambda: time.sleep(0.5), count=1)
    t0 = time.monotonic()
    with anyio.move_on_after(0.2) as scope:
        await s.rename_batch(reqs)
    assert scope.cancel_called and time.monotonic() - t0 >= 0.5
    assert await names(blob_env) == sorted(f"dst/f{i}" for i in range(6))


async def test_job_commit_renames_in_batches_and_survives_sub_faults(blob_env: BlobEnv) -> None:
    """Faults on single renames inside batches (the FaultyStore sends them alone) and on
    the store's own requests: the commit is exact; one Blob Batch per manifest."""
    dest = "out"
    store, expected = await _blob_job(blob_env, dest)
    faulty = FaultyStore(store, seed=5)
    faulty.lose_response("rename", path="*/p=1/f1.bin", count=1)
    faulty.throttle("rename", path="*/p=2/*", retry_after=0.001, count=2)
    report = await commit_job(faulty, dest, JOB, config=FAST_CFG)
    assert report.success and report.files == len(expected)
    await _exact(blob_env, store, dest, expected)
    assert store.iostats.count("rename_batch") >= 2  # the manifests without faulted renames
