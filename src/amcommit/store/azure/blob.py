"""Azure Blob API store (flat-namespace accounts, Azurite), straight over aiohttp.

Operations and their limits:

* ``put``: Put Blob (one request) up to ``single_put_max`` bytes, else Put Block + Put Block
  List. Either way the blob appears whole or not at all. ``PutMode.CREATE`` sends
  ``If-None-Match: *``; ``UpdateIf`` sends ``If-Match``. Conditional puts also write a
  random id into the blob's metadata (``amcommitputid``), so a retry whose first attempt
  did land (lost response) is recognised as success instead of "already exists".
* ``rename`` = Get Properties (source) + Copy Blob + conditional Delete Blob: *not atomic*;
  for a moment both names exist. The copy never overwrites (``If-None-Match: *``), copies
  only the version it saw (``x-ms-source-if-match``), re-sends the source's metadata (any
  ``x-ms-meta-*`` replaces all of it) plus ``amcommitrenameid=<rename_id>``, and waits for
  a pending copy. The source is deleted only if still that version (``If-Match``); if it
  changed in between, the copy is deleted again and the rename fails with
  :class:`~amcommit.errors.PreconditionFailed`. A copy gets a new etag, so a retried rename
  proves an earlier success by the destination's ``rename_id`` (and size): ``stat`` exposes
  it as :attr:`ObjectInfo.rename_id`. Without a caller's ``rename_id`` one is generated per
  call (internal retries can still prove success; a later call cannot). Two concurrent
  renames of one source are not exclusive (both copies may succeed). With a known
  ``src_etag`` the Get Properties is skipped (two requests per rename: Copy Blob + Delete
  Blob) when the caller vouches that the source at that etag has no user metadata
  (``src_meta=False``: task commit lists the blobs with their metadata and says so in the
  manifest) or when ``preserve_metadata=False``; the copy then carries only amcommit's
  marks. Any change of the source's metadata changes its etag, so the copy's
  ``x-ms-source-if-match`` fails rather than drop metadata a later version gained.
* Directories are virtual: ``mkdirs`` is a no-op and writes no ``hdi_isfolder`` marker
  blobs (they cost a request per directory and nothing needs them); markers written by
  other tools are recognised by ``stat`` and ``list`` and removed by recursive deletes.
  ``stat`` of a prefix with blobs below it reports a directory.
* ``delete(recursive=True)`` lists and deletes blob by blob: not atomic.
* ``rename_batch`` (:class:`~amcommit.store.base.BatchRenamer`; the job commit renames
  one manifest's files per call): each rename planned and copied as ``rename`` does it
  (the copies at once, within the limiter), then the sources' conditional deletes
  (``If-Match``) in one Blob Batch per 256, each sub-answer judged as ``rename`` judges
  its delete's answer. One request per file plus one per batch instead of two per file.
  The whole call is shielded from cancellation like one ``rename``; a killed process may
  leave any of the batch's copies next to their sources (each carries its rename id: a
  repeated rename proves it and deletes the source).
* ``delete_batch`` (:class:`~amcommit.store.base.BatchDeleter`): up to 256 Delete Blob
  sub-requests in one Blob Batch request (``POST <container>?restype=container&comp=batch``,
  ``multipart/mixed``), each sub-request signed on its own. Each blob is deleted or not on
  its own (the service runs the sub-requests one by one; a batch cut midway may have
  deleted any subset); each sub-answer is classified like the answer of a single Delete
  Blob (404: already gone, not a failure). The batch request itself is retried like any
  idempotent request (the body, signatures included, is built once per call: the retries
  of one call end well within the 15 minutes a Shared Key signature is valid). A service
  that refuses Blob Batch as a whole (400 / 501, or any other answer that is not
  throttling, a transient failure, an authentication failure or a missing container)
  gets single Delete Blob requests from then on. Not verified against the real service:
  whether accounts with a hierarchical namespace accept Blob Batch (Microsoft's 2019
  announcement said they did not); if they refuse, this fallback is what runs there.
"""

from __future__ import annotations

import base64
import builtins
import uuid
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import anyio
from multidict import CIMultiDict, CIMultiDictProxy

from amcommit.errors import (
    AlreadyExists,
    BucketNotFound,
    InvalidInput,
    NotFound,
    NotSupported,
    PreconditionFailed,
    StoreError,
    Throttled,
    Transient,
    Unauthenticated,
)
from amcommit.paths import ParsedUri, check_path
from amcommit.store.azure._common import (
    META_PUT_ID,
    META_RENAME_ID,
    AzureBase,
    norm_etag,
    parse_http_date,
    store_options_from_url,
)
from amcommit.store.azure.auth import http_date
from amcommit.store.azure.codes import classify
from amcommit.store.base import (
    BatchFailures,
    Capabilities,
    ObjectInfo,
    PutMode,
    RenameRequest,
    RenameResult,
    UpdateIf,
    WriteMode,
)
from amcommit.store.http import HttpResponse
from amcommit.store.names import AZURE_LIMITS, check_storable, unreachable
from amcommit.store.proof import Expected, Verdict, judge_rename, source_at

_META = "x-ms-meta-"
META_SOURCE_ETAG = "amcommitsrcetag"
"""Blob metadata key: the etag of the source a rename copied (without quotes)."""
_MiB = 1024 * 1024
BATCH_MAX = 256
"""Sub-requests per Blob Batch request (the service's limit)."""


_OWN_META = frozenset((META_RENAME_ID, META_PUT_ID, META_SOURCE_ETAG))
"""amcommit's own metadata keys: never carried over by a rename (it writes its own)."""
_OWN_HEADERS = frozenset(f"{_META}{k}" for k in _OWN_META)


_UNBATCHED = Transient("not sent in a Blob Batch (the service refused batches)", op="delete")
"""The answer :meth:`BlobStore._batch_deletes` gives for items to be sent alone (a marker)."""


def _first(item: tuple[int, object]) -> int:
    return item[0]


@dataclass(slots=True)
class _Rename:
    """One planned copy + delete: what the copy sends, and what it found."""

    src: str
    dst: str
    etag: str
    size: int | None
    headers: dict[str, str]
    rid: str
    rename_id: str | None
    dst_etag: str | None = None
    recovered: bool = False


def _has_user_meta(keys: Iterable[str]) -> bool:
    """True if any of these (lower-case) metadata keys is the user's, not amcommit's own
    (a folder marker's ``hdi_isfolder`` counts: such a blob is not renamed as a file)."""
    return any(k not in _OWN_META for k in keys)


class BlobStore(AzureBase):
    """A :class:`~amcommit.store.base.Store` over one Blob container. See the module doc."""

    capabilities = Capabilities(
        atomic_rename=False,
        directories=False,
        etag_kept_on_rename=False,
        rename_provenance=True,
        conditional_put=True,
        name="blob",
        retries=True,
        batch_rename=True,
        delete_batch_max=BATCH_MAX,
        name_limits=AZURE_LIMITS,
    )

    def __init__(
        self,
        container: str,
        *,
        single_put_max: int = 4 * _MiB,
        block_size: int = 4 * _MiB,
        copy_poll_interval: float = 0.05,
        copy_timeout: float = 600.0,
        delete_concurrency: int = 32,
        preserve_metadata: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(container, **options)
        if block_size < 1 or single_put_max < 0:
            raise InvalidInput("block_size must be >= 1 and single_put_max >= 0")
        self.single_put_max = single_put_max
        self.block_size = block_size
        self.copy_poll_interval = copy_poll_interval
        self.copy_timeout = copy_timeout
        self.delete_concurrency = delete_concurrency
        self.preserve_metadata = preserve_metadata
        self._batch_refused = False
        self._batches_running = 0

    def _default_root_uri(self) -> str:
        return f"wasb://{self.container}@{self.account}.blob.core.windows.net/"

    # -- container -------------------------------------------------------------------------
    async def create_container(self) -> bool:
        """Create the container; False if it already existed."""
        return await self._create_root("container", "restype=container")

    async def delete_container(self) -> bool:
        """Delete the container and everything in it; False if it did not exist."""
        return await self._delete_root("container", "restype=container")

    # -- helpers ---------------------------------------------------------------------------
    def _info(self, path: str, headers: CIMultiDictProxy[str]) -> ObjectInfo:
        is_dir = headers.get("x-ms-meta-hdi_isfolder", "").lower() == "true"
        return ObjectInfo(
            path=path,
            size=0 if is_dir else int(headers.get("Content-Length", "0")),
            etag=None if is_dir else norm_etag(headers.get("ETag")),
            is_dir=is_dir,
            mtime=parse_http_date(headers.get("Last-Modified")),
            rename_id=headers.get(f"{_META}{META_RENAME_ID}"),
            source_etag=norm_etag(headers.get(f"{_META}{META_SOURCE_ETAG}")),
            user_meta=_has_user_meta(k[len(_META) :].lower() for k in headers if k.lower().startswith(_META)),
        )

    async def _head(self, path: str, op: str) -> CIMultiDictProxy[str]:
        return (await self.request(op, "HEAD", self.url(path), path=path)).headers

    async def _list_page(
        self, prefix: str, *, delimiter: bool, marker: str | None, max_results: int = 5000
    ) -> tuple[list[tuple[str, dict[str, str], dict[str, str]]], list[str], str | None]:
        """One List Blobs page: ``(blobs as (name, properties, metadata), prefixes, marker)``."""
        q = [f"restype=container&comp=list&include=metadata&maxresults={max_results}"]
        if prefix:
            q.append(f"prefix={quote(prefix, safe='')}")
        if delimiter:
            q.append("delimiter=%2F")
        if marker:
            q.append(f"marker={quote(marker, safe='')}")
        r = await self.request("list", "GET", self.url("", "&".join(q)), path=prefix.rstrip("/"))
        try:
            root = ET.fromstring(r.body)
        except ET.ParseError:
            raise Transient("malformed List Blobs answer", op="list", path=prefix) from None
        blobs: list[tuple[str, dict[str, str], dict[str, str]]] = []
        prefixes: list[str] = []
        container = root.find("Blobs")
        if container is not None:
            for el in container:
                name_el = el.find("Name")
                if name_el is None or name_el.text is None:
                    continue
                name = name_el.text
                if name_el.get("Encoded") == "true":
                    name = unquote(name)
                if el.tag == "Blob":
                    pe, me = el.find("Properties"), el.find("Metadata")
                    props = {c.tag: c.text or "" for c in pe} if pe is not None else {}
                    meta = {c.tag.lower(): c.text or "" for c in me} if me is not None else {}
                    blobs.append((name, props, meta))
                elif el.tag == "BlobPrefix":
                    prefixes.append(name)
        nm = root.findtext("NextMarker")
        return blobs, prefixes, nm or None

    async def _has_children(self, path: str) -> bool:
        blobs, prefixes, _ = await self._list_page(path + "/", delimiter=True, marker=None, max_results=1)
        return bool(blobs or prefixes)

    # -- Store protocol --------------------------------------------------------------------
    async def stat(self, path: str) -> ObjectInfo:
        """Properties of a blob; a prefix with blobs below it is a directory."""
        check_path(path)
        if path == "":
            return ObjectInfo("", 0, is_dir=True)
        gone = unreachable(AZURE_LIMITS, path, "stat")
        if gone is not None:
            raise gone
        try:
            return self._info(path, await self._head(path, "stat"))
        except NotFound:
            if await self._has_children(path):
                return ObjectInfo(path, 0, is_dir=True)
            raise

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        """Blobs below ``prefix`` (List Blobs with marker paging; not a snapshot)."""
        check_path(prefix)
        if unreachable(AZURE_LIMITS, prefix, "list") is not None:
            return  # nothing can be below a name the store cannot hold
        p = f"{prefix}/" if prefix else ""
        marker: str | None = None
        dirs: set[str] = set()
        while True:
            blobs, prefixes, marker = await self._list_page(p, delimiter=not recursive, marker=marker)
            for name, props, meta in blobs:
                if name.endswith("/"):
                    continue
                if meta.get("hdi_isfolder", "").lower() == "true":
                    if not recursive and name not in dirs:
                        dirs.add(name)
                        yield ObjectInfo(name, 0, is_dir=True)
                    continue
                yield ObjectInfo(
                    path=name,
                    size=int(props.get("Content-Length") or 0),
                    etag=norm_etag(props.get("Etag")),
                    mtime=parse_http_date(props.get("Last-Modified")),
                    rename_id=meta.get(META_RENAME_ID),
                    source_etag=norm_etag(meta.get(META_SOURCE_ETAG)),
                    user_meta=_has_user_meta(meta),
                )
            for d in prefixes:
                name = d.rstrip("/")
                if name and name not in dirs:
                    dirs.add(name)
                    yield ObjectInfo(name, 0, is_dir=True)
            if not marker:
                return

    async def get(self, path: str) -> bytes:
        """The whole blob (one Get Blob)."""
        check_path(path, allow_root=False)
        gone = unreachable(AZURE_LIMITS, path, "get")
        if gone is not None:
            raise gone
        return (await self.request("get", "GET", self.url(path), path=path)).body

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (one ranged Get Blob, ``x-ms-range``; fewer at the end)."""
        check_path(path, allow_root=False)
        if length <= 0:
            return b""
        gone = unreachable(AZURE_LIMITS, path, "get")
        if gone is not None:
            raise gone
        rng = {"x-ms-range": f"bytes={start}-{start + length - 1}"}
        r = await self.request("get", "GET", self.url(path), path=path, headers=rng)
        return r.body[:length] if r.status == 206 else r.body[start : start + length]

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        """Write a whole blob atomically (see the module doc for modes and retries)."""
        check_path(path, allow_root=False)
        check_storable(AZURE_LIMITS, path, "put")
        cond: dict[str, str] = {}
        put_id: str | None = None
        if mode is PutMode.CREATE:
            cond["If-None-Match"] = "*"
        elif isinstance(mode, UpdateIf):
            cond["If-Match"] = mode.etag
        if mode is not PutMode.OVERWRITE:
            put_id = uuid.uuid4().hex
            cond[f"{_META}{META_PUT_ID}"] = put_id
        try:
            if len(data) <= self.single_put_max:
                r = await self.request(
                    "put",
                    "PUT",
                    self.url(path),
                    path=path,
                    headers={"x-ms-blob-type": "BlockBlob", **cond},
                    data=data,
                )
            else:
                r = await self._put_blocks(path, data, cond)
        except (AlreadyExists, PreconditionFailed, NotFound) as e:
            return await self._put_conflict(path, data, mode, put_id, e)
        return ObjectInfo(
            path,
            len(data),
            norm_etag(r.headers.get("ETag")),
            mtime=parse_http_date(r.headers.get("Last-Modified")),
        )

    async def _put_blocks(self, path: str, data: bytes, cond: dict[str, str]) -> Any:
        prefix = uuid.uuid4().hex
        ids = []
        for i, off in enumerate(range(0, len(data), self.block_size)):
            bid = base64.b64encode(f"{prefix}-{i:08d}".encode()).decode()
            ids.append(bid)
            await self.request(
                "put_block",
                "PUT",
                self.url(path, f"comp=block&blockid={quote(bid, safe='')}"),
                path=path,
                data=data[off : off + self.block_size],
            )
        body = (
            '<?xml version="1.0" encoding="utf-8"?><BlockList>'
            + "".join(f"<Latest>{b}</Latest>" for b in ids)
            + "</BlockList>"
        ).encode()
        return await self.request(
            "put", "PUT", self.url(path, "comp=blocklist"), path=path, headers=cond, data=body
        )

    async def _put_conflict(
        self, path: str, data: bytes, mode: WriteMode, put_id: str | None, e: StoreError
    ) -> ObjectInfo:
        if put_id is not None:
            # an earlier attempt of this call may have landed (lost answer): prove it
            try:
                h = await self._head(path, "put")
            except NotFound:
                h = None
            if h is not None and h.get(f"{_META}{META_PUT_ID}") == put_id:
                return self._info(path, h)
        if mode is PutMode.CREATE and isinstance(e, (AlreadyExists, PreconditionFailed)):
            raise AlreadyExists("blob exists", op="put", path=path, status=e.status, code=e.code) from None
        if isinstance(mode, UpdateIf):
            raise PreconditionFailed(
                f"blob is not at etag {mode.etag}", op="put", path=path, status=e.status, code=e.code
            ) from None
        raise e

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        """Copy + conditional delete; never overwrites ``dst``; not atomic (for a moment
        both names exist). See the module doc."""
        plan = await self._plan_rename(src, dst, src_etag, rename_id, src_meta)
        if isinstance(plan, RenameResult):
            return plan
        # copy + delete settle together: a cancelled caller never leaves both names behind
        return await self._http.shielded("rename", src, lambda _scope: self._copy_then_delete(plan))

    async def _plan_rename(
        self, src: str, dst: str, src_etag: str | None, rename_id: str | None, src_meta: bool | None
    ) -> _Rename | RenameResult:
        """Checks, and the source's properties where they must be read: what the copy
        sends, or the result when the source is gone and the rename proven done."""
        check_path(src, allow_root=False)
        check_path(dst, allow_root=False)
        gone = unreachable(AZURE_LIMITS, src, "rename")
        if gone is not None:
            raise gone
        check_storable(AZURE_LIMITS, dst, "rename")
        if src == dst:
            raise AlreadyExists("source and destination are the same", op="rename", path=dst)
        rid = rename_id or uuid.uuid4().hex
        headers: dict[str, str] = {}
        if src_etag is not None and (src_meta is False or not self.preserve_metadata):
            # two requests: copy + delete (nothing of the source's to carry over, and the
            # copy is conditioned on the etag the caller knows)
            etag, size = norm_etag(src_etag), None
        else:
            try:
                sh = await self._head(src, "rename")
            except NotFound:
                return await self._recover(src, dst, rename_id, None)
            source = self._info(src, sh)
            if source.is_dir:
                raise NotSupported("directory rename on a flat namespace", op="rename", path=src)
            if src_etag is not None and norm_etag(src_etag) != source.etag:
                raise PreconditionFailed(
                    f"source etag is {source.etag}, expected {src_etag}", op="rename", path=src
                )
            etag, size = source.etag, source.size
            if self.preserve_metadata:
                headers = {
                    k: v
                    for k, v in sh.items()
                    if k.lower().startswith(_META) and k.lower() not in _OWN_HEADERS
                }
        assert etag is not None
        headers.update(
            {
                "x-ms-copy-source": self.url_text(src),
                "If-None-Match": "*",
                "x-ms-source-if-match": etag,
                f"{_META}{META_RENAME_ID}": rid,
                f"{_META}{META_SOURCE_ETAG}": etag.strip('"'),
            }
        )
        return _Rename(src, dst, etag, size, headers, rid, rename_id)

    async def _copy_then_delete(self, r: _Rename) -> RenameResult:
        """Runs inside rename()'s shielded scope: its requests pass ``shielded=True``."""
        done = await self._copy(r)
        if done is not None:
            return done
        return await self._delete_source(r)

    async def _copy(self, r: _Rename) -> RenameResult | None:
        """The copy of a rename (shielded by the caller): None when the destination now
        holds our copy (``r.dst_etag``; ``r.recovered`` if an earlier attempt made it), or
        the final result when the source turned out gone and the rename proven done."""
        src, dst, etag, size = r.src, r.dst, r.etag, r.size
        for stale_removed in (False, True):
            try:
                resp = await self.request(
                    "rename", "PUT", self.url(dst), path=dst, headers=r.headers, shielded=True
                )
                r.dst_etag = norm_etag(resp.headers.get("ETag"))
                if resp.headers.get("x-ms-copy-status", "success") != "success":
                    r.dst_etag = await self._wait_copy(dst, resp.headers.get("x-ms-copy-id"))
            except (AlreadyExists, PreconditionFailed) as e:
                if e.code == "SourceConditionNotMet":
                    raise PreconditionFailed(
                        f"source is no longer at etag {etag}", op="rename", path=src, status=e.status
                    ) from None
                try:
                    d = self._info(dst, await self._head(dst, "rename"))
                except NotFound:
                    # (Azurite answers a failed source condition with ConditionNotMet)
                    raise PreconditionFailed(
                        f"source is no longer at etag {etag}", op="rename", path=src, status=e.status
                    ) from None
                verdict = judge_rename(self.capabilities, Expected(r.rid), d, source_at(src, etag, size, d))
                if verdict is Verdict.STALE and not stale_removed:
                    # our copy of an older version of the source (the source was rewritten
                    # after an earlier, interrupted attempt): remove it and copy again
                    try:
                        await self.request(
                            "rename",
                            "DELETE",
                            self.url(dst),
                            path=dst,
                            headers={"If-Match": d.etag or "*"},
                            shielded=True,
                        )
                    except (NotFound, PreconditionFailed):
                        pass
                    continue
                if verdict is not Verdict.HALF:  # another's, or our stale copy again
                    raise AlreadyExists(
                        "destination exists", op="rename", path=dst, status=e.status
                    ) from None
                r.dst_etag, r.recovered = d.etag, True  # our own copy, from an earlier attempt
            except NotFound:
                # the source went away between Get Properties and Copy Blob
                return await self._recover(src, dst, r.rename_id, size)
            return None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _delete_source(self, r: _Rename, first: StoreError | None = None) -> RenameResult:
        """The conditional delete of a copied rename's source (shielded by the caller), and
        what its answer means. ``first``: the answer this delete already got (a Blob Batch
        sub-answer: not found or precondition failed), taken instead of sending it."""
        src, dst, etag, dst_etag, recovered = r.src, r.dst, r.etag, r.dst_etag, r.recovered
        try:
            if first is not None:
                raise first
            await self.request(
                "rename", "DELETE", self.url(src), path=src, headers={"If-Match": etag}, shielded=True
            )
        except NotFound as e:
            recovered = recovered or e.attempts > 1
        except PreconditionFailed:
            try:
                await self._head(src, "rename")
            except NotFound:
                # gone: an earlier attempt's delete landed (the service may answer a
                # conditional delete of a missing blob with 412)
                return RenameResult(dst=dst, etag=dst_etag, recovered=True)
            # the source was rewritten after the copy: take the copy back, publish nothing
            try:
                await self.request(
                    "rename",
                    "DELETE",
                    self.url(dst),
                    path=dst,
                    headers={"If-Match": dst_etag or "*"},
                    shielded=True,
                )
            except (NotFound, PreconditionFailed):
                pass
            raise PreconditionFailed(
                "source changed during the rename; the copy was removed", op="rename", path=src
            ) from None
        return RenameResult(dst=dst, etag=dst_etag, recovered=recovered)

    async def _recover(self, src: str, dst: str, rename_id: str | None, size: int | None) -> RenameResult:
        """The source is gone: did this rename (``rename_id``) already happen?"""
        if rename_id is not None:
            try:
                d = self._info(dst, await self._head(dst, "rename"))
            except NotFound:
                d = None
            want = Expected(rename_id, size)
            if d is not None and judge_rename(self.capabilities, want, d, None) is Verdict.DONE:
                return RenameResult(dst=dst, etag=d.etag, recovered=True)
        raise NotFound("source does not exist", op="rename", path=src)

    async def _wait_copy(self, dst: str, copy_id: str | None) -> str | None:
        delay = self.copy_poll_interval
        with anyio.fail_after(self.copy_timeout):
            while True:
                await anyio.sleep(delay)
                delay = min(delay * 2, 2.0)
                h = await self._head(dst, "rename")
                if copy_id and h.get("x-ms-copy-id") not in (None, copy_id):
                    raise AlreadyExists("destination replaced during the copy", op="rename", path=dst)
                status = h.get("x-ms-copy-status", "success")
                if status == "success":
                    return norm_etag(h.get("ETag"))
                if status != "pending":
                    try:
                        await self.request(
                            "rename",
                            "DELETE",
                            self.url(dst),
                            path=dst,
                            headers={"If-Match": h.get("ETag", "*")},
                        )
                    except (NotFound, PreconditionFailed):
                        pass
                    raise Transient(f"copy {status}", op="rename", path=dst)

    async def _delete_blob(self, path: str) -> None:
        """One Delete Blob; a blob already gone is not an error."""
        try:
            await self.request("delete", "DELETE", self.url(path), path=path)
        except NotFound:
            pass

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete a blob, or (``recursive``) every blob below ``path/``; not atomic."""
        check_path(path, allow_root=False)
        if unreachable(AZURE_LIMITS, path, "delete") is not None:
            return False  # nothing of that name, nor below it, can exist
        deleted = False
        try:
            await self.request("delete", "DELETE", self.url(path), path=path)
            deleted = True
            if not recursive:
                return True
        except NotFound as e:
            deleted = e.attempts > 1  # an earlier attempt of ours deleted it
        prefix = path + "/"
        marker: str | None = None
        first = True
        while True:
            blobs, _, marker = await self._list_page(prefix, delimiter=False, marker=marker)
            if first and not blobs:
                return deleted
            if first and not recursive:
                raise PreconditionFailed("directory not empty", op="delete", path=path)
            first = False
            names = [b[0] for b in blobs]

            async def rm(name: str, sem: anyio.Semaphore) -> None:
                async with sem:
                    await self._delete_blob(name)

            sem = anyio.Semaphore(self.delete_concurrency)
            async with anyio.create_task_group() as tg:
                for n in names:
                    tg.start_soon(rm, n, sem)
            if not marker:
                return True

    async def delete_batch(self, paths: Sequence[str]) -> dict[int, StoreError]:
        """Delete up to 256 blobs with one Blob Batch request (see the module doc and
        :meth:`~amcommit.store.base.BatchDeleter.delete_batch`): not atomic, each blob
        deleted or not on its own; returns the failed ones by index (a blob already gone is
        not a failure). A throttled sub-request is reported to the limiter (once per
        batch) and returned as :class:`~amcommit.errors.Throttled`; a sub-request without
        an answer as :class:`~amcommit.errors.Transient`. A failure of the batch request
        itself is raised after the store's retries; a service that refuses Blob Batch
        (400/501) gets single Delete Blob requests instead, from then on."""
        if not paths:
            return {}
        if len(paths) > BATCH_MAX:
            raise InvalidInput(f"at most {BATCH_MAX} paths per delete_batch, got {len(paths)}")
        for p in paths:
            check_path(p, allow_root=False)
        if any(unreachable(AZURE_LIMITS, p, "delete") is not None for p in paths):
            # a name the store cannot hold is already gone; the others go as usual
            keep = [i for i, p in enumerate(paths) if unreachable(AZURE_LIMITS, p, "delete") is None]
            sub = await self.delete_batch([paths[i] for i in keep]) if keep else {}
            return {keep[i]: e for i, e in sub.items()}
        answers = await self._batch_deletes("delete", [(p, None) for p in paths])
        failed: dict[int, StoreError] = {}
        for i, err in enumerate(answers):
            if err is _UNBATCHED:
                try:
                    await self._delete_blob(paths[i])
                except StoreError as e:
                    failed[i] = e
            elif err is not None and not (isinstance(err, NotFound) and not isinstance(err, BucketNotFound)):
                failed[i] = err
        return failed

    async def _batch_deletes(
        self, op: str, items: Sequence[tuple[str, str | None]]
    ) -> Sequence[StoreError | None]:
        """Delete Blob for each ``(path, if_match)`` (at most 256) in one Blob Batch request:
        each sub-answer classified as the answer of a single delete would be (``op`` names
        them), None for success; a missing sub-answer is :class:`Transient`. Throttled
        sub-answers slow the limiter once per batch. The batch request itself is retried
        by the store like any idempotent request; its final failure is raised if retryable
        (throttled, transient) or an authentication or missing-container error. Any other
        refusal of the batch as a whole (400 ``InvalidInput`` / 501 from a service that does
        not offer Blob Batch, or whatever an account type without it answers) makes every
        item :data:`_UNBATCHED` (send it alone), then and for every later batch of this
        store."""
        if self._batch_refused:
            return [_UNBATCHED] * len(items)
        boundary = f"batch_{uuid.uuid4()}"
        body = await self._batch_body(boundary, items)
        try:
            r = await self.request(
                f"{op}_batch",
                "POST",
                self.url("", "restype=container&comp=batch"),
                path=items[0][0],
                headers={"Content-Type": f"multipart/mixed; boundary={boundary}"},
                data=body,
            )
        except (Unauthenticated, BucketNotFound):
            raise  # a single delete would fail the same way
        except StoreError as e:
            if e.retryable:
                raise  # still failing after the store's retries
            # refused as a whole for another reason: a service or account without Blob
            # Batch answers 400 / 501, but which status an account type (e.g. one with a
            # hierarchical namespace) gives is not documented: single deletes then say
            # for themselves whether they can be done
            self._batch_refused = True
            self.iostats.incr("blob_batch_refused")
            return [_UNBATCHED] * len(items)
        answers = parse_batch_response(r.headers.get("Content-Type", ""), r.body)
        out: builtins.list[StoreError | None] = []
        throttled = False
        for i, (p, _) in enumerate(items):
            sub = answers.get(i)
            if sub is None:
                out.append(Transient("no answer for this sub-request of a batch", op=op, path=p))
                continue
            err = classify(sub, op, p)
            if err is not None:
                err.attempts = r.attempts
                if isinstance(err, Throttled):
                    if not throttled:
                        self.limiter.throttled(err.retry_after)
                        self.iostats.incr("store_io_throttled")
                        throttled = True
                    err.throttle_reported = True
            out.append(err)
        self.iostats.incr(f"{op}_batch_items", len(items))
        return out

    async def _batch_body(self, boundary: str, items: Sequence[tuple[str, str | None]]) -> bytes:
        """The ``multipart/mixed`` body of a Blob Batch of Delete Blob sub-requests
        (``(path, if_match)``), each signed; ``Content-ID`` = index in ``items``."""
        sign_sync = getattr(self.credential, "sign_sync", None)
        date = http_date()
        out: list[str] = []
        for i, (p, if_match) in enumerate(items):
            url = self.url(p)
            headers = {"x-ms-date": date, "Content-Length": "0"}
            if if_match is not None:
                headers["If-Match"] = if_match
            if sign_sync is not None:
                sign_sync("DELETE", url, headers)
            else:
                await self.credential.sign("DELETE", url, headers)
            out.append(
                f"--{boundary}\r\nContent-Type: application/http\r\n"
                f"Content-Transfer-Encoding: binary\r\nContent-ID: {i}\r\n\r\n"
                f"DELETE {url.raw_path_qs} HTTP/1.1\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                + "\r\n"
            )
        out.append(f"--{boundary}--\r\n")
        return "".join(out).encode()

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """Many renames (:class:`~amcommit.store.base.BatchRenamer`), each decided as
        :meth:`rename` decides it, with the deletes of the sources sent in Blob Batches:
        the copies first (at once, within the store's limiter), then one Blob Batch of
        conditional deletes (``If-Match``) per 256 copied sources; a sub-delete answered
        "not found" or "condition not met" is judged as in ``rename`` (a source rewritten
        after its copy: the copy is taken back, :class:`~amcommit.errors.PreconditionFailed`),
        one answered "busy", or not at all, is sent again alone. Two requests per file become
        one plus 1/256.

        Not atomic, per request or as a whole: a batch stopped midway (a killed process)
        may have copied any of its files and deleted the sources of any of those copied;
        every copy carries its ``rename_id``, so a repeated request proves and completes
        it (the destination is our copy: the source is deleted). The whole batch runs
        shielded from cancellation, as one ``rename`` does: when the call returns or
        raises, every copy it made has had its delete (or its failure is returned). A
        failure of a Blob Batch request as a whole is returned for each of its renames."""
        failed = BatchFailures()
        if not requests:
            return failed

        async def run(_scope: anyio.CancelScope) -> None:
            copied: builtins.list[tuple[int, _Rename]] = []
            todo = iter(enumerate(requests))

            async def copier() -> None:
                for i, q in todo:  # one event loop: next() never runs concurrently
                    try:
                        plan = await self._plan_rename(q.src, q.dst, q.src_etag, q.rename_id, q.src_meta)
                        if isinstance(plan, RenameResult):
                            done: RenameResult | None = plan
                        else:
                            done = await self._copy(plan)
                            if done is None:
                                copied.append((i, plan))
                        if done is not None and done.recovered:
                            failed.recovered.add(i)
                    except StoreError as e:
                        failed[i] = e

            # the limiter's concurrency, shared among the batches in progress (the engine
            # runs one per worker: each then copies one file at a time, no task per file)
            budget = self.limiter.concurrency_ceiling or BATCH_MAX
            workers = max(1, min(len(requests), budget // self._batches_running))
            if workers == 1:
                await copier()
            else:
                async with anyio.create_task_group() as tg:
                    for _ in range(workers):
                        tg.start_soon(copier)
            copied.sort(key=_first)
            for start in range(0, len(copied), BATCH_MAX):
                chunk = copied[start : start + BATCH_MAX]
                try:
                    answers = await self._batch_deletes("rename", [(c.src, c.etag) for _, c in chunk])
                except StoreError as e:
                    for i, _ in chunk:
                        failed[i] = e  # repeated by the caller: the copy proves itself
                    continue
                for (i, plan), err in zip(chunk, answers, strict=True):
                    if err is None:
                        if plan.recovered:
                            failed.recovered.add(i)
                        continue
                    try:
                        if err is _UNBATCHED or err.retryable:
                            res = await self._delete_source(plan)  # alone, with the store's retries
                        else:
                            res = await self._delete_source(plan, first=err)
                    except StoreError as e:
                        failed[i] = e
                    else:
                        if res.recovered:
                            failed.recovered.add(i)

        self._batches_running += 1
        try:
            await self._http.shielded("rename", requests[0].src, run)
        finally:
            self._batches_running -= 1
        return failed

    async def mkdirs(self, path: str) -> None:
        """No-op: directories are virtual on a flat namespace (no marker blobs written)."""
        check_path(path)
        check_storable(AZURE_LIMITS, path, "mkdirs")


def parse_batch_response(content_type: str, body: bytes) -> dict[int, HttpResponse]:
    """The sub-answers of a Blob Batch answer by ``Content-ID`` (pure). Parts without a
    ``Content-ID`` (an error about the batch as a whole) or that cannot be read are left
    out: their sub-requests count as unanswered. Raises :class:`~amcommit.errors.Transient`
    when the answer is not ``multipart/mixed`` with a boundary."""
    boundary = ""
    for param in content_type.split(";")[1:]:
        k, _, v = param.strip().partition("=")
        if k.lower() == "boundary":
            boundary = v.strip().strip('"')
    if not content_type.lower().startswith("multipart/mixed") or not boundary:
        raise Transient("malformed Blob Batch answer (no multipart boundary)", op="delete_batch")
    text = body.decode("utf-8", "replace").replace("\r\n", "\n")
    out: dict[int, HttpResponse] = {}
    for part in text.split(f"--{boundary}")[1:]:
        if part.startswith("--"):
            break  # the closing delimiter
        head, _, rest = part.lstrip("\n").partition("\n\n")
        cid: int | None = None
        for line in head.split("\n"):
            k, _, v = line.partition(":")
            if k.strip().lower() == "content-id":
                try:
                    cid = int(v.strip())
                except ValueError:
                    cid = None
        status_line, _, rest = rest.partition("\n")
        fields = status_line.split(" ", 2)
        if cid is None or len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
            continue
        hdr_text, _, sub_body = rest.partition("\n\n")
        headers: CIMultiDict[str] = CIMultiDict()
        for line in hdr_text.split("\n"):
            k, sep, v = line.partition(":")
            if sep:
                headers.add(k.strip(), v.strip())
        out[cid] = HttpResponse(int(fields[1]), CIMultiDictProxy(headers), sub_body.strip().encode())
    return out


def blob_from_url(parsed: ParsedUri, **options: Any) -> BlobStore:
    """``open_store`` factory for ``wasb[s]://container@account.blob.core.windows.net/``."""
    return BlobStore(**store_options_from_url(parsed, "blob", options))


__all__ = ["BATCH_MAX", "BlobStore", "blob_from_url", "parse_batch_response"]
