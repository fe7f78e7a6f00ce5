"""An in-memory ADLS Gen2 (hierarchical namespace) test server on 127.0.0.1 (aiohttp.web).

Azurite has no ``dfs`` endpoint, so amcommit brings its own. It speaks the Data Lake REST
API the way the service answers it, for the operations amcommit and the official SDK's
basic file operations use:

* filesystems: create / delete / properties (``resource=filesystem``; the Blob forms
  ``restype=container`` too);
* paths: Create file/directory (parents created implicitly), Append / Flush (uncommitted
  data is invisible until flushed; ``flush=true`` on append), Rename
  (``x-ms-rename-source``; atomic for files and directories; **keeps the etag**; missing
  destination parent -> 404 ``RenameDestinationParentPathNotFound``), Get Properties,
  Read (``Range``/``x-ms-range``; 416 on an empty file, as the Blob endpoint does), Delete
  (``recursive``; big directories are deleted in pages of ``delete_page_size`` with an
  ``x-ms-continuation`` token), List Paths (``directory``, ``recursive``, ``maxResults``,
  continuation tokens).
* conditions: ``If-Match``/``If-None-Match`` on the target, ``x-ms-source-if-match`` /
  ``x-ms-source-if-none-match`` on a rename source; error codes and statuses as the
  service returns them (``PathNotFound``, ``SourcePathNotFound``, ``PathAlreadyExists``,
  ``ConditionNotMet``, ``SourceConditionNotMet``, ``DirectoryNotEmpty``, ``PathConflict``,
  ``InvalidFlushPosition``, ``FilesystemNotFound``...), with ``x-ms-error-code`` and a JSON
  body.
* auth: Shared Key signatures are verified (default account: Azurite's well-known
  ``devstoreaccount1``); bearer tokens and SAS signatures are accepted when registered.

Not modelled: ACLs, leases, blob-only operations (the SDK's reads go to the blob endpoint,
which here is the same server: HEAD/GET of a path answer with both dfs and blob headers),
``posix`` rename semantics beyond ``legacy`` (a file onto a file overwrites unless a
condition forbids it; onto a directory fails with ``PathAlreadyExists``).

Fault switches (:meth:`AdlsTestServer.inject`): ``throttle`` (503 ``ServerBusy`` with an
optional ``Retry-After``), ``error`` (any status/code, e.g. 500 ``OperationTimedOut``),
``lose`` (perform the operation, then drop the connection: a lost response), ``reset``
(drop the connection without performing it) and ``latency``.

Use it as a context manager; it runs its own event loop in a thread, so sync test code,
the SDK and async stores in any loop can all talk to it::

    with AdlsTestServer() as srv:
        store = DfsStore("fs1", **srv.store_options())
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hmac
import itertools
import json
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

from aiohttp import web

from amcommit.store.azure.auth import AZURITE_ACCOUNT, AZURITE_KEY, SharedKey, canonical_query, string_to_sign
from amcommit.testing.faults import RuleMatcher

FaultKind = Literal["throttle", "error", "lose", "reset", "latency"]
OPS = frozenset(
    {"filesystem", "list", "create", "mkdir", "append", "flush", "rename", "read", "props", "delete", "other"}
)


@dataclass
class ServerFault(RuleMatcher):
    """One injection rule; ``op`` from :data:`OPS` (None: any), ``path`` an fnmatch glob
    matched against the target path and a rename's source."""

    kind: FaultKind
    op: str | None = None
    path: str | None = None
    count: int | None = 1
    after: int = 0
    status: int = 503
    code: str = "ServerBusy"
    message: str = "Operations per second is over the account limit."
    retry_after: float | None = None
    seconds: float = 0.0
    matched: int = 0
    fired: int = 0
    ops: frozenset[str] | None = field(init=False)

    def __post_init__(self) -> None:
        self.ops = None if self.op is None else frozenset([self.op])


@dataclass
class _Node:
    is_dir: bool
    etag: str
    mtime: float
    ctime: float
    data: bytes = b""
    pending: dict[int, bytes] = field(default_factory=dict)
    properties: str = ""


@dataclass
class _Filesystem:
    etag: str
    mtime: float
    nodes: dict[str, _Node] = field(default_factory=dict)


def _strip(etag: str) -> str:
    e = etag.strip()
    if e.startswith("W/"):
        e = e[2:]
    return e.strip('"')


def _http_date(t: float) -> str:
    return email.utils.formatdate(t, usegmt=True)


def _filetime(t: float) -> str:
    return str(int((t + 11644473600) * 10_000_000))


class AdlsTestServer:
    """In-memory ADLS Gen2 dfs endpoint. See the module docstring."""

    def __init__(
        self,
        *,
        accounts: dict[str, str] | None = None,
        require_auth: bool = True,
        tokens: tuple[str, ...] = (),
        sas_signatures: tuple[str, ...] = (),
        delete_page_size: int = 1000,
        max_list_results: int = 5000,
    ) -> None:
        self.accounts = dict(accounts or {AZURITE_ACCOUNT: AZURITE_KEY})
        self._keys = {a: SharedKey(a, k) for a, k in self.accounts.items()}
        self.require_auth = require_auth
        self.tokens = set(tokens)
        self.sas_signatures = set(sas_signatures)
        self.delete_page_size = delete_page_size
        self.max_list_results = max_list_results
        self.filesystems: dict[tuple[str, str], _Filesystem] = {}
        self.faults: list[ServerFault] = []
        self.requests: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self.auth_failures: list[str] = []
        """String-to-sign of rejected Shared Key requests (for debugging signers)."""
        self._lock = threading.RLock()
        self._etags = itertools.count(0x8DC000000000000 + int(time.time() * 1000) % 0x10000000 * 0x100)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> AdlsTestServer:
        if self._thread is not None:
            return self
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="adls-test-server", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), loop).result(timeout=30)
        return self

    async def _start(self) -> None:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()

    def stop(self) -> None:
        """Stop serving and join the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
        self._loop = self._thread = self._runner = None

    def __enter__(self) -> AdlsTestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def account(self) -> str:
        return next(iter(self.accounts))

    @property
    def endpoint(self) -> str:
        """Account endpoint, path style: ``http://127.0.0.1:PORT/devstoreaccount1``."""
        return f"http://127.0.0.1:{self.port}/{self.account}"

    def store_options(self) -> dict[str, Any]:
        """Keyword arguments for :class:`~amcommit.store.azure.DfsStore` / ``open_store``."""
        return {
            "endpoint": self.endpoint,
            "account": self.account,
            "account_key": self.accounts[self.account],
        }

    # -- test controls -------------------------------------------------------------------
    def inject(self, kind: FaultKind, op: str | None = None, **kw: Any) -> ServerFault:
        """Add a fault rule (see :class:`ServerFault`); returns it (``fired`` counts hits)."""
        if op is not None and op not in OPS:
            raise ValueError(f"unknown op {op!r}; known: {sorted(OPS)}")
        rule = ServerFault(kind, op, **kw)
        with self._lock:
            self.faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def reset(self) -> None:
        """Forget every filesystem, fault and counter."""
        with self._lock:
            self.filesystems.clear()
            self.faults.clear()
            self.requests.clear()
            self.injected.clear()
            self.auth_failures.clear()

    def files(self, filesystem: str, account: str | None = None) -> dict[str, bytes]:
        """Committed content of every file in a filesystem (for assertions)."""
        with self._lock:
            fs = self.filesystems.get((account or self.account, filesystem))
            if fs is None:
                return {}
            return {p: n.data for p, n in fs.nodes.items() if not n.is_dir}

    def paths(self, filesystem: str, account: str | None = None) -> dict[str, bool]:
        """Every path -> is_dir (for assertions)."""
        with self._lock:
            fs = self.filesystems.get((account or self.account, filesystem))
            return {p: n.is_dir for p, n in fs.nodes.items()} if fs else {}

    # -- helpers -----------------------------------------------------------------------------
    def _etag(self) -> str:
        return f'"0x{next(self._etags):X}"'

    def _error(
        self, status: int, code: str, message: str, /, head: bool = False, extra: dict[str, str] | None = None
    ) -> web.Response:
        rid = str(uuid.uuid4())
        h = {"x-ms-error-code": code, "x-ms-request-id": rid, "x-ms-version": "2025-01-05", **(extra or {})}
        if head:
            return web.Response(status=status, headers=h)
        body = json.dumps(
            {"error": {"code": code, "message": f"{message}\nRequestId:{rid}\nTime:{_iso_now()}"}}
        )
        h["Content-Type"] = "application/json;charset=utf-8"
        return web.Response(status=status, headers=h, body=body.encode())

    def _ok(self, status: int = 200, body: bytes = b"", /, **headers: str) -> web.Response:
        h = {"x-ms-request-id": str(uuid.uuid4()), "x-ms-version": "2025-01-05", **headers}
        return web.Response(status=status, headers=h, body=body)

    def _auth(self, request: web.Request, account: str) -> web.Response | None:
        if not self.require_auth:
            return None
        head = request.method == "HEAD"
        authz = request.headers.get("Authorization", "")
        if authz.startswith("SharedKey "):
            acct, _, sig = authz[len("SharedKey ") :].partition(":")
            key = self._keys.get(acct)
            if key is not None and acct == account:
                url = request.rel_url
                sts = string_to_sign(
                    request.method, acct, url.raw_path, canonical_query(url.raw_query_string), request.headers
                )
                if hmac.compare_digest(key.signature(sts), sig):
                    return None
                with self._lock:
                    self.auth_failures.append(sts)
            return self._error(
                403,
                "AuthenticationFailed",
                "Server failed to authenticate the request. Make sure the value of Authorization header "
                "is formed correctly including the signature.",
                head,
            )
        if authz.startswith("Bearer "):
            if authz[len("Bearer ") :] in self.tokens:
                return None
            return self._error(
                401,
                "InvalidAuthenticationInfo",
                "Authentication information is not given in the correct format.",
                head,
            )
        sas_sig = request.rel_url.query.get("sig")
        if sas_sig is not None:
            if sas_sig in self.sas_signatures:
                return None
            return self._error(
                403, "AuthenticationFailed", "Signature did not match. String to sign used was ...", head
            )
        return self._error(
            401, "NoAuthenticationInformation", "Server failed to authenticate the request.", head
        )

    @staticmethod
    def _classify(request: web.Request, path: str) -> str:
        q = request.rel_url.query
        m = request.method
        if not path:
            if q.get("resource") == "filesystem" and m == "GET":
                return "list"
            return "filesystem"
        if m == "PUT":
            if "x-ms-rename-source" in request.headers:
                return "rename"
            r = q.get("resource")
            return "create" if r == "file" else "mkdir" if r == "directory" else "other"
        if m == "PATCH":
            a = q.get("action")
            return a if a in ("append", "flush") else "other"
        if m == "GET":
            return "read"
        if m == "HEAD":
            return "props"
        if m == "DELETE":
            return "delete"
        return "other"

    # -- dispatch -----------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = request.rel_url.raw_path
        segs = raw.lstrip("/").split("/", 2)
        account = unquote(segs[0]) if segs and segs[0] else ""
        fsname = unquote(segs[1]) if len(segs) > 1 else ""
        path = unquote(segs[2]).strip("/") if len(segs) > 2 else ""
        head = request.method == "HEAD"
        if account not in self.accounts:
            return self._error(
                400, "InvalidUri", "The requested URI does not represent any resource on the server.", head
            )
        denied = self._auth(request, account)
        if denied is not None:
            return denied
        body = await request.read()
        op = self._classify(request, path)
        src_path = ""
        if op == "rename":
            src_path = (
                unquote(request.headers["x-ms-rename-source"].split("?", 1)[0]).lstrip("/").partition("/")[2]
            )
        self.requests[op] += 1
        action: ServerFault | None = None
        delay = 0.0
        with self._lock:
            for rule in self.faults:
                if rule.kind == "latency":
                    if rule.check(op, (path, src_path)):
                        delay += rule.seconds
                elif action is None and rule.check(op, (path, src_path)):
                    action = rule
        if delay:
            await asyncio.sleep(delay)
        if action is not None:
            self.injected[f"{action.kind}:{op}"] += 1
            if action.kind == "throttle":
                extra = {"Retry-After": str(action.retry_after)} if action.retry_after is not None else {}
                return self._error(action.status, action.code, action.message, head, extra)
            if action.kind == "error":
                return self._error(action.status, action.code, action.message, head)
            if action.kind == "reset":
                self._drop(request)
                return web.Response(status=500)
        with self._lock:
            resp = self._dispatch(request, op, account, fsname, path, body)
        if action is not None and action.kind == "lose":
            self._drop(request)  # the answer is written to a dead connection: lost
        return resp

    @staticmethod
    def _drop(request: web.Request) -> None:
        tr = request.transport
        if tr is not None:
            tr.abort()

    def _dispatch(
        self, request: web.Request, op: str, account: str, fsname: str, path: str, body: bytes
    ) -> web.Response:
        q = request.rel_url.query
        head = request.method == "HEAD"
        if not fsname:
            return self._error(
                400, "InvalidQueryParameterValue", "Account-level operations are not supported.", head
            )
        key = (account, fsname)
        if op == "filesystem":
            return self._filesystem_op(request, key, head)
        fs = self.filesystems.get(key)
        if fs is None:
            blobish = "restype" in q or (op in ("read", "props"))
            code = "ContainerNotFound" if blobish else "FilesystemNotFound"
            return self._error(404, code, "The specified filesystem does not exist.", head)
        if op == "list":
            return self._list(request, fs)
        h = request.headers
        if op == "rename":
            return self._rename(request, account, fs, path)
        if op == "create":
            return self._create(fs, path, h, is_dir=False)
        if op == "mkdir":
            return self._create(fs, path, h, is_dir=True)
        if op == "append":
            return self._append(fs, path, q, h, body)
        if op == "flush":
            return self._flush(fs, path, q, h)
        if op == "read":
            return self._read(fs, path, h)
        if op == "props":
            return self._props(fs, path)
        if op == "delete":
            return self._delete(fs, path, q, h)
        return self._error(
            400, "UnsupportedOperation", f"{request.method} with this query is not supported here.", head
        )

    # -- filesystems ---------------------------------------------------------------------------
    def _filesystem_op(self, request: web.Request, key: tuple[str, str], head: bool) -> web.Response:
        q = request.rel_url.query
        blob = q.get("restype") == "container"
        if not blob and q.get("resource") != "filesystem":
            return self._error(
                400, "InvalidQueryParameterValue", "Value for one of the query parameters is not valid.", head
            )
        exists_code = "ContainerAlreadyExists" if blob else "FilesystemAlreadyExists"
        missing_code = "ContainerNotFound" if blob else "FilesystemNotFound"
        fs = self.filesystems.get(key)
        now = time.time()
        if request.method == "PUT":
            if fs is not None:
                return self._error(409, exists_code, "The specified filesystem already exists.")
            fs = self.filesystems[key] = _Filesystem(self._etag(), now)
            return self._ok(201, ETag=fs.etag, **{"Last-Modified": _http_date(now)})
        if fs is None:
            return self._error(404, missing_code, "The specified filesystem does not exist.", head)
        if request.method == "DELETE":
            del self.filesystems[key]
            return self._ok(202)
        if request.method in ("HEAD", "GET"):
            return self._ok(
                200,
                ETag=fs.etag,
                **{"Last-Modified": _http_date(fs.mtime), "x-ms-namespace-enabled": "true"},
            )
        return self._error(
            400, "UnsupportedHttpVerb", "The resource doesn't support the specified HTTP verb."
        )

    # -- paths -----------------------------------------------------------------------------------
    def _parent_problem(self, fs: _Filesystem, path: str, *, create: bool) -> web.Response | None:
        """PathConflict if an ancestor is a file; with ``create`` make missing ancestors."""
        segs = path.split("/")
        anc = ["/".join(segs[:i]) for i in range(1, len(segs))]
        for a in anc:
            n = fs.nodes.get(a)
            if n is not None and not n.is_dir:
                return self._error(
                    409,
                    "PathConflict",
                    "The specified path, or an element of the path, exists and its resource type is invalid "
                    "for this operation.",
                )
        if create:
            now = time.time()
            for a in anc:
                if a not in fs.nodes:
                    fs.nodes[a] = _Node(True, self._etag(), now, now)
        return None

    def _target_conditions(self, node: _Node | None, h: Any, *, create: bool) -> web.Response | None:
        im, inm = h.get("If-Match"), h.get("If-None-Match")
        if im is not None:
            if node is None:
                if create:
                    return self._error(
                        412,
                        "ConditionNotMet",
                        "The condition specified using HTTP conditional header(s) is not met.",
                    )
                return self._error(404, "PathNotFound", "The specified path does not exist.")
            if im.strip() != "*" and _strip(im) != _strip(node.etag):
                return self._error(
                    412,
                    "ConditionNotMet",
                    "The condition specified using HTTP conditional header(s) is not met.",
                )
        if inm is not None and node is not None and (inm.strip() == "*" or _strip(inm) == _strip(node.etag)):
            if create and inm.strip() == "*":
                return self._error(409, "PathAlreadyExists", "The specified path already exists.")
            return self._error(
                412, "ConditionNotMet", "The condition specified using HTTP conditional header(s) is not met."
            )
        return None

    def _create(self, fs: _Filesystem, path: str, h: Any, *, is_dir: bool) -> web.Response:
        node = fs.nodes.get(path)
        bad = self._target_conditions(node, h, create=True)
        if bad is not None:
            return bad
        bad = self._parent_problem(fs, path, create=False)
        if bad is not None:
            return bad
        if node is not None and node.is_dir != is_dir:
            return self._error(
                409,
                "PathConflict",
                "The specified path, or an element of the path, exists and its resource type is invalid for "
                "this operation.",
            )
        self._parent_problem(fs, path, create=True)
        now = time.time()
        if node is not None and is_dir:
            node.etag, node.mtime = self._etag(), now
        else:
            node = _Node(is_dir, self._etag(), now, now, properties=h.get("x-ms-properties", ""))
            fs.nodes[path] = node
        return self._ok(
            201,
            ETag=node.etag,
            **{
                "Last-Modified": _http_date(now),
                "Content-Length": "0",
                "x-ms-request-server-encrypted": "true",
            },
        )

    def _file(self, fs: _Filesystem, path: str, head: bool = False) -> _Node | web.Response:
        node = fs.nodes.get(path)
        if node is None:
            return self._error(404, "PathNotFound", "The specified path does not exist.", head)
        return node

    def _append(self, fs: _Filesystem, path: str, q: Any, h: Any, body: bytes) -> web.Response:
        node = self._file(fs, path)
        if isinstance(node, web.Response):
            return node
        if node.is_dir:
            return self._error(
                409,
                "PathConflict",
                "The specified path, or an element of the path, exists and its resource type is invalid for this operation.",
            )
        try:
            pos = int(q["position"])
        except (KeyError, ValueError):
            return self._error(
                400,
                "MissingRequiredQueryParameter",
                "A query parameter that's mandatory for this request is not specified.",
            )
        if body:
            node.pending[pos] = body
        if q.get("flush", "").lower() == "true":
            return self._flush_to(node, pos + len(body), h, status=200)
        return self._ok(202, **{"x-ms-request-server-encrypted": "true", "Content-Length": "0"})

    def _flush(self, fs: _Filesystem, path: str, q: Any, h: Any) -> web.Response:
        node = self._file(fs, path)
        if isinstance(node, web.Response):
            return node
        bad = self._target_conditions(node, h, create=False)
        if bad is not None:
            return bad
        try:
            pos = int(q["position"])
        except (KeyError, ValueError):
            return self._error(
                400,
                "MissingRequiredQueryParameter",
                "A query parameter that's mandatory for this request is not specified.",
            )
        return self._flush_to(node, pos, h, status=200)

    def _flush_to(self, node: _Node, pos: int, h: Any, *, status: int) -> web.Response:
        bad = self._error(
            400,
            "InvalidFlushPosition",
            "The uploaded data is not contiguous or the position query parameter value is not equal to the "
            "length of the file after appending the uploaded data.",
        )
        cur = len(node.data)
        if pos < cur:
            return bad
        if pos > cur:
            parts = [node.data]
            at = cur
            while at < pos:
                chunk = node.pending.get(at)
                if chunk is None:
                    return bad
                parts.append(chunk)
                at += len(chunk)
            if at != pos:
                return bad
            node.data = b"".join(parts)
            node.pending = {k: v for k, v in node.pending.items() if k >= pos}
            node.etag, node.mtime = self._etag(), time.time()
        return self._ok(
            status,
            ETag=node.etag,
            **{
                "Last-Modified": _http_date(node.mtime),
                "Content-Length": "0",
                "x-ms-request-server-encrypted": "true",
            },
        )

    def _rename(self, request: web.Request, account: str, fs: _Filesystem, dst: str) -> web.Response:
        h = request.headers
        q = request.rel_url.query
        mode = q.get("mode", "legacy")
        if mode not in ("legacy", "posix"):
            return self._error(
                400, "InvalidQueryParameterValue", "Value for one of the query parameters is not valid."
            )
        source = unquote(h["x-ms-rename-source"].split("?", 1)[0]).lstrip("/")
        src_fs_name, _, src = source.partition("/")
        src = src.strip("/")
        src_fs = self.filesystems.get((account, src_fs_name))
        if src_fs is None:
            return self._error(
                404, "SourcePathNotFound", "The source path for a rename operation does not exist."
            )
        if src_fs is not fs:
            return self._error(
                400, "InvalidRenameSourcePath", "The source path for a rename operation is not valid."
            )
        node = fs.nodes.get(src)
        if not src or node is None:
            return self._error(
                404, "SourcePathNotFound", "The source path for a rename operation does not exist."
            )
        sim, sinm = h.get("x-ms-source-if-match"), h.get("x-ms-source-if-none-match")
        if (sim is not None and sim.strip() != "*" and _strip(sim) != _strip(node.etag)) or (
            sinm is not None and (sinm.strip() == "*" or _strip(sinm) == _strip(node.etag))
        ):
            return self._error(
                412,
                "SourceConditionNotMet",
                "The source condition specified using HTTP conditional header(s) is not met.",
            )
        target = fs.nodes.get(dst)
        bad = self._target_conditions(target, h, create=False)
        if bad is not None:
            if bad.status == 404:  # If-Match on a missing destination
                return self._error(
                    412,
                    "ConditionNotMet",
                    "The condition specified using HTTP conditional header(s) is not met.",
                )
            return bad
        if dst == src:
            return self._ok(
                201, ETag=node.etag, **{"Last-Modified": _http_date(node.mtime), "Content-Length": "0"}
            )
        if dst.startswith(src + "/"):
            return self._error(
                400, "InvalidDestinationPath", "The specified path, or an element of the path, is not valid."
            )
        par = dst.rpartition("/")[0]
        if par:
            pn = fs.nodes.get(par)
            if pn is None:
                return self._error(
                    404,
                    "RenameDestinationParentPathNotFound",
                    "The parent directory of the destination path does not exist.",
                )
            if not pn.is_dir:
                return self._error(
                    409,
                    "PathConflict",
                    "The specified path, or an element of the path, exists and its resource type is invalid for "
                    "this operation.",
                )
        if target is not None:
            if target.is_dir or node.is_dir:
                return self._error(409, "PathAlreadyExists", "The specified path already exists.")
            del fs.nodes[dst]
        # atomic move of the node and (for a directory) its subtree; etags are kept
        moved = {src: node}
        if node.is_dir:
            pre = src + "/"
            moved.update({p: n for p, n in fs.nodes.items() if p.startswith(pre)})
        for p in moved:
            del fs.nodes[p]
        for p, n in moved.items():
            fs.nodes[dst + p[len(src) :]] = n
        return self._ok(
            201,
            ETag=node.etag,
            **{"Last-Modified": _http_date(node.mtime), "Content-Length": "0"},
        )

    def _common_headers(self, node: _Node) -> dict[str, str]:
        h = {
            "ETag": node.etag,
            "Last-Modified": _http_date(node.mtime),
            "x-ms-creation-time": _http_date(node.ctime),
            "x-ms-resource-type": "directory" if node.is_dir else "file",
            "x-ms-blob-type": "BlockBlob",
            "x-ms-server-encrypted": "true",
            "x-ms-lease-state": "available",
            "x-ms-lease-status": "unlocked",
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "x-ms-owner": "$superuser",
            "x-ms-group": "$superuser",
            "x-ms-permissions": "rwxr-x---" if node.is_dir else "rw-r-----",
        }
        if node.properties:
            h["x-ms-properties"] = node.properties
        if node.is_dir:
            h["x-ms-meta-hdi_isfolder"] = "true"
        return h

    def _props(self, fs: _Filesystem, path: str) -> web.Response:
        node = self._file(fs, path, head=True)
        if isinstance(node, web.Response):
            return node
        h = self._common_headers(node)
        h["Content-Length"] = str(len(node.data))
        return self._ok(200, **h)

    def _read(self, fs: _Filesystem, path: str, h: Any) -> web.Response:
        node = self._file(fs, path)
        if isinstance(node, web.Response):
            return node
        hdrs = self._common_headers(node)
        data = node.data
        rng = h.get("x-ms-range") or h.get("Range")
        if rng:
            try:
                unit, _, spec = rng.partition("=")
                a, _, b = spec.partition("-")
                start = int(a)
                end = int(b) if b else len(data) - 1
                if unit.strip() != "bytes" or start < 0:
                    raise ValueError
            except ValueError:
                return self._error(
                    400,
                    "InvalidRange",
                    "The range specified is invalid for the current size of the resource.",
                )
            if start >= len(data):
                return self._error(
                    416,
                    "InvalidRange",
                    "The range specified is invalid for the current size of the resource.",
                    extra={"Content-Range": f"bytes */{len(data)}"},
                )
            end = min(end, len(data) - 1)
            hdrs["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            return self._ok(206, data[start : end + 1], **hdrs)
        return self._ok(200, data, **hdrs)

    def _delete(self, fs: _Filesystem, path: str, q: Any, h: Any) -> web.Response:
        node = self._file(fs, path)
        if isinstance(node, web.Response):
            return node
        bad = self._target_conditions(node, h, create=False)
        if bad is not None:
            return bad
        if not node.is_dir:
            del fs.nodes[path]
            return self._ok(200)
        recursive = q.get("recursive", "").lower() == "true"
        pre = path + "/"
        below = sorted((p for p in fs.nodes if p.startswith(pre)), key=lambda p: (-p.count("/"), p))
        if below and not recursive:
            return self._error(
                409,
                "DirectoryNotEmpty",
                "The recursive query parameter value must be true to delete a non-empty directory.",
            )
        page = below[: self.delete_page_size]
        for p in page:
            del fs.nodes[p]
        if len(below) > len(page):
            token = base64.b64encode(f"del:{path}:{uuid.uuid4().hex}".encode()).decode()
            return self._ok(200, **{"x-ms-continuation": token})
        del fs.nodes[path]
        return self._ok(200)

    def _list(self, request: web.Request, fs: _Filesystem) -> web.Response:
        q = request.rel_url.query
        rec = q.get("recursive")
        if rec is None:
            return self._error(
                400,
                "MissingRequiredQueryParameter",
                "A query parameter that's mandatory for this request is not specified.",
            )
        recursive = rec.lower() == "true"
        directory = q.get("directory", "").strip("/")
        try:
            limit = min(int(q.get("maxResults", self.max_list_results)), self.max_list_results)
        except ValueError:
            return self._error(
                400, "InvalidQueryParameterValue", "Value for one of the query parameters is not valid."
            )
        if limit < 1:
            return self._error(
                400, "InvalidQueryParameterValue", "Value for one of the query parameters is not valid."
            )
        if directory:
            dnode = fs.nodes.get(directory)
            if dnode is None:
                return self._error(404, "PathNotFound", "The specified path does not exist.")
            if not dnode.is_dir:
                names = [directory]
            else:
                names = sorted(self._below(fs, directory + "/", recursive))
        else:
            names = sorted(self._below(fs, "", recursive))
        token = q.get("continuation")
        if token:
            try:
                after = base64.b64decode(token.encode()).decode()
            except (ValueError, UnicodeDecodeError):
                return self._error(
                    400, "InvalidQueryParameterValue", "Value for one of the query parameters is not valid."
                )
            names = [n for n in names if n > after]
        page, more = names[:limit], len(names) > limit
        out = []
        for n in page:
            node = fs.nodes[n]
            e: dict[str, str] = {
                "contentLength": str(len(node.data)),
                "creationTime": _filetime(node.ctime),
                "etag": _strip(node.etag),
                "group": "$superuser",
                "lastModified": _http_date(node.mtime),
                "name": n,
                "owner": "$superuser",
                "permissions": "rwxr-x---" if node.is_dir else "rw-r-----",
            }
            if node.is_dir:
                e["isDirectory"] = "true"
            out.append(e)
        headers = {"Content-Type": "application/json;charset=utf-8"}
        if more:
            headers["x-ms-continuation"] = base64.b64encode(page[-1].encode()).decode()
        return self._ok(200, json.dumps({"paths": out}).encode(), **headers)

    @staticmethod
    def _below(fs: _Filesystem, pre: str, recursive: bool) -> Iterator[str]:
        for p in fs.nodes:
            if pre and not p.startswith(pre):
                continue
            if not recursive and "/" in p[len(pre) :]:
                continue
            yield p


def _iso_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.0000000Z", time.gmtime())


__all__ = ["OPS", "AdlsTestServer", "ServerFault"]
