"""``amcommit rollback DEST --instant I``: roll back an inflight instant of a Hudi table.

Registered from :mod:`amcommit.cli` by :func:`add_commands` (one line there). What it does is
:func:`amcommit.table.rollback.rollback_instant`: every file stamped with the instant, the
staging folder and heartbeat, the instant files last; a completed instant is refused, and
the instant of a live writer (fresh heartbeat) too unless ``--force``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["add_commands", "cmd_rollback"]


def cmd_rollback(args: argparse.Namespace) -> int:
    from amcommit.cli import _store_options
    from amcommit.committer.report import JobReport
    from amcommit.loop import run_blocking
    from amcommit.store.schemes import open_location
    from amcommit.table.rollback import rollback_instant

    opts = _store_options(args)

    async def main() -> JobReport:
        store, dest = open_location(args.dest, **opts)
        async with store:
            return await rollback_instant(store, dest, args.instant, force=args.force)

    report = run_blocking(main)
    if report.rolled_back:
        print(f"instant {args.instant} rolled back: its files, staging, heartbeat and instant files removed")
    else:
        print(f"instant {args.instant}: nothing to roll back")
    return 0


def add_commands(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    store_args: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``rollback`` to the CLI's subcommands."""
    sp = sub.add_parser(
        "rollback",
        help="roll back an inflight instant of a Hudi table",
        description="Roll back an inflight instant of a Hudi table: remove every file stamped with "
        "it, its staging and heartbeat, then its instant files. A completed instant is refused, and so "
        "is the instant of a live writer (heartbeat younger than writer_ttl) unless --force.",
    )
    sp.add_argument("dest", help="table URL or path")
    sp.add_argument("--instant", required=True, help="the inflight instant time (17 digits)")
    sp.add_argument(
        "--force",
        action="store_true",
        help="roll back even if the instant's writer looks alive (fresh heartbeat): its files are deleted "
        "and its commit fails",
    )
    store_args(sp)
    sp.set_defaults(func=cmd_rollback)
