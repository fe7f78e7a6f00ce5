"""Where a demo commits: a bucket on an emulator (:mod:`amcommit.emulators.targets`) or a
local directory (a fresh temporary one, removed afterwards unless ``--keep``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from amcommit.errors import ConfigError


@dataclass
class DemoTarget:
    url: str
    """The destination (a URL, or a local path)."""
    options: dict[str, Any] = field(repr=False)
    """Store options for :func:`~amcommit.store.schemes.open_location` / ``.option(...)``."""
    where: str
    local_dir: str | None = None
    """The destination as a local directory (local target), else None."""


@contextlib.contextmanager
def demo_target(args: argparse.Namespace, name: str = "events") -> Iterator[DemoTarget]:
    """The destination ``args`` ask for (``--target``, ``--dest``, ``--keep``); an emulator
    runs (and a temporary directory exists) until the block ends."""
    if args.target in ("gcs", "azurite"):
        from amcommit.emulators.targets import start_target

        with start_target(args.target, "amcommit-demo") as emu:
            yield DemoTarget(
                emu.location(f"demo-{uuid.uuid4().hex[:8]}/{name}"), dict(emu.options), emu.description
            )
        return
    if args.dest:
        from amcommit.store.schemes import parse_location

        parsed = parse_location(args.dest)
        if parsed.scheme != "file":
            raise ConfigError("--dest is for local paths; use commit-job for cloud URLs")
        path = "/" + parsed.path
        yield DemoTarget(path, {}, f"local directory {path}", local_dir=path)
        return
    tmp = tempfile.mkdtemp(prefix="amcommit-demo-")
    try:
        dest = os.path.join(tmp, name)
        yield DemoTarget(dest, {}, f"local directory {tmp}", local_dir=dest)
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["DemoTarget", "check_at_least_one", "demo_target"]


def check_at_least_one(**values: int) -> None:
    """ConfigError naming the first option (``io_threads`` -> ``--io-threads``) below 1."""
    for name, value in values.items():
        if value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1")
