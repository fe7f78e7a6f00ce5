"""``gs://`` store over the GCS JSON API (aiohttp), with generation preconditions.

Paths are object names in one bucket; directories are virtual (implied by ``/`` in names;
``name/`` directory-marker objects written by other tools are skipped by ``list``).

**etag = generation.** :attr:`ObjectInfo.etag` is the object's *generation* number as a
decimal string, not the HTTP/JSON ``etag`` field, because generations are what GCS
preconditions speak: ``UpdateIf(etag)`` becomes ``ifGenerationMatch``, ``rename(src_etag=)``
becomes ``ifSourceGenerationMatch``. Every write, copy and move creates a new generation,
so the etag is *not* kept on rename (``Capabilities.etag_kept_on_rename=False``).

**Rename** never overwrites its destination and is done one of two ways:

* ``objects.move`` (atomic, ``Capabilities.atomic_rename=True``) where the bucket supports
  it. Move copies the source's metadata, so the rename id is first added to the *source*
  with a metadata patch (which keeps its generation), then the object is moved with
  ``ifGenerationMatch=0`` and ``ifSourceGenerationMatch`` + ``ifSourceMetagenerationMatch``
  (so of two concurrent renames of one source exactly one wins and the destination always
  carries the winner's id). Two requests.
* otherwise ``objects.rewrite`` with ``ifGenerationMatch=0`` (never overwrite) and
  ``ifSourceGenerationMatch``, looping on ``rewriteToken`` until ``done``, writing the
  destination's metadata (the source's, plus ``amcommitRenameId``) in the same request;
  then the source is deleted with ``ifGenerationMatch``. Not atomic: for a moment both
  exist; a crash in between leaves both (a repeated rename then proves the copy by its id
  and deletes the source). When ``preserve_metadata`` is on (default) or no ``src_etag`` is
  given, the source is read first (one more request).

Support for ``objects.move`` is detected, not assumed: ``use_move=None`` probes once per
store (a move of a missing object: a JSON ``notFound`` or a 412 means supported; 400, 405,
501 mean not) and falls back to rewrite if a real move is refused while its source exists.
Capabilities are updated when the detection completes; they start conservative
(``atomic_rename=False``).

**Recovery.** A rename whose source is gone (a retry after a lost response, or a resumed
job commit) reads the destination; if it carries the same rename id (and, when known, the
same size and crc32c) the result is ``RenameResult(recovered=True)``. Every such proof
(four places) is :func:`amcommit.store.proof.judge_rename`. Without a caller
``rename_id`` a fresh id is generated per call, which still proves internal retries.

**Idempotency.** Reads, precondition-guarded writes (``CREATE``, ``UpdateIf``, rename
steps, deletes with a generation) are retried on 408/429/5xx. ``put(OVERWRITE)`` is
retried only after 429 (GCS did nothing); an unconditional single ``delete`` is retried
with the generation it reads after a failure. A retried ``CREATE`` / ``UpdateIf`` that
answers 412 compares the stored object with the data (size + MD5) to tell its own lost
success from a real conflict.

**Emulators** (``verify_preconditions``, default on for non-Google endpoints): some
emulators ignore preconditions on rewrite, delete and resumable uploads (fake-gcs-server
1.54 honours only multipart inserts). The store then also checks the destination's absence
and the source's generation by reading them first. That check is racy (a writer between
check and copy is not detected): it makes single-writer tests meaningful, it is no
substitute for the service's guarantee.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self, TypeVar

import anyio
from yarl import URL

from amcommit.errors import (
    AlreadyExists,
    ConfigError,
    InvalidInput,
    NotFound,
    NotSupported,
    PreconditionFailed,
    StoreError,
)
from amcommit.iostats import IOStatistics
from amcommit.paths import ancestors, check_path
from amcommit.store.base import Capabilities, ObjectInfo, PutMode, RenameResult, UpdateIf, WriteMode
from amcommit.store.gcs.auth import BearerAuth, TokenProvider, google_auth_provider
from amcommit.store.gcs.client import (
    ENCODER,
    LIST_DECODER,
    OBJECT_DECODER,
    RENAME_ID_KEY,
    REWRITE_DECODER,
    GcsObject,
    gcs_http_client,
    qname,
    query,
    resolve_endpoint,
)
from amcommit.store.limits import Limiter, default_limiter, shared_limiter
from amcommit.store.names import GCS_LIMITS, check_storable, unreachable
from amcommit.store.proof import Expected, Verdict, judge_rename, source_at
from amcommit.store.retry import RetryPolicy

T = TypeVar("T")
MiB = 1024 * 1024
_CHUNK_ALIGN = 256 * 1024
_OBJECT_FIELDS = (
    "name,size,generation,metageneration,updated,contentType,contentEncoding,contentDisposition,"
    "contentLanguage,cacheControl,customTime,crc32c,md5Hash,metadata"
)
_LIST_FIELDS = f"items({_OBJECT_FIELDS}),prefixes,nextPageToken"
# encoded query strings of the per-rename requests (built once, not per request)
_GET_Q = query({"fields": _OBJECT_FIELDS})
_MOVE_Q = query({"fields": "name,size,generation,metageneration,crc32c,metadata"})
"""The fields a move-based rename reads from its PATCH and move answers (generations for
the preconditions, size and crc32c for the proofs): a partial response, smaller to parse."""
_JSON_HEADERS = {"Content-Type": "application/json; charset=UTF-8"}
"""Headers of the JSON-bodied rename requests (never mutated: signing copies them)."""
_REWRITE_FIELDS_Q = query({"fields": f"done,rewriteToken,resource({_OBJECT_FIELDS})"})
_MOVE_UNSUPPORTED = (400, 405, 501)
SOURCE_GEN_KEY = "amcommitSourceGeneration"
"""Custom metadata key: the generation of the source a rewrite-based rename copied
(removed by a move, which copies the source's own metadata)."""
_MAX_MOVE_ROUNDS = 8
GCS_BUCKET_WRITES = 1000.0
"""Object writes per second a bucket takes at first ("Buckets have an initial IO capacity
of around 1000 object write requests per second": Google, "Request rate and access
distribution guidelines", https://cloud.google.com/storage/docs/request-rate)."""
GCS_RAMP_SECONDS = 20 * 60.0
"""The same guidelines: increase the request rate "no faster than doubling over a period of
20 minutes"."""


def _bucket_ok(name: str) -> bool:
    if not 3 <= len(name) <= 222:
        return False
    ok = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")
    return all(c in ok for c in name) and name[0].isalnum() and name[-1].isalnum()


def _generation(etag: str, *, op: str, path: str) -> int:
    try:
        g = int(etag)
    except ValueError:
        raise PreconditionFailed(
            f"etag {etag!r} is not a GCS generation (this store's etags are generations)", op=op, path=path
        ) from None
    if g <= 0:
        raise PreconditionFailed(f"etag {etag!r} is not a GCS generation", op=op, path=path)
    return g


class GcsStore:
    """A :class:`~amcommit.store.base.Store` over one GCS bucket. See the module docstring
    for etag, rename, recovery and idempotency semantics.

    Args:
        bucket: the bucket name (the store's root).
        endpoint: JSON API base URL (emulators); default ``STORAGE_EMULATOR_HOST`` or Google.
        token_provider / credentials / anonymous: authentication. Emulator endpoints default
            to anonymous; Google's to ``google.auth.default()`` (optional ``gcs`` extra).
        limiter: the request limiter (default: shared by the stores of this process for
            the endpoint and bucket, with the adaptive in-flight limit
            :data:`~amcommit.store.limits.DEFAULT_ADAPTIVE`; see :func:`default_limiter`).
        max_concurrency: fix the default limiter's in-flight limit to this many requests
            (adaptation off); None: adaptive.
        write_rate: object writes (uploads, rewrites, moves, deletes) per second for the
            write gate, shared per bucket (default 1,000: the starting write budget of a GCS
            bucket), ramping like the service (doubling after each 20 minutes in which at
            least half of it was used: Google's "Request rate and access distribution
            guidelines"); ``None`` = no write gate. ``write_limiter`` gives a limiter to use
            (shared between stores) instead.
        bucket_warm: the bucket already takes more than the starting budget (it has
            served such a load recently, or Google raised it): no write gate.
        retry: retry policy for idempotent requests.
        use_move: use ``objects.move`` (True), never (False) or detect it (None).
        verify_preconditions: also check rename/upload preconditions on the client
            (emulators that ignore them); default True for non-Google endpoints.
        preserve_metadata: copy-based renames carry the source's content type, encoding
            and custom metadata (one extra read per rename).
        multipart_threshold / chunk_size: objects up to the threshold are uploaded in one
            multipart request, larger ones by a resumable upload in chunks.
        shield_timeout: how long a started mutation (put, rename, delete of an object)
            may keep running after its caller was cancelled (see ``_shielded``).
        page_size: objects per list request (at most 1,000).
        user_project: project billed for requester-pays buckets.
    """

    def __init__(
        self,
        bucket: str,
        *,
        endpoint: str | None = None,
        token_provider: TokenProvider | None = None,
        credentials: Any = None,
        anonymous: bool | None = None,
        limiter: Limiter | None = None,
        max_concurrency: int | None = None,
        write_rate: float | None = GCS_BUCKET_WRITES,
        write_limiter: Limiter | None = None,
        bucket_warm: bool = False,
        retry: RetryPolicy | None = None,
        use_move: bool | None = None,
        verify_preconditions: bool | None = None,
        preserve_metadata: bool = True,
        multipart_threshold: int = 8 * MiB,
        chunk_size: int = 8 * MiB,
        request_timeout: float = 60.0,
        shield_timeout: float = 120.0,
        page_size: int = 1000,
        user_project: str | None = None,
    ) -> None:
        if not _bucket_ok(bucket):
            raise ConfigError(f"invalid GCS bucket name {bucket!r}")
        if chunk_size < _CHUNK_ALIGN or chunk_size % _CHUNK_ALIGN:
            raise ConfigError(f"chunk_size must be a positive multiple of {_CHUNK_ALIGN}")
        if multipart_threshold < 0:
            raise ConfigError("multipart_threshold must be >= 0")
        self.bucket = bucket
        self.endpoint, self.is_emulator = resolve_endpoint(endpoint)
        self.verify_preconditions = self.is_emulator if verify_preconditions is None else verify_preconditions
        self.preserve_metadata = preserve_metadata
        self.multipart_threshold = multipart_threshold
        self.chunk_size = chunk_size
        self.user_project = user_project
        self.shield_timeout = shield_timeout
        self.page_size = max(1, min(page_size, 1000))
        self.iostats = IOStatistics()

        if anonymous is None:
            anonymous = self.is_emulator and token_provider is None and credentials is None
        self._auth: BearerAuth | None = None
        if not anonymous:
            provider = token_provider or google_auth_provider(credentials)
            self._auth = BearerAuth(provider)

        key = f"gcs:{self.endpoint}/{bucket}"
        self.limiter = limiter or default_limiter(key, max_concurrency)
        if write_limiter is None and write_rate is not None and not bucket_warm:
            write_limiter = shared_limiter(
                f"writes:{key}|{write_rate}",
                max_concurrency=None,
                rate=write_rate,
                burst=max(1.0, write_rate / 10),
                ramp=GCS_RAMP_SECONDS,
            )
        self.write_limiter = write_limiter
        self.http = gcs_http_client(
            limiter=self.limiter,
            write_gate=write_limiter,
            retry=retry,
            stats=self.iostats,
            auth=self._auth,
            request_timeout=request_timeout,
            shield_timeout=shield_timeout,
        )
        self._use_move = use_move
        self._detect_lock: anyio.Lock | None = None
        self.capabilities = self._caps()
        b = self._bucket_q = qname(bucket)
        self._obj_base = f"{self.endpoint}/storage/v1/b/{b}/o"
        ep = URL(self.endpoint)
        self._scheme, self._authority = ep.scheme, ep.raw_authority
        self._obj_path = f"{ep.raw_path.rstrip('/')}/storage/v1/b/{b}/o"
        self._upload_base = f"{self.endpoint}/upload/storage/v1/b/{b}/o"

    # -- small helpers -------------------------------------------------------------------
    def _caps(self) -> Capabilities:
        return Capabilities(
            atomic_rename=self._use_move is True,
            directories=False,
            etag_kept_on_rename=False,
            rename_provenance=True,
            conditional_put=True,
            name="gcs",
            retries=True,
            name_limits=GCS_LIMITS,
        )

    @property
    def root_uri(self) -> str:
        """``gs://bucket/``."""
        return f"gs://{self.bucket}/"

    @property
    def uses_move(self) -> bool | None:
        """Whether renames use ``objects.move`` (None until detected)."""
        return self._use_move

    def __repr__(self) -> str:
        auth = "anonymous" if self._auth is None else "bearer"
        return f"GcsStore({self.bucket!r}, endpoint={self.endpoint!r}, auth={auth})"

    def _url(self, base: str, params: dict[str, str | int | None] | None = None) -> URL:
        if self.user_project:
            params = {**(params or {}), "userProject": self.user_project}
        q = query(params) if params else ""
        return URL(f"{base}?{q}" if q else base, encoded=True)

    def _obj_url(self, name: str, suffix: str = "", params: dict[str, str | int | None] | None = None) -> URL:
        return self._obj_url_q(name, query(params) if params else "", suffix)

    def _obj_url_q(self, name: str, q: str, suffix: str = "") -> URL:
        """The URL of object ``name`` (+ ``suffix``) with the encoded query string ``q``
        (built from its parts: about half the cost of parsing the URL string)."""
        return self._qobj_url_q(qname(name), q, suffix)

    def _qobj_url_q(self, qn: str, q: str, suffix: str = "") -> URL:
        """:meth:`_obj_url_q` for a name already encoded (``qn = qname(name)``)."""
        if self.user_project:
            up = query({"userProject": self.user_project})
            q = f"{q}&{up}" if q else up
        return URL.build(
            scheme=self._scheme,
            authority=self._authority,
            path=f"{self._obj_path}/{qn}{suffix}",
            query_string=q,
            encoded=True,
        )

    @staticmethod
    def _info(o: GcsObject) -> ObjectInfo:
        return ObjectInfo(
            path=o.name,
            size=int(o.size),
            etag=o.generation,
            is_dir=False,
            mtime=o.mtime(),
            rename_id=o.rename_id,
            source_etag=(o.metadata or {}).get(SOURCE_GEN_KEY) or None,
            checksum=o.crc32c,
        )

    # -- object primitives ---------------------------------------------------------------
    async def _get_object(self, name: str, op: str = "gcs_get") -> GcsObject:
        r = await self.http.send(op, "GET", self._obj_url_q(name, _GET_Q), path=name)
        return OBJECT_DECODER.decode(r.body)

    async def _find_object(self, name: str) -> GcsObject | None:
        """The object, or None if it does not exist (a 404 is not raised: this is the
        per-rename "is the destination free?" probe)."""
        r = await self.http.send("gcs_get", "GET", self._obj_url_q(name, _GET_Q), path=name, missing_ok=True)
        return None if r is None else OBJECT_DECODER.decode(r.body)

    async def _has_children(self, prefix: str) -> bool:
        url = self._url(
            self._obj_base, {"prefix": prefix + "/", "maxResults": 1, "fields": "items(name),prefixes"}
        )
        r = await self.http.send("gcs_list", "GET", url, path=prefix)
        page = LIST_DECODER.decode(r.body)
        return bool(page.items or page.prefixes)

    async def _shielded(self, op: str, path: str, fn: Callable[[anyio.CancelScope], Awaitable[T]]) -> T:
        """``fn(scope)`` in the client's one cancellation shield
        (:meth:`~amcommit.store.http.HttpClient.shielded`, ``shield_timeout``)."""
        return await self.http.shielded(op, path, fn)

    async def _delete_object(self, name: str, generation: str | None) -> bool:
        """Delete one object (with ``ifGenerationMatch`` when ``generation`` is given).
        True if it was deleted, False if it was not there."""
        return await self._shielded("delete", name, lambda _: self._delete_object_once(name, generation))

    async def _delete_object_once(self, name: str, generation: str | None) -> bool:
        if generation is not None:
            r = await self.http.send(
                "gcs_delete",
                "DELETE",
                self._obj_url_q(name, query({"ifGenerationMatch": generation})),
                path=name,
                write=True,
                missing_ok=True,
            )
            return r is not None
        try:
            await self.http.send(
                "gcs_delete", "DELETE", self._obj_url(name), path=name, write=True, idempotent=False
            )
            return True
        except NotFound:
            return False
        except StoreError as e:
            if not e.retryable:
                raise
        # The unconditional attempt may or may not have happened: read the current
        # generation and delete exactly that one (idempotent from here on).
        cur = await self._find_object(name)
        if cur is None:
            return True
        try:
            return await self._delete_object_once(name, cur.generation)
        except PreconditionFailed:
            return True  # replaced meanwhile by a newer object, which stays

    # -- Store protocol: reads -----------------------------------------------------------
    async def stat(self, path: str) -> ObjectInfo:
        """Info of an object, or of a virtual directory (``is_dir=True``) when objects
        exist below ``path/``. Idempotent."""
        check_path(path)
        gone = unreachable(GCS_LIMITS, path, "stat")
        if gone is not None:
            raise gone
        with self.iostats.time("stat"):
            if path == "":
                return ObjectInfo(path="", size=0, is_dir=True)
            try:
                return self._info(await self._get_object(path))
            except NotFound:
                if await self._has_children(path):
                    return ObjectInfo(path=path, size=0, is_dir=True)
                raise

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        """Objects below directory ``prefix`` (paged, 1,000 per request); non-recursive
        listings use the ``/`` delimiter and yield common prefixes as directories.
        Not a snapshot."""
        check_path(prefix)
        if unreachable(GCS_LIMITS, prefix, "list") is not None:
            return  # nothing can be below a name the store cannot hold
        pfx = prefix + "/" if prefix else ""
        token: str | None = None
        seen_dirs: set[str] = set()
        while True:
            params: dict[str, str | int | None] = {
                "prefix": pfx or None,
                "maxResults": self.page_size,
                "pageToken": token,
                "fields": _LIST_FIELDS,
            }
            if not recursive:
                params["delimiter"] = "/"
            r = await self.http.send("gcs_list", "GET", self._url(self._obj_base, params), path=prefix)
            page = LIST_DECODER.decode(r.body)
            for p in page.prefixes or ():
                d = p.rstrip("/")
                if d and d not in seen_dirs and d != prefix:
                    seen_dirs.add(d)
                    yield ObjectInfo(path=d, size=0, is_dir=True)
            for o in page.items or ():
                if o.name.endswith("/") or not o.name.startswith(pfx):
                    continue  # directory markers of other tools
                yield self._info(o)
            token = page.next_page_token
            if not token:
                return

    async def get(self, path: str) -> bytes:
        """The whole object (``alt=media``). Idempotent."""
        check_path(path, allow_root=False)
        gone = unreachable(GCS_LIMITS, path, "get")
        if gone is not None:
            raise gone
        r = await self.http.send("gcs_media", "GET", self._obj_url(path, params={"alt": "media"}), path=path)
        return r.body

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (one ``Range`` read; fewer at the end). Idempotent."""
        check_path(path, allow_root=False)
        if length <= 0:
            return b""
        gone = unreachable(GCS_LIMITS, path, "get")
        if gone is not None:
            raise gone
        url = self._obj_url(path, params={"alt": "media"})
        rng = {"Range": f"bytes={start}-{start + length - 1}"}
        r = await self.http.send("gcs_media", "GET", url, path=path, headers=rng)
        return r.body[:length] if r.status == 206 else r.body[start : start + length]

    # -- Store protocol: put -------------------------------------------------------------
    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        """Upload a whole object: one multipart request up to ``multipart_threshold``,
        else a resumable upload. The object appears whole or not at all.

        ``CREATE`` sends ``ifGenerationMatch=0``, ``UpdateIf(etag)`` sends
        ``ifGenerationMatch=etag``: both are enforced by GCS and retried; ``OVERWRITE`` is
        retried only after 429.
        """
        check_path(path, allow_root=False)
        check_storable(GCS_LIMITS, path, "put")
        precondition: str | None
        if mode is PutMode.CREATE:
            precondition = "0"
        elif isinstance(mode, UpdateIf):
            precondition = str(_generation(mode.etag, op="put", path=path))
        else:
            precondition = None
        with self.iostats.time("put"):
            return await self._shielded("put", path, lambda _: self._put(path, data, mode, precondition))

    async def _put(self, path: str, data: bytes, mode: WriteMode, precondition: str | None) -> ObjectInfo:
        try:
            if len(data) <= self.multipart_threshold:
                obj = await self._multipart(path, data, precondition)
            else:
                if precondition is not None and self.verify_preconditions:
                    await self._check_put_precondition(path, precondition)
                obj = await self._resumable(path, data, precondition)
        except PreconditionFailed as e:
            if precondition is not None and e.attempts > 1:
                # a retry after a lost response may find its own earlier success
                mine = await self._same_content(path, data)
                if mine is not None:
                    return self._info(mine)
            if mode is PutMode.CREATE:
                raise AlreadyExists("object exists", op="put", path=path, status=e.status) from None
            raise
        return self._info(obj)

    async def _check_put_precondition(self, path: str, precondition: str) -> None:
        cur = await self._find_object(path)
        if precondition == "0":
            if cur is not None:
                raise PreconditionFailed("object exists (client-side check)", op="put", path=path, status=412)
        elif cur is None or cur.generation != precondition:
            raise PreconditionFailed(
                "generation does not match (client-side check)", op="put", path=path, status=412
            )

    async def _same_content(self, path: str, data: bytes) -> GcsObject | None:
        cur = await self._find_object(path)
        if cur is None or int(cur.size) != len(data) or not cur.md5_hash:
            return None
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        return cur if md5 == cur.md5_hash else None

    async def _multipart(self, path: str, data: bytes, precondition: str | None) -> GcsObject:
        boundary = "amcommit-" + uuid.uuid4().hex
        meta = ENCODER.encode({"name": path, "contentType": "application/octet-stream"})
        body = b"".join(
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                meta,
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        url = self._url(self._upload_base, {"uploadType": "multipart", "ifGenerationMatch": precondition})
        r = await self.http.send(
            "gcs_insert",
            "POST",
            url,
            path=path,
            headers={"Content-Type": f"multipart/related; boundary={boundary}"},
            data=body,
            write=True,
            idempotent=precondition is not None,
        )
        return OBJECT_DECODER.decode(r.body)

    async def _resumable(self, path: str, data: bytes, precondition: str | None) -> GcsObject:
        total = len(data)
        url = self._url(
            self._upload_base, {"uploadType": "resumable", "name": path, "ifGenerationMatch": precondition}
        )
        r = await self.http.send(
            "gcs_upload_start",
            "POST",
            url,
            path=path,
            headers={
                "Content-Type": "application/json; charset=UTF-8",
                "X-Upload-Content-Type": "application/octet-stream",
                "X-Upload-Content-Length": str(total),
            },
            data=ENCODER.encode({"name": path, "contentType": "application/octet-stream"}),
            write=True,
        )  # a new session per attempt: harmless
        location = r.headers.get("Location")
        if not location:
            raise StoreError("resumable upload: no session URL in the answer", op="put", path=path)
        session = URL(location, encoded=True)
        offset = 0
        view = memoryview(data)
        while True:
            end = min(offset + self.chunk_size, total)
            if offset < total:
                headers = {
                    "Content-Range": f"bytes {offset}-{end - 1}/{total}",
                    "Content-Type": "application/octet-stream",
                }
                chunk: bytes | None = bytes(view[offset:end])
            else:  # nothing left to send: ask for the status (finishes a lost last answer)
                headers = {"Content-Range": f"bytes */{total}"}
                chunk = None
            # Re-sending a chunk at the same offset is idempotent for resumable sessions;
            # a completed session answers the final object again.
            r = await self.http.send(
                "gcs_upload_chunk", "PUT", session, path=path, headers=headers, data=chunk, write=True
            )
            if r.status in (200, 201):
                return OBJECT_DECODER.decode(r.body)
            # 308: "Range: bytes=0-N" is what the service persisted; go on from there
            rng = r.headers.get("Range")
            offset = int(rng.rpartition("-")[2]) + 1 if rng else 0

    # -- Store protocol: rename ----------------------------------------------------------
    async def supports_move(self) -> bool:
        """Whether this bucket's endpoint implements ``objects.move`` (probed once)."""
        if self._use_move is None:
            if self._detect_lock is None:
                self._detect_lock = anyio.Lock()
            async with self._detect_lock:
                if self._use_move is None:
                    self._set_move(await self._probe_move())
        return bool(self._use_move)

    def _set_move(self, value: bool) -> None:
        self._use_move = value
        self.capabilities = self._caps()
        self.iostats.incr("gcs_move_supported" if value else "gcs_move_unsupported")

    async def _probe_move(self) -> bool:
        probe = f".amcommit-move-probe-{uuid.uuid4().hex}"
        url = self._obj_url(probe, f"/moveTo/o/{qname(probe + '-dst')}", {"ifGenerationMatch": 0})
        try:
            await self.http.send("gcs_move_probe", "POST", url, path=probe, write=True)
        except NotFound as e:
            return e.code == "notFound"
        except PreconditionFailed:
            return True
        except (InvalidInput, NotSupported):
            return False
        except StoreError as e:
            if e.status in _MOVE_UNSUPPORTED:
                return False
            raise
        # a move of a missing object cannot succeed; be safe and do not trust this server
        return False

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        """Rename one object; never overwrites ``dst`` (see the module docstring for the
        two strategies, their atomicity and the recovery of retried renames)."""
        check_path(src, allow_root=False)
        check_path(dst, allow_root=False)
        gone = unreachable(GCS_LIMITS, src, "rename")
        if gone is not None:
            raise gone
        check_storable(GCS_LIMITS, dst, "rename")
        if src == dst:
            raise AlreadyExists("source and destination are the same object", op="rename", path=dst)
        expected = None if src_etag is None else str(_generation(src_etag, op="rename", path=src))
        rid = rename_id or f"amc-{uuid.uuid4().hex}"
        with self.iostats.time("rename"):
            # the rewrite strategy's source delete runs in this scope (extending its
            # deadline) instead of opening a second one
            return await self.http.shielded(
                "rename", src, lambda scope: self._rename(src, dst, expected, rid, scope)
            )

    async def _rename(
        self, src: str, dst: str, expected: str | None, rid: str, scope: anyio.CancelScope
    ) -> RenameResult:
        if self._use_move or (self._use_move is None and await self.supports_move()):
            res = await self._rename_move(src, dst, expected, rid)
            if res is not None:
                return res
        return await self._rename_rewrite(src, dst, expected, rid, scope)

    def _judge(
        self, rid: str, d: GcsObject, src: ObjectInfo | None, size: int | None = None, crc: str | None = None
    ) -> Verdict:
        """The one judgement (:func:`~amcommit.store.proof.judge_rename`) of destination
        ``d`` of rename ``rid``; ``src`` as found or known (None: gone)."""
        return judge_rename(self.capabilities, Expected(rid, size, checksum=crc), self._info(d), src)

    def _copied_from(self, src: str, gen: str, size: int | None, d: GcsObject) -> ObjectInfo:
        """The source at generation ``gen`` (the copy's precondition), for the judgement."""
        return source_at(src, gen, size, self._info(d))

    async def _prove(
        self, dst: str, rid: str, size: int | None = None, crc32c: str | None = None
    ) -> GcsObject | None:
        """The destination if it provably is the result of rename ``rid`` (source gone)."""
        d = await self._find_object(dst)
        if d is None or self._judge(rid, d, None, size, crc32c) is not Verdict.DONE:
            return None
        return d

    async def _gone(
        self, src: str, dst: str, rid: str, size: int | None = None, crc: str | None = None
    ) -> RenameResult:
        """The source is missing: recovered if the destination carries ``rid``, else NotFound."""
        d = await self._prove(dst, rid, size, crc)
        if d is not None:
            self.iostats.incr("gcs_rename_recovered")
            return RenameResult(dst=dst, etag=d.generation, recovered=True)
        raise NotFound("source does not exist", op="rename", path=src)

    async def _rename_move(self, src: str, dst: str, expected: str | None, rid: str) -> RenameResult | None:
        """Patch the id onto the source, then move. None = move unsupported after all."""
        if self.verify_preconditions and await self._find_object(dst) is not None:
            raise AlreadyExists("destination exists", op="rename", path=dst)
        patch_body = ENCODER.encode({"metadata": {RENAME_ID_KEY: rid, SOURCE_GEN_KEY: None}})
        qsrc = qname(src)  # encoded once for both requests
        move_suffix = f"/moveTo/o/{qname(dst)}"
        patch_url = self._qobj_url_q(qsrc, f"ifGenerationMatch={expected}&{_MOVE_Q}" if expected else _MOVE_Q)
        for _round in range(_MAX_MOVE_ROUNDS):
            try:
                r = await self.http.send(
                    "gcs_patch",
                    "PATCH",
                    patch_url,
                    path=src,
                    headers=_JSON_HEADERS,
                    data=patch_body,
                    write=True,
                )  # setting one metadata key to a fixed value: idempotent
            except NotFound:
                return await self._gone(src, dst, rid)
            except PreconditionFailed:
                raise PreconditionFailed(
                    "source generation changed", op="rename", path=src, status=412
                ) from None
            s = OBJECT_DECODER.decode(r.body)
            if expected is not None and s.generation != expected:
                raise PreconditionFailed("source generation changed", op="rename", path=src, status=412)
            gen, mgen = s.generation, s.metageneration
            if gen.isdigit() and mgen.isdigit():  # always, from the service: no encoding needed
                q = f"ifGenerationMatch=0&ifSourceGenerationMatch={gen}&ifSourceMetagenerationMatch={mgen}&{_MOVE_Q}"
            else:
                q = query(
                    {
                        "ifGenerationMatch": 0,
                        "ifSourceGenerationMatch": gen,
                        "ifSourceMetagenerationMatch": mgen,
                        "fields": "name,size,generation,metageneration,crc32c,metadata",
                    }
                )
            url = self._qobj_url_q(qsrc, q, move_suffix)
            try:
                r = await self.http.send("gcs_move", "POST", url, path=src, write=True)
            except NotFound:
                d = await self._prove(dst, rid, int(s.size), s.crc32c)
                if d is not None:
                    self.iostats.incr("gcs_rename_recovered")
                    return RenameResult(dst=dst, etag=d.generation, recovered=True)
                cur = await self._find_object(src)
                if cur is not None and cur.generation == s.generation:
                    # the source is there, yet "not found": this endpoint has no move
                    self._set_move(False)
                    return None
                raise NotFound("source does not exist", op="rename", path=src) from None
            except PreconditionFailed:
                d = await self._find_object(dst)
                if d is not None:
                    # a move is atomic: our id on the destination means the source is gone
                    if self._judge(rid, d, None, int(s.size)) is Verdict.DONE:
                        self.iostats.incr("gcs_rename_recovered")
                        return RenameResult(dst=dst, etag=d.generation, recovered=True)
                    raise AlreadyExists("destination exists", op="rename", path=dst, status=412) from None
                cur = await self._find_object(src)
                if cur is None:
                    return await self._gone(src, dst, rid, int(s.size), s.crc32c)
                if expected is not None and cur.generation != expected:
                    raise PreconditionFailed(
                        "source generation changed", op="rename", path=src, status=412
                    ) from None
                self.iostats.incr("gcs_move_conflict_retry")
                continue  # a concurrent metadata change: patch and try again
            except StoreError as e:
                if e.status in _MOVE_UNSUPPORTED:
                    self._set_move(False)
                    return None
                raise
            d = OBJECT_DECODER.decode(r.body)
            return RenameResult(dst=dst, etag=d.generation)
        raise PreconditionFailed("source kept changing during the move", op="rename", path=src, status=412)

    async def _drop_stale(self, dst: str, d: GcsObject) -> None:
        self.iostats.incr("gcs_rename_stale_copy")
        try:
            await self._delete_object_once(dst, d.generation)
        except (NotFound, PreconditionFailed):
            pass

    async def _rename_rewrite(
        self,
        src: str,
        dst: str,
        expected: str | None,
        rid: str,
        scope: anyio.CancelScope,
        *,
        again: bool = False,
    ) -> RenameResult:
        s: GcsObject | None = None
        if self.preserve_metadata or expected is None or self.verify_preconditions:
            try:
                s = await self._get_object(src)
            except NotFound:
                return await self._gone(src, dst, rid)
            if expected is not None and s.generation != expected:
                raise PreconditionFailed(
                    f"source generation is {s.generation}, expected {expected}",
                    op="rename",
                    path=src,
                    status=412,
                )
            gen = s.generation
        else:
            assert expected is not None
            gen = expected
        if self.verify_preconditions:
            d0 = await self._find_object(dst)
            if d0 is not None:
                assert s is not None  # verify_preconditions: the source was read
                v = self._judge(rid, d0, self._copied_from(src, gen, int(s.size), d0))
                if v is Verdict.STALE and not again:
                    await self._drop_stale(dst, d0)
                    return await self._rename_rewrite(src, dst, expected, rid, scope, again=True)
                if v is Verdict.HALF:
                    return await self._finish_rewrite(src, dst, gen, d0, scope, recovered=True)
                raise AlreadyExists("destination exists", op="rename", path=dst)
        body: dict[str, object] = {}
        if s is not None and self.preserve_metadata:
            body.update(s.copy_fields())
            body["metadata"] = {**(s.metadata or {}), RENAME_ID_KEY: rid, SOURCE_GEN_KEY: gen}
        else:
            body["metadata"] = {RENAME_ID_KEY: rid, SOURCE_GEN_KEY: gen}
        payload = ENCODER.encode(body)
        size = int(s.size) if s is not None else None
        crc = s.crc32c if s is not None else None
        token: str | None = None
        suffix = f"/rewriteTo/b/{self._bucket_q}/o/{qname(dst)}"
        while True:
            q = query({"ifGenerationMatch": 0, "ifSourceGenerationMatch": gen, "rewriteToken": token})
            url = self._obj_url_q(src, f"{q}&{_REWRITE_FIELDS_Q}", suffix)
            try:
                r = await self.http.send(
                    "gcs_rewrite",
                    "POST",
                    url,
                    path=src,
                    headers={"Content-Type": "application/json; charset=UTF-8"},
                    data=payload,
                    write=True,
                )
            except NotFound:
                return await self._gone(src, dst, rid, size, crc)
            except PreconditionFailed:
                d = await self._find_object(dst)
                if d is not None:
                    v = self._judge(rid, d, self._copied_from(src, gen, size, d))
                    if v is Verdict.STALE and not again:
                        await self._drop_stale(dst, d)
                        return await self._rename_rewrite(src, dst, expected, rid, scope, again=True)
                    if v is Verdict.HALF:
                        # our own copy (an earlier attempt whose answer was lost)
                        return await self._finish_rewrite(src, dst, gen, d, scope, recovered=True)
                    raise AlreadyExists("destination exists", op="rename", path=dst, status=412) from None
                raise PreconditionFailed(
                    "source generation changed", op="rename", path=src, status=412
                ) from None
            rw = REWRITE_DECODER.decode(r.body)
            if rw.done:
                if rw.resource is None:
                    raise StoreError("rewrite finished without a resource", op="rename", path=dst)
                return await self._finish_rewrite(src, dst, gen, rw.resource, scope, recovered=False)
            if not rw.rewrite_token:
                raise StoreError("rewrite not done and no rewriteToken", op="rename", path=dst)
            token = rw.rewrite_token
            self.iostats.incr("gcs_rewrite_continued")

    async def _finish_rewrite(
        self, src: str, dst: str, gen: str, d: GcsObject, scope: anyio.CancelScope, *, recovered: bool
    ) -> RenameResult:
        # ``scope`` is the rename's shield: the delete gets a full ``shield_timeout`` of its
        # own, as _delete_object() (a scope of its own, at twice the cost) would give it
        self.http.extend(scope)
        try:
            await self._delete_object_once(src, gen)
        except PreconditionFailed:
            # the source was replaced after the copy: the new object is not ours to delete
            self.iostats.incr("gcs_rename_source_replaced")
        if recovered:
            self.iostats.incr("gcs_rename_recovered")
        return RenameResult(dst=dst, etag=d.generation, recovered=recovered)

    # -- Store protocol: delete, mkdirs, close -------------------------------------------
    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete the object ``path`` and, with ``recursive``, every object below
        ``path/`` (concurrently, each with its listed generation). Not atomic.

        Without ``recursive``, a missing object with objects below it raises
        :class:`~amcommit.errors.PreconditionFailed` (a non-empty "directory").
        """
        check_path(path, allow_root=False)
        if unreachable(GCS_LIMITS, path, "delete") is not None:
            return False  # nothing of that name, nor below it, can exist
        with self.iostats.time("delete"):
            deleted = await self._delete_object(path, None)
            if not recursive:
                if not deleted and await self._has_children(path):
                    raise PreconditionFailed("directory not empty", op="delete", path=path)
                return deleted
            pfx = path + "/"
            token: str | None = None
            results: list[bool] = []

            async def one(o: GcsObject) -> None:
                try:
                    results.append(await self._delete_object(o.name, o.generation))
                except PreconditionFailed:  # replaced since the listing: delete the new one
                    results.append(await self._delete_object(o.name, None))

            while True:
                params: dict[str, str | int | None] = {
                    "prefix": pfx,
                    "maxResults": self.page_size,
                    "pageToken": token,
                    "fields": "items(name,generation),nextPageToken",
                }
                r = await self.http.send("gcs_list", "GET", self._url(self._obj_base, params), path=path)
                page = LIST_DECODER.decode(r.body)
                async with anyio.create_task_group() as tg:
                    for o in page.items or ():
                        tg.start_soon(one, o)
                token = page.next_page_token
                if not token:
                    return deleted or any(results)

    async def mkdirs(self, path: str) -> None:
        """No directory objects are created (directories are virtual); raises
        :class:`~amcommit.errors.AlreadyExists` if ``path`` or an ancestor is an object."""
        if path == "":
            return
        check_path(path)
        check_storable(GCS_LIMITS, path, "mkdirs")
        with self.iostats.time("mkdirs"):
            names = [*ancestors(path), path]
            found: list[str] = []

            async def look(n: str) -> None:
                if await self._find_object(n) is not None:
                    found.append(n)

            async with anyio.create_task_group() as tg:
                for n in names:
                    tg.start_soon(look, n)
            if found:
                raise AlreadyExists(f"a file is in the way: {sorted(found)[0]!r}", op="mkdirs", path=path)

    async def aclose(self) -> None:
        """Close the HTTP session. Idempotent."""
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["GcsStore"]
