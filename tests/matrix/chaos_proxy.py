"""HTTP faults in front of any emulator: a loopback proxy (own thread and event loop) that
forwards every request to ``upstream`` and, with probability ``rate`` (seeded), instead:

* ``throttle``: answers one of ``statuses`` (429 / 503, Azure's ``ServerBusy`` code) with
  ``Retry-After: 0`` and does not forward;
* ``lose``: forwards, then drops the connection: the operation happened, the answer is lost;
* ``reset``: drops the connection without forwarding.

Unlike tests/azure/fault_proxy.py (count-based rules for Azurite paths) it is
probabilistic and backend-neutral: the same storm on Azurite, the ADLS test server, the GCS
double and fake-gcs-server. ``armed`` is False until the runner starts the faulty phase.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
from collections import Counter

import aiohttp
from aiohttp import web
from yarl import URL

_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


class ChaosProxy:
    def __init__(
        self,
        upstream: str,
        kind: str,
        *,
        rate: float = 0.2,
        statuses: tuple[int, ...] = (429, 503),
        seed: int = 11,
    ) -> None:
        if kind not in ("throttle", "lose", "reset"):
            raise ValueError(f"unknown fault kind {kind!r}")
        u = URL(upstream)
        self.upstream = f"{u.scheme}://{u.host}:{u.port}"
        self.kind = kind
        self.rate = rate
        self.statuses = statuses
        self.armed = False
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ChaosProxy:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="chaos-proxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            # shorter than Azurite's 5 s idle timeout: no reset of a reused upstream connection
            connector=aiohttp.TCPConnector(keepalive_timeout=2.0),
            auto_decompress=False,
            skip_auto_headers=("Content-Type", "User-Agent", "Accept-Encoding"),
        )
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()

    async def _stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _roll(self) -> bool:
        with self._lock:
            return self.armed and self._rng.random() < self.rate

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        fault = self._roll()
        if fault and self.kind == "throttle":
            with self._lock:
                status = self._rng.choice(self.statuses)
                self.counts[f"throttle {status}"] += 1
            return web.Response(
                status=status,
                headers={"Retry-After": "0", "x-ms-error-code": "ServerBusy"},
                content_type="application/json",
                text=json.dumps(
                    {
                        "error": {
                            "code": status,
                            "message": "injected throttling",
                            "errors": [{"reason": "rateLimitExceeded"}],
                        }
                    }
                ),
            )
        if fault and self.kind == "reset":
            with self._lock:
                self.counts["reset"] += 1
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        assert self._session is not None
        async with self._session.request(
            request.method,
            URL(self.upstream + request.raw_path, encoded=True),
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
        ) as up:
            data = await up.read()
            out = {k: v for k, v in up.headers.items() if k.lower() not in _HOP}
            status, length = up.status, up.headers.get("Content-Length")
        if fault:  # lose
            with self._lock:
                self.counts["lose"] += 1
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        if request.method == "HEAD":
            if length is not None:
                out["Content-Length"] = length
            return web.Response(status=status, headers=out)
        return web.Response(status=status, headers=out, body=data)
