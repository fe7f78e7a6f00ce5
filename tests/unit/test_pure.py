"""Pure pieces: URIs, config, planning, spool, limiter, retry policy, fault rules."""

from __future__ import annotations

import time

import anyio
import pytest

from amcommit.committer.config import CommitterConfig
from amcommit.committer.layout import JobLayout, check_id
from amcommit.committer.spool import EntrySpool
from amcommit.committer.stages.prepare_dirs import plan_directories, with_ancestors
from amcommit.committer.stages.scope import minimal_roots
from amcommit.errors import ConfigError, InvalidInput, NotFound, Throttled, Transient
from amcommit.manifest import RenameEntry
from amcommit.paths import decode_path, encode_path, parse_uri, uri_to_path
from amcommit.store.limits import Limiter
from amcommit.store.local import LocalStore
from amcommit.store.retry import RetryPolicy, call_with_retries
from amcommit.testing.faults import FaultyStore


@pytest.mark.parametrize(
    ("raw", "encoded"),
    [
        ("/a b/c", "/a%20b/c"),
        ("/x%y", "/x%25y"),
        ("/h#t", "/h%23t"),
        ("/p+q=r", "/p+q=r"),
        ("/é ü", "/é%20ü"),
        ("/q?x", "/q%3Fx"),
        ("/[b]{c}|^`\\", "/%5Bb%5D%7Bc%7D%7C%5E%60%5C"),
    ],
)
def test_encode_like_hadoop(raw: str, encoded: str) -> None:
    assert encode_path(raw) == encoded
    assert decode_path(encoded) == raw


def test_parse_and_map_uris() -> None:
    assert parse_uri("file:/a%20b/c").path == "a b/c"
    assert parse_uri("file:///a/b").path == "a/b"
    assert parse_uri("file://localhost/a").path == "a"
    assert uri_to_path("gs://bucket/", "gs://bucket/x/y%20z") == "x/y z"
    assert (
        uri_to_path("abfs://fs@acct.dfs.core.windows.net/", "abfss://fs@ACCT.dfs.core.windows.net/p") == "p"
    )
    for bad in ("gs://other/x", "gs://bucket/a/../b", "relative/path", "file://remote/x"):
        with pytest.raises(InvalidInput):
            uri_to_path("gs://bucket/" if bad.startswith("gs") else "file:///", bad)


def test_config_accepts_hadoop_and_spark_keys() -> None:
    c = CommitterConfig.from_mapping(
        {
            "spark.hadoop.mapreduce.manifest.committer.io.threads": "12",
            "mapreduce.manifest.committer.validate.output": "true",
            "spark.amcommit.conflict-mode": "replace",
            "mapreduce.fileoutputcommitter.cleanup.skipped": "false",
            "io_rate": "250",
        }
    )
    assert (c.io_threads, c.validate_output, c.conflict_mode, c.cleanup_skipped, c.io_rate) == (
        12,
        True,
        "replace",
        False,
        250.0,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"io_thread": "4"}, "did you mean 'io_threads'"),
        ({"mapreduce.manifest.committer.no.such": "1"}, "unknown committer option"),
        ({"io_threads": "many"}, "must be an integer"),
        ({"io_threads": "0"}, ">= 1"),
        ({"validate_output": "maybe"}, "true or false"),
        ({"conflict_mode": "merge"}, "'conflict_mode' must be one of append, fail"),
    ],
)
def test_config_errors_name_the_bad_key(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CommitterConfig.from_mapping(options)


def test_ids_are_checked() -> None:
    for bad in ("", "../x", "a/b", ".hidden", "x.tmp", "a b"):
        with pytest.raises(ConfigError):
            check_id(bad, "job id")
    with pytest.raises(ConfigError):
        JobLayout("d", "job/1")


def test_directory_planning() -> None:
    assert plan_directories({"d/a", "d/a/b", "d/a/b/c", "d/x", "d/ab"}) == ["d/a/b/c", "d/ab", "d/x"]
    assert with_ancestors({"d/a/b"}, "d") == {"d/a", "d/a/b"}
    assert minimal_roots({"d/a", "d/a/b", "d/c"}) == ["d/a", "d/c"]


def test_spool_round_trip_and_exact_duplicates(tmp_path: object) -> None:
    sp = EntrySpool(batch_size=7)
    m0 = sp.add_manifest("m0")
    m1 = sp.add_manifest("m1")
    sp.append([RenameEntry(f"s{i}", f"d/{i}", i, None) for i in range(50)], m0)
    sp.append([RenameEntry("s-x", "d/7", 1, "e"), RenameEntry("s-y", "d/new", 2, None)], m1)
    assert sp.count == 52 and [e.dst for e in sp.entries()][:3] == ["d/0", "d/1", "d/2"]
    assert sp.find_duplicates() == [("d/7", ["m0", "m1"])]
    assert sp.has_dest("d/new") and not sp.has_dest("d/none")
    sp.close()


async def test_limiter_bounds_concurrency_and_rate() -> None:
    lim = Limiter(max_concurrency=3, rate=200, burst=1)
    peak = 0
    active = 0

    async def op() -> None:
        nonlocal peak, active
        async with lim.slot():
            active += 1
            peak = max(peak, active)
            await anyio.sleep(0.01)
            active -= 1
            lim.succeeded()

    t0 = time.monotonic()
    async with anyio.create_task_group() as tg:
        for _ in range(40):
            tg.start_soon(op)
    assert peak <= 3
    assert time.monotonic() - t0 >= 39 / 200 * 0.9  # token bucket paces starts


async def test_limiter_pauses_everything_while_most_answers_are_throttled() -> None:
    lim = Limiter(max_concurrency=8, rate=None)
    for _ in range(20):  # every answer so far: the service refuses us
        lim.throttled(retry_after=0.05)
    assert lim.throttle_events == 20
    t0 = time.monotonic()
    async with lim.slot():
        pass
    assert time.monotonic() - t0 >= 0.04  # Retry-After honoured by every new operation


async def test_retry_policy_retries_only_retryable() -> None:
    calls = 0

    async def flaky(attempt: int) -> str:
        nonlocal calls
        calls += 1
        if attempt < 3:
            raise Throttled("slow down", retry_after=0.001) if attempt == 1 else Transient("reset")
        return "ok"

    assert await call_with_retries(flaky, policy=RetryPolicy(5, 0.001, 0.002)) == "ok" and calls == 3

    async def missing(attempt: int) -> str:
        raise NotFound("gone")

    with pytest.raises(NotFound) as ei:
        await call_with_retries(missing, policy=RetryPolicy(5, 0.001, 0.002))
    assert ei.value.attempts == 1
    with pytest.raises(Transient) as ei2:
        await call_with_retries(lambda a: flaky(0), policy=RetryPolicy(2, 0.001, 0.002))
    assert ei2.value.attempts == 2


async def test_faulty_store_rules(tmp_path: object) -> None:
    inner = LocalStore(str(tmp_path), fsync=False)
    f = FaultyStore(inner, seed=1)
    f.fail("put", error=NotFound, path="a/*", count=1, after=1)
    await f.put("a/1", b"1")  # let through (after=1)
    with pytest.raises(NotFound):
        await f.put("a/2", b"2")
    await f.put("a/3", b"3")  # count exhausted
    f.lose_response("delete")
    with pytest.raises(Transient):
        await f.delete("a/1")
    assert not await inner.delete("a/1")  # the delete did happen
    f.clear()
    f.latency(0.05, "stat")
    t0 = time.monotonic()
    await f.stat("a/3")
    assert time.monotonic() - t0 >= 0.045
    assert f.injected == {"error:put": 1, "lost_response:delete": 1}
    with pytest.raises(ValueError, match="unknown operation"):
        f.fail("rename_all")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda f: setattr(f, "source", f.source.replace("/tasks/attempt_j_m_000000_0/", "/tasks/other/")),
            "outside the task attempt",
        ),
        (lambda f: setattr(f, "dest", f.dest.replace("/dest/", "/dest/_temporary/")), "temporary directory"),
        (
            lambda f: setattr(f, "dest", f.dest.replace("/dest/", "/elsewhere/")),
            "outside the job's destination",
        ),
        (lambda f: setattr(f, "dest", f.dest.replace("/dest/", "/dest/../escape/")), "not usable"),
        (lambda f: setattr(f, "dest", f.dest.replace("/dest/", "/dest//")), "not usable"),
        (lambda f: setattr(f, "size", -5), "negative size"),
    ],
)
@pytest.mark.parametrize("plain", [True, False])
def test_manifest_validation_fast_and_exact_paths_agree(mutate: object, message: str, plain: bool) -> None:
    from amcommit.errors import ManifestError
    from amcommit.manifest import TASK_MANIFEST_TYPE, FileEntry, Scope, TaskManifest, check_manifest

    root = "gs://bucket/"
    tdir = f"{root}dest/_temporary/manifest_j/00/tasks/attempt_j_m_000000_0"
    files = [FileEntry(f"{tdir}/p=1/f{i}", f"{root}dest/p=1/f{i}", i, "e") for i in range(5)]
    m = TaskManifest(TASK_MANIFEST_TYPE, 1, "j", 0, "task_j_m_000000", "attempt_j_m_000000_0", tdir, files)
    scope = Scope(root, "dest", "dest/_temporary", "dest/_temporary/manifest_j/00/tasks")
    entries, dirs = check_manifest(m, job_id="j", scope=scope, plain=plain)
    assert [e.dst for e in entries] == [f"dest/p=1/f{i}" for i in range(5)] and dirs == {"dest/p=1"}
    mutate(files[3])  # type: ignore[operator]
    with pytest.raises(ManifestError, match=message):
        check_manifest(m, job_id="j", scope=scope, plain=plain)


def test_new_limiter_reacts_to_the_first_throttle() -> None:
    """On a clock the test moves (the limiter's cut is computed from the answers per second
    it saw: on the real clock a busy machine's pause before the first answer lowers it)."""
    now = [100.0]
    lim = Limiter(max_concurrency=4, rate=1000.0, min_samples=1, clock=lambda: now[0])
    now[0] += 0.0005
    lim.throttled()
    assert lim.rate == 500.0 and lim.rate_decreases == 1
    now[0] += 0.5
    lim.throttled()  # within the cooldown (1 s): one decrease per interval
    assert lim.rate == 500.0 and lim.rate_decreases == 1


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda f: setattr(f, "dest", f.dest.replace("/dest/", "/dest/.hoodie/.temp/")),
            "temporary directory",
        ),
        (lambda f: setattr(f, "dest", f.dest.replace("/dest/", "/dest/../escape/")), "not usable"),
        (lambda f: setattr(f, "source", f.source.replace("/tasks/", "/tasks/../")), "not usable"),
        (lambda f: setattr(f, "source", f.source + "/"), "not usable"),
    ],
)
def test_table_staging_manifest_takes_the_fast_path(
    mutate: object, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table write stages under ``.hoodie/.temp/``: its URIs map by slicing (no URI parsing),
    also when the raw JSON has escapes elsewhere (``plain=False``: JSON in extraData), and
    bad entries are still refused."""
    import amcommit.paths
    from amcommit.errors import ManifestError
    from amcommit.manifest import TASK_MANIFEST_TYPE, FileEntry, Scope, TaskManifest, check_manifest

    root = "gs://bucket/"
    inst = "20261123020000123"
    tdir = f"{root}dest/.hoodie/.temp/{inst}/00/tasks/attempt_{inst}_m_000000_0"
    name = "0b3f7e2c-1b7e-4a55-9c1e-0a1b2c3d4e5f-0_0-1-0_" + inst + ".parquet"
    files = [FileEntry(f"{tdir}/day={i}/{name}", f"{root}dest/day={i}/{name}", 1, "e") for i in range(5)]
    m = TaskManifest(
        TASK_MANIFEST_TYPE, 1, inst, 0, f"task_{inst}_m_000000", f"attempt_{inst}_m_000000_0", tdir, files
    )
    scope = Scope(root, "dest", "dest/.hoodie/.temp", f"dest/.hoodie/.temp/{inst}/00/tasks")
    real = amcommit.paths.uri_to_path

    def no_parsing(root_uri: str, uri: str) -> str:
        raise AssertionError(f"parsed {uri}")

    monkeypatch.setattr(amcommit.paths, "uri_to_path", no_parsing)
    entries, dirs = check_manifest(m, job_id=inst, scope=scope, plain=False)
    assert [e.dst for e in entries] == [f"dest/day={i}/{name}" for i in range(5)]
    assert entries[0].src == f"dest/.hoodie/.temp/{inst}/00/tasks/attempt_{inst}_m_000000_0/day=0/{name}"
    assert dirs == {f"dest/day={i}" for i in range(5)}
    monkeypatch.setattr(amcommit.paths, "uri_to_path", real)
    mutate(files[3])  # type: ignore[operator]
    with pytest.raises(ManifestError, match=message):
        check_manifest(m, job_id=inst, scope=scope, plain=False)
