"""A fault-injecting HTTP proxy in front of Azurite (which has no fault switches itself).

Runs on 127.0.0.1 in its own thread and event loop. Rules select requests by method,
path glob and presence of a header; kinds:

* ``lose``: forward, then drop the connection (the operation happened; the answer is lost);
* ``throttle``: answer 503 ``ServerBusy`` (with ``Retry-After``) without forwarding;
* ``before``: call ``hook()`` (sync, in the proxy thread) before forwarding, e.g. to change
  the source of a rename between two of its requests;
* ``rewrite``: forward, then replace response headers with ``set_headers`` (e.g. make a
  finished copy look ``pending``).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

import aiohttp
from aiohttp import web
from yarl import URL

from amcommit.testing.faults import RuleMatcher

Kind = Literal["lose", "throttle", "before", "rewrite"]
_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}


@dataclass
class ProxyRule(RuleMatcher):
    """A proxy rule: the shared :class:`~amcommit.testing.faults.RuleMatcher` (operation =
    the HTTP method, path = the decoded blob path after the container), plus a header the
    request must carry."""

    kind: Kind
    method: str | None = None
    path: str | None = None
    """fnmatch glob on the decoded blob path (after the container)."""
    header: str | None = None
    """Only requests carrying this header (e.g. ``x-ms-copy-source``)."""
    count: int | None = 1
    after: int = 0
    retry_after: float | None = None
    hook: Callable[[], None] | None = None
    set_headers: dict[str, str] | None = None
    matched: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    @property
    def ops(self) -> frozenset[str] | None:  # type: ignore[override]
        return None if self.method is None else frozenset({self.method})

    def matches(self, method: str, path: str, headers: object) -> bool:
        """Whether the request is selected and the fault fires for it (counts it)."""
        if self.header is not None and self.header not in headers:  # type: ignore[operator]
            return False
        return self.check(method, (path,))


class FaultProxy:
    """Forward everything to ``upstream`` (``http://127.0.0.1:PORT``), injecting faults."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.rules: list[ProxyRule] = []
        self.forwarded = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    def add(self, kind: Kind, **kw: object) -> ProxyRule:
        rule = ProxyRule(kind, **kw)  # type: ignore[arg-type]
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def start(self) -> FaultProxy:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), loop).result(timeout=30)
        return self

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(
            auto_decompress=False, skip_auto_headers=("Content-Type", "User-Agent", "Accept-Encoding")
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

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        segs = request.rel_url.raw_path.lstrip("/").split("/", 2)
        path = unquote(segs[2]) if len(segs) > 2 else ""
        rule = None
        with self._lock:
            for r in self.rules:
                if r.matches(request.method, path, request.headers):
                    rule = r
                    break
        if rule is not None and rule.kind == "throttle":
            h = {"x-ms-error-code": "ServerBusy"}
            if rule.retry_after is not None:
                h["Retry-After"] = str(rule.retry_after)
            return web.Response(status=503, headers=h)
        if rule is not None and rule.kind == "before" and rule.hook is not None:
            await asyncio.get_running_loop().run_in_executor(None, rule.hook)
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
            out_headers = {k: v for k, v in up.headers.items() if k.lower() not in _HOP}
            status = up.status
            length = up.headers.get("Content-Length")
        self.forwarded += 1
        if rule is not None and rule.kind == "rewrite" and rule.set_headers:
            out_headers.update(rule.set_headers)
        if rule is not None and rule.kind == "lose":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        if request.method == "HEAD":
            if length is not None:
                out_headers["Content-Length"] = length
            return web.Response(status=status, headers=out_headers)
        return web.Response(status=status, headers=out_headers, body=data)
