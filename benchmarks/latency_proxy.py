"""A loopback HTTP/1.1 proxy that adds latency to every request and can throttle; and the
latency-hiding and throttling scenarios that use it.

The proxy sits between a client (amcommit, an official SDK, the raw loop: all see the same
thing) and an emulator on 127.0.0.1. It reads each request (head + body, by
``Content-Length`` or chunked framing) and either

* forwards it ``--delay`` seconds after it arrived (the answer comes straight back), so
  every request costs at least that much more, as on a real cloud store; or
* with probability ``--throttle`` answers it itself, without forwarding: ``503
  ServerBusy`` (Azure's shape, with ``x-ms-error-code``) or ``429 rateLimitExceeded``
  (GCS's JSON error), both with ``Retry-After``.

Clients send one request at a time per connection (no pipelining), so answers stay in
order. The proxy runs in its own process (``python -m benchmarks.latency_proxy serve``)
and writes its counters to ``--stats-file`` when it gets SIGTERM.

Scenarios (each contender in a fresh process, fresh emulator, output verified exact):

    .venv/bin/python -m benchmarks.latency_proxy latency [--files 20000] [--backend gcs]
    .venv/bin/python -m benchmarks.latency_proxy throttle [--files 20000] [--backend gcs]

* ``latency``: 50 ms added to every request; amcommit (defaults, c=64; and c=256 with
  two requests per rename, as the SDK contenders send) vs the thread pool of 32 vs v1
  sequential. Sequential at 50 ms per request would take hours at
  20,000 files: it commits a sample of the tasks and its rate is reported (marked).
* ``throttle``: 10% of requests answered 503/429 with ``Retry-After: 1``; amcommit vs the
  thread pool; throughput, retries and an exact output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from amcommit.emulators.procs import stop_process

# -- the proxy -------------------------------------------------------------------------


class _Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.throttled = 0
        self.connections = 0


class _Upstream(asyncio.Protocol):
    def __init__(self, down: _Downstream) -> None:
        self.down = down
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.down.upstream_ready()

    def data_received(self, data: bytes) -> None:
        if self.down.transport is not None and not self.down.transport.is_closing():
            self.down.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.down.transport is not None:
            self.down.transport.close()


class _Downstream(asyncio.Protocol):
    def __init__(self, proxy: Proxy) -> None:
        self.p = proxy
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.up: _Upstream | None = None
        self.buf = bytearray()
        self.need: int | None = None  # bytes of the current request (None: head incomplete)
        self.chunked = False
        self.method = b""
        self.queue: deque[tuple[float, bytes]] = deque()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.p.stats.connections += 1
        self.up = _Upstream(self)
        self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        assert self.up is not None
        try:
            await self.loop.create_connection(lambda: self.up, self.p.target_host, self.p.target_port)  # type: ignore[arg-type, return-value]
        except OSError:
            if self.transport is not None:
                self.transport.close()

    def upstream_ready(self) -> None:
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.up is not None and self.up.transport is not None:
            self.up.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self._one():
            pass

    def _one(self) -> bool:
        """Take one complete request off the buffer; False if none is complete."""
        if self.need is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(self.buf[: end + 4])
            self.method = head.split(b" ", 1)[0]
            length = 0
            self.chunked = False
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                k = k.strip().lower()
                if k == b"content-length":
                    length = int(v.strip())
                elif k == b"transfer-encoding" and b"chunked" in v.lower():
                    self.chunked = True
            self.need = end + 4 + length
        if self.chunked:
            term = self.buf.find(b"0\r\n\r\n", self.need)
            if term < 0:
                return False
            size = term + 5
        else:
            if len(self.buf) < self.need:
                return False
            size = self.need
        req = bytes(self.buf[:size])
        del self.buf[:size]
        self.need = None
        self.p.stats.requests += 1
        if self.p.throttle and random.random() < self.p.throttle:
            self.p.stats.throttled += 1
            if self.transport is not None:
                self.transport.write(self.p.throttle_answer(self.method == b"HEAD"))
            return True
        due = self.loop.time() + self.p.delay
        self.queue.append((due, req))
        if self.p.delay > 0:
            self.loop.call_at(due, self._flush)
        else:
            self._flush()
        return True

    def _flush(self) -> None:
        up = self.up.transport if self.up is not None else None
        if up is None:
            return  # upstream_ready() flushes
        now = self.loop.time() + 1e-4
        while self.queue and self.queue[0][0] <= now:
            up.write(self.queue.popleft()[1])


class Proxy:
    """The proxy's settings and counters (see the module docstring)."""

    def __init__(
        self, target_port: int, *, delay: float, throttle: float, style: str, retry_after: int = 1
    ) -> None:
        self.target_host = "127.0.0.1"
        self.target_port = target_port
        self.delay = delay
        self.throttle = throttle
        self.style = style
        self.retry_after = retry_after
        self.stats = _Stats()

    def throttle_answer(self, head_only: bool) -> bytes:
        if self.style == "azure":
            status = b"503 Service Unavailable"
            body = (
                b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
                b"<Message>The server is busy (benchmark proxy).</Message></Error>"
            )
            extra = b"Content-Type: application/xml\r\nx-ms-error-code: ServerBusy\r\n"
        else:
            status = b"429 Too Many Requests"
            body = json.dumps(
                {
                    "error": {
                        "code": 429,
                        "message": "rate limit exceeded (benchmark proxy)",
                        "errors": [{"reason": "rateLimitExceeded", "message": "rate limit exceeded"}],
                    }
                }
            ).encode()
            extra = b"Content-Type: application/json; charset=UTF-8\r\n"
        head = (
            b"HTTP/1.1 "
            + status
            + b"\r\n"
            + extra
            + b"Retry-After: %d\r\n" % self.retry_after
            + b"Content-Length: %d\r\n\r\n" % len(body)
        )
        return head if head_only else head + body

    async def serve(self, port_file: str | None, stats_file: str | None) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Downstream(self), "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        if port_file:
            _write_file(port_file, str(port))
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.close()
        if stats_file:
            t = os.times()
            _write_file(
                stats_file,
                json.dumps(
                    {
                        "requests": self.stats.requests,
                        "throttled": self.stats.throttled,
                        "connections": self.stats.connections,
                        "proxy_cpu_s": round(t.user + t.system, 3),
                    }
                ),
            )


def _write_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (readers never see a partial file)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


@contextlib.contextmanager
def proxied(target: Any, *, delay: float = 0.0, throttle: float = 0.0) -> Iterator[tuple[Any, Any]]:
    """Run a proxy process in front of ``target`` (a clients.Target); yield (the target
    through the proxy, ``stats()`` which stops the proxy and returns its counters)."""
    style = "azure" if target.kind == "azurite" else "gcs"
    with tempfile.TemporaryDirectory(prefix="amcommit-proxy-") as tmp:
        port_file, stats_file = f"{tmp}/port", f"{tmp}/stats.json"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.latency_proxy",
                "serve",
                "--target-port",
                str(target.port),
                "--delay",
                str(delay),
                "--throttle",
                str(throttle),
                "--style",
                style,
                "--port-file",
                port_file,
                "--stats-file",
                stats_file,
            ],
            cwd=str(Path(__file__).parent.parent),
        )
        try:
            deadline = time.monotonic() + 20
            while not os.path.exists(port_file):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the latency proxy did not start")
                time.sleep(0.02)
            port = int(Path(port_file).read_text())

            def stats() -> dict[str, Any]:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=10)
                try:
                    return json.loads(Path(stats_file).read_text())  # type: ignore[no-any-return]
                except (OSError, ValueError):
                    return {}

            yield target.via_port(port), stats
        finally:
            stop_process(proc)


# -- scenarios -------------------------------------------------------------------------


def run_latency(
    backends: Sequence[str],
    files: int,
    *,
    delay: float = 0.05,
    amcommit_conc: Sequence[int] = (64,),
    lean_conc: Sequence[int] = (256,),
    seq_sample_tasks: int = 4,
    log: Any = sys.stderr,
) -> list[dict[str, Any]]:
    """amcommit (defaults; and lean: 2 requests per rename like the SDKs) vs thread pool 32
    vs sequential (sampled) with ``delay`` on every request."""
    from benchmarks.job_commit import SDK_THREADS, Contender, run_one

    plan = [Contender("amcommit", c) for c in amcommit_conc]
    plan += [Contender("amcommit", c, lean=True) for c in lean_conc]
    plan += [Contender("threadpool", SDK_THREADS), Contender("sequential", 0, seq_sample_tasks)]
    rows = []
    for kind in backends:
        for c in plan:
            r = run_one(kind, files, c, proxy=lambda t: proxied(t, delay=delay), log=log)
            r["scenario"] = f"latency {int(delay * 1000)} ms"
            rows.append(r)
    _ratios(rows)
    return rows


def run_throttle(
    backends: Sequence[str],
    files: int,
    *,
    fraction: float = 0.1,
    amcommit_conc: Sequence[int] = (64,),
    lean_conc: Sequence[int] = (64,),
    log: Any = sys.stderr,
) -> list[dict[str, Any]]:
    """amcommit (defaults; and lean: 2 requests per rename like the SDK, so the same share
    of renames meets a throttling answer) vs thread pool 32, with ``fraction`` of requests
    throttled (Retry-After: 1)."""
    from benchmarks.job_commit import SDK_THREADS, Contender, run_one

    plan = [Contender("amcommit", c) for c in amcommit_conc]
    plan += [Contender("amcommit", c, lean=True) for c in lean_conc]
    plan += [Contender("threadpool", SDK_THREADS)]
    rows = []
    for kind in backends:
        for c in plan:
            r = run_one(kind, files, c, proxy=lambda t: proxied(t, throttle=fraction), log=log)
            r["scenario"] = f"throttle {int(fraction * 100)}%"
            p = r.get("proxy") or {}
            r["throttled_answers"] = p.get("throttled", 0)
            r["requests"] = p.get("requests", 0)
            if r["kind"] != "amcommit" and r["verified"] == "exact":
                # the SDKs keep no count; every throttled answer was retried (output exact)
                r["retries"] = r["throttled_answers"]
            rows.append(r)
    _ratios(rows)
    return rows


def _ratios(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        if r["kind"] != "amcommit":
            continue
        for other in rows:
            if other["backend"] != r["backend"] or not other["files_per_s"]:
                continue
            if other["kind"] == "threadpool":
                r["x_threadpool"] = round(r["files_per_s"] / other["files_per_s"], 2)
            elif other["kind"] == "sequential":
                # the sample's rate: its whole-run files/s (listing + renames, no cleanup)
                r["x_sequential"] = round(r["files_per_s"] / other["files_per_s"], 1)


LAT_COLUMNS = [
    "backend",
    "files",
    "contender",
    "files_per_s",
    "x_threadpool",
    "x_sequential",
    "cpu_ms_per_file",
    "peak_rss_mb",
    "p50_ms",
    "p99_ms",
    "verified",
]
THR_COLUMNS = [
    "backend",
    "files",
    "contender",
    "files_per_s",
    "x_threadpool",
    "requests",
    "throttled_answers",
    "retries",
    "recovered",
    "cpu_ms_per_file",
    "p99_ms",
    "verified",
]


def _table_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "files": r["files"]} for r in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the proxy (until SIGTERM)")
    s.add_argument("--target-port", type=int, required=True)
    s.add_argument("--delay", type=float, default=0.05)
    s.add_argument("--throttle", type=float, default=0.0)
    s.add_argument("--style", choices=["azure", "gcs"], default="gcs")
    s.add_argument("--retry-after", type=int, default=1)
    s.add_argument("--port-file")
    s.add_argument("--stats-file")
    for name in ("latency", "throttle"):
        p = sub.add_parser(name)
        p.add_argument("--backends", default="gcs")
        p.add_argument("--files", type=int, default=20000)
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        proxy = Proxy(
            a.target_port, delay=a.delay, throttle=a.throttle, style=a.style, retry_after=a.retry_after
        )
        asyncio.run(proxy.serve(a.port_file, a.stats_file))
        return 0
    from benchmarks.common import table, write_json

    backends = a.backends.split(",")
    if a.cmd == "latency":
        rows = run_latency(backends, a.files)
        print(table(rows, LAT_COLUMNS, "Job commit with 50 ms added to every request"))
        print(f"\nwrote {write_json('latency', {'benchmark': 'latency', 'rows': rows})}")
    else:
        rows = run_throttle(backends, a.files)
        print(table(rows, THR_COLUMNS, "Job commit with 10% of requests throttled"))
        print(f"\nwrote {write_json('throttle', {'benchmark': 'throttle', 'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
