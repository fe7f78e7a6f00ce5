"""Authentication: Shared Key signing against the SDK's signer, SAS, bearer tokens,
connection strings, URL factories, and that secrets never leak into errors, reprs or logs."""

from __future__ import annotations

import logging
import pickle
import random
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from functools import cmp_to_key

import anyio
import pytest
from yarl import URL

from amcommit.emulators.azurite import Azurite
from amcommit.errors import ConfigError, InvalidInput, NotFound, Unauthenticated
from amcommit.store import open_location, open_store
from amcommit.store.azure import BlobStore, DfsStore
from amcommit.store.azure.auth import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    BearerToken,
    SasToken,
    Secret,
    SharedKey,
    header_sort_key,
    http_date,
    parse_connection_string,
    string_to_sign,
)
from amcommit.store.base import PutMode
from tests.azure.conftest import BlobEnv, DfsEnv
from tests.servers.adls_server import AdlsTestServer

OTHER_KEY = "c2VjcmV0LWtleS10aGF0LWlzLXdyb25nLWJ1dC12YWxpZC1iYXNlNjQtLS0tLS0tLS0tLS0tLQ=="


# -- Shared Key signing vs the SDK ------------------------------------------------------


def _sdk_authorization(method: str, url: str, headers: dict[str, str]) -> str:
    from azure.core.pipeline import PipelineContext, PipelineRequest
    from azure.core.rest import HttpRequest
    from azure.storage.blob._shared.authentication import SharedKeyCredentialPolicy

    req = HttpRequest(method, url, headers=dict(headers))
    SharedKeyCredentialPolicy(AZURITE_ACCOUNT, AZURITE_KEY).on_request(
        PipelineRequest(req, PipelineContext(None))
    )
    return str(req.headers["Authorization"])


CASES: list[tuple[str, str, dict[str, str]]] = [
    ("HEAD", "/devstoreaccount1/c/a%20b/f%2B%25%23.txt", {}),
    (
        "PUT",
        "/devstoreaccount1/c/x",
        {"Content-Length": "0", "If-None-Match": "*", "x-ms-blob-type": "BlockBlob"},
    ),
    (
        "PUT",
        "/devstoreaccount1/c/dst?comp=copy&timeout=30",
        {
            "Content-Length": "0",
            "x-ms-copy-source": "http://127.0.0.1/devstoreaccount1/c/src",
            "x-ms-source-if-match": '"0x1"',
            "x-ms-meta-amcommitrenameid": "r1",
            "x-ms-meta-a_b": "v",
            "x-ms-meta-a1": "w",
            "If-None-Match": "*",
        },
    ),
    (
        "GET",
        "/devstoreaccount1/c?restype=container&comp=list&prefix=a%2Fb%2F&marker=2%213%21&maxresults=10",
        {},
    ),
    ("DELETE", "/devstoreaccount1/c/%C3%BC/f", {"If-Match": '"0x8D"'}),
    ("PATCH", "/devstoreaccount1/fs/f?action=append&position=0", {"Content-Length": "11"}),
]


@pytest.mark.parametrize(("method", "path", "headers"), CASES)
def test_shared_key_signature_equals_sdk(method: str, path: str, headers: dict[str, str]) -> None:
    url = f"http://127.0.0.1:10000{path}"
    hdrs = {"x-ms-version": "2025-01-05", "x-ms-date": http_date(), **headers}
    ours = dict(hdrs)
    SharedKey(AZURITE_ACCOUNT, AZURITE_KEY).sign_sync(method, URL(url, encoded=True), ours)
    assert ours["Authorization"] == _sdk_authorization(method, url, hdrs)


def test_cached_signing_state_equals_sdk_and_an_independent_hmac() -> None:
    """One SharedKey signs many requests: its kept HMAC state and its cached header order
    (one per set of header names, whatever their order in the dict) give what the SDK
    and a from-scratch HMAC give, request after request."""
    import base64
    import hashlib
    import hmac

    key = SharedKey(AZURITE_ACCOUNT, AZURITE_KEY)
    rng = random.Random(3)
    for i in range(60):
        method, path, headers = CASES[i % len(CASES)]
        items = [*{"x-ms-version": "2025-01-05", "x-ms-date": http_date(), **headers}.items()]
        items.append((f"x-ms-meta-k{rng.randint(0, 3)}", f"v{i}"))  # new sets of names, too
        rng.shuffle(items)  # the same set of names in another order: the same canonical form
        hdrs = dict(items)
        url = f"http://127.0.0.1:10000{path}"
        ours = dict(hdrs)
        key.sign_sync(method, URL(url, encoded=True), ours)
        assert ours["Authorization"] == _sdk_authorization(method, url, hdrs)
        sts = string_to_sign(method, AZURITE_ACCOUNT, URL(url, encoded=True).raw_path, [], hdrs)
        fresh = hmac.new(base64.b64decode(AZURITE_KEY), sts.encode(), hashlib.sha256).digest()
        assert key.signature(sts) == base64.b64encode(fresh).decode()


def test_http_date_is_cached_per_second_and_rolls_over() -> None:
    t = 1_790_000_000.0
    first = http_date(t)
    assert first == "Mon, 21 Sep 2026 14:13:20 GMT"
    assert http_date(t + 0.999) is first  # the same second: the cached text
    assert http_date(t + 1.0) == "Mon, 21 Sep 2026 14:13:21 GMT"
    assert http_date(t + 86_400) == "Tue, 22 Sep 2026 14:13:20 GMT"
    assert http_date(t) == first  # back again: formatted anew, the same text
    before = int(time.time())
    now = http_date()  # the clock's second, not the one cached last
    assert now in {format_datetime(datetime.fromtimestamp(s, UTC), usegmt=True) for s in (before, before + 1)}


def test_header_collation_matches_service_sort() -> None:
    from azure.storage.blob._shared.authentication import compare

    rng = random.Random(7)
    alphabet = "abcxyz019-_"
    names = [
        "x-ms-meta-" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(400)
    ]
    names = list(dict.fromkeys(names))
    assert sorted(names, key=header_sort_key) == sorted(names, key=cmp_to_key(compare))


def test_sdk_requests_pass_the_test_servers_signature_check(dfs_env: DfsEnv) -> None:
    # the server verifies Shared Key with amcommit's canonicalisation: the SDK agrees with it
    f = dfs_env.sdk.get_file_client("dir/ü name+%.txt")
    f.upload_data(b"x", overwrite=True)
    f.get_file_properties()
    assert dfs_env.server.auth_failures == []


# -- secrets never shown --------------------------------------------------------------------


def test_reprs_hide_secrets() -> None:
    key = SharedKey("acct", AZURITE_KEY)
    sas = SasToken("sv=2025-01-05&sp=rwdl&sig=SECRETSIG%3D")
    tok = BearerToken(lambda: "TOKEN-VALUE")
    info = parse_connection_string(
        f"AccountName=a;AccountKey={AZURITE_KEY};SharedAccessSignature=sig=SECRETSIG"
    )
    for obj in (key, sas, tok, info, Secret("hush")):
        text = f"{obj!r} {obj} {obj:>10}" if isinstance(obj, Secret) else f"{obj!r} {obj}"
        for secret in (AZURITE_KEY, "SECRETSIG", "TOKEN-VALUE", "hush"):
            assert secret not in text
    with pytest.raises(TypeError):
        pickle.dumps(Secret("hush"))
    store = BlobStore("cont", endpoint="http://127.0.0.1:1/devstoreaccount1", sas_token="sp=r&sig=SECRETSIG")
    assert "SECRETSIG" not in repr(store) and "SECRETSIG" not in store.root_uri


async def test_wrong_key_is_unauthenticated_and_leaks_nothing(
    dfs_env: DfsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = dfs_env.store(account_key=OTHER_KEY)
    with pytest.raises(Unauthenticated) as ei:
        await store.put("f", b"x")
    with pytest.raises(Unauthenticated) as ei2:
        await store.stat("f")  # HEAD: no body, code from the header only
    for text in (str(ei.value), repr(ei.value), str(ei2.value), caplog.text):
        assert OTHER_KEY not in text and "SharedKey" not in text and "Signature" not in text
    assert dfs_env.server.auth_failures  # (the server did check)


async def test_bearer_token_auth(adls_server: AdlsTestServer, dfs_env: DfsEnv) -> None:
    adls_server.tokens.add("good-token")
    calls = []

    async def provider() -> tuple[str, float]:
        calls.append(1)
        return "good-token", time.time() + 3600

    store = dfs_env.store(account_key=None, token_provider=provider)
    await store.put("f", b"data")
    assert await store.get("f") == b"data"
    assert len(calls) == 1  # cached
    bad = dfs_env.store(account_key=None, token_provider=lambda: "bad-token-value")
    with pytest.raises(Unauthenticated) as ei:
        await bad.get("f")
    assert "bad-token-value" not in str(ei.value)


async def test_rejected_bearer_token_is_dropped_and_replaced_once(
    adls_server: AdlsTestServer, dfs_env: DfsEnv
) -> None:
    """A cached token the service refuses (401: revoked, clock skew) is dropped and the
    request sent once more with a fresh one; concurrent refusals of the same old token
    cause one fetch, not one per request."""
    adls_server.tokens.add("good-token")
    handed: list[str] = []

    async def provider() -> tuple[str, float]:
        handed.append("revoked-token" if not handed else "good-token")
        return handed[-1], time.time() + 3600  # valid for an hour, as far as the cache knows

    store = dfs_env.store(account_key=None, token_provider=provider)
    try:
        await store.put("f", b"data")
        assert await store.get("f") == b"data"
        assert handed == ["revoked-token", "good-token"]
    finally:
        await store.aclose()

    handed.clear()
    store = dfs_env.store(account_key=None, token_provider=provider)
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(store.stat, "f")
        assert handed == ["revoked-token", "good-token"]
    finally:
        await store.aclose()

    # a token refused every time: one fresh token per request, then Unauthenticated
    fetched: list[int] = []

    def always_bad() -> str:
        fetched.append(1)
        return "bad-token-value"

    bad = dfs_env.store(account_key=None, token_provider=always_bad)
    try:
        with pytest.raises(Unauthenticated) as ei:
            await bad.get("f")
        assert ei.value.status == 401 and len(fetched) == 2
        assert "bad-token-value" not in str(ei.value)
    finally:
        await bad.aclose()


async def test_token_provider_shapes_and_refresh() -> None:
    class AccessToken:
        def __init__(self, token: str, expires_on: float) -> None:
            self.token, self.expires_on = token, expires_on

    class AsyncCred:
        n = 0

        async def get_token(self, *scopes: str) -> AccessToken:
            assert scopes == ("https://storage.azure.com/.default",)
            self.n += 1
            return AccessToken(f"t{self.n}", time.time() - 1)  # already expired: never cached

    class SyncCred:
        def get_token(self, *scopes: str) -> AccessToken:
            return AccessToken("sync", time.time() + 3600)

    cred = AsyncCred()
    b = BearerToken(cred)
    assert await b.token() == "t1" and await b.token() == "t2"
    assert await BearerToken(SyncCred()).token() == "sync"
    assert await BearerToken(lambda: ("tuple", None)).token() == "tuple"

    def broken() -> str:
        raise RuntimeError("provider failed with secret=abc123")

    with pytest.raises(Unauthenticated) as ei:
        await BearerToken(broken).token()
    assert "abc123" not in str(ei.value) and ei.value.__cause__ is None


async def test_sas_on_test_server(
    adls_server: AdlsTestServer, dfs_env: DfsEnv, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    adls_server.sas_signatures.add("GOODSIG=")
    store = dfs_env.store(account_key=None, sas_token="?sv=2025-01-05&ss=b&sp=rwdlac&sig=GOODSIG%3D")
    await store.put("a/f", b"1")
    res = await store.rename("a/f", "b/g")  # the rename source carries the SAS as well
    assert (await store.stat("b/g")).etag == res.etag
    with pytest.raises(NotFound) as ei:
        await store.get("missing")
    bad = dfs_env.store(account_key=None, sas_token="sv=2025-01-05&sig=WRONGSIG")
    with pytest.raises(Unauthenticated) as ei2:
        await bad.get("b/g")
    for text in (str(ei.value), str(ei2.value), caplog.text):
        assert "GOODSIG" not in text and "WRONGSIG" not in text


async def test_sas_generated_by_sdk_on_azurite(azurite: Azurite, blob_env: BlobEnv) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(
        azurite.account,
        blob_env.container,
        account_key=azurite.account_key,
        permission=ContainerSasPermissions(
            read=True, write=True, delete=True, list=True, add=True, create=True
        ),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    store = blob_env.store(account_key=None, sas_token=sas)
    await store.put("d/f", b"payload", mode=PutMode.CREATE)
    res = await store.rename("d/f", "e/g", rename_id="r-sas")  # copy source authorised by the SAS
    assert (await store.stat("e/g")).rename_id == "r-sas" and res.dst == "e/g"
    assert [i.path async for i in store.list("e")] == ["e/g"]
    assert await store.delete("e", recursive=True)
    sig = next(p for p in sas.split("&") if p.startswith("sig="))[4:]
    with pytest.raises(NotFound) as ei:
        await store.get("e/g")
    assert sig not in str(ei.value)


# -- connection strings and URL factories ------------------------------------------------------


def test_connection_strings() -> None:
    dev = parse_connection_string("UseDevelopmentStorage=true")
    assert dev.account == AZURITE_ACCOUNT and dev.blob_endpoint == "http://127.0.0.1:10000/devstoreaccount1"
    assert dev.account_key is not None and dev.account_key.reveal() == AZURITE_KEY
    real = parse_connection_string(
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURITE_KEY};EndpointSuffix=core.windows.net"
    )
    assert real.blob_endpoint == "https://acct.blob.core.windows.net"
    assert real.dfs_endpoint == "https://acct.dfs.core.windows.net"
    sas = parse_connection_string(
        "BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=1&sig=x"
    )
    assert sas.account == "acct" and sas.sas_token is not None and sas.account_key is None
    for bad in ("AccountKey=abc", "garbage"):
        with pytest.raises(ConfigError):
            parse_connection_string(bad)
    with pytest.raises(ConfigError):
        SharedKey("a", "not base64!!")


async def test_open_store_urls(azurite: Azurite, adls_server: AdlsTestServer) -> None:
    conn = azurite.connection_string
    store, path = open_location(
        "wasb://cont@devstoreaccount1.blob.core.windows.net/a/b c", connection_string=conn
    )
    assert isinstance(store, BlobStore) and path == "a/b c" and store.endpoint == azurite.endpoint
    assert store.root_uri == "wasb://cont@devstoreaccount1.blob.core.windows.net/"
    await store.aclose()
    dfs = open_store("abfss://fs1@acct.dfs.core.windows.net/x", **adls_server.store_options())
    assert isinstance(dfs, DfsStore) and dfs.filesystem == "fs1"
    assert dfs.root_uri == "abfss://fs1@acct.dfs.core.windows.net/"
    await dfs.aclose()
    default = open_store("abfs://fs1@myacct.dfs.core.windows.net/", account_key=AZURITE_KEY)
    assert isinstance(default, DfsStore) and default.endpoint == "https://myacct.dfs.core.windows.net"
    assert default.account == "myacct"
    await default.aclose()
    with pytest.raises(InvalidInput):
        open_store("abfs://fs@127.0.0.1:1/")
    with pytest.raises(ConfigError):
        open_store("abfs://nofilesystem.dfs.core.windows.net/")


async def test_connection_failures_do_not_show_the_sas() -> None:
    import traceback

    from amcommit.emulators.azurite import free_port
    from amcommit.errors import Transient
    from amcommit.store.retry import RetryPolicy

    store = BlobStore(
        "cont",
        endpoint=f"http://127.0.0.1:{free_port()}/devstoreaccount1",  # nothing listens here
        sas_token="sv=2025-01-05&sp=r&sig=CONNSECRET%3D",
        retry=RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.002),
    )
    with pytest.raises(Transient) as ei:
        await store.get("f")
    await store.aclose()
    assert "CONNSECRET" not in "".join(traceback.format_exception(ei.value))
