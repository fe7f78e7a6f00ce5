"""``amcommit`` command line.

    amcommit success URL [--json]            show a _SUCCESS report (URL: the file or its directory)
    amcommit manifest URL [--json]           show a task manifest
    amcommit commit-job DEST --job-id ID     run or resume a job commit, with a progress bar
    amcommit abort-job DEST --job-id ID      abort a job (roll back, or finish past the point of no return)
    amcommit jobs DEST [--json]              the jobs under DEST/_temporary, their state, the lock
    amcommit demo [--target gcs|azurite|local] [--no-spark]   a Spark job committed on an embedded default
    amcommit --version

User errors print one line (``amcommit: error: ...``) and exit with status 1 (2 for bad
usage); no tracebacks. A closed output pipe (``amcommit jobs DEST | head -1``) ends the
command quietly with status 141 (128 + SIGPIPE, what ``cat``/``git`` report when the
reader goes away). Credentials come from options or the environment
(``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_KEY``, ``AZURE_STORAGE_SAS_TOKEN``,
``STORAGE_EMULATOR_HOST``) and are never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

from amcommit.committer.config import CommitterConfig
from amcommit.committer.jobs import DestinationJobs, JobInfo
from amcommit.committer.report import JobReport, Progress
from amcommit.errors import AmcommitError, ConfigError, InvalidInput, NotFound
from amcommit.manifest import SuccessData, decode_manifest, decode_success
from amcommit.messages import for_user
from amcommit.redact import redact
from amcommit.store.base import basename


class ProgressBar:
    """A one-line progress display on stderr (a plain line per stage when not a TTY)."""

    def __init__(self, stream: TextIO | None = None, min_interval: float = 0.1) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.min_interval = min_interval
        self._last = 0.0
        self._stage = ""

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if p.phase == "start":
            self._stage = p.stage
            if not self.tty:
                print(f"  {p.stage} ...", file=self.stream, flush=True)
            return
        if p.phase == "end":
            if self.tty:
                self.stream.write("\r\x1b[K")
                print(f"  {p.stage} done", file=self.stream, flush=True)
            return
        if not self.tty or (now - self._last < self.min_interval and p.done < p.total):
            return
        self._last = now
        width = 30
        frac = p.done / p.total if p.total else 1.0
        bar = "#" * int(frac * width)
        self.stream.write(f"\r\x1b[K  {p.stage:<16} [{bar:<{width}}] {p.done}/{p.total}")
        self.stream.flush()


def _store_options(args: argparse.Namespace) -> dict[str, Any]:
    """The store options of the command (``--endpoint``, ``--store-option``, the Azure
    environment variables), converted and checked by the backend's options struct."""
    from amcommit.store.urls import store_options

    opts: dict[str, Any] = {}
    env = os.environ
    if getattr(args, "endpoint", None):
        opts["endpoint"] = args.endpoint
    url = getattr(args, "url", "") or getattr(args, "dest", "")
    if url.startswith(("abfs", "wasb", "az:")):
        if env.get("AZURE_STORAGE_CONNECTION_STRING"):
            opts["connection_string"] = env["AZURE_STORAGE_CONNECTION_STRING"]
        elif env.get("AZURE_STORAGE_KEY"):
            opts["account_key"] = env["AZURE_STORAGE_KEY"]
        elif env.get("AZURE_STORAGE_SAS_TOKEN"):
            opts["sas_token"] = env["AZURE_STORAGE_SAS_TOKEN"]
    for item in getattr(args, "store_option", None) or []:
        key, sep, value = item.partition("=")
        if not sep:  # the text may be a secret: do not show it
            raise ConfigError("--store-option expects KEY=VALUE (one was given without '=')")
        opts[key.strip()] = value
    return store_options(url, opts)


def _config(args: argparse.Namespace) -> CommitterConfig:
    conf: dict[str, str] = {}
    for item in args.conf or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    if getattr(args, "mode", None):
        conf["conflict_mode"] = args.mode
    if getattr(args, "io_threads", None):
        conf["io_threads"] = str(args.io_threads)
    return CommitterConfig.from_mapping(conf)


def _read(url: str, opts: dict[str, Any]) -> bytes:
    from amcommit.committer.sync import run_blocking
    from amcommit.store.urls import open_location

    async def main() -> bytes:
        store, path = open_location(url, **opts)
        try:
            return await store.get(path)
        finally:
            await store.aclose()

    return run_blocking(main)


def format_success(s: SuccessData) -> str:
    m = s.metrics
    lines = [
        f"job            {s.job_id}  ({'SUCCESS' if s.success else 'FAILED'})",
        f"committer      {s.committer}",
        f"date           {s.date}  on {s.hostname}",
    ]
    if "files" in m:
        dur = m.get("duration_ms", 0) / 1000
        lines.append(f"files          {m.get('files', 0):,}  ({m.get('bytes', 0):,} bytes) in {dur:.2f} s")
        lines.append(
            f"renames        {m.get('renamed', 0):,} (recovered {m.get('recovered_renames', 0)}, "
            f"retries {m.get('retries', 0)})  from {m.get('manifests', 0)} manifests"
        )
        if m.get("victims_deleted") or m.get("moved_aside"):
            lines.append(f"replaced       {m.get('victims_deleted', 0)} old files deleted")
        stages = {k[6:-3]: v for k, v in m.items() if k.startswith("stage_") and k.endswith("_ms")}
        if stages:
            lines.append("stages (ms)    " + ", ".join(f"{k} {v}" for k, v in stages.items()))
    for k, v in s.diagnostics.items():
        lines.append(f"{k:<14} {v}")
    if s.filenames:
        lines.append(f"files (first {len(s.filenames)}):")
        lines.extend(f"  {f}" for f in s.filenames[:10])
        if len(s.filenames) > 10:
            lines.append(f"  ... {len(s.filenames) - 10} more")
    return "\n".join(lines)


def format_report(r: JobReport) -> str:
    if r.already_committed and r.committed_by:
        return (
            f"job {r.job_id} was already committed into {r.dest_uri} by job {r.committed_by}, "
            f"which took over the destination lock it left ({r.committed_date or 'date unknown'}): nothing to do"
        )
    if r.already_committed:
        return (
            f"job {r.job_id} was already committed ({r.files:,} files, {r.committed_date or 'date unknown'}) "
            f"into {r.dest_uri}: nothing to do"
        )
    rate = r.rename_rate
    out = [
        f"job {r.job_id}: {'committed' if r.success else 'FAILED'} {r.files:,} files ({r.bytes:,} bytes) "
        f"from {r.manifests} task manifests into {r.dest_uri}",
        f"  rename rate {rate:,.0f} files/s, recovered renames {r.recovered_renames}, "
        f"directories created {r.directories_created}, total {r.duration:.2f} s"
        + (" (resumed)" if r.resumed else ""),
        "  stages: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in r.stage_seconds.items()),
    ]
    if r.victims_deleted or r.moved_aside:
        out.append(f"  replaced old data: {r.victims_deleted + r.moved_aside} files")
    return "\n".join(out)


def cmd_success(args: argparse.Namespace) -> int:
    opts = _store_options(args)
    url = args.url
    candidates = [url] if basename(url.rstrip("/")) == "_SUCCESS" else [url.rstrip("/") + "/_SUCCESS", url]
    data = None
    for candidate in candidates:
        try:
            data = _read(candidate, opts)
            url = candidate
            break
        except NotFound:
            continue
        except InvalidInput:
            continue
    if data is None:
        raise NotFound(
            "no _SUCCESS report found (not found as a file, nor in it as a directory)", path=args.url
        )
    if args.json:
        sys.stdout.write(data.decode("utf-8") + "\n")
        return 0
    print(format_success(decode_success(data, name=url)))
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    data = _read(args.url, _store_options(args))
    m = decode_manifest(data, name=args.url)
    if args.json:
        print(json.dumps(json.loads(data), indent=2, ensure_ascii=False))
        return 0
    print(f"task           {m.task_id}")
    print(f"attempt        {m.task_attempt_id}  (job {m.job_id}, job attempt {m.job_attempt_number})")
    print(f"files          {len(m.files):,}  ({m.total_bytes:,} bytes)")
    print(f"directories    {len(m.directories):,}")
    for f in m.files[:20]:
        print(f"  {f.size:>12,}  {f.dest}")
    if len(m.files) > 20:
        print(f"  ... {len(m.files) - 20} more")
    return 0


def cmd_commit_job(args: argparse.Namespace) -> int:
    from amcommit.committer.sync import BlockingCommitter

    committer = BlockingCommitter(
        args.dest, args.job_id, config=_config(args), store_options=_store_options(args)
    )
    report = committer.commit_job(
        progress=None if args.quiet else ProgressBar(), allow_partial=args.allow_partial
    )
    print(format_report(report))
    if report.completeness:
        print(f"  completeness: {report.completeness}")
    return 0


def cmd_abort_job(args: argparse.Namespace) -> int:
    from amcommit.committer.sync import BlockingCommitter

    committer = BlockingCommitter(
        args.dest, args.job_id, config=_config(args), store_options=_store_options(args)
    )
    report = committer.abort_job(progress=None if args.quiet else ProgressBar())
    if report.success:
        print(f"job {args.job_id} had passed its point of no return: the commit was completed instead")
        print(format_report(report))
    elif report.rolled_back:
        print(f"job {args.job_id} aborted: renamed files rolled back, temporary data deleted")
    else:
        print(f"job {args.job_id} aborted: temporary data deleted (destination untouched)")
    return 0


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def jobs_json(d: DestinationJobs, now: float | None = None) -> dict[str, Any]:
    """The ``jobs --json`` document (times as epoch seconds; the lock's heartbeat age)."""
    now = time.time() if now is None else now
    lock = None
    if d.lock is not None:
        lock = {
            "owner": d.lock.owner,
            "jobAttempt": d.lock.job_attempt,
            "operation": d.lock.operation,
            "host": d.lock.host,
            "pid": d.lock.pid,
            "acquired": d.lock.acquired,
            "heartbeat": d.lock.heartbeat,
            "heartbeatAgeSeconds": round(d.lock.heartbeat_age(now), 3),
            "ttl": d.lock.ttl,
        }
    return {
        "destination": d.dest_uri,
        "jobs": [
            {
                "jobId": j.job_id,
                "layout": j.layout,
                "state": j.state,
                "manifests": j.manifests,
                "created": j.created,
                "origin": j.origin,
                "updated": j.updated,
                "holdsLock": j.holds_lock,
            }
            for j in d.jobs
        ],
        "lock": lock,
        "lockUnreadable": d.lock_unreadable,
        "lastCommit": None
        if d.last_commit is None
        else {
            "jobId": d.last_commit.job_id,
            "date": d.last_commit.date,
            "success": d.last_commit.success,
            "files": d.last_commit.files,
        },
    }


def _job_row(j: JobInfo) -> list[str]:
    return [
        j.job_id,
        j.layout,
        j.state,
        str(j.manifests),
        _when(j.created),
        j.origin or "-",
        "yes" if j.holds_lock else "",
    ]


def format_jobs(d: DestinationJobs, now: float | None = None) -> str:
    """``amcommit jobs`` as aligned plain text."""
    now = time.time() if now is None else now
    out = [f"destination    {d.dest_uri}"]
    if d.jobs:
        header = ["JOB", "LAYOUT", "STATE", "MANIFESTS", "CREATED", "ORIGIN", "LOCK"]
        rows = [header] + [_job_row(j) for j in d.jobs]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        out.append("")
        for r in rows:
            out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        out.append("")
    else:
        out.append("jobs           none pending")
    if d.lock is not None:
        lk = d.lock
        out.append(
            f"lock           held by job {lk.owner} ({lk.operation}, host {lk.host or '?'}, pid {lk.pid}), "
            f"last heartbeat {_ago(lk.heartbeat_age(now))}, ttl {lk.ttl:g} s"
        )
    elif d.lock_unreadable:
        out.append("lock           present but unreadable (not an amcommit lock)")
    if d.last_commit is not None:
        lc = d.last_commit
        files = f", {lc.files:,} files" if lc.files is not None else ""
        out.append(
            f"last commit    job {lc.job_id or '?'}  {'SUCCESS' if lc.success else 'FAILED'}  "
            f"{lc.date or 'date unknown'}{files}"
        )
    else:
        out.append("last commit    none (no _SUCCESS report)")
    return "\n".join(out)


def cmd_jobs(args: argparse.Namespace) -> int:
    from amcommit.committer.jobs import list_jobs
    from amcommit.committer.sync import run_blocking
    from amcommit.store.urls import open_location

    opts = _store_options(args)

    async def main() -> DestinationJobs:
        store, dest = open_location(args.dest, **opts)
        try:
            return await list_jobs(store, dest)
        finally:
            await store.aclose()

    result = run_blocking(main)
    if args.json:
        print(json.dumps(jobs_json(result), indent=2, ensure_ascii=False))
    else:
        print(format_jobs(result))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from amcommit.demo import run_demo

    return run_demo(args)


def package_version() -> str:
    """The installed package's version (``importlib.metadata``), else ``amcommit.__version__``."""
    from importlib import metadata

    try:
        return metadata.version("amcommit")
    except metadata.PackageNotFoundError:
        import amcommit

        return str(getattr(amcommit, "__version__", "unknown"))


_URL_FORMS = (
    "a path (~ expanded), file://, abfs[s]://fs@account.dfs.core.windows.net/..., "
    "wasb[s]://container@account.blob.core.windows.net/..., gs://bucket/..., or fsspec-style "
    "az://container/..., abfs[s]://fs/... (account from --store-option account=NAME or "
    "AZURE_STORAGE_ACCOUNT_NAME), gcs://bucket/..."
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amcommit", description="Async job-commit engine for ABFS, GCS and local files."
    )
    p.add_argument("--version", action="version", version=f"amcommit {package_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def store_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--endpoint", help="service endpoint (emulators), e.g. http://127.0.0.1:10000/devstoreaccount1"
        )
        sp.add_argument(
            "--store-option",
            action="append",
            metavar="KEY=VALUE",
            help="store option (repeatable), e.g. account=NAME, account_key=..., token=..., use_move=false",
        )

    sp = sub.add_parser("success", help="show a _SUCCESS report", description="Show a _SUCCESS report.")
    sp.add_argument("url", help="the _SUCCESS file or its directory: " + _URL_FORMS)
    sp.add_argument("--json", action="store_true", help="print the raw JSON")
    store_args(sp)
    sp.set_defaults(func=cmd_success)

    sp = sub.add_parser("manifest", help="show a task manifest", description="Show a task manifest.")
    sp.add_argument("url", help="the task manifest file (...-manifest.json): " + _URL_FORMS)
    sp.add_argument("--json", action="store_true", help="print the JSON, pretty")
    store_args(sp)
    sp.set_defaults(func=cmd_manifest)

    sp = sub.add_parser(
        "jobs",
        help="list the jobs under a destination (state, manifests, lock, last commit)",
        description="List the jobs under DEST/_temporary (amcommit's and Hadoop's layout) with their "
        "state: 'set up' (commit not begun), 'renaming' (commit under way or stopped; abort rolls back), "
        "'renamed' (past the point of no return; abort completes it), 'committed' (only cleanup "
        "pending); the destination lock's holder and the last commit from _SUCCESS. Reads only.",
    )
    sp.add_argument("dest", help="destination directory: " + _URL_FORMS)
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    store_args(sp)
    sp.set_defaults(func=cmd_jobs)

    for name, func, helptext in (
        ("commit-job", cmd_commit_job, "run or resume the job commit from the manifests in the store"),
        ("abort-job", cmd_abort_job, "abort a job: roll back or clean up"),
    ):
        sp = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        sp.add_argument("dest", help="destination directory: " + _URL_FORMS)
        sp.add_argument("--job-id", required=True, help="the job's id (see `amcommit jobs DEST`)")
        sp.add_argument(
            "--mode",
            choices=["append", "fail", "replace", "overwrite"],
            help="conflict mode when a file exists (default append)",
        )
        sp.add_argument("--io-threads", type=int, help="concurrent file operations")
        sp.add_argument(
            "--conf",
            action="append",
            metavar="KEY=VALUE",
            help="committer option (ours or mapreduce.manifest.committer.*)",
        )
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
        if name == "commit-job":
            sp.add_argument(
                "--allow-partial",
                action="store_true",
                help="commit even if the job is not known to be complete (a Spark job whose "
                "driver never began the commit, or fewer task manifests than expected)",
            )
        store_args(sp)
        sp.set_defaults(func=func)

    sp = sub.add_parser(
        "demo",
        help="write a partitioned dataset with Spark through amcommit into fake-gcs-server "
        "(or Azurite, a local dir), report and verify; --no-spark: the engine alone",
    )
    from amcommit.demo import add_demo_arguments

    add_demo_arguments(sp)
    sp.set_defaults(func=cmd_demo)
    __import__("amcommit.table.cli_write", fromlist=["add_commands"]).add_commands(sub, store_args)
    __import__("amcommit.table.cli", fromlist=["add_commands"]).add_commands(sub, store_args, _URL_FORMS)
    return p


EXIT_SIGPIPE = 141
"""Exit status when the reader of our output went away (128 + SIGPIPE, as ``cat`` or
``git log | head`` end)."""


def _output_closed() -> int:
    """stdout's reader is gone: send what is left to /dev/null (so the interpreter's final
    flush stays quiet) and return :data:`EXIT_SIGPIPE`."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (tests): nothing to silence
        pass
    return EXIT_SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = int(args.func(args))
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return _output_closed()
    except KeyboardInterrupt:
        print("amcommit: interrupted", file=sys.stderr)
        return 130
    except (AmcommitError, msgspec.DecodeError, OSError, ValueError) as e:
        if isinstance(e, AmcommitError):  # paths as the user wrote them, buckets named
            e = for_user(e, getattr(args, "dest", None) or getattr(args, "url", None))
        print(f"amcommit: error: {redact(str(e))}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
