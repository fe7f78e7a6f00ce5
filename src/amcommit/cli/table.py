"""Table commands of the ``amcommit`` command line.

    amcommit timeline DEST [--archived] [--json]         the instants, newest last (deltacommits, compactions);
                                                         --archived: the archived ones first, marked
    amcommit changes DEST --since I|000 [--until J] [--records] [--json]
                                                         files added / replaced in (I, J]; --records: the
                                                         records changed (an incremental read)
    amcommit clean DEST --retain-commits N [--dry-run]   delete files replaced before the latest N commits
    amcommit rollback DEST --instant I [--force]         roll back an inflight instant
    amcommit compact DEST [--target-io-mb MB] [--json]   compact a Merge-on-Read table's log files
    amcommit archive DEST [--keep-max N --keep-min M]    move old instants into .hoodie/archived/

Registered by :func:`add_commands` from :func:`amcommit.cli.main.build_parser`; errors go through
``amcommit.cli.main`` (one line, no traceback).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from amcommit.cli.common import URL_FORMS, committer_config, int_arg, on_store, store_args, store_options
from amcommit.errors import ConfigError
from amcommit.table.commit.archive import ArchiveReport
from amcommit.table.commit.clean import CleanReport
from amcommit.table.timeline.instants import Changes
from amcommit.table.timeline.reader import COUNT_COLUMNS, InstantInfo

__all__ = [
    "add_commands",
    "add_rollback",
    "changes_json",
    "cmd_compact",
    "cmd_rollback",
    "format_instants",
    "instants_json",
]

_COLUMNS = ("TIME", "ACTION", "STATE", "FILES", "BYTES", "ROWS", *COUNT_COLUMNS, "DURATION", "LABEL")


def instants_json(instants: list[InstantInfo]) -> list[dict[str, Any]]:
    return [asdict(i) for i in instants]


def changes_json(c: Changes) -> dict[str, Any]:
    return {
        "since": c.since,
        "until": c.until,
        "instants": [{"time": i.time, "action": i.action, "label": c.labels.get(i.time)} for i in c.instants],
        "added": [asdict(f) for f in c.added],
        "logs": [asdict(f) for f in c.logs],
        "replaced": [{"partition": p, "file_id": fid} for p, fid in c.replaced],
    }


def _num(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _row(i: InstantInfo) -> list[str]:
    if i.compacted:
        action = f"{i.action} (compacted)"
    elif i.operation in (None, "CLEAN"):
        action = i.action
    else:
        action = f"{i.action} ({i.operation})"
    dur = "-" if i.duration is None else f"{i.duration:.3f} s"
    state = f"{i.state} (archived)" if i.archived else i.state
    return [i.time, action, state, *map(_num, (i.files, i.bytes, i.rows, *i.counts)), dur, i.label or ""]


def format_instants(instants: list[InstantInfo], *, use_rich: bool | None = None) -> str:
    """The instants as a table: rich's if the package is importable, else aligned text."""
    rows = [_row(i) for i in instants]
    if use_rich is not False:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            if use_rich:
                raise
        else:
            table = Table(box=None, pad_edge=False)
            for c in _COLUMNS:
                table.add_column(c, justify="left" if c in ("TIME", "ACTION", "STATE", "LABEL") else "right")
            for r in rows:
                table.add_row(*r)
            console = Console(width=200, color_system=None, force_terminal=False)
            with console.capture() as cap:
                console.print(table)
            return "\n".join(line.rstrip() for line in cap.get().splitlines())
    allrows = [list(_COLUMNS), *rows]
    widths = [max(len(r[k]) for r in allrows) for k in range(len(_COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in allrows)


def _open(args: argparse.Namespace) -> Any:
    from amcommit.table.timeline.reader import open_timeline

    return open_timeline(args.dest, **store_options(args))


def cmd_timeline(args: argparse.Namespace) -> int:
    instants = _open(args).instants(archived=args.archived)
    if args.json:
        print(json.dumps(instants_json(instants), indent=2))
    elif not instants:
        print("no instants")
    else:
        print(format_instants(instants))
    return 0


FROM_START = frozenset({"0", "00", "000"})
"""``--since`` values meaning "from the start of the timeline" (Hudi's ``000``, as the Spark
reader's ``hoodie.datasource.read.begin.instanttime`` takes it)."""


def _records(args: argparse.Namespace, since: str | None) -> list[dict[str, Any]]:
    """The records changed in ``(since, until]``: an incremental read
    (:func:`amcommit.table.query.read.read`: on a Merge-on-Read table each slice's base file
    merged with its logs), rows as JSON-ready dicts."""
    from amcommit.table.query.read import read

    table = read(
        args.dest,
        since=since or "000",
        until=args.until,
        query_type="incremental",
        store_options=store_options(args),
    )
    return [{k: _jsonable(v) for k, v in r.items()} for r in table.to_pylist()]


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def cmd_changes(args: argparse.Namespace) -> int:
    since = None if args.since.strip() in FROM_START else args.since
    c: Changes = _open(args).changes(since, args.until)
    records = _records(args, since) if args.records else None
    if args.json:
        out = changes_json(c)
        if records is not None:
            out["records"] = records
        print(json.dumps(out, indent=2))
        return 0
    until = c.until or "latest"
    print(
        f"changes in ({c.since or 'start'}, {until}]: {len(c.instants)} instants, {len(c.added)} files added, "
        + (f"{len(c.logs)} log files written, " if c.logs else "")
        + f"{len(c.replaced)} file groups replaced"
        + ("" if records is None else f", {len(records):,} records changed")
    )
    for f in c.added:
        print(f"+ {f.path}  ({f.rows:,} rows, {f.size:,} bytes, {f.instant})")
    for log in c.logs:
        print(f"+ {log.path}  (log, {log.size:,} bytes, {log.instant})")
    for p, fid in c.replaced:
        print(f"- {p + '/' if p else ''}{fid}  (file group replaced)")
    for r in records or ():
        print(json.dumps(r, separators=(",", ":")))
    return 0


def _orphans_text(r: CleanReport) -> list[str]:
    if not r.orphans:
        return []
    verb = "would remove" if r.dry_run else "removed"
    return [
        f"{verb} {len(r.orphans)} orphan files (stamped with a decided instant that does not name them):"
    ] + [f"  {f}" for f in r.orphans]


def _clean_text(r: CleanReport) -> str:
    if r.dry_run:
        if not r.files:
            return "\n".join(
                [f"nothing to clean (keeping the latest {r.retain_commits} commits)", *_orphans_text(r)]
            )
        lines = [f"would delete {len(r.files)} files (keeping from instant {r.earliest_retained} on):"]
        return "\n".join(lines + [f"  {f}" for f in r.files] + _orphans_text(r))
    out = []
    if r.resumed:
        out.append(f"completed interrupted clean {', '.join(r.resumed)}")
    if r.rolled_back:
        out.append(f"rolled back other writers' expired pending instants: {', '.join(r.rolled_back)}")
    out.extend(_orphans_text(r))
    if r.instant is None:
        out.append(f"nothing to clean (keeping the latest {r.retain_commits} commits)")
    else:
        out.append(
            f"clean {r.instant}: deleted {len(r.files)} files ({r.already_gone} already gone); "
            f"time travel and incremental reads start at {r.earliest_retained}"
        )
    return "\n".join(out)


def cmd_clean(args: argparse.Namespace) -> int:
    from amcommit.table.commit.clean import clean

    opts = store_options(args)
    config = committer_config(args)
    report: CleanReport = on_store(
        args.dest,
        opts,
        lambda store, dest: clean(
            store, dest, retain_commits=args.retain_commits, config=config, dry_run=args.dry_run
        ),
    )
    if args.json:
        print(json.dumps(asdict(report), indent=2))
    else:
        print(_clean_text(report))
    return 0


def _compaction_text(r: Any) -> str:
    out = [f"completed interrupted compaction {t}" for t in r.resumed]
    out += [f"rolled back pending write {t} (its writer was dead)" for t in r.rolled_back]
    if r.instant is not None:
        out.append(
            f"compaction {r.instant}: {r.file_groups} file slices ({r.log_files} log files) -> "
            f"{len(r.files)} base files, {r.rows} rows, {r.bytes_written} bytes"
        )
    elif not r.resumed:
        out.append("nothing to compact (no file slice with log files)")
    return "\n".join(out)


def cmd_compact(args: argparse.Namespace) -> int:
    from amcommit.table.commit.compaction import compact

    report = compact(
        args.dest,
        config=committer_config(args),
        target_io_mb=args.target_io_mb,
        store_options=store_options(args),
    )
    print(json.dumps(asdict(report), indent=2) if args.json else _compaction_text(report))
    return 0


def _archive_text(r: ArchiveReport) -> str:
    out = []
    if r.finished:
        out.append(f"finished an interrupted archival of {len(r.finished)} instants")
    if r.archived:
        out.append(
            f"archived {len(r.archived)} instants ({r.archived[0]} .. {r.archived[-1]}) into {r.file}; "
            f"{r.active_writes} completed writes stay active"
        )
    else:
        out.append(f"nothing to archive ({r.active_writes} completed writes active)")
    return "\n".join(out)


def cmd_archive(args: argparse.Namespace) -> int:
    from amcommit.table.commit.archive import archive

    opts = store_options(args)
    config = committer_config(args)
    report: ArchiveReport = on_store(
        args.dest,
        opts,
        lambda store, dest: archive(
            store, dest, config=config, keep_max=args.keep_max, keep_min=args.keep_min
        ),
    )
    print(json.dumps(asdict(report), indent=2) if args.json else _archive_text(report))
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from amcommit.committer.report import JobReport
    from amcommit.table.commit.rollback import rollback_instant

    report: JobReport = on_store(
        args.dest,
        store_options(args),
        lambda store, dest: rollback_instant(store, dest, args.instant, force=args.force),
    )
    if report.rolled_back:
        print(f"instant {args.instant} rolled back: its files, staging, heartbeat and instant files removed")
        return 0
    raise ConfigError(
        f"instant {args.instant} is no pending instant of {args.dest!r}: nothing of it was found "
        "(a mistyped time, or rolled back already; `amcommit timeline` lists the instants)"
    )


def add_rollback(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rollback``, ``timeline``, ``changes``, ``clean`` and ``compact`` to the subcommands ``sub``."""
    add_rollback(sub)
    url_forms = URL_FORMS

    sp = sub.add_parser(
        "timeline",
        help="list a table's instants (time, action, state, files, bytes, rows, duration, label)",
        description="List the instants of the Hudi table at DEST, newest last. Reads only.",
    )
    sp.add_argument("dest", help="the table: " + url_forms)
    sp.add_argument(
        "--archived",
        action="store_true",
        help="also list the archived timeline's instants (.hoodie/archived/), first, marked (archived)",
    )
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    store_args(sp)
    sp.set_defaults(func=cmd_timeline)

    sp = sub.add_parser(
        "changes",
        help="files added and file groups replaced in (SINCE, UNTIL]",
        description="Files added (base files, and log files of Merge-on-Read deltacommits) and file groups "
        "replaced by the commits in (SINCE, UNTIL] of the table at DEST (an incremental read's file list). "
        "Reads only the instants in the range; --records also reads the records changed.",
    )
    sp.add_argument("dest", help="the table: " + url_forms)
    sp.add_argument(
        "--since",
        required=True,
        help="exclusive start: a completed instant time (17 digits), or 000 for the start of the timeline",
    )
    sp.add_argument("--until", help="inclusive end: a completed instant time (default: the latest)")
    sp.add_argument(
        "--records",
        action="store_true",
        help="also read the records changed in the range (an incremental read; Merge-on-Read: base "
        "files merged with their logs), one JSON object a line (with --json: under 'records')",
    )
    sp.add_argument("--json", action="store_true", help="print JSON")
    store_args(sp)
    sp.set_defaults(func=cmd_changes)

    sp = sub.add_parser(
        "clean",
        help="delete the files of file groups replaced before the latest N commits",
        description="Delete the base files of file groups replaced by overwrites before the latest N "
        "commits and older versions of rewritten ones (as Hudi's KEEP_LATEST_COMMITS), recorded as a "
        "clean instant; time travel and incremental reads before those N commits "
        "are refused afterwards. Completes an interrupted clean first. Holds the destination lock.",
    )
    sp.add_argument("dest", help="the table: " + url_forms)
    sp.add_argument(
        "--retain-commits", type=int_arg(), required=True, metavar="N", help="commits kept readable (>= 1)"
    )
    sp.add_argument("--dry-run", action="store_true", help="only show what would be deleted")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument(
        "--conf", action="append", metavar="KEY=VALUE", help="committer option (lock_wait, io_threads, ...)"
    )
    store_args(sp)
    sp.set_defaults(func=cmd_clean)

    sp = sub.add_parser(
        "compact",
        help="compact a Merge-on-Read table: merge file slices' log files into new base files",
        description="Compact the Merge-on-Read table at DEST as Hudi does (<t>.compaction.requested -> "
        ".inflight -> <t>.commit with compacted=true): the file slices with the most log bytes first, up "
        "to --target-io-mb of reads and writes (hoodie.compaction.target.io). Completes an interrupted "
        "compaction first; waits (up to lock_wait) while other writes are pending. Holds the table's lock.",
    )
    sp.add_argument("dest", help="the table: " + url_forms)
    sp.add_argument(
        "--target-io-mb", type=float, default=None, metavar="MB", help="IO budget of one run (default 512000)"
    )
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument(
        "--conf", action="append", metavar="KEY=VALUE", help="committer option (lock_wait, io_threads, ...)"
    )
    store_args(sp)
    sp.set_defaults(func=cmd_compact)

    sp = sub.add_parser(
        "archive",
        help="move completed instants beyond the newest N into .hoodie/archived/ (Hudi's archival)",
        description="Archive the timeline of the Hudi table at DEST as Hudi does: once more than "
        "--keep-max completed writes are active, the oldest are moved into .hoodie/archived/ (Hudi's "
        "archived-timeline log files) until --keep-min remain; never past a pending instant or the "
        "earliest instant the latest clean keeps. Finishes an interrupted archival first. Holds the "
        "destination lock.",
    )
    sp.add_argument("dest", help="the table: " + url_forms)
    sp.add_argument("--keep-max", type=int_arg(), metavar="N", help="hoodie.keep.max.commits (default 30)")
    sp.add_argument("--keep-min", type=int_arg(), metavar="M", help="hoodie.keep.min.commits (default 20)")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument(
        "--conf", action="append", metavar="KEY=VALUE", help="committer option (lock_wait, io_threads, ...)"
    )
    store_args(sp)
    sp.set_defaults(func=cmd_archive)
