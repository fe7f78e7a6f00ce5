"""Bearer tokens: sent on every request, refreshed before expiry, never in errors, reprs or
logs."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from amcommit.errors import Unauthenticated
from amcommit.store.gcs import AccessToken, GcsStore, google_auth_provider, static_token
from amcommit.testing.gcs_double import GcsDouble
from tests.plugins.gcs_backends import FAST_RETRY, new_bucket_name

SECRET = "ya29.s3cr3t-T0KEN-value"


@pytest.fixture
async def secured() -> AsyncIterator[tuple[GcsDouble, str]]:
    async with GcsDouble(token=SECRET) as d:
        bucket = new_bucket_name()
        d.create_bucket(bucket)
        yield d, bucket


def _store(d: GcsDouble, bucket: str, **kw: Any) -> GcsStore:
    return GcsStore(
        bucket, endpoint=d.url, write_rate=None, retry=FAST_RETRY, verify_preconditions=False, **kw
    )


async def test_bearer_token_is_sent(secured: tuple[GcsDouble, str]) -> None:
    d, bucket = secured
    store = _store(d, bucket, token_provider=static_token(SECRET))
    async with store:
        await store.put("a/b", b"1")
        await store.rename("a/b", "a/c")
        assert [i.path async for i in store.list("a")] == ["a/c"]
        assert SECRET not in repr(store)


async def test_anonymous_is_refused(secured: tuple[GcsDouble, str]) -> None:
    d, bucket = secured
    store = _store(d, bucket)  # emulator endpoint: anonymous by default
    async with store:
        with pytest.raises(Unauthenticated) as ei:
            await store.stat("x")
        assert ei.value.status == 401 and ei.value.code == "authError"


async def test_token_never_in_errors_or_logs(
    secured: tuple[GcsDouble, str], caplog: pytest.LogCaptureFixture
) -> None:
    d, bucket = secured
    wrong = SECRET + "-expired"
    caplog.set_level(logging.DEBUG)
    store = _store(d, bucket, token_provider=static_token(wrong))
    errors: list[BaseException] = []
    async with store:
        for call in (
            store.stat("p"),
            store.put("p", b"1"),
            store.get("p"),
            store.rename("p", "q", rename_id="i"),
        ):
            try:
                await call
            except Unauthenticated as e:
                errors.append(e)
    assert len(errors) == 4
    for e in errors:
        text = f"{e!s} {e!r} {e.args!r} {vars(e)!r}"
        assert "s3cr3t" not in text
    assert "s3cr3t" not in caplog.text
    assert "s3cr3t" not in repr(AccessToken(SECRET, 1.0)) and "s3cr3t" not in str(AccessToken(SECRET))


async def test_token_refresh_before_expiry(secured: tuple[GcsDouble, str]) -> None:
    d, bucket = secured
    calls = 0
    fetched = 0.0

    async def provider() -> AccessToken:
        nonlocal calls, fetched
        calls += 1
        fetched = time.time()
        return AccessToken(SECRET, fetched + (0.4 if calls == 1 else 3600))

    store = _store(d, bucket, token_provider=provider)
    async with store:
        await store.put("x", b"1")
        # the shared rule (amcommit.store.token): a short-lived token is used for half its
        # life, then fetched anew before it expires
        await anyio.sleep(max(0.0, 0.25 - (time.time() - fetched)))  # still valid
        await store.stat("x")  # -> refreshed
        await store.stat("x")
        assert calls == 2


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # google-auth: naive UTC


class FakeCredentials:
    """Quacks like google.auth credentials (refresh sets token and expiry)."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.expiry: datetime.datetime | None = None
        self.refreshed = 0

    @property
    def valid(self) -> bool:
        return self.token is not None and self.expiry is not None and self.expiry > _utcnow()

    def refresh(self, request: Any) -> None:
        self.refreshed += 1
        self.token = SECRET
        self.expiry = _utcnow() + datetime.timedelta(hours=1)


async def test_google_auth_credentials(secured: tuple[GcsDouble, str]) -> None:
    d, bucket = secured
    creds = FakeCredentials()
    store = _store(d, bucket, credentials=creds)
    async with store:
        await store.put("g", b"1")
        assert (await store.stat("g")).size == 1
        assert creds.refreshed == 1
    provider = google_auth_provider(creds)
    tok = await provider()
    assert tok.token == SECRET and tok.expires_at is not None and tok.expires_at > time.time() + 3000


async def test_failed_refresh_is_unauthenticated_without_details() -> None:
    class Broken(FakeCredentials):
        def refresh(self, request: Any) -> None:
            raise RuntimeError(f"server said no to {SECRET}")

    with pytest.raises(Unauthenticated) as ei:
        await google_auth_provider(Broken())()
    assert "s3cr3t" not in str(ei.value) and ei.value.__cause__ is None


async def test_rejected_token_is_replaced_once(secured: tuple[GcsDouble, str]) -> None:
    """A token the service no longer accepts (revoked, clock skew) is fetched anew."""
    d, bucket = secured
    tokens = [SECRET + "-revoked", SECRET]

    async def provider() -> AccessToken:
        return AccessToken(tokens.pop(0) if len(tokens) > 1 else tokens[0], time.time() + 3600)

    store = _store(d, bucket, token_provider=provider)
    async with store:
        await store.put("x", b"1")
        assert (await store.stat("x")).size == 1
