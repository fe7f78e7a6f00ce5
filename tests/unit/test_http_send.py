"""The one send path of the HTTP stores (amcommit.store.http.HttpClient.send), against a
scripted aiohttp server on 127.0.0.1: the per-request policy and the auth hook."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import anyio
import pytest
from aiohttp import web
from yarl import URL

from amcommit.errors import NotFound, Throttled, Transient, Unauthenticated
from amcommit.store.http import HttpClient
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy

FAST = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.002)


@dataclass
class Script:
    """Answers in order (the last one repeats); what the server saw."""

    answers: list[tuple[int, float]] = field(default_factory=lambda: [(200, 0.0)])
    seen: list[tuple[str, str | None]] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)
    good_token: str | None = None

    async def handle(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization")
        self.seen.append((request.method, auth))
        if self.good_token is not None and auth != f"Bearer {self.good_token}":
            return web.Response(status=401)
        status, delay = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        await anyio.sleep(delay)
        self.finished.append(time.monotonic())
        return web.Response(status=status, body=b"ok")


@pytest.fixture
async def server() -> AsyncIterator[tuple[Script, URL]]:
    script = Script()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", script.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield script, URL(f"http://127.0.0.1:{port}/o", encoded=True)
    await runner.cleanup()


def client(**kw: object) -> HttpClient:
    return HttpClient(limiter=Limiter(max_concurrency=8), retry=FAST, **kw)  # type: ignore[arg-type]


class Tokens:
    """An auth with a refreshable bearer token: hands out t1, t2, ..."""

    def __init__(self, refreshable: bool = True) -> None:
        self.n = 0
        self.current: str | None = None
        self.refreshable = refreshable

    async def sign(self, method: str, url: URL, headers: dict[str, str]) -> None:
        if self.current is None:
            self.n += 1
            self.current = f"t{self.n}"
        headers["Authorization"] = f"Bearer {self.current}"

    def invalidate(self, signed: Mapping[str, str] | None = None) -> bool:
        if not self.refreshable:
            return False
        if signed is not None and signed.get("Authorization") == f"Bearer {self.current}":
            self.current = None
        return True


async def test_401_refreshes_a_refreshable_credential_once(server: tuple[Script, URL]) -> None:
    script, url = server
    script.good_token = "t2"
    c = client(auth=Tokens())
    try:
        r = await c.send("put", "PUT", url, data=b"x", idempotent=False)
        assert r.status == 200 and [a for _m, a in script.seen] == ["Bearer t1", "Bearer t2"]
    finally:
        await c.aclose()
    script.seen.clear()
    c = client(auth=Tokens(refreshable=False))
    try:
        with pytest.raises(Unauthenticated):
            await c.send("get", "GET", url)
        assert len(script.seen) == 1  # a fixed credential: no second try, no retries
    finally:
        await c.aclose()


async def test_not_idempotent_is_sent_once_unless_unexecuted(server: tuple[Script, URL]) -> None:
    script, url = server
    script.answers = [(503, 0.0), (200, 0.0)]
    c = client()
    try:
        with pytest.raises(Throttled) as ei:
            await c.send("put", "PUT", url, data=b"x", idempotent=False)
        assert len(script.seen) == 1 and not ei.value.retries_spent  # declined, not spent
    finally:
        await c.aclose()
    script.seen.clear()
    script.answers = [(429, 0.0), (200, 0.0)]
    gate = Limiter(max_concurrency=None)
    c = client(retry_unexecuted=lambda e: e.status == 429, write_gate=gate)
    try:
        r = await c.send("put", "PUT", url, data=b"x", idempotent=False, write=True)
        assert r.status == 200 and len(script.seen) == 2
        assert gate.throttle_events == 1 and c.limiter.throttle_events == 1
    finally:
        await c.aclose()


async def test_missing_ok_answers_none(server: tuple[Script, URL]) -> None:
    script, url = server
    script.answers = [(404, 0.0)]
    c = client()
    try:
        assert await c.send("get", "GET", url, missing_ok=True) is None
        with pytest.raises(NotFound):
            await c.send("get", "GET", url)
    finally:
        await c.aclose()


async def test_shield_settles_a_mutation_before_the_cancellation(server: tuple[Script, URL]) -> None:
    script, url = server
    script.answers = [(200, 0.3)]
    c = client()
    try:
        for shield in (True, False):
            script.finished.clear()
            with anyio.move_on_after(0.05):
                await c.send("put", "PUT", url, data=b"x", shield=shield)
            left = time.monotonic()
            if shield:  # the caller moved on only once the service had answered
                assert script.finished and script.finished[0] <= left
            else:
                assert not script.finished
    finally:
        await c.aclose()


async def test_shield_deadline_is_transient(server: tuple[Script, URL]) -> None:
    script, url = server
    script.answers = [(200, 1.0)]
    c = client(shield_timeout=0.1)
    try:
        with pytest.raises(Transient, match=r"did not finish within 0\.1s"):
            await c.send("put", "PUT", url, data=b"x", shield=True)
    finally:
        await c.aclose()
