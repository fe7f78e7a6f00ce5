"""A loopback HTTP/1.1 proxy (raw asyncio) that delays and throttles requests by rule; and
the latency-hiding and throttling scenarios that use it.

The proxy sits between a client (amcommit, an official SDK, the raw loop: all see the same
thing) and an emulator on 127.0.0.1. Each client connection gets its own connection to the
emulator (both kept alive as long as the client keeps its own). The proxy frames each
request (head + body, by ``Content-Length`` or chunked framing), asks the rules, and either
forwards its bytes as they came (after its delay) or answers it itself; the emulator's
answer is piped straight back, byte for byte, without being parsed. Clients send one
request at a time per connection (no pipelining), so answers stay in order.

It is two :class:`asyncio.Protocol` classes, not an HTTP framework, because a benchmark
proxy must cost as little CPU as possible: on 2 cores every microsecond it spends is taken
from the contenders. Measured in one alternating run (2026-11-23, fake-gcs-server, 50 ms
on every request): 10,000 GETs of 1 KiB at c=128, 3 rounds each: this engine 45–52 µs of
CPU per request, the ``aiohttp.web`` + ``ClientSession`` proxy it replaces (commits
1654fbd–30f0878) 191–193 µs, the earlier raw-asyncio proxy without rules (533d8a3)
56–58 µs; a lean 5,000-file latency run (amcommit lean c=256, 2 rounds each, load
average 7–8): this engine 52.7 and 49.9 µs (509 and 537 files/s), the aiohttp proxy 250
and 229 µs (315 and 365 files/s). Not supported (no benchmark client uses them):
pipelining, ``Expect: 100-continue``.

Which requests are delayed or throttled is decided by :class:`ProxyRule`, the shared
fault-rule matcher :class:`amcommit.testing.faults.RuleMatcher` (the one FaultyStore, the
Azure fault proxy and the test doubles use): a rule selects requests by HTTP method
(``ops``) and by an fnmatch glob on the decoded request path or, for uploads, the
``name`` query parameter (``path``); of those it lets ``after`` through, then fires at
most ``count`` times, each time with ``probability``. Kinds:

* ``delay``: wait ``seconds`` before forwarding (delay rules add up), so every selected
  request costs at least that much more, as on a real cloud store;
* ``throttle``: answer the request itself after the delays, without forwarding:
  ``503 ServerBusy`` (Azure's shape, with ``x-ms-error-code``) or ``429
  rateLimitExceeded`` (GCS's JSON error), both with ``Retry-After``. The first throttle
  rule that fires wins.

``--delay S`` and ``--throttle P`` are shorthands for one rule each over every request;
``--rule`` adds rules (``kind,key=value,...``, e.g.
``throttle,probability=0.5,count=10,ops=PUT,path=*/part-*``). The proxy runs in its own
process on the event loop :mod:`amcommit.loop` picks (uvloop where installed) and writes
its counters (requests, delayed, throttled, per-rule counts, CPU) to ``--stats-file``
when it gets SIGTERM.

Scenarios (each contender in a fresh process, fresh emulator, output verified exact):

    .venv/bin/python -m benchmarks.latency_proxy latency [--files 20000] [--backends gcs,azurite]
        [--delay 0.05] [--fixed 128,256] [--lean 256] [--seq-tasks 4] [--no-threadpool]
        [--variants] [--compare-src DIR] [--rounds 1] [--save]
    .venv/bin/python -m benchmarks.latency_proxy throttle [--files 5000] [--backends gcs] [--save]

(results in ``benchmarks/results/tmp/``; ``--save``: ``benchmarks/results/``, tracked)

* ``latency``: ``--delay`` (50 ms) added to every request; amcommit with its defaults
  (``CommitterConfig()`` and the store's default options: literally what a user gets of
  ``commit-job``: the adaptive in-flight limit, the GCS write gate of a cold bucket),
  with ``--variants`` also the defaults with ``bucket_warm=true`` (GCS: no write gate)
  and/or ``io_threads=1024`` (the committer's own bound on renames in flight), with
  ``--compare-src`` the defaults of another source tree (before/after); amcommit at a
  fixed c=N (``--fixed``: io_threads and a fixed store limit of N, no GCS write gate; the
  sweep the defaults are judged against: ``x_best_fixed``), amcommit lean
  (two requests per rename, as the SDK contenders send) at c=256, the thread pool of 32
  and v1 sequential. Sequential at 50 ms per request would take hours at 20,000 files:
  it commits a sample of the tasks and its rate is reported (marked). ``--delay 0``: no
  proxy (the no-latency comparison of defaults).
* ``throttle``: 10% of requests answered 503/429 with ``Retry-After: 1``; amcommit vs the
  thread pool; throughput, retries and an exact output.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, unquote

from amcommit.emulators.procs import stop_process
from amcommit.testing.faults import RuleMatcher

if TYPE_CHECKING:
    from benchmarks.job_commit import Contender

# -- the proxy -------------------------------------------------------------------------

RuleKind = Literal["delay", "throttle"]
_HEAD_END = b"\r\n\r\n"


@dataclass
class ProxyRule(RuleMatcher):
    """One proxy rule: the shared :class:`~amcommit.testing.faults.RuleMatcher` over HTTP
    requests (``ops``: methods, e.g. ``{"PUT"}``; ``path``: fnmatch glob on the decoded
    request path or the ``name`` query parameter), plus what to do when it fires."""

    kind: RuleKind
    ops: frozenset[str] | None = None
    path: str | None = None
    probability: float = 1.0
    count: int | None = None
    after: int = 0
    seconds: float = 0.0
    """``delay``: how long to hold the request."""
    matched: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.kind not in ("delay", "throttle"):
            raise ValueError(f"unknown rule kind {self.kind!r} (delay, throttle)")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {self.probability}")
        if self.ops is not None:
            self.ops = frozenset(m.upper() for m in self.ops)

    @classmethod
    def parse(cls, spec: str) -> ProxyRule:
        """A rule from ``kind,key=value,...`` (keys: ops as ``GET+PUT``, path, probability,
        count, after, seconds)."""
        kind, *pairs = spec.split(",")
        kw: dict[str, Any] = {}
        for pair in pairs:
            k, sep, v = pair.partition("=")
            if not sep:
                raise ValueError(f"rule {spec!r}: expected key=value, got {pair!r}")
            if k == "ops":
                kw[k] = frozenset(v.split("+"))
            elif k == "path":
                kw[k] = v
            elif k in ("count", "after"):
                kw[k] = int(v)
            elif k in ("probability", "seconds"):
                kw[k] = float(v)
            else:
                raise ValueError(f"rule {spec!r}: unknown key {k!r}")
        return cls(kind, **kw)  # type: ignore[arg-type]

    def to_spec(self) -> str:
        """The ``--rule`` text of this rule (:meth:`parse` inverts it)."""
        parts: list[str] = [self.kind]
        if self.ops is not None:
            parts.append("ops=" + "+".join(sorted(self.ops)))
        if self.path is not None:
            parts.append(f"path={self.path}")
        if self.probability != 1.0:
            parts.append(f"probability={self.probability}")
        if self.count is not None:
            parts.append(f"count={self.count}")
        if self.after:
            parts.append(f"after={self.after}")
        if self.seconds:
            parts.append(f"seconds={self.seconds}")
        return ",".join(parts)

    def describe(self) -> dict[str, Any]:
        """The rule and its counters, for the stats file."""
        return {"rule": self.to_spec(), "matched": self.matched, "fired": self.fired}


def standard_rules(delay: float = 0.0, throttle: float = 0.0) -> list[ProxyRule]:
    """The scenarios' rules: ``delay`` seconds on every request, ``throttle`` probability
    of a throttling answer on every request (each rule only when non-zero)."""
    rules = []
    if delay > 0:
        rules.append(ProxyRule("delay", seconds=delay))
    if throttle > 0:
        rules.append(ProxyRule("throttle", probability=throttle))
    return rules


def _request_paths(target: bytes) -> tuple[str, ...]:
    """The decoded path of a request target and, for uploads, its ``name`` parameter."""
    path, _, query = target.decode("latin-1").partition("?")
    path = unquote(path)
    if "name=" in query:
        for k, v in parse_qsl(query):
            if k == "name":
                return (path, v)
    return (path,)


class _Upstream(asyncio.Protocol):
    """The proxy's connection to the emulator for one client connection: every byte it
    receives goes straight to the client."""

    def __init__(self, down: _Downstream) -> None:
        self.down = down
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.down.upstream_ready()

    def data_received(self, data: bytes) -> None:
        down = self.down.transport
        if down is not None and not down.is_closing():
            down.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.down.transport is not None:
            self.down.transport.close()

    def pause_writing(self) -> None:  # the emulator reads slower than the client sends
        if self.down.transport is not None:
            self.down.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.down.transport is not None and not self.down.transport.is_closing():
            self.down.transport.resume_reading()


class _Downstream(asyncio.Protocol):
    """One client connection: frames its requests (``Content-Length`` or chunked), asks
    the rules, and forwards each request (after its delay) or answers it (throttle)."""

    def __init__(self, proxy: Proxy) -> None:
        self.p = proxy
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.up = _Upstream(self)
        self.buf = bytearray()
        self.need: int | None = None  # bytes of the current request (None: head incomplete)
        self.chunk_at = -1  # chunked body: where the next chunk-size line starts (-1: not chunked)
        self.wait = 0.0
        self.throttle = False
        self.head_only = False
        # requests waiting for their delay or for the upstream connection, in order:
        # [ready, bytes, to the emulator (else: the answer to the client)]
        self.queue: deque[list[Any]] = deque()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.p.connections += 1
        self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        try:
            await self.loop.create_connection(lambda: self.up, self.p.target_host, self.p.target_port)
        except OSError as e:
            self.p.upstream_errors += 1
            if self.transport is not None and not self.transport.is_closing():
                if self.queue or self.buf:
                    self.transport.write(_bad_gateway(e))
                self.transport.close()

    def upstream_ready(self) -> None:
        if self.queue:
            self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.up.transport is not None:
            self.up.transport.close()

    def pause_writing(self) -> None:  # the client reads slower than the emulator answers
        if self.up.transport is not None:
            self.up.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.up.transport is not None and not self.up.transport.is_closing():
            self.up.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self._one():
            pass

    def _head(self) -> bool:
        """Parse the head of the next request and ask the rules; False if incomplete."""
        buf = self.buf
        end = buf.find(_HEAD_END)
        if end < 0:
            return False
        head = bytes(buf[: end + 2])  # every line ends with \r\n
        low = head.lower()
        length = 0
        i = low.find(b"\r\ncontent-length:")
        if i >= 0:
            length = int(low[i + 17 : low.index(b"\r\n", i + 17)])
        self.chunk_at = -1
        i = low.find(b"\r\ntransfer-encoding:")
        if i >= 0 and b"chunked" in low[i : low.index(b"\r\n", i + 20)]:
            self.chunk_at = end + 4
        self.need = end + 4 + length
        sp = head.index(b" ")
        method = head[:sp]
        self.head_only = method == b"HEAD"
        p = self.p
        p.requests += 1
        if p.rules:
            if p.paths_needed:
                target = head[sp + 1 : head.rindex(b" ", sp + 1, head.index(b"\r\n"))]
                paths = _request_paths(target)
            else:
                paths = ()
            self.wait, self.throttle = p.decide(method.decode("latin-1"), paths)
        return True

    def _one(self) -> bool:
        """Take one complete request off the buffer; False if none is complete."""
        if self.need is None and not self._head():
            return False
        buf = self.buf
        if self.chunk_at >= 0:
            pos = self.chunk_at
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    self.chunk_at = pos
                    return False
                size = int(bytes(buf[pos:eol]).partition(b";")[0], 16)
                if size == 0:
                    term = buf.find(_HEAD_END, eol)  # the last chunk, then trailers if any
                    if term < 0:
                        self.chunk_at = pos
                        return False
                    size = term + 4
                    break
                if len(buf) < eol + size + 4:  # this chunk's data and its \r\n
                    self.chunk_at = pos
                    return False
                pos = eol + size + 4
        else:
            size = self.need  # type: ignore[assignment]
            if len(buf) < size:
                return False
        if size == len(buf):
            req, self.buf = bytes(buf), bytearray()
        else:
            req = bytes(buf[:size])
            del buf[:size]
        self.need = None
        wait, self.wait = self.wait, 0.0
        if self.throttle:
            self.throttle = False
            item = [wait <= 0, self.p.throttle_head if self.head_only else self.p.throttle_full, False]
        else:
            item = [wait <= 0, req, True]
        if wait > 0:
            self.loop.call_later(wait, self._release, item)
            self.queue.append(item)
        elif not self.queue and item[2] and self.up.transport is not None:
            self.up.transport.write(req)  # the common case: straight through
        else:
            self.queue.append(item)
            self._flush()
        return True

    def _release(self, item: list[Any]) -> None:
        item[0] = True
        self._flush()

    def _flush(self) -> None:
        """Send the queue's ready head, in order."""
        queue = self.queue
        while queue and queue[0][0]:
            _, data, to_up = queue[0]
            if to_up:
                if self.up.transport is None:
                    return  # upstream_ready() flushes
                self.up.transport.write(data)
            elif self.transport is not None:
                self.transport.write(data)
            queue.popleft()


def _bad_gateway(e: BaseException) -> bytes:
    body = f"benchmark proxy: upstream failed: {e!r}".encode()
    return b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


class Proxy:
    """The proxy's settings, rules and counters (see the module docstring)."""

    def __init__(
        self,
        target_port: int,
        rules: Sequence[ProxyRule],
        *,
        style: str,
        retry_after: int = 1,
        seed: int | None = None,
    ) -> None:
        self.target_host = "127.0.0.1"
        self.target_port = target_port
        self.rules = list(rules)
        self.paths_needed = any(r.path is not None for r in self.rules)
        self.style = style
        self.retry_after = retry_after
        self.rng = random.Random(seed)
        self.requests = 0
        self.delayed = 0
        self.throttled = 0
        self.upstream_errors = 0
        self.connections = 0
        self.throttle_full = self._throttle_answer()
        self.throttle_head = self.throttle_full[: self.throttle_full.index(_HEAD_END) + 4]

    def _throttle_answer(self) -> bytes:
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
        head = b"HTTP/1.1 %s\r\n%sRetry-After: %d\r\nContent-Length: %d\r\n\r\n" % (
            status,
            extra,
            self.retry_after,
            len(body),
        )
        return head + body

    def decide(self, method: str, paths: tuple[str, ...]) -> tuple[float, bool]:
        """(seconds to hold the request, whether to throttle it) by the rules, in order
        (the caller counts the request)."""
        wait = 0.0
        throttle = False
        for r in self.rules:
            if r.kind == "delay":
                if r.check(method, paths, self.rng):
                    wait += r.seconds
            elif not throttle and r.check(method, paths, self.rng):
                throttle = True
        if wait > 0:
            self.delayed += 1
        if throttle:
            self.throttled += 1
        return wait, throttle

    def stats(self, serve_cpu_s: float) -> dict[str, Any]:
        """The counters, CPU seconds of the whole process and of serving alone."""
        t = os.times()
        return {
            "requests": self.requests,
            "delayed": self.delayed,
            "throttled": self.throttled,
            "upstream_errors": self.upstream_errors,
            "connections": self.connections,
            "rules": [r.describe() for r in self.rules],
            "proxy_cpu_s": round(t.user + t.system, 3),
            "serve_cpu_s": round(serve_cpu_s, 3),
            "cpu_us_per_request": round(serve_cpu_s * 1e6 / self.requests, 1) if self.requests else 0.0,
        }

    async def serve(self, port_file: str | None, stats_file: str | None) -> None:
        """Listen on 127.0.0.1 (a free port, written to ``port_file``) until SIGTERM/SIGINT;
        then write :meth:`stats` to ``stats_file``."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Downstream(self), "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        t0 = os.times()
        if port_file:
            _write_file(port_file, str(port))
        await stop.wait()
        t1 = os.times()
        server.close()
        if stats_file:
            serve_cpu = (t1.user + t1.system) - (t0.user + t0.system)
            _write_file(stats_file, json.dumps(self.stats(serve_cpu)))


def _write_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (readers never see a partial file)."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


@contextlib.contextmanager
def proxied(
    target: Any,
    *,
    delay: float = 0.0,
    throttle: float = 0.0,
    rules: Sequence[ProxyRule] = (),
    seed: int | None = None,
) -> Iterator[tuple[Any, Any]]:
    """Run a proxy process in front of ``target`` (a clients.Target) with ``delay`` and
    ``throttle`` on every request (:func:`standard_rules`) followed by ``rules``; yield
    (the target through the proxy, ``stats()`` which stops the proxy and returns its
    counters)."""
    style = "azure" if target.kind == "azurite" else "gcs"
    specs = [r.to_spec() for r in [*standard_rules(delay, throttle), *rules]]
    with tempfile.TemporaryDirectory(prefix="amcommit-proxy-") as tmp:
        port_file, stats_file = f"{tmp}/port", f"{tmp}/stats.json"
        argv = [sys.executable, "-m", "benchmarks.latency_proxy", "serve", "--target-port", str(target.port)]
        argv += ["--style", style, "--port-file", port_file, "--stats-file", stats_file]
        argv += [a for s in specs for a in ("--rule", s)]
        if seed is not None:
            argv += ["--seed", str(seed)]
        proc = subprocess.Popen(argv, cwd=str(Path(__file__).parent.parent))
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
    amcommit_conc: Sequence[int] = (128, 256),
    lean_conc: Sequence[int] = (256,),
    seq_sample_tasks: int = 4,
    double: bool = False,
    threadpool: bool = True,
    variants: Sequence[Contender] = (),
    compare_src: str | None = None,
    rounds: int = 1,
    log: Any = sys.stderr,
    compare_variants: bool = False,
) -> list[dict[str, Any]]:
    """amcommit (defaults; ``variants``: defaults with some settings changed, e.g.
    ``bucket_warm``; ``compare_src``: the defaults of another source tree, e.g. main's, for a
    before/after, and with ``compare_variants`` each variant from it too; c=N: a fixed in-flight limit of N and io_threads N; lean: 2 requests per
    rename like the SDKs) vs thread pool 32 vs sequential (sampled; 0 tasks: left out)
    with ``delay`` on every request (0: no proxy at all); ``double``: also the defaults,
    c=256 and the thread pool on the GCS double (``objects.move``). ``rounds``: the plan
    that many times, the order reversed every other round."""
    from benchmarks.job_commit import SDK_THREADS, Contender, run_one

    plan = [Contender("amcommit", 0, defaults=True), *variants]
    if compare_src:
        plan.append(Contender("amcommit", 0, defaults=True, src=compare_src))
        if compare_variants:  # each variant with the other source tree too
            plan += [dataclasses.replace(v, src=compare_src) for v in variants]
    plan += [Contender("amcommit", c) for c in amcommit_conc]
    plan += [Contender("amcommit", c, lean=True) for c in lean_conc]
    if threadpool:
        plan.append(Contender("threadpool", SDK_THREADS))
    if seq_sample_tasks:
        plan.append(Contender("sequential", 0, seq_sample_tasks))
    scenario = f"latency {int(delay * 1000)} ms" if delay > 0 else "no added latency"
    rows = []
    for kind in backends:
        for rnd in range(rounds):
            for c in plan if rnd % 2 == 0 else list(reversed(plan)):
                if kind == "azurite" and any(k == "bucket_warm" for k, _ in c.store_opts):
                    continue  # a GCS setting
                proxy = (lambda t: proxied(t, delay=delay)) if delay > 0 else None
                load0 = os.getloadavg()[0]
                r = run_one(kind, files, c, proxy=proxy, log=log)
                r["load"] = f"{load0:.1f}-{os.getloadavg()[0]:.1f}"  # 1-minute load, before-after
                print(f"    load {r['load']}", file=log, flush=True)
                r["scenario"] = scenario
                r["round"] = rnd
                _proxy_cpu(r)
                rows.append(r)
    if double:
        for c in [Contender("amcommit", 0, defaults=True), Contender("amcommit", 256)]:
            rows.append(run_on_double(files, c, delay=delay, log=log))
        rows.append(run_on_double(files, Contender("threadpool", SDK_THREADS), delay=delay, log=log))
        for r in rows[-3:]:
            r["scenario"] = scenario
            _proxy_cpu(r)
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
    """amcommit (defaults; c=N; lean: 2 requests per rename like the SDK, so the same share
    of renames meets a throttling answer) vs thread pool 32, with ``fraction`` of requests
    throttled (Retry-After: 1)."""
    from benchmarks.job_commit import SDK_THREADS, Contender, run_one

    plan = [Contender("amcommit", 0, defaults=True)]
    plan += [Contender("amcommit", c) for c in amcommit_conc]
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
            _proxy_cpu(r)
            rows.append(r)
    _ratios(rows)
    return rows


_DOUBLE_MAIN = """
import os, sys, time
from amcommit.testing.gcs_double import GcsDouble
d = GcsDouble().start_in_thread()
d.create_bucket(sys.argv[2])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(d.port))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(3600)
"""


@contextlib.contextmanager
def gcs_double() -> Iterator[tuple[Any, int]]:
    """The GCS double (``src/amcommit/testing/gcs_double.py``: ``objects.move``, preconditions
    enforced on the server, like the real service) in its own process with a fresh bucket;
    yield (its clients.Target, its pid)."""
    import uuid

    from benchmarks.clients import Target

    bucket = f"bench{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory(prefix="amcommit-double-") as tmp:
        port_file = f"{tmp}/port"
        root = str(Path(__file__).parent.parent)
        proc = subprocess.Popen([sys.executable, "-c", _DOUBLE_MAIN, port_file, bucket], cwd=root)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(port_file):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the GCS double did not start")
                time.sleep(0.02)
            yield Target("gcs", f"http://127.0.0.1:{Path(port_file).read_text()}", bucket), proc.pid
        finally:
            stop_process(proc)


def run_on_double(files: int, c: Any, *, delay: float = 0.05, log: Any = sys.stderr) -> dict[str, Any]:
    """``job_commit.run_one`` with the GCS double (``objects.move``: the rename path of
    the real service) instead of fake-gcs-server, behind the proxy with ``delay``."""
    from benchmarks.clients import server_cpu
    from benchmarks.common import run_isolated
    from benchmarks.job_commit import setup, verify

    with gcs_double() as (t, pid), tempfile.TemporaryDirectory(prefix="amcommit-bench-") as tmp:
        job = setup(t, files)
        spec = {"contender": c.kind, "concurrency": c.concurrency, "sample_tasks": c.sample_tasks}
        spec.update(lean=c.lean, defaults=c.defaults, loop=c.loop)
        path = Path(tmp) / "spec.json"
        with proxied(t, delay=delay) as (pt, stats):
            path.write_text(json.dumps({**spec, "target": pt.to_json()}))
            s0 = server_cpu(pid)
            try:
                res = run_isolated("benchmarks.job_commit", ["--worker", str(path)], timeout=3600)
            except Exception as e:  # a failed contender is a finding: keep going
                res = {"files_per_s": 0.0, "files": 0, "cpu_ms_per_file": 0.0, "error": str(e)[-300:]}
            s1 = server_cpu(pid)
            res["proxy"] = stats()
        res["verified"] = verify(t, job, c.sample_tasks, True) if "error" not in res else "FAILED"
    res.update(backend="gcs double (move)", job_files=job.files, contender=c.label, kind=c.kind)
    res["concurrency"] = c.concurrency
    if s0 is not None and s1 is not None and res["files"]:
        res["server_cpu_ms_per_file"] = round((s1 - s0) * 1000 / res["files"], 3)
    if log is not None:
        print(
            f"  double {files} {c.label:<34} {res['files_per_s']:>8,.0f} files/s {res['verified']}", file=log
        )
    return res


def _proxy_cpu(r: dict[str, Any]) -> None:
    """Add the proxy's CPU per file and per request (while serving) to a row."""
    p = r.get("proxy") or {}
    if p.get("requests") and r.get("files"):
        r["proxy_cpu_ms_per_file"] = round(p["serve_cpu_s"] * 1000 / r["files"], 3)
        r["proxy_cpu_us_per_request"] = p["cpu_us_per_request"]
        r["requests_per_file"] = round(p["requests"] / r["files"], 2)


def _ratios(rows: list[dict[str, Any]]) -> None:
    """Each amcommit row's files/s against the same backend's (and round's) thread pool,
    sequential sample and best fixed concurrency (the fastest ``amcommit c=N`` row that is
    not lean: the same requests per rename as the defaults)."""
    for r in rows:
        if r["kind"] != "amcommit":
            continue
        peers = [o for o in rows if o["backend"] == r["backend"] and o.get("round", 0) == r.get("round", 0)]
        for other in peers:
            if not other["files_per_s"]:
                continue
            if other["kind"] == "threadpool":
                r["x_threadpool"] = round(r["files_per_s"] / other["files_per_s"], 2)
                if r.get("renames_per_s") and other.get("renames_per_s"):
                    # the rename phases alone (no manifests loaded, no cleanup)
                    r["x_threadpool_renames"] = round(r["renames_per_s"] / other["renames_per_s"], 2)
            elif other["kind"] == "sequential":
                # the sample's rate: its whole-run files/s (listing + renames, no cleanup)
                r["x_sequential"] = round(r["files_per_s"] / other["files_per_s"], 1)
        fixed = [
            o["files_per_s"]
            for o in peers
            if o["contender"].startswith("amcommit c=") and "lean" not in o["contender"]
        ]
        if fixed and max(fixed):
            r["x_best_fixed"] = round(r["files_per_s"] / max(fixed), 2)


LAT_COLUMNS = [
    "backend",
    "files",
    "contender",
    "round",
    "load",
    "files_per_s",
    "x_threadpool",
    "renames_per_s",
    "x_threadpool_renames",
    "x_best_fixed",
    "x_sequential",
    "requests_per_file",
    "cpu_ms_per_file",
    "server_cpu_ms_per_file",
    "proxy_cpu_ms_per_file",
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


def main(argv: list[str] | None = None) -> int:
    from benchmarks.common import add_save_arg

    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the proxy (until SIGTERM)")
    s.add_argument("--target-port", type=int, required=True)
    s.add_argument("--delay", type=float, default=0.0, help="seconds added to every request")
    s.add_argument("--throttle", type=float, default=0.0, help="share of requests throttled")
    s.add_argument("--rule", action="append", default=[], help="kind,key=value,... (repeatable)")
    s.add_argument("--style", choices=["azure", "gcs"], default="gcs")
    s.add_argument("--retry-after", type=int, default=1)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--port-file")
    s.add_argument("--stats-file")
    for name in ("latency", "throttle"):
        p = sub.add_parser(name)
        p.add_argument("--backends", default="gcs")
        p.add_argument("--files", type=int, default=20000 if name == "latency" else 5000)
        if name == "latency":
            p.add_argument("--double", action="store_true", help="also on the GCS double (objects.move)")
            p.add_argument("--only-double", action="store_true", help="only the GCS double's rows")
            p.add_argument(
                "--delay", type=float, default=0.05, help="seconds added to every request (0: no proxy)"
            )
            p.add_argument(
                "--fixed", default="128,256", help="fixed in-flight limits to sweep (c=N), comma-separated"
            )
            p.add_argument("--lean", default="256", help="lean (2 requests per rename) c=N, comma-separated")
            p.add_argument(
                "--seq-tasks", type=int, default=4, help="sequential sample tasks (0: no sequential)"
            )
            p.add_argument("--no-threadpool", action="store_true", help="leave out the SDK thread pool")
            p.add_argument(
                "--variants",
                action="store_true",
                help="also the defaults with bucket_warm=true (GCS) and with io_threads 1024",
            )
            p.add_argument("--compare-src", help="also the defaults of amcommit from this src directory")
            p.add_argument(
                "--compare-variants",
                action="store_true",
                help="with --compare-src: also each --variant from there",
            )
            p.add_argument(
                "--variant",
                action="append",
                default=[],
                metavar="KEY=VALUE[,KEY=VALUE]",
                help="also the defaults with these store options (io_threads=N: the committer's); repeatable",
            )
            p.add_argument("--rounds", type=int, default=1)
            p.add_argument("--out", default="latency", help="result file name (default latency.json)")
        add_save_arg(p)
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        from amcommit.loop import loop_factory

        rules = [*standard_rules(a.delay, a.throttle), *(ProxyRule.parse(x) for x in a.rule)]
        proxy = Proxy(a.target_port, rules, style=a.style, retry_after=a.retry_after, seed=a.seed)
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            runner.run(proxy.serve(a.port_file, a.stats_file))
        return 0
    from benchmarks.common import table, write_json

    backends = a.backends.split(",")
    if a.cmd == "latency":
        from benchmarks.job_commit import Contender

        def ints(v: str) -> list[int]:
            return [int(x) for x in v.split(",") if x]

        variants = []
        if a.variants:
            warm = (("bucket_warm", True),)
            variants = [
                Contender("amcommit", 0, defaults=True, store_opts=warm),
                Contender("amcommit", 0, defaults=True, io_threads=1024),
                Contender("amcommit", 0, defaults=True, io_threads=1024, store_opts=warm),
            ]
        for spec in a.variant:
            opts: dict[str, Any] = {}
            for pair in spec.split(","):
                k, _, v = pair.partition("=")
                opts[k] = json.loads(v) if v not in ("", "none") else None
            io = int(opts.pop("io_threads", 0) or 0)
            variants.append(
                Contender("amcommit", 0, defaults=True, io_threads=io, store_opts=tuple(opts.items()))
            )
        rows = run_latency(
            [] if a.only_double else backends,
            a.files,
            delay=a.delay,
            amcommit_conc=ints(a.fixed),
            lean_conc=ints(a.lean),
            seq_sample_tasks=a.seq_tasks,
            double=a.double or a.only_double,
            threadpool=not a.no_threadpool,
            variants=variants,
            compare_src=a.compare_src,
            rounds=a.rounds,
            compare_variants=a.compare_variants,
        )
        title = (
            f"Job commit with {int(a.delay * 1000)} ms added to every request"
            if a.delay
            else "no added latency"
        )
        print(table(rows, LAT_COLUMNS, title))
        print(f"\nwrote {write_json(a.out, {'benchmark': 'latency', 'rows': rows}, save=a.save)}")
    else:
        rows = run_throttle(backends, a.files)
        print(table(rows, THR_COLUMNS, "Job commit with 10% of requests throttled"))
        print(f"\nwrote {write_json('throttle', {'benchmark': 'throttle', 'rows': rows}, save=a.save)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
