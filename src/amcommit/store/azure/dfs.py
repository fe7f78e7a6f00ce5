"""ADLS Gen2 (hierarchical namespace) store over the Data Lake ``dfs`` REST API (aiohttp).

Operations and their limits:

* ``rename``: one Path Create with ``x-ms-rename-source`` (``mode=legacy``), atomic for a
  file or a whole directory. A declared file (``src_etag``/``rename_id``) that is a
  directory is refused: by the source etag precondition, else by the stat below. ``If-None-Match: *`` makes it never overwrite;
  ``x-ms-source-if-match`` carries ``src_etag``. The namespace keeps a file's etag across a
  rename, so a retry that finds its source gone (404 ``SourcePathNotFound``) compares the
  destination's etag with the source's and, when equal, reports
  ``RenameResult(recovered=True)``. Without ``src_etag`` the source is stat'ed first to
  learn it (one extra request). A missing destination parent
  (``RenameDestinationParentPathNotFound``) is created and the rename retried once.
* ``put``: Path Create of a hidden temporary file next to the target
  (``.amcommit-tmp-<uuid>``, never listed), Append (in ``append_size`` chunks), Flush, then
  a rename onto the target: readers see the old or the new file, never a partial one (a
  direct Create would show an empty file until the Flush). ``PutMode.CREATE`` renames with
  ``If-None-Match: *``, ``UpdateIf`` with ``If-Match``. Four requests for a small file.
  A failed upload is restarted on a fresh temporary file; leftovers are deleted on a best
  effort basis.
* ``delete(recursive=True)``: Path Delete, following ``x-ms-continuation`` for large
  directories. Not atomic: the service deletes a directory in batches.
* ``mkdirs``: Create Directory (creates parents; repeating it is harmless).
* ``list``: List Paths with continuation tokens; not a snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import msgspec

from amcommit.errors import AlreadyExists, NotFound, PreconditionFailed, StoreError, Transient
from amcommit.paths import ParsedUri, basename, check_path, join, parent
from amcommit.store.azure._common import (
    AzureBase,
    norm_etag,
    parse_http_date,
    quote_path,
    store_options_from_url,
)
from amcommit.store.base import (
    TMP_PREFIX,
    Capabilities,
    ObjectInfo,
    PutMode,
    RenameResult,
    StoreRecipe,
    UpdateIf,
    WriteMode,
)
from amcommit.store.names import AZURE_LIMITS, check_storable, unreachable
from amcommit.store.proof import Expected, Verdict, judge_rename
from amcommit.store.retry import call_with_retries

_MiB = 1024 * 1024


class DfsStore(AzureBase):
    """A :class:`~amcommit.store.base.Store` over one ADLS Gen2 filesystem (HNS account)."""

    capabilities = Capabilities(
        atomic_rename=True,
        directories=True,
        etag_kept_on_rename=True,
        rename_provenance=False,
        conditional_put=True,
        name="dfs",
        retries=True,
        name_limits=AZURE_LIMITS,
    )

    def __init__(
        self,
        filesystem: str,
        *,
        append_size: int = 4 * _MiB,
        list_page_size: int = 5000,
        **options: Any,
    ) -> None:
        options.pop("container", None)
        super().__init__(filesystem, **options)
        self.recipe = StoreRecipe(
            type(self),
            (filesystem,),
            {
                **{k: v for k, v in options.items() if k != "limiter"},
                "append_size": append_size,
                "list_page_size": list_page_size,
            },
        )
        self.append_size = max(1, append_size)
        self.list_page_size = list_page_size

    @property
    def filesystem(self) -> str:
        return self.container

    def _default_root_uri(self) -> str:
        return f"abfs://{self.container}@{self.account}.dfs.core.windows.net/"

    # -- filesystem ------------------------------------------------------------------------
    async def create_filesystem(self) -> bool:
        """Create the filesystem; False if it already existed."""
        return await self._create_root("filesystem", "resource=filesystem")

    async def delete_filesystem(self) -> bool:
        """Delete the filesystem and everything in it; False if it did not exist."""
        return await self._delete_root("filesystem", "resource=filesystem")

    create_container = create_filesystem
    delete_container = delete_filesystem

    # -- Store protocol --------------------------------------------------------------------
    async def stat(self, path: str) -> ObjectInfo:
        """Path Get Properties (file or directory)."""
        check_path(path)
        if path == "":
            return ObjectInfo("", 0, is_dir=True)
        gone = unreachable(AZURE_LIMITS, path, "stat")
        if gone is not None:
            raise gone
        h = (await self.request("stat", "HEAD", self.url(path), path=path)).headers
        is_dir = h.get("x-ms-resource-type") == "directory"
        return ObjectInfo(
            path=path,
            size=0 if is_dir else int(h.get("Content-Length", "0")),
            etag=None if is_dir else norm_etag(h.get("ETag")),
            is_dir=is_dir,
            mtime=parse_http_date(h.get("Last-Modified")),
        )

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        """List Paths below directory ``prefix`` (continuation paging; not a snapshot)."""
        check_path(prefix)
        if unreachable(AZURE_LIMITS, prefix, "list") is not None:
            return  # nothing can be below a name the store cannot hold
        base = f"resource=filesystem&recursive={'true' if recursive else 'false'}&maxResults={self.list_page_size}"
        if prefix:
            base += f"&directory={quote(prefix, safe='')}"
        token: str | None = None
        while True:
            q = base + (f"&continuation={quote(token, safe='')}" if token else "")
            try:
                r = await self.request("list", "GET", self.url("", q), path=prefix)
            except NotFound as e:
                if e.code in ("FilesystemNotFound", "ContainerNotFound"):
                    raise
                return
            try:
                paths = msgspec.json.decode(r.body).get("paths", [])
            except (msgspec.DecodeError, AttributeError):
                raise Transient("malformed List Paths answer", op="list", path=prefix) from None
            for p in paths:
                name = p.get("name", "")
                if not name or name == prefix or basename(name).startswith(TMP_PREFIX):
                    continue
                is_dir = str(p.get("isDirectory", "false")).lower() == "true"
                if is_dir and recursive:
                    continue
                yield ObjectInfo(
                    path=name,
                    size=0 if is_dir else int(p.get("contentLength") or 0),
                    etag=None if is_dir else norm_etag(p.get("etag") or p.get("eTag")),
                    is_dir=is_dir,
                    mtime=parse_http_date(p.get("lastModified")),
                )
            token = r.headers.get("x-ms-continuation") or None
            if not token:
                return

    async def get(self, path: str) -> bytes:
        """Path Read of the whole file."""
        check_path(path, allow_root=False)
        gone = unreachable(AZURE_LIMITS, path, "get")
        if gone is not None:
            raise gone
        return (await self.request("get", "GET", self.url(path), path=path)).body

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (one ranged Path Read, ``x-ms-range``; fewer at the end)."""
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
        """Upload to a temporary file, then rename it into place (see the module doc)."""
        check_path(path, allow_root=False)
        check_storable(AZURE_LIMITS, path, "put")
        dirname = parent(path)

        async def attempt(n: int) -> tuple[str, str]:
            tmp = join(dirname, f"{TMP_PREFIX}{uuid.uuid4().hex}")
            try:
                return tmp, await self._upload(tmp, data)
            except BaseException:
                await self._discard(tmp)
                raise

        tmp, etag = await call_with_retries(attempt, policy=self.retry, stats=self.iostats)
        dst_headers: dict[str, str] = {}
        if mode is PutMode.CREATE:
            dst_headers["If-None-Match"] = "*"
        elif isinstance(mode, UpdateIf):
            dst_headers["If-Match"] = mode.etag
        try:
            await self._rename(tmp, path, src_etag=etag, dst_headers=dst_headers, op="put")
        except BaseException as e:
            await self._discard(tmp)
            if isinstance(e, NotFound) and isinstance(mode, UpdateIf):
                raise PreconditionFailed("no object to update", op="put", path=path) from None
            if isinstance(e, StoreError) and e.op == "rename":
                e.op = "put"
                e.path = path
            raise
        return ObjectInfo(path, len(data), etag)

    async def _discard(self, tmp: str) -> None:
        try:
            await self.request("put", "DELETE", self.url(tmp, "recursive=false"), path=tmp)
        except Exception:  # best effort: a leftover hidden temporary file is harmless
            pass

    async def _upload(self, tmp: str, data: bytes) -> str:
        """Create + Append + Flush ``tmp``; returns its etag."""
        try:
            r = await self.request(
                "put", "PUT", self.url(tmp, "resource=file"), path=tmp, headers={"If-None-Match": "*"}
            )
            etag = norm_etag(r.headers.get("ETag"))
        except AlreadyExists:
            etag = None  # an earlier attempt of ours created it (lost answer): the name is unique
        for off in range(0, len(data), self.append_size):
            await self.request(
                "put",
                "PATCH",
                self.url(tmp, f"action=append&position={off}"),
                path=tmp,
                data=data[off : off + self.append_size],
                idempotent=False,
            )
        if data or etag is None:
            r = await self.request(
                "put", "PATCH", self.url(tmp, f"action=flush&position={len(data)}&close=true"), path=tmp
            )
            etag = norm_etag(r.headers.get("ETag"))
        if etag is None:
            raise Transient("no etag in the flush answer", op="put", path=tmp)
        return etag

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        """Atomic rename that never overwrites; recovers lost answers by etag."""
        check_path(src, allow_root=False)
        check_path(dst, allow_root=False)
        gone = unreachable(AZURE_LIMITS, src, "rename")
        if gone is not None:
            raise gone
        check_storable(AZURE_LIMITS, dst, "rename")
        if src == dst:
            raise AlreadyExists("source and destination are the same", op="rename", path=dst)
        known = src_etag
        if known is None:
            st = await self.stat(src)  # NotFound: the source really is missing (no etag to prove)
            if st.is_dir and rename_id is not None:  # a declared file (see Store.rename)
                raise PreconditionFailed("source is a directory, not a file", op="rename", path=src)
            known = st.etag
            precondition = None
        else:
            # a directory's etag never equals a file's: x-ms-source-if-match refuses it
            precondition = src_etag
        return await self._rename(
            src, dst, src_etag=precondition, known_etag=known, dst_headers={"If-None-Match": "*"}, op="rename"
        )

    async def _proven(self, dst: str, etag: str | None) -> RenameResult | None:
        """The rename already happened if ``dst`` has the source's etag (kept on HNS)."""
        if etag is None:
            return None
        try:
            d = await self.stat(dst)
        except NotFound:
            return None
        # (no rename id is recorded on HNS: the kept etag is the proof)
        if judge_rename(self.capabilities, Expected("", etag=norm_etag(etag)), d, None) is Verdict.DONE:
            return RenameResult(dst=dst, etag=d.etag, recovered=True)
        return None

    async def _rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None,
        dst_headers: dict[str, str],
        op: str,
        known_etag: str | None = None,
    ) -> RenameResult:
        known = known_etag or src_etag
        source = f"/{quote_path(self.container)}/{quote_path(src)}"
        if self._sas:
            source += f"?{self._sas}"
        headers = {"x-ms-rename-source": source, **dst_headers}
        if src_etag is not None:
            headers["x-ms-source-if-match"] = src_etag
        url = self.url(dst, "mode=legacy")
        for again in (False, True):
            try:
                r = await self.request("rename", "PUT", url, path=src, headers=headers)
                return RenameResult(dst=dst, etag=norm_etag(r.headers.get("ETag")) or norm_etag(known))
            except NotFound as e:
                if e.code == "RenameDestinationParentPathNotFound":
                    if again:
                        raise
                    await self.mkdirs(parent(dst))
                    continue
                # the source is gone: did an earlier attempt (lost answer) do it?
                proof = await self._proven(dst, known)
                if proof is not None:
                    return proof
                raise NotFound(
                    "source does not exist", op=op, path=src, status=e.status, code=e.code
                ) from None
            except (PreconditionFailed, AlreadyExists) as e:
                if e.code == "SourceConditionNotMet":
                    raise PreconditionFailed(
                        f"source is no longer at etag {src_etag}",
                        op=op,
                        path=src,
                        status=e.status,
                        code=e.code,
                    ) from None
                proof = await self._proven(dst, known)  # an earlier attempt's answer lost?
                if proof is not None:
                    return proof
                if "If-Match" in dst_headers:
                    raise PreconditionFailed(
                        f"destination is not at etag {dst_headers['If-Match']}",
                        op=op,
                        path=dst,
                        status=e.status,
                        code=e.code,
                    ) from None
                raise AlreadyExists(
                    "destination exists", op=op, path=dst, status=e.status, code=e.code
                ) from None
        raise AssertionError("unreachable")

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Path Delete (following continuation tokens for big directories); not atomic."""
        check_path(path, allow_root=False)
        if unreachable(AZURE_LIMITS, path, "delete") is not None:
            return False  # nothing of that name, nor below it, can exist
        token: str | None = None
        while True:
            q = f"recursive={'true' if recursive else 'false'}"
            if token:
                q += f"&continuation={quote(token, safe='')}"
            try:
                r = await self.request("delete", "DELETE", self.url(path, q), path=path)
            except NotFound as e:
                # nothing there, or an earlier attempt of ours (lost answer) deleted it
                return token is not None or e.attempts > 1
            token = r.headers.get("x-ms-continuation") or None
            if not token:
                return True

    async def mkdirs(self, path: str) -> None:
        """Create Directory (with parents); AlreadyExists if a file is in the way."""
        check_path(path)
        if path == "":
            return
        check_storable(AZURE_LIMITS, path, "mkdirs")
        try:
            await self.request("mkdirs", "PUT", self.url(path, "resource=directory"), path=path)
        except AlreadyExists as e:
            raise AlreadyExists(
                "a file is in the way", op="mkdirs", path=path, status=e.status, code=e.code
            ) from None


def dfs_from_url(parsed: ParsedUri, **options: Any) -> DfsStore:
    """``open_store`` factory for ``abfs[s]://filesystem@account.dfs.core.windows.net/``."""
    opts = store_options_from_url(parsed, "dfs", options)
    return DfsStore(opts.pop("container"), **opts)


__all__ = ["DfsStore", "dfs_from_url"]
