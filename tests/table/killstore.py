"""The store wrapper the table kill tests' child processes use: it SIGKILLs its own process
just before the ``nth`` mutating request (put, rename, delete, mkdirs) whose description
``"<op> <path>"`` (a rename: ``"rename <src> -> <dst>"``) matches ``pattern`` (None: every
mutating request counts). Reads pass through. ``count`` is how many requests matched."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator
from typing import Any

from amcommit.store.base import ObjectInfo, RenameResult, Store, read_range


class KillStore:
    def __init__(self, inner: Store, pattern: str | None = None, nth: int = 1) -> None:
        self.inner = inner
        self.pattern = None if pattern is None else re.compile(pattern)
        self.nth = nth
        self.count = 0
        self.capabilities = inner.capabilities
        self.iostats = inner.iostats

    def _check(self, what: str) -> None:
        if self.pattern is None or self.pattern.search(what):
            self.count += 1
            if self.count >= self.nth:
                os.kill(os.getpid(), signal.SIGKILL)

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    async def stat(self, path: str) -> ObjectInfo:
        return await self.inner.stat(path)

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        return self.inner.list(prefix, recursive=recursive)

    async def get(self, path: str) -> bytes:
        return await self.inner.get(path)

    async def get_range(self, path: str, start: int, length: int) -> bytes:
        return await read_range(self.inner, path, start, length)

    async def put(self, path: str, data: bytes, **kw: Any) -> ObjectInfo:
        self._check(f"put {path}")
        return await self.inner.put(path, data, **kw)

    async def rename(self, src: str, dst: str, **kw: Any) -> RenameResult:
        self._check(f"rename {src} -> {dst}")
        return await self.inner.rename(src, dst, **kw)

    async def delete(self, path: str, **kw: Any) -> bool:
        self._check(f"delete {path}")
        return await self.inner.delete(path, **kw)

    async def mkdirs(self, path: str) -> None:
        self._check(f"mkdirs {path}")
        await self.inner.mkdirs(path)

    async def aclose(self) -> None:
        await self.inner.aclose()
