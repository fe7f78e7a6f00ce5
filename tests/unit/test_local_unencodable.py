"""A path the local file system cannot name (a lone surrogate: JSON and Python strings can
hold one, UTF-8 cannot) fails every LocalStore operation with a typed InvalidInput that
prints, never with the codec's UnicodeEncodeError; in a batch of renames only that request
fails."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from amcommit.errors import InvalidInput
from amcommit.store.base import PutMode, RenameRequest
from amcommit.store.local import LocalStore

BAD = "dir/bad-\ud800.bin"


def _check(e: InvalidInput) -> None:
    text = str(e)
    text.encode("utf-8")  # printable as UTF-8 (a log line, the CLI)
    assert "cannot be encoded" in text


@pytest.mark.parametrize(
    "op", ["stat", "get", "put", "delete", "mkdirs", "rename_from", "rename_to", "get_many", "list"]
)
def test_every_operation_says_invalid_input(tmp_path: Path, op: str) -> None:
    async def run() -> None:
        store = LocalStore(str(tmp_path), fsync=False)
        async with store:
            await store.put("dir/good.bin", b"x")
            calls = {
                "stat": lambda: store.stat(BAD),
                "get": lambda: store.get(BAD),
                "put": lambda: store.put(BAD, b"y", mode=PutMode.CREATE),
                "delete": lambda: store.delete(BAD),
                "mkdirs": lambda: store.mkdirs(BAD),
                "rename_from": lambda: store.rename(BAD, "dir/new.bin"),
                "rename_to": lambda: store.rename("dir/good.bin", BAD),
                "get_many": lambda: store.get_many(["dir/good.bin", BAD]),
            }
            with pytest.raises(InvalidInput) as ei:
                if op == "list":
                    async for _ in store.list(BAD, recursive=True):
                        pass
                else:
                    await calls[op]()
            _check(ei.value)
            assert await store.get("dir/good.bin") == b"x"  # nothing else touched

    anyio.run(run)


def test_a_batch_fails_only_the_unencodable_request(tmp_path: Path) -> None:
    async def run() -> None:
        store = LocalStore(str(tmp_path), fsync=False)
        async with store:
            for n in ("a", "b"):
                await store.put(f"src/{n}.bin", n.encode())
            etag = {n: (await store.stat(f"src/{n}.bin")).etag for n in ("a", "b")}
            failed = await store.rename_batch(
                [
                    RenameRequest("src/a.bin", "dst/a.bin", etag["a"]),
                    RenameRequest("src/b.bin", "dst/b-\ud800.bin", etag["b"]),
                ]
            )
            assert list(failed) == [1] and isinstance(failed[1], InvalidInput)
            _check(failed[1])
            assert await store.get("dst/a.bin") == b"a"
            assert await store.get("src/b.bin") == b"b"  # left where it was

    anyio.run(run)
