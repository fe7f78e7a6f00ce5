"""Smoke test of the benchmark suite: the quick mode's smallest case (one small job commit
on fake-gcs-server, amcommit and the raw ceiling, each in a fresh process), its
verification, tables, JSON and plot. Not a measurement: the figures are not checked."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchmarks.smoke import ROOT, run_benchmark


def _fake_gcs_available() -> bool:
    try:
        from amcommit.emulators.fakegcs import find_binary

        return find_binary().exists()
    except Exception:
        return False


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _fake_gcs_available(), reason="fake-gcs-server is not installed")
def test_quick_smallest_case(tmp_path: Path) -> None:
    proc = run_benchmark("benchmarks", "--smoke", "--out", str(tmp_path), timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| amcommit c=8 |" in proc.stdout
    payload = json.loads((tmp_path / "benchmarks.json").read_text())
    local = payload["results"]["local"]
    assert {r["contender"] for r in local["rows"]} == {"amcommit", "amcommit one by one", "sequential"}
    assert all(r["verified"] == "exact" and r["files"] == 100 for r in local["rows"])
    assert local["speedup_vs_sequential"] > 0 and "| amcommit one by one | 100 |" in proc.stdout
    rows = payload["results"]["emulators"]["rows"]
    assert {r["kind"] for r in rows} == {"amcommit", "raw"}
    for r in rows:
        assert r["verified"] == "exact", r
        assert r["files"] == 200 and r["files_per_s"] > 0 and r["cpu_ms_per_file"] > 0
        assert r["peak_rss_mb"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0
    assert payload["targets"], "targets are evaluated"
    assert (tmp_path / "benchmarks.md").read_text().startswith("Run ")
    assert (tmp_path / "emulators.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.timeout(150)
@pytest.mark.skipif(not _fake_gcs_available(), reason="fake-gcs-server is not installed")
def test_job_commit_by_hand_keeps_the_tracked_results() -> None:
    """``python -m benchmarks.job_commit`` run by hand writes
    ``benchmarks/results/tmp/job_commit.json`` with its run (date, commit, machine) and
    leaves the tracked ``benchmarks/results/job_commit.json`` alone (``--save`` replaces it)."""
    tracked = ROOT / "benchmarks" / "results" / "job_commit.json"
    scratch = ROOT / "benchmarks" / "results" / "tmp" / "job_commit.json"
    before = tracked.read_bytes() if tracked.exists() else None
    started = time.time()
    args = ["--backends", "gcs", "--files", "200", "--concurrency", "8", "--contenders", "amcommit"]
    proc = run_benchmark("benchmarks.job_commit", *args, timeout=140)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tracked.read_bytes() if tracked.exists() else None) == before, "tracked results replaced"
    assert scratch.stat().st_mtime >= started - 1
    payload = json.loads(scratch.read_text())
    assert payload["run"]["commit"] and payload["run"]["date"] and payload["run"]["machine"]["cpus"]
    assert [(r["contender"], r["verified"]) for r in payload["rows"]] == [("amcommit c=8", "exact")]


@pytest.mark.timeout(120)
def test_event_loop_local(tmp_path: Path) -> None:
    """``benchmarks.event_loop``: amcommit on asyncio and on uvloop in one run, each worker
    on the loop it was asked for, a ratio row, the JSON at --out."""
    pytest.importorskip("uvloop")
    out = tmp_path / "loop.json"
    args = ["--backends", "local", "--local-files", "400", "--rounds", "2", "--out", str(out)]
    proc = run_benchmark("benchmarks.event_loop", *args, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads(out.read_text())
    runs = payload["runs"]
    assert [(r["round"], r["contender"]) for r in runs] == [
        (0, "amcommit (asyncio)"),
        (0, "amcommit (uvloop)"),
        (1, "amcommit (uvloop)"),
        (1, "amcommit (asyncio)"),
    ]
    for r in runs:
        assert r["files"] == 400 and r["files_per_s"] > 0 and r["cpu_ms_per_file"] > 0
        assert r["loop"].split()[0] == r["contender"][len("amcommit (") : -1]
    ratio = [r for r in payload["rows"] if r["contender"] == "amcommit: ratio uvloop / asyncio"]
    assert len(ratio) == 1 and ratio[0]["best_cpu_ms_per_file"] > 0
    assert len(payload["load_before"]) == 3


@pytest.mark.timeout(180)
def test_stream_commit_quick(tmp_path: Path) -> None:
    """``benchmarks.stream_commit --quick`` runs both sinks and writes its JSON to --out
    only (never over benchmarks/results)."""
    pytest.importorskip("pyspark")
    refused = run_benchmark("benchmarks.stream_commit", "--quick", timeout=60)
    assert refused.returncode == 2 and "--out" in refused.stderr
    proc = run_benchmark("benchmarks.stream_commit", "--quick", "--out", str(tmp_path), timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| 10 | " in proc.stdout
    rows = json.loads((tmp_path / "stream_commit.json").read_text())["rows"]
    assert [r["files_per_batch"] for r in rows] == [10]
    # the sink's commit() timings (AMCOMMIT_STREAM_TIMINGS) split amcommit's interval after
    # the tasks: Spark's hand-off, then amcommit's commit up to the visible instant
    row = rows[0]
    for key in ("handoff_ms", "enter_to_visible_ms", "visible_to_return_ms"):
        assert row[f"amcommit_{key}_all"] and all(v >= 0 for v in row[f"amcommit_{key}_all"]), key
    assert (
        row["amcommit_handoff_ms"] + row["amcommit_enter_to_visible_ms"] <= row["amcommit_after_tasks_ms"] + 1
    )


@pytest.mark.timeout(150)
def test_gcs_double_move_backend() -> None:
    """The ``gcsmove`` backend (the GCS double in a process of its own, ``objects.move``):
    amcommit renames with 2 requests (PATCH + move) like the raw loop, every output exact,
    and the rename phase's CPU is compared with the raw loop's."""
    from benchmarks import job_commit

    runs = job_commit.run_matrix(["gcsmove"], [200], [8], kinds=["amcommit", "raw", "threadpool"], log=None)
    rows = {r["kind"]: r for r in job_commit.summarize(runs)}
    assert set(rows) == {"amcommit", "raw", "threadpool"}
    for r in rows.values():
        assert r["verified"] == "exact", r
    am = rows["amcommit"]
    # 200 files in 200 manifests: 2 per rename plus ~3 per manifest (get, delete, ...)
    assert am["requests_per_file"] is not None and 2.0 < am["requests_per_file"] < 8.0
    assert rows["raw"]["requests_per_file"] == 2
    assert am["rename_cpu_ms_per_file"] > 0 and am["cpu_vs_raw"] > 0 and am["cpu_vs_threadpool"] > 0
    moves = [r for r in runs if r["kind"] == "amcommit"]
    assert all(r["retries"] == 0 for r in moves)


@pytest.mark.timeout(60)
@pytest.mark.skipif(not _fake_gcs_available(), reason="fake-gcs-server is not installed")
def test_latency_proxy_rules() -> None:
    """``benchmarks.latency_proxy``'s raw-asyncio proxy in front of fake-gcs-server: delay
    and throttle rules (the shared RuleMatcher: count, method, path glob) fire exactly as
    counted, throttled answers have GCS's shape, a 2 MiB body goes up and comes back
    intact, all over one keep-alive connection."""
    import asyncio
    import time

    import aiohttp

    from benchmarks.clients import emulator
    from benchmarks.latency_proxy import ProxyRule, proxied

    rules = [
        ProxyRule("delay", seconds=0.05, count=4),
        ProxyRule("throttle", ops=frozenset({"GET"}), path="*/o/big*", count=2),
    ]
    big = bytes(range(256)) * 8192  # 2 MiB: many reads of the socket on both sides

    async def client(endpoint: str, bucket: str) -> list[tuple[int, float, bytes, str | None]]:
        out = []
        async with aiohttp.ClientSession() as s:
            up = f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&name=bigfile"
            t0 = time.monotonic()
            async with s.post(up, data=big) as r:
                out.append((r.status, time.monotonic() - t0, await r.read(), None))
            for _ in range(5):
                t0 = time.monotonic()
                url = f"{endpoint}/storage/v1/b/{bucket}/o/bigfile?alt=media"
                async with s.get(url) as r:
                    body = await r.read()
                    out.append((r.status, time.monotonic() - t0, body, r.headers.get("Retry-After")))
        return out

    with emulator("gcs") as (t, _pid), proxied(t, rules=rules, seed=1) as (pt, stats):
        answers = asyncio.run(client(pt.endpoint, pt.container))
        st = stats()
    statuses = [a[0] for a in answers]
    assert statuses == [200, 429, 429, 200, 200, 200], statuses
    assert all(a[1] >= 0.045 for a in answers[:4]), [a[1] for a in answers]
    assert json.loads(answers[1][2])["error"]["errors"][0]["reason"] == "rateLimitExceeded"
    assert answers[1][3] == "1" and answers[2][3] == "1"
    assert all(a[2] == big for a in answers[3:])
    assert st["requests"] == 6 and st["delayed"] == 4 and st["throttled"] == 2, st
    assert [(r["matched"], r["fired"]) for r in st["rules"]] == [(6, 4), (5, 2)], st
    assert st["connections"] == 1 and st["upstream_errors"] == 0, st
    assert ProxyRule.parse(rules[1].to_spec()).to_spec() == rules[1].to_spec()


@pytest.mark.timeout(120)
def test_shard_commit_small(tmp_path: Path) -> None:
    """``benchmarks.shard_commit``: one process and two on the simulated store, each run in
    a fresh process, every file renamed, the ratio, the JSON at --out and its plot. Not a
    measurement (a tiny job: the workers' start-up dominates)."""
    out = tmp_path / "shard_commit.json"
    args = ["--files", "1000", "--manifests", "10", "--latency-ms", "2", "--rounds", "1", "--out", str(out)]
    proc = run_benchmark("benchmarks.shard_commit", *args, timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| processes |" in proc.stdout and "x2_vs_1" in proc.stdout
    payload = json.loads(out.read_text())
    assert payload["run"]["commit"] and len(payload["run"]["load_average"]) == 3
    runs = payload["runs"]
    assert [r["processes"] for r in runs] == [1, 2]
    assert [r["rename_processes"] for r in runs] == [1, 2]
    for r in runs:
        assert r["files"] == 1000 and r["files_per_s"] > 0 and r["cpu_ms_per_file"] > 0
        assert len(r["load_before"]) == 3 and r["peak_rss_mb"] > 0
    # the renames' two requests each: in the committing process, or in the workers
    assert runs[0]["requests_in_coordinator"] >= 2000 > 2 >= runs[1]["requests_in_coordinator"]
    assert runs[1]["worker_peak_rss_mb"] and payload["x2_vs_1"] > 0
    pytest.importorskip("matplotlib")
    from benchmarks.plot import plot_shard

    png = plot_shard(tmp_path, tmp_path / "shard.png")
    assert png is not None and png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_direct_commit_scenario_smoke(tmp_path: Path) -> None:
    """Issue 26's ``direct`` scenario through ``python -m benchmarks`` (local files, tiny):
    plain, staged and direct commits of the same job at two file counts, each output exact;
    the mutating requests counted (the direct commit's do not grow with the files on local
    files: no rename per file, the markers go with one recursive delete); its own result
    file and plot; its targets evaluated."""
    proc = run_benchmark("benchmarks", "--smoke", "--only", "direct", "--out", str(tmp_path), timeout=110)
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads((tmp_path / "direct_commit.json").read_text())
    assert payload["run"]["commit"] and len(payload["run"]["load_average"]) == 3
    rows = {(r["files"], r["contender"]): r for r in payload["rows"]}
    assert set(rows) == {(n, k) for n in (20, 40) for k in ("plain", "staged", "direct")}
    for r in rows.values():
        assert r["verified"] == "exact", r
        assert r["seconds"] > 0 and r["to_visible_s"] is not None and 0 < r["to_visible_s"] <= r["seconds"]
    # staged and plain rename every file (local: batch renames, one sub-request per file)
    for kind in ("plain", "staged"):
        assert rows[(40, kind)]["mutating_sub_requests"] - rows[(20, kind)]["mutating_sub_requests"] == 20
    # direct: no rename, the same requests at both counts
    assert "rename_batch" not in rows[(40, "direct")]["sub_requests_by_op"]
    assert rows[(40, "direct")]["other_requests"] == rows[(20, "direct")]["other_requests"]
    assert {r["files"] for r in payload["ratios"]} == {20, 40}
    suite = json.loads((tmp_path / "benchmarks.json").read_text())
    assert any(t["target"].startswith("direct table commit <= 0.3x staged (local") for t in suite["targets"])
    assert (tmp_path / "direct_commit.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _fake_gcs_available(), reason="fake-gcs-server is not installed")
def test_direct_commit_counts_on_fake_gcs(tmp_path: Path) -> None:
    """``benchmarks.direct_commit commit`` on fake-gcs-server (tiny): outside marker
    removal the direct commit sends the same mutating requests at both file counts; marker
    removal is one delete per file there (GCS has no batch delete in amcommit's store)."""
    args = ["commit", "--backends", "gcs", "--tasks", "2", "--files", "20", "--count-files", "10"]
    proc = run_benchmark(
        "benchmarks.direct_commit", *args, "--rounds", "1", "--out", str(tmp_path), timeout=110
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {
        (r["files"], r["contender"]): r
        for r in json.loads((tmp_path / "direct_commit.json").read_text())["rows"]
    }
    assert all(r["verified"] == "exact" for r in rows.values())
    small, big = rows[(20, "direct")], rows[(40, "direct")]
    assert small["other_requests"] == big["other_requests"]
    assert (small["marker_requests"], big["marker_requests"]) == (20, 40)
    assert big["http_mutating"] >= big["mutating_requests"] and big["all_requests"] > big["http_mutating"]


@pytest.mark.timeout(240)
def test_stream_commit_direct_quick(tmp_path: Path) -> None:
    """``benchmarks.stream_commit --quick --direct``: the amcommit sink with
    ``table_commit=direct`` runs beside the staged sink and the file sink; its commit moved
    no file (every data file's inode unchanged since before ``commit()``), the staged
    one's moved them all."""
    pytest.importorskip("pyspark")
    proc = run_benchmark(
        "benchmarks.stream_commit", "--quick", "--direct", "--out", str(tmp_path), timeout=230
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads((tmp_path / "stream_direct.json").read_text())
    assert payload["sinks"] == ["parquet", "amcommit", "amcommit_direct"]
    assert payload["files_moved_by_commit"]["amcommit_direct"] == 0
    assert payload["files_moved_by_commit"]["amcommit"] > 0
    row = payload["rows"][0]
    assert (
        row["amcommit_direct_enter_to_visible_ms_all"]
        and row["direct_enter_to_visible_vs_parquet_after_tasks"] > 0
    )
