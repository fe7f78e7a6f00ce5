"""A small in-memory GCS JSON API test double (aiohttp.web, bound to 127.0.0.1).

It exists because fake-gcs-server ignores most preconditions and has no ``objects.move``:
this double behaves like the real service where amcommit's correctness depends on it, and
is checked against ``google-cloud-storage`` as the oracle in the test suite.

What it implements, like the real service:

* buckets: insert, get, list, delete (empty only);
* objects: get (metadata, ``alt=media``, ``/download/...``), list (``prefix``,
  ``delimiter``, ``maxResults``, ``pageToken``, ``startOffset``), patch, delete, insert
  (``media``, ``multipart``, ``resumable`` with chunked ``PUT`` and status queries),
  ``copyTo``, ``rewriteTo`` (multi-call with ``rewriteToken`` for objects larger than
  ``rewrite_chunk_bytes``) and ``moveTo`` (atomic; new generation, metageneration 1,
  metadata kept);
* generation preconditions, enforced everywhere: ``ifGenerationMatch`` (``0`` = must not
  exist), ``ifGenerationNotMatch``, ``ifMetagenerationMatch``/``NotMatch`` and the
  ``ifSource...`` variants on copy/rewrite/move; 412 ``conditionNotMet``;
* every write, copy and move creates a new generation and a new etag (etag != MD5), while
  size, MD5 and CRC32C carry over; a metadata patch bumps the metageneration only;
* partial responses (``fields=``), the JSON error envelope with ``reason``;
* optional bearer-token check (401 ``authError`` without echoing the token);
* the per-object mutation rate limit (``object_rate=OBJECT_RATE``; off unless asked for):
  GCS documents "one write per second" to one object name ("Maximum rate of writes to the
  same object name", Cloud Storage quotas and limits) and answers more with ``429
  rateLimitExceeded``, "The object BUCKET/NAME exceeded the rate limit for object mutation
  operations (create, update, and delete). Please reduce your request rate. See
  https://cloud.google.com/storage/docs/gcs429.", without a Retry-After and without doing
  the write. Modelled as a token bucket per object name: ``object_rate`` changes per second,
  at most ``object_burst`` at once. Every change of a name counts: an upload, a metadata
  patch, a delete, the destination of a copy/rewrite, both names of a move; a request
  refused (412, 404, 429) changes nothing and costs nothing. Off by default: the suites
  that kill, resume and fault commits on the double restart them many times a second on
  purpose (the same journal, source or destination name rewritten 5-30 times in a second)
  and took twice as long with it on; the tests of the limit turn it on.

Fault injection (:meth:`GcsDouble.inject`): answer selected operations with a status (429 /
503 with ``Retry-After``, 500, ...) *instead of* doing them, or do them and then drop the
connection without an answer (``lost``: the client sees a reset, the effect happened).

Not implemented: versioning (no noncurrent generations), ACLs/IAM, batch, compose,
XML API, soft delete, retention, customer-supplied encryption keys.

Run it inside the caller's event loop (``async with GcsDouble() as d``) or in a background
thread (``with GcsDouble() as d``), which blocking clients such as google-cloud-storage need.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal
from urllib.parse import parse_qsl, quote, unquote

import google_crc32c
from aiohttp import web

from amcommit.testing.faults import RuleMatcher

Json = dict[str, Any]


# ---------------------------------------------------------------------------------------
# checksums


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) of ``data``, as GCS reports it (google-crc32c, a C library)."""
    return int(google_crc32c.value(data))


def b64_crc32c(data: bytes) -> str:
    return base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()


def b64_md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------------------------------
# partial responses: fields=items(name,size),nextPageToken


def parse_fields(spec: str) -> dict[str, Any]:
    """Parse a ``fields`` selector into a tree ``{key: subtree or None}``."""
    pos = 0

    def parse_list() -> dict[str, Any]:
        nonlocal pos
        out: dict[str, Any] = {}
        while pos < len(spec):
            start = pos
            while pos < len(spec) and spec[pos] not in ",()":
                pos += 1
            key = spec[start:pos].strip()
            sub: dict[str, Any] | None = None
            if pos < len(spec) and spec[pos] == "(":
                pos += 1
                sub = parse_list()
                pos += 1  # ')'
            if key:
                parts = key.split("/")
                node = out
                for p in parts[:-1]:
                    node = node.setdefault(p, {}) or {}
                node[parts[-1]] = sub
            if pos < len(spec) and spec[pos] == ",":
                pos += 1
                continue
            if pos < len(spec) and spec[pos] == ")":
                return out
        return out

    return parse_list()


def apply_fields(value: Any, tree: dict[str, Any] | None) -> Any:
    if tree is None:
        return value
    if isinstance(value, list):
        return [apply_fields(v, tree) for v in value]
    if isinstance(value, dict):
        return {k: apply_fields(v, tree[k]) for k, v in value.items() if k in tree}
    return value


# ---------------------------------------------------------------------------------------
# state


@dataclass
class StoredObject:
    name: str
    data: bytes
    generation: int
    metageneration: int
    created: float
    updated: float
    content_type: str = "application/octet-stream"
    metadata: dict[str, str] | None = None
    extra: dict[str, str] = field(default_factory=dict)
    """contentEncoding, contentDisposition, contentLanguage, cacheControl, customTime."""
    md5: str = ""
    crc: str = ""

    @property
    def etag(self) -> str:
        """Opaque, new for every generation and metageneration (never the MD5)."""
        return base64.b64encode(f"{self.generation}/{self.metageneration}".encode()).decode()


_EXTRA_FIELDS = ("contentEncoding", "contentDisposition", "contentLanguage", "cacheControl", "customTime")


@dataclass
class Bucket:
    name: str
    created: float
    objects: dict[str, StoredObject] = field(default_factory=dict)


@dataclass
class Upload:
    bucket: str
    name: str
    resource: Json
    params: dict[str, str]
    data: bytearray = field(default_factory=bytearray)
    result: StoredObject | None = None


FaultKind = Literal["status", "lost"]
OPS = frozenset(
    {
        "buckets",
        "list",
        "get",
        "media",
        "insert",
        "upload_chunk",
        "patch",
        "delete",
        "rewrite",
        "copy",
        "move",
    }
)


@dataclass
class Fault(RuleMatcher):
    """An injection rule (see :meth:`GcsDouble.inject`); ``path`` globs the object name."""

    kind: FaultKind
    ops: frozenset[str] | None
    status: int = 503
    retry_after: float | None = None
    count: int | None = 1
    path: str | None = None
    after: int = 0
    matched: int = 0
    fired: int = 0


class GcsError(Exception):
    def __init__(self, status: int, reason: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.headers = headers or {}


def _not_found(what: str) -> GcsError:
    return GcsError(404, "notFound", f"No such object: {what}")


def _precondition() -> GcsError:
    return GcsError(412, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")


class _Lost(Exception):
    """Drop the connection after doing the operation."""


OBJECT_RATE = 1.0
"""GCS's documented limit: one write per second to one object name."""
OBJECT_BURST = 4.0
"""Changes of one name the double accepts at once before the rate applies. GCS documents
only the rate; 4 lets through what one job commit does to a name of its own in a moment (a
journal: written at three states, then deleted; a file: uploaded, marked, moved), while
any name rewritten for longer than a few seconds at more than ``OBJECT_RATE`` is refused."""


def _object_rate_limited(bucket: str, name: str) -> GcsError:
    """GCS's answer to a change of one object name beyond its rate (no Retry-After)."""
    return GcsError(
        429,
        "rateLimitExceeded",
        f"The object {bucket}/{name} exceeded the rate limit for object mutation operations "
        "(create, update, and delete). Please reduce your request rate. "
        "See https://cloud.google.com/storage/docs/gcs429.",
    )


# ---------------------------------------------------------------------------------------
# the server


class GcsDouble:
    """The test double. See the module docstring.

    Args:
        token: if set, every request must carry ``Authorization: Bearer <token>``.
        supports_move: implement ``objects.move`` (else its URL is an unknown route: 404
            with a plain-text body, as a server without the method would answer).
        rewrite_chunk_bytes: rewrites of larger objects take several calls (rewriteToken).
        object_rate: changes per second allowed to one object name (GCS:
            :data:`OBJECT_RATE`, 1); None (the default) turns the per-object limit off.
            Switchable per instance, also later (the attribute).
        object_burst: changes of one name accepted at once before ``object_rate`` applies.
            GCS documents only the rate ("writing to the same object name at a higher rate
            might result in throttling errors"); see :data:`OBJECT_BURST`.
        host, port: where to listen (127.0.0.1 and a free port by default).
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        supports_move: bool = True,
        rewrite_chunk_bytes: int | None = None,
        object_rate: float | None = None,
        object_burst: float = OBJECT_BURST,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the GCS double binds to loopback only")
        self.token = token
        self.supports_move = supports_move
        self.rewrite_chunk_bytes = rewrite_chunk_bytes
        if object_rate is not None and object_rate <= 0:
            raise ValueError("object_rate must be > 0 changes per second, or None")
        if object_burst < 1:
            raise ValueError("object_burst must be >= 1")
        self.object_rate = object_rate
        self.object_burst = object_burst
        self._name_tokens: dict[tuple[str, str], tuple[float, float]] = {}
        """(bucket, name) -> (tokens, when) of the per-object limit."""
        self.rate_limited: Counter[str] = Counter()
        """Object names answered 429 for the per-object limit, and how often."""
        self.changes: Counter[str] = Counter()
        """Changes accepted per object name (``bucket/name``), for tests to inspect."""
        self.host = host
        self.port = port
        self.buckets: dict[str, Bucket] = {}
        self.uploads: dict[str, Upload] = {}
        self.faults: list[Fault] = []
        self.calls: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self._lock = threading.RLock()
        self._last_gen = 0
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Base URL (the ``endpoint`` for GcsStore and google-cloud-storage)."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> GcsDouble:
        """Start serving in the running event loop."""
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        server = getattr(site, "_server", None)
        if self.port == 0 and server is not None and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start_in_thread(self) -> GcsDouble:
        """Serve from a background thread with its own event loop (for blocking clients)."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as e:  # pragma: no cover - reported to the caller
                errors.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="gcs-double", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    def stop_thread(self) -> None:
        """Stop the background thread started by :meth:`start_in_thread`."""
        if self._thread is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> GcsDouble:
        return self.start_in_thread()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_thread()

    async def __aenter__(self) -> GcsDouble:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- test controls -------------------------------------------------------------------
    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (no error if it exists)."""
        with self._lock:
            self.buckets.setdefault(name, Bucket(name, time.time()))

    def inject(
        self,
        ops: str | list[str] | None = None,
        *,
        kind: FaultKind = "status",
        status: int = 503,
        retry_after: float | None = None,
        count: int | None = 1,
        name: str | None = None,
        after: int = 0,
    ) -> Fault:
        """Add a fault for operations ``ops`` (see ``OPS``; None = all) on object names
        matching glob ``name``: ``status`` answers ``status`` (+ ``Retry-After``) without
        doing the operation; ``lost`` does it and drops the connection. ``count`` faults
        at most (None = always), after letting ``after`` matches through."""
        sel = None if ops is None else frozenset([ops] if isinstance(ops, str) else ops)
        if sel is not None and sel - OPS:
            raise ValueError(f"unknown op(s) {sorted(sel - OPS)}; known: {sorted(OPS)}")
        f = Fault(kind, sel, status, retry_after, count, name, after)
        with self._lock:
            self.faults.append(f)
        return f

    def clear_faults(self) -> None:
        """Remove every injection rule."""
        with self._lock:
            self.faults.clear()

    def object(self, bucket: str, name: str) -> StoredObject | None:
        """Direct access to a stored object (tests)."""
        with self._lock:
            b = self.buckets.get(bucket)
            return None if b is None else b.objects.get(name)

    # -- plumbing ------------------------------------------------------------------------
    def _next_generation(self) -> int:
        self._last_gen = max(self._last_gen + 1, time.time_ns() // 1000)
        return self._last_gen

    def _change(self, bucket: str, *names: str) -> None:
        """Admit one change of each of ``names`` under the per-object limit, all or none
        (429 ``rateLimitExceeded`` naming the first refused one, nothing changed)."""
        rate = self.object_rate
        if rate is not None:
            now = time.monotonic()
            burst = self.object_burst
            state = self._name_tokens
            left: list[tuple[tuple[str, str], float]] = []
            for name in names:
                tokens, last = state.get((bucket, name), (burst, now))
                tokens = min(burst, tokens + (now - last) * rate)
                if tokens < 1.0:
                    self.rate_limited[f"{bucket}/{name}"] += 1
                    raise _object_rate_limited(bucket, name)
                left.append(((bucket, name), tokens - 1.0))
            for key, tokens in left:
                state[key] = (tokens, now)
            if len(state) > 50_000:  # forget names whose bucket is full again
                for key in [k for k, (t, w) in state.items() if t + (now - w) * rate >= burst]:
                    del state[key]
        for name in names:
            self.changes[f"{bucket}/{name}"] += 1

    def _bucket(self, name: str) -> Bucket:
        b = self.buckets.get(name)
        if b is None:
            raise GcsError(404, "notFound", f"The specified bucket does not exist: {name}")
        return b

    def _base(self, request: web.Request) -> str:
        return f"http://{request.host}"

    def _resource(self, base: str, bucket: str, o: StoredObject) -> Json:
        q = quote(o.name, safe="")
        r: Json = {
            "kind": "storage#object",
            "id": f"{bucket}/{o.name}/{o.generation}",
            "selfLink": f"{base}/storage/v1/b/{bucket}/o/{q}",
            "mediaLink": f"{base}/download/storage/v1/b/{bucket}/o/{q}?generation={o.generation}&alt=media",
            "name": o.name,
            "bucket": bucket,
            "generation": str(o.generation),
            "metageneration": str(o.metageneration),
            "contentType": o.content_type,
            "storageClass": "STANDARD",
            "size": str(len(o.data)),
            "md5Hash": o.md5,
            "crc32c": o.crc,
            "etag": o.etag,
            "timeCreated": _rfc3339(o.created),
            "updated": _rfc3339(o.updated),
            "timeStorageClassUpdated": _rfc3339(o.created),
        }
        r.update(o.extra)
        if o.metadata:
            r["metadata"] = dict(o.metadata)
        return r

    @staticmethod
    def _media_headers(o: StoredObject) -> dict[str, str]:
        """Headers of an ``alt=media`` answer, as GCS sends them (clients read properties
        and verify checksums from these)."""
        h = {
            "Content-Type": o.content_type,
            "ETag": o.etag,
            "X-Goog-Generation": str(o.generation),
            "X-Goog-Metageneration": str(o.metageneration),
            "X-Goog-Storage-Class": "STANDARD",
            "X-Goog-Stored-Content-Length": str(len(o.data)),
            "X-Goog-Hash": f"crc32c={o.crc},md5={o.md5}",
        }
        for key, header in (
            ("contentEncoding", "X-Goog-Stored-Content-Encoding"),
            ("cacheControl", "Cache-Control"),
            ("contentLanguage", "Content-Language"),
            ("contentDisposition", "Content-Disposition"),
        ):
            if key in o.extra:
                h[header] = o.extra[key]
        for k, v in (o.metadata or {}).items():
            h[f"X-Goog-Meta-{k}"] = v
        return h

    def _bucket_resource(self, base: str, b: Bucket) -> Json:
        return {
            "kind": "storage#bucket",
            "id": b.name,
            "name": b.name,
            "selfLink": f"{base}/storage/v1/b/{b.name}",
            "projectNumber": "0",
            "metageneration": "1",
            "location": "US",
            "storageClass": "STANDARD",
            "etag": "CAE=",
            "timeCreated": _rfc3339(b.created),
            "updated": _rfc3339(b.created),
        }

    @staticmethod
    def _check(o: StoredObject | None, params: dict[str, str], *, source: bool = False) -> None:
        """Evaluate generation / metageneration preconditions against ``o`` (None = absent);
        ``source`` selects the ``ifSource...`` parameters of copy, rewrite and move."""
        pre = "ifSource" if source else "if"
        gm = params.get(f"{pre}GenerationMatch")
        gnm = params.get(f"{pre}GenerationNotMatch")
        mm = params.get(f"{pre}MetagenerationMatch")
        mnm = params.get(f"{pre}MetagenerationNotMatch")
        gen = o.generation if o is not None else 0
        if gm is not None and int(gm) != gen:
            raise _precondition()
        if gnm is not None and int(gnm) == gen:
            raise _precondition()
        if o is None:
            if mm is not None:
                raise _precondition()
            return
        if mm is not None and int(mm) != o.metageneration:
            raise _precondition()
        if mnm is not None and int(mnm) == o.metageneration:
            raise _precondition()

    def _new_object(
        self, name: str, data: bytes, resource: Json, *, prev: StoredObject | None = None
    ) -> StoredObject:
        now = time.time()
        extra = {k: str(resource[k]) for k in _EXTRA_FIELDS if resource.get(k)}
        meta = resource.get("metadata")
        return StoredObject(
            name=name,
            data=data,
            generation=self._next_generation(),
            metageneration=1,
            created=now,
            updated=now,
            content_type=str(resource.get("contentType") or "application/octet-stream"),
            metadata={str(k): str(v) for k, v in meta.items() if v is not None}
            if isinstance(meta, dict)
            else None,
            extra=extra,
            md5=b64_md5(data),
            crc=b64_crc32c(data),
        )

    # -- dispatch ------------------------------------------------------------------------
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        raw = request.rel_url.raw_path
        segs = [unquote(s) for s in raw.split("/")[1:]]
        params = dict(parse_qsl(request.rel_url.raw_query_string, keep_blank_values=True))
        base = self._base(request)
        lost = False
        try:
            if self.token is not None:
                auth = request.headers.get("Authorization", "")
                if auth != f"Bearer {self.token}":
                    raise GcsError(401, "authError", "Invalid Credentials")
            op, target = self._classify(request.method, segs, params)
            with self._lock:
                self.calls[op] += 1
                for f in self.faults:
                    if f.check(op, (target,)):
                        self.injected[f"{f.kind}:{op}"] += 1
                        if f.kind == "lost":
                            lost = True
                            break
                        hdrs = {} if f.retry_after is None else {"Retry-After": f"{f.retry_after:g}"}
                        reason = "rateLimitExceeded" if f.status == 429 else "backendError"
                        raise GcsError(f.status, reason, "injected fault", hdrs)
                status, payload, headers = self._handle(op, request.method, segs, params, body, base, request)
        except GcsError as e:
            err = {
                "error": {
                    "code": e.status,
                    "message": e.message,
                    "errors": [{"domain": "global", "reason": e.reason, "message": e.message}],
                }
            }
            return web.json_response(err, status=e.status, headers=e.headers)
        except _UnknownRoute:
            return web.Response(status=404, text="Not Found", content_type="text/plain")
        if lost:
            # the operation happened; the answer never arrives (the client sees a reset)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        if isinstance(payload, bytes):
            return web.Response(status=status, body=payload, headers=headers)
        if payload is None:
            return web.Response(status=status, headers=headers)
        if "fields" in params and isinstance(payload, dict):
            payload = apply_fields(payload, parse_fields(params["fields"]))
        return web.Response(
            status=status, body=json.dumps(payload).encode(), headers=headers, content_type="application/json"
        )

    def _classify(self, method: str, segs: list[str], params: dict[str, str]) -> tuple[str, str]:
        """(operation name, object name) of a request; raises _UnknownRoute."""
        n = len(segs)
        if segs[:3] == ["storage", "v1", "b"]:
            if n <= 4:
                return "buckets", ""
            if n == 5 and segs[4] == "o":
                return "list", params.get("prefix", "")
            if n == 6 and segs[4] == "o":
                if method == "GET":
                    return ("media" if params.get("alt") == "media" else "get"), segs[5]
                if method in ("PATCH", "PUT"):
                    return "patch", segs[5]
                if method == "DELETE":
                    return "delete", segs[5]
            if n == 11 and segs[4] == "o" and segs[6] in ("rewriteTo", "copyTo") and method == "POST":
                return ("rewrite" if segs[6] == "rewriteTo" else "copy"), segs[5]
            if n == 9 and segs[4] == "o" and segs[6] == "moveTo" and method == "POST" and self.supports_move:
                return "move", segs[5]
        if segs[:4] == ["upload", "storage", "v1", "b"] and n == 6 and segs[5] == "o":
            if method == "POST":
                return "insert", params.get("name", "")
            if method == "PUT":
                up = self.uploads.get(params.get("upload_id", ""))
                return "upload_chunk", up.name if up else ""
        if segs[:4] == ["download", "storage", "v1", "b"] and n == 7 and method == "GET":
            return "media", segs[6]
        raise _UnknownRoute()

    def _handle(
        self,
        op: str,
        method: str,
        segs: list[str],
        params: dict[str, str],
        body: bytes,
        base: str,
        request: web.Request,
    ) -> tuple[int, Json | bytes | None, dict[str, str]]:
        if op == "buckets":
            return self._buckets(method, segs, params, body, base)
        if op == "insert":
            return self._insert(segs[4], params, body, base, request)
        if op == "upload_chunk":
            return self._upload_chunk(params, body, base, request)
        bucket = self._bucket(segs[3] if segs[0] != "download" else segs[4])
        if op == "list":
            return 200, self._list(bucket, params, base), {}
        name = segs[5] if segs[0] != "download" else segs[6]
        o = bucket.objects.get(name)
        if op in ("get", "media"):
            if o is None:
                raise _not_found(name)
            if "generation" in params and int(params["generation"]) != o.generation:
                raise _not_found(f"{name}#{params['generation']}")
            self._check(o, params)
            if op == "media":
                return 200, o.data, self._media_headers(o)
            return 200, self._resource(base, bucket.name, o), {}
        if op == "patch":
            if o is None:
                raise _not_found(name)
            self._check(o, params)
            res = json.loads(body or b"{}")
            self._change(bucket.name, name)
            if "metadata" in res:
                if res["metadata"] is None:
                    o.metadata = None
                else:
                    md = dict(o.metadata or {})
                    for k, v in res["metadata"].items():
                        if v is None:
                            md.pop(k, None)
                        else:
                            md[k] = str(v)
                    o.metadata = md or None
            if "contentType" in res:
                o.content_type = str(res["contentType"])
            for k in _EXTRA_FIELDS:
                if k in res:
                    if res[k]:
                        o.extra[k] = str(res[k])
                    else:
                        o.extra.pop(k, None)
            o.metageneration += 1
            o.updated = time.time()
            return 200, self._resource(base, bucket.name, o), {}
        if op == "delete":
            if o is None:
                raise _not_found(name)
            self._check(o, params)
            self._change(bucket.name, name)
            del bucket.objects[name]
            return 204, None, {}
        if op in ("rewrite", "copy"):
            return self._rewrite(op, bucket, name, segs, params, body, base)
        if op == "move":
            return self._move(bucket, name, segs[8], params, base)
        raise _UnknownRoute()  # pragma: no cover

    def _buckets(
        self, method: str, segs: list[str], params: dict[str, str], body: bytes, base: str
    ) -> tuple[int, Json | bytes | None, dict[str, str]]:
        if len(segs) == 3:
            if method == "GET":
                items = [
                    self._bucket_resource(base, b)
                    for b in sorted(self.buckets.values(), key=lambda b: b.name)
                ]
                return 200, {"kind": "storage#buckets", "items": items}, {}
            if method == "POST":
                res = json.loads(body or b"{}")
                name = str(res.get("name", ""))
                if not name:
                    raise GcsError(400, "required", "Required")
                if name in self.buckets:
                    raise GcsError(
                        409,
                        "conflict",
                        "Your previous request to create the named bucket succeeded and you already own it.",
                    )
                b = self.buckets[name] = Bucket(name, time.time())
                return 200, self._bucket_resource(base, b), {}
        b = self._bucket(segs[3])
        if method == "GET":
            return 200, self._bucket_resource(base, b), {}
        if method == "DELETE":
            if b.objects:
                raise GcsError(409, "conflict", "The bucket you tried to delete is not empty.")
            del self.buckets[b.name]
            return 204, None, {}
        raise GcsError(405, "methodNotAllowed", "method not allowed")

    def _list(self, bucket: Bucket, params: dict[str, str], base: str) -> Json:
        prefix = params.get("prefix", "")
        delim = params.get("delimiter", "")
        max_results = max(1, min(int(params.get("maxResults", "1000")), 1000))
        after = base64.urlsafe_b64decode(params["pageToken"]).decode() if params.get("pageToken") else None
        start = params.get("startOffset")
        items: list[Json] = []
        prefixes: list[str] = []
        count = 0
        last: str | None = None
        more = False
        for name in sorted(bucket.objects):
            if not name.startswith(prefix) or (start is not None and name < start):
                continue
            key = name
            is_prefix = False
            if delim:
                i = name.find(delim, len(prefix))
                if i >= 0:
                    key, is_prefix = name[: i + len(delim)], True
            if after is not None and key <= after:
                continue  # before the page token (names of a common prefix are contiguous)
            if key == last:
                continue  # same common prefix as the entry before
            if count == max_results:
                more = True
                break
            if is_prefix:
                prefixes.append(key)
            else:
                items.append(self._resource(base, bucket.name, bucket.objects[name]))
            count += 1
            last = key
        out: Json = {"kind": "storage#objects"}
        if items:
            out["items"] = items
        if prefixes:
            out["prefixes"] = prefixes
        if more and last is not None:
            out["nextPageToken"] = base64.urlsafe_b64encode(last.encode()).decode()
        return out

    def _insert(
        self, bucket_name: str, params: dict[str, str], body: bytes, base: str, request: web.Request
    ) -> tuple[int, Json | bytes | None, dict[str, str]]:
        bucket = self._bucket(bucket_name)
        kind = params.get("uploadType", "media")
        if kind == "resumable":
            res = json.loads(body) if body else {}
            name = params.get("name") or str(res.get("name") or "")
            if not name:
                raise GcsError(400, "required", "Required")
            upload_id = uuid.uuid4().hex
            self.uploads[upload_id] = Upload(bucket.name, name, res, dict(params))
            loc = f"{base}/upload/storage/v1/b/{quote(bucket.name, safe='')}/o?uploadType=resumable&upload_id={upload_id}"
            return 200, None, {"Location": loc}
        if kind == "multipart":
            res, data = self._parse_multipart(request.headers.get("Content-Type", ""), body)
            name = params.get("name") or str(res.get("name") or "")
        elif kind == "media":
            res = {"contentType": request.headers.get("Content-Type") or "application/octet-stream"}
            name, data = params.get("name", ""), body
        else:
            raise GcsError(400, "invalid", f"unsupported uploadType {kind!r}")
        if not name:
            raise GcsError(400, "required", "Required")
        o = self._store(bucket, name, data, res, params)
        return 200, self._resource(base, bucket.name, o), {}

    def _store(
        self, bucket: Bucket, name: str, data: bytes, res: Json, params: dict[str, str]
    ) -> StoredObject:
        cur = bucket.objects.get(name)
        self._check(cur, params)
        if res.get("md5Hash") and res["md5Hash"] != b64_md5(data):
            raise GcsError(400, "invalid", "Provided MD5 hash does not match the data")
        if res.get("crc32c") and res["crc32c"] != b64_crc32c(data):
            raise GcsError(400, "invalid", "Provided CRC32C does not match the data")
        self._change(bucket.name, name)
        o = bucket.objects[name] = self._new_object(name, data, res)
        return o

    @staticmethod
    def _parse_multipart(content_type: str, body: bytes) -> tuple[Json, bytes]:
        boundary = ""
        for part in content_type.split(";"):
            k, _, v = part.strip().partition("=")
            if k.lower() == "boundary":
                boundary = v.strip('"')
        if not boundary:
            raise GcsError(400, "invalid", "multipart upload without a boundary")
        delim = b"--" + boundary.encode()
        parts = body.split(delim)
        # parts[0] is the preamble; the last is "--\r\n"
        payloads: list[tuple[str, bytes]] = []
        for p in parts[1:]:
            if p.startswith(b"--"):
                break
            head, sep, content = p.partition(b"\r\n\r\n")
            if not sep:
                raise GcsError(400, "invalid", "malformed multipart part")
            if content.endswith(b"\r\n"):
                content = content[:-2]
            ctype = ""
            for line in head.decode("latin-1").split("\r\n"):
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-type":
                    ctype = v.strip()
            payloads.append((ctype, content))
        if len(payloads) != 2:
            raise GcsError(400, "invalid", f"multipart upload needs 2 parts, got {len(payloads)}")
        try:
            res = json.loads(payloads[0][1] or b"{}")
        except ValueError:
            raise GcsError(400, "parseError", "metadata part is not JSON") from None
        if not res.get("contentType") and payloads[1][0]:
            res["contentType"] = payloads[1][0]  # the media part's type, as GCS does
        return res, payloads[1][1]

    def _upload_chunk(
        self, params: dict[str, str], body: bytes, base: str, request: web.Request
    ) -> tuple[int, Json | bytes | None, dict[str, str]]:
        up = self.uploads.get(params.get("upload_id", ""))
        if up is None:
            raise GcsError(404, "notFound", "No such upload session")
        bucket = self._bucket(up.bucket)
        if up.result is not None:
            return 200, self._resource(base, bucket.name, up.result), {}
        cr = request.headers.get("Content-Range", "")
        # "bytes a-b/total", "bytes a-b/*", "bytes */total"
        if not cr.startswith("bytes "):
            cr = f"bytes 0-{len(body) - 1}/{len(body)}" if body else f"bytes */{len(up.data)}"
        rng, _, total_s = cr[6:].partition("/")
        total = None if total_s == "*" else int(total_s)
        if rng != "*":
            a, _, b = rng.partition("-")
            first, last = int(a), int(b)
            if last - first + 1 != len(body):
                raise GcsError(400, "invalid", "Content-Range does not match the body length")
            have = len(up.data)
            if first > have:
                raise GcsError(400, "invalid", "chunk starts beyond the persisted data")
            up.data += body[have - first :] if last >= have else b""
        if total is not None and len(up.data) >= total:
            if len(up.data) != total:
                raise GcsError(400, "invalid", "more data than the declared total")
            bucket = self._bucket(up.bucket)
            o = self._store(bucket, up.name, bytes(up.data), up.resource, up.params)
            up.result = o
            return 200, self._resource(base, bucket.name, o), {}
        headers = {"Range": f"bytes=0-{len(up.data) - 1}"} if up.data else {}
        return 308, None, headers

    def _rewrite(
        self,
        op: str,
        bucket: Bucket,
        name: str,
        segs: list[str],
        params: dict[str, str],
        body: bytes,
        base: str,
    ) -> tuple[int, Json | bytes | None, dict[str, str]]:
        src = bucket.objects.get(name)
        if src is None:
            raise _not_found(name)
        if "sourceGeneration" in params and int(params["sourceGeneration"]) != src.generation:
            raise _not_found(f"{name}#{params['sourceGeneration']}")
        dst_bucket = self._bucket(segs[8])
        dst_name = segs[10]
        self._check(src, params, source=True)
        self._check(dst_bucket.objects.get(dst_name), params)
        size = len(src.data)
        if op == "rewrite" and self.rewrite_chunk_bytes and size > self.rewrite_chunk_bytes:
            token = params.get("rewriteToken")
            done_bytes = 0
            if token:
                tok = json.loads(base64.urlsafe_b64decode(token))
                if tok["src"] != name or tok["gen"] != src.generation or tok["dst"] != dst_name:
                    raise GcsError(400, "invalid", "Invalid rewrite token")
                done_bytes = int(tok["done"])
            done_bytes = min(size, done_bytes + self.rewrite_chunk_bytes)
            if done_bytes < size:
                nt = base64.urlsafe_b64encode(
                    json.dumps(
                        {"src": name, "gen": src.generation, "dst": dst_name, "done": done_bytes}
                    ).encode()
                ).decode()
                resp: Json = {
                    "kind": "storage#rewriteResponse",
                    "totalBytesRewritten": str(done_bytes),
                    "objectSize": str(size),
                    "done": False,
                    "rewriteToken": nt,
                }
                return 200, resp, {}
        res: Json = {
            "contentType": src.content_type,
            **src.extra,
        }
        if src.metadata:
            res["metadata"] = dict(src.metadata)
        override = json.loads(body) if body.strip() else {}
        for k, v in override.items():
            if k in ("name", "bucket"):
                continue
            res[k] = v
        self._change(dst_bucket.name, dst_name)
        o = dst_bucket.objects[dst_name] = self._new_object(dst_name, src.data, res)
        resource = self._resource(base, dst_bucket.name, o)
        if op == "copy":
            return 200, resource, {}
        out: Json = {
            "kind": "storage#rewriteResponse",
            "totalBytesRewritten": str(size),
            "objectSize": str(size),
            "done": True,
            "resource": resource,
        }
        return 200, out, {}

    def _move(
        self, bucket: Bucket, name: str, dst_name: str, params: dict[str, str], base: str
    ) -> tuple[int, Json | bytes | None, dict[str, str]]:
        if name == dst_name:
            raise GcsError(400, "invalid", "Source and destination object names must be different.")
        src = bucket.objects.get(name)
        if src is None:
            raise _not_found(name)
        self._check(src, params, source=True)
        self._check(bucket.objects.get(dst_name), params)
        self._change(bucket.name, name, dst_name)
        now = time.time()
        o = StoredObject(
            name=dst_name,
            data=src.data,
            generation=self._next_generation(),
            metageneration=1,
            created=now,
            updated=now,
            content_type=src.content_type,
            metadata=dict(src.metadata) if src.metadata else None,
            extra=dict(src.extra),
            md5=src.md5,
            crc=src.crc,
        )
        del bucket.objects[name]
        bucket.objects[dst_name] = o
        return 200, self._resource(base, bucket.name, o), {}


class _UnknownRoute(Exception):
    pass


__all__ = [
    "OBJECT_BURST",
    "OBJECT_RATE",
    "OPS",
    "Fault",
    "GcsDouble",
    "StoredObject",
    "apply_fields",
    "b64_crc32c",
    "b64_md5",
    "crc32c",
    "parse_fields",
]
