"""Clients shared by the job-commit, latency and throttling benchmarks.

One :class:`Target` (JSON-serialisable, so a contender in a fresh process can open it)
names an emulator endpoint and a container/bucket. For each backend this module has:

* :func:`amcommit_store`: amcommit's own store (BlobStore / GcsStore) with its defaults,
  except a limiter sized to the benchmark's concurrency and, on GCS, no write gate (the
  default 1,000 writes/s gate models a new GCS bucket; the emulator has no such limit);
* :class:`SdkClient`: the official SDK (azure-storage-blob / google-cloud-storage) doing
  list, download, upload, delete and the rename the way the backend engineers' rename
  benchmarks do it (``benchmarks/azure_rename.py``, ``benchmarks/gcs_rename.py``): Blob
  ``start_copy_from_url`` + ``delete_blob`` with the same conditions; GCS ``rewrite`` +
  ``delete`` with generation preconditions. Thread-safe: one client serves a pool;
* :func:`raw_renamer`: the raw ceiling: a minimal aiohttp loop sending exactly the
  requests amcommit's store sends for one rename with its defaults (Blob: Get Properties
  + Copy Blob + Delete Blob; GCS on an emulator: GET source + GET destination + rewrite
  + DELETE), without retries, limiter, recovery or statistics.

Everything talks to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any
from urllib.parse import quote, unquote, urlsplit

KINDS = ("azurite", "gcs")
SDK_API_VERSION = "2026-06-06"  # the newest x-ms-version Azurite 3.37 accepts


@dataclass(frozen=True)
class Target:
    """An emulator endpoint and one container (Azurite) or bucket (fake-gcs-server)."""

    kind: str
    endpoint: str  # azurite: http://127.0.0.1:P/devstoreaccount1; gcs: http://127.0.0.1:P
    container: str
    account: str = ""
    key: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, str]) -> Target:
        return cls(**d)

    @property
    def port(self) -> int:
        return int(urlsplit(self.endpoint).port or 80)

    def via_port(self, port: int) -> Target:
        """The same target reached through another loopback port (a proxy)."""
        u = urlsplit(self.endpoint)
        return replace(self, endpoint=f"{u.scheme}://127.0.0.1:{port}{u.path}")


@contextlib.contextmanager
def emulator(kind: str) -> Iterator[tuple[Target, int | None]]:
    """Start a fresh emulator of ``kind``; yield (target with a new container, server pid)."""
    name = f"bench{uuid.uuid4().hex[:10]}"
    if kind == "azurite":
        from amcommit.emulators.azurite import Azurite

        with Azurite() as az:
            t = Target("azurite", az.endpoint, name, az.account, az.account_key)
            _run(_create_container(t))
            yield t, az._proc.pid if az._proc is not None else None
    elif kind == "gcs":
        from amcommit.emulators.fakegcs import FakeGcsServer

        with FakeGcsServer() as srv:
            srv.create_bucket(name)
            yield Target("gcs", srv.url, name), srv._proc.pid if srv._proc is not None else None
    else:
        raise ValueError(f"unknown backend {kind!r}")


def _run(coro: Awaitable[Any]) -> Any:
    import anyio

    async def main() -> Any:
        return await coro

    return anyio.run(main)


async def _create_container(t: Target) -> None:
    from amcommit.store.azure import BlobStore

    s = BlobStore(t.container, endpoint=t.endpoint, account=t.account, account_key=t.key)
    await s.create_container()
    await s.aclose()


def server_cpu(pid: int | None) -> float | None:
    """CPU seconds used so far by the emulator process tree (psutil), or None."""
    if pid is None:
        return None
    try:
        import psutil

        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
        return float(sum(x.cpu_times().user + x.cpu_times().system for x in procs))
    except Exception:
        return None


# -- amcommit --------------------------------------------------------------------------


def amcommit_store(t: Target, concurrency: int, lean: bool = False) -> Any:
    """amcommit's store for ``t`` (defaults, limiter sized to ``concurrency``).

    ``lean``: two requests per rename, the same as the SDK contenders send (Blob: no Get
    Properties, ``preserve_metadata=False``; GCS: also no client-side precondition checks,
    ``verify_preconditions=False``, which the emulator default turns on because
    fake-gcs-server ignores preconditions on rewrite and delete)."""
    from amcommit.store.limits import Limiter

    lim = Limiter(max_concurrency=concurrency)
    if t.kind == "azurite":
        from amcommit.store.azure import BlobStore

        return BlobStore(
            t.container,
            endpoint=t.endpoint,
            account=t.account,
            account_key=t.key,
            limiter=lim,
            preserve_metadata=not lean,
        )
    from amcommit.store.gcs import GcsStore

    opts = {"verify_preconditions": False, "preserve_metadata": False} if lean else {}
    return GcsStore(t.container, endpoint=t.endpoint, limiter=lim, write_rate=None, **opts)


def amcommit_default_store(t: Target) -> Any:
    """amcommit's store for ``t`` with every option at its default (limiter, GCS write
    gate, request mix): what a user gets without tuning."""
    if t.kind == "azurite":
        from amcommit.store.azure import BlobStore

        return BlobStore(t.container, endpoint=t.endpoint, account=t.account, account_key=t.key)
    from amcommit.store.gcs import GcsStore

    return GcsStore(t.container, endpoint=t.endpoint)


class TimedStore:
    """Delegates to a store and records the wall time of every ``rename`` (p50/p99)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.latencies: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def rename(self, src: str, dst: str, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await self._inner.rename(src, dst, **kw)
        finally:
            self.latencies.append(time.perf_counter() - t0)


# -- official SDKs ---------------------------------------------------------------------


def object_name(uri: str) -> str:
    """Object name of a manifest URI (``wasb://c@a.blob.../p``, ``gs://b/p``)."""
    return unquote(urlsplit(uri).path).lstrip("/")


class SdkClient:
    """The official SDK for a target; methods are blocking and thread-safe."""

    def __init__(self, t: Target, pool: int) -> None:
        self.t = t
        if t.kind == "azurite":
            import requests
            from azure.core.pipeline.transport import RequestsTransport
            from azure.storage.blob import ContainerClient

            self._session = requests.Session()
            adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=max(4, pool * 2))
            self._session.mount("http://", adapter)
            self.cc = ContainerClient(
                t.endpoint,
                t.container,
                credential={"account_name": t.account, "account_key": t.key},
                api_version=SDK_API_VERSION,
                transport=RequestsTransport(session=self._session, session_owner=False),
            )
        else:
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage
            from requests.adapters import HTTPAdapter

            self.client = storage.Client(
                project="bench",
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": t.endpoint},
            )
            self.client._http.mount("http://", HTTPAdapter(pool_connections=4, pool_maxsize=max(4, pool * 2)))
            self.bucket = self.client.bucket(t.container)

    def list(self, prefix: str) -> list[tuple[str, str, int]]:
        """(name, etag or generation, size) of every object below ``prefix``."""
        if self.t.kind == "azurite":
            return [(b.name, b.etag, b.size) for b in self.cc.list_blobs(name_starts_with=prefix)]
        return [
            (b.name, str(b.generation), b.size) for b in self.client.list_blobs(self.bucket, prefix=prefix)
        ]

    def get(self, name: str) -> bytes:
        if self.t.kind == "azurite":
            return bytes(self.cc.download_blob(name).readall())
        return bytes(self.bucket.blob(name).download_as_bytes())

    def put(self, name: str, data: bytes) -> None:
        if self.t.kind == "azurite":
            self.cc.upload_blob(name, data, overwrite=True)
        else:
            self.bucket.blob(name).upload_from_string(data)

    def delete(self, name: str) -> None:
        if self.t.kind == "azurite":
            self.cc.delete_blob(name)
        else:
            self.bucket.blob(name).delete()

    def rename(self, src: str, dst: str, etag: str) -> None:
        """Copy (never overwriting, only the version seen) + conditional delete."""
        if self.t.kind == "azurite":
            from azure.core import MatchConditions

            s = self.cc.get_blob_client(src)
            d = self.cc.get_blob_client(dst)
            r = d.start_copy_from_url(
                s.url,
                match_condition=MatchConditions.IfMissing,
                source_etag=etag,
                source_match_condition=MatchConditions.IfNotModified,
            )
            while r["copy_status"] == "pending":
                time.sleep(0.05)
                r = {"copy_status": d.get_blob_properties().copy.status}
            s.delete_blob(etag=etag, match_condition=MatchConditions.IfNotModified)
            return
        g = int(etag)
        sb = self.bucket.blob(src)
        db = self.bucket.blob(dst)
        token, _, _ = db.rewrite(sb, if_generation_match=0, if_source_generation_match=g)
        while token is not None:
            token, _, _ = db.rewrite(sb, token=token, if_generation_match=0, if_source_generation_match=g)
        sb.delete(if_generation_match=g)

    def close(self) -> None:
        if self.t.kind == "azurite":
            self.cc.close()
            self._session.close()
        else:
            self.client.close()


# -- raw ceiling -----------------------------------------------------------------------


RawRename = Callable[[str, str, str], Awaitable[None]]


@contextlib.asynccontextmanager
async def raw_renamer(t: Target, concurrency: int) -> Any:
    """Yield ``rename(src, dst, etag)``: the store's rename requests, nothing else."""
    import aiohttp
    from yarl import URL

    conn = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=4.0)
    session = aiohttp.ClientSession(connector=conn, skip_auto_headers=("Content-Type",))
    try:
        if t.kind == "azurite":
            from amcommit.store.azure.auth import SharedKey

            key = SharedKey(t.account, t.key)
            base = f"{t.endpoint}/{t.container}"

            def url(name: str) -> URL:
                return URL(f"{base}/{quote(name)}", encoded=True)

            async def send(
                method: str, u: URL, headers: dict[str, str], ok: int
            ) -> aiohttp.typedefs.LooseHeaders:
                headers["x-ms-version"] = "2025-01-05"
                key.sign_sync(method, u, headers)
                async with session.request(method, u, headers=headers) as r:
                    await r.read()
                    if r.status != ok:
                        raise RuntimeError(f"{method} {u.path}: HTTP {r.status}")
                    return r.headers

            async def rename(src: str, dst: str, etag: str) -> None:
                su = url(src)
                h = await send("HEAD", su, {}, 200)
                meta = {k: v for k, v in h.items() if k.lower().startswith("x-ms-meta-")}
                await send(
                    "PUT",
                    url(dst),
                    {
                        **meta,
                        "Content-Length": "0",
                        "x-ms-copy-source": str(su),
                        "If-None-Match": "*",
                        "x-ms-source-if-match": h["ETag"],
                        "x-ms-meta-amcommitrenameid": uuid.uuid4().hex,
                    },
                    202,
                )
                await send("DELETE", su, {"If-Match": h["ETag"]}, 202)

            yield rename
        else:
            obase = f"{t.endpoint}/storage/v1/b/{t.container}/o"
            fields = "name,size,generation,metageneration,contentType,crc32c,md5Hash,metadata"

            def ourl(name: str, suffix: str = "", q: str = "") -> URL:
                return URL(f"{obase}/{quote(name, safe='')}{suffix}?{q}", encoded=True)

            async def get(u: URL, ok: tuple[int, ...] = (200,)) -> tuple[int, bytes]:
                async with session.get(u) as r:
                    body = await r.read()
                    if r.status not in ok:
                        raise RuntimeError(f"GET {u.path}: HTTP {r.status}")
                    return r.status, body

            async def rename(src: str, dst: str, etag: str) -> None:
                _, body = await get(ourl(src, q=f"fields={fields}"))
                s = json.loads(body)
                await get(ourl(dst, q=f"fields={fields}"), (404,))
                payload = {
                    "contentType": s.get("contentType"),
                    "metadata": {**(s.get("metadata") or {}), "amcommitRenameId": uuid.uuid4().hex},
                }
                u = ourl(
                    src,
                    f"/rewriteTo/b/{t.container}/o/{quote(dst, safe='')}",
                    f"ifGenerationMatch=0&ifSourceGenerationMatch={s['generation']}",
                )
                async with session.post(
                    u, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
                ) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"rewrite {src}: HTTP {r.status}")
                async with session.delete(ourl(src, q=f"ifGenerationMatch={s['generation']}")) as r:
                    await r.read()
                    if r.status not in (200, 204):
                        raise RuntimeError(f"DELETE {src}: HTTP {r.status}")

            yield rename
    finally:
        await session.close()
