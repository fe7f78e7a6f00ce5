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
  requests amcommit's store sends for one rename with its defaults (Blob, sources without
  user metadata as the manifests say: Copy Blob + Delete Blob; GCS on fake-gcs-server:
  GET source + GET destination + rewrite + DELETE; GCS with ``objects.move``, the GCS
  double: metadata PATCH + move), without retries, limiter, recovery or statistics.

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
"""The emulators the full suite runs by default; ``gcsmove`` (the repository's GCS double,
the rename path of a real GCS bucket: ``objects.move``) is selected explicitly."""
ALL_KINDS = ("azurite", "gcs", "gcsmove")
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
    elif kind == "gcsmove":
        with _gcs_double() as (url, pid):
            _create_bucket(url, name)
            yield Target("gcsmove", url, name), pid
    else:
        raise ValueError(f"unknown backend {kind!r}")


@contextlib.contextmanager
def _gcs_double() -> Iterator[tuple[str, int]]:
    """The GCS test double (preconditions enforced, ``objects.move``) in a process of its
    own (``benchmarks.gcs_double_server``); yields (endpoint URL, pid)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.gcs_double_server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the GCS double did not start: {url!r}")
        yield url, proc.pid
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the server stops when its stdin closes
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _create_bucket(endpoint: str, name: str) -> None:
    import urllib.request

    req = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=bench",
        data=json.dumps({"name": name}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:  # loopback only
        r.read()


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

    opts: dict[str, Any] = {"verify_preconditions": False, "preserve_metadata": False} if lean else {}
    if t.kind == "gcsmove":
        # the GCS double enforces preconditions like the service: run with the defaults a
        # real bucket gets (no client-side checks; objects.move detected by a probe)
        opts = {"verify_preconditions": False}
    return GcsStore(t.container, endpoint=t.endpoint, limiter=lim, write_rate=None, **opts)


def amcommit_default_store(t: Target, **opts: Any) -> Any:
    """amcommit's store for ``t`` with every option at its default (limiter, GCS write
    gate, request mix): what a user gets without tuning; ``opts``: store options set as a
    user would (e.g. ``bucket_warm=True``)."""
    if t.kind == "azurite":
        from amcommit.store.azure import BlobStore

        return BlobStore(t.container, endpoint=t.endpoint, account=t.account, account_key=t.key, **opts)
    from amcommit.store.gcs import GcsStore

    return GcsStore(t.container, endpoint=t.endpoint, **opts)


class TimedStore:
    """Delegates to a store and records the wall time of every ``rename`` (p50/p99; a
    ``rename_batch`` counts each of its files with the batch's time), and the process CPU
    time from the first rename's start to the last one's end (:attr:`rename_cpu`: the
    rename phase's CPU, comparable with the raw loop's)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.latencies: list[float] = []
        self._cpu0: float | None = None
        self._cpu1 = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def rename_cpu(self) -> float:
        return 0.0 if self._cpu0 is None else self._cpu1 - self._cpu0

    async def rename(self, src: str, dst: str, **kw: Any) -> Any:
        t0 = time.perf_counter()
        if self._cpu0 is None:
            self._cpu0 = time.process_time()
        try:
            return await self._inner.rename(src, dst, **kw)
        finally:
            self.latencies.append(time.perf_counter() - t0)
            self._cpu1 = time.process_time()

    async def rename_batch(self, requests: Any) -> Any:
        """A batch of renames (Blob, local files): each of its files is recorded with the
        batch's wall time (every one of them took that long to be renamed)."""
        t0 = time.perf_counter()
        if self._cpu0 is None:
            self._cpu0 = time.process_time()
        try:
            return await self._inner.rename_batch(requests)
        finally:
            self.latencies.extend([time.perf_counter() - t0] * len(requests))
            self._cpu1 = time.process_time()


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
        if self.t.kind == "gcsmove":  # one atomic objects.move, never overwriting
            self.bucket.move_blob(sb, dst, if_generation_match=0, if_source_generation_match=g)
            return
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
                # the manifest says the sources carry no user metadata: no Get Properties
                su = url(src)
                await send(
                    "PUT",
                    url(dst),
                    {
                        "Content-Length": "0",
                        "x-ms-copy-source": str(su),
                        "If-None-Match": "*",
                        "x-ms-source-if-match": etag,
                        "x-ms-meta-amcommitrenameid": uuid.uuid4().hex,
                        "x-ms-meta-amcommitsrcetag": etag.strip('"'),
                    },
                    202,
                )
                await send("DELETE", su, {"If-Match": etag}, 202)

            yield rename
        elif t.kind == "gcsmove":
            obase = f"{t.endpoint}/storage/v1/b/{t.container}/o"
            fields = "name,size,generation,metageneration,crc32c,metadata"
            jh = {"Content-Type": "application/json; charset=UTF-8"}

            def murl(name: str, suffix: str = "", q: str = "") -> URL:
                return URL(f"{obase}/{quote(name, safe='')}{suffix}?{q}", encoded=True)

            async def rename(src: str, dst: str, etag: str) -> None:
                # metadata PATCH (the rename id onto the source) + objects.move
                body = json.dumps(
                    {"metadata": {"amcommitRenameId": uuid.uuid4().hex, "amcommitSourceGeneration": None}}
                ).encode()
                u = murl(src, q=f"ifGenerationMatch={etag}&fields={fields}")
                async with session.patch(u, data=body, headers=jh) as r:
                    s = json.loads(await r.read())
                    if r.status != 200:
                        raise RuntimeError(f"PATCH {src}: HTTP {r.status}")
                q = (
                    f"ifGenerationMatch=0&ifSourceGenerationMatch={s['generation']}"
                    f"&ifSourceMetagenerationMatch={s['metageneration']}&fields={fields}"
                )
                async with session.post(murl(src, f"/moveTo/o/{quote(dst, safe='')}", q)) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"move {src}: HTTP {r.status}")

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
