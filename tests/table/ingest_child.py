"""Child process for test_folder_ingest: runs ``examples/folder_ingest.py`` (its ``run``) on a
local table whose store SIGKILLs the process before the ``nth`` mutating request matching a
regex (``"-"``: never).

argv: root inbox checkpoint kill_regex nth batch_files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import anyio

from amcommit.store.local import LocalStore
from tests.table.label_child import KillOn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "folder_ingest.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("folder_ingest", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    root, inbox, checkpoint, pattern, nth, batch_files = sys.argv[1:7]
    example = load_example()

    async def go() -> None:
        store = KillOn(LocalStore(root, fsync=False), pattern, int(nth))
        await example.run(store, "tbl", Path(inbox), Path(checkpoint), "ingest", int(batch_files), True)

    anyio.run(go)


if __name__ == "__main__":
    main()
