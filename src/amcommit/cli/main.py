"""``amcommit`` command line: the entry point (``amcommit.cli:main``) and the commands on plain
destinations; table commands are in :mod:`amcommit.cli.table`, shared parts in
:mod:`amcommit.cli.common`.

    amcommit success URL [--json]            show a _SUCCESS report (URL: the file or its directory)
    amcommit manifest URL [--json]           show a task manifest
    amcommit commit-job DEST --job-id ID     run or resume a job commit, with a progress bar
    amcommit abort-job DEST --job-id ID      abort a job (roll back, or finish past the point of no return)
    amcommit jobs DEST [--json]              the jobs under DEST/_temporary (a table's pending instants), the lock
    amcommit jobs DEST --remove-leftovers    first delete what zombie task attempts left after their job was over
    amcommit demo [--target gcs|azurite|local] [--no-spark]   a Spark job committed on an embedded default
    amcommit emulator start gcs|azurite      run an emulator with a bucket, print how to use it
    amcommit --version
    amcommit --no-uvloop COMMAND ...          any command on asyncio's own loop (see amcommit.loop)

User errors print one line (``amcommit: error: ...``) and exit with status 1 (2 for bad
usage); no tracebacks. Warnings of amcommit's loggers (a commit that waits for another
writer's lock says so, in one line) print as ``amcommit: ...`` on stderr. A closed output pipe (``amcommit jobs DEST | head -1``) ends the
command quietly with status 141 (128 + SIGPIPE, what ``cat``/``git`` report when the
reader goes away). Credentials come from options or the environment
(``AZURE_STORAGE_CONNECTION_STRING``, ``AZURE_STORAGE_KEY``, ``AZURE_STORAGE_SAS_TOKEN``,
``STORAGE_EMULATOR_HOST``) and are never printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from amcommit import loop
from amcommit.cli.common import (
    URL_FORMS,
    USER_ERRORS,
    choice_arg,
    committer_config,
    int_arg,
    log_to_stderr,
    on_store,
    output_closed,
    print_error,
    read_object,
    store_args,
    store_options,
)
from amcommit.committer.jobs import DestinationJobs
from amcommit.console import (
    ProgressBar,
    dumps_json,
    format_jobs,
    format_manifest,
    format_report,
    format_success,
    jobs_json,
    out,
    pretty_json,
)
from amcommit.errors import ConfigError, InvalidInput, NotFound
from amcommit.manifest import decode_manifest, decode_success
from amcommit.paths import basename

if TYPE_CHECKING:
    from amcommit.store.base import Store


def cmd_success(args: argparse.Namespace) -> int:
    opts = store_options(args)
    url = args.url
    candidates = [url] if basename(url.rstrip("/")) == "_SUCCESS" else [url.rstrip("/") + "/_SUCCESS", url]
    data = None
    for candidate in candidates:
        try:
            data = read_object(candidate, opts)
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
    out(format_success(decode_success(data, name=url)))
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    data = read_object(args.url, store_options(args))
    m = decode_manifest(data, name=args.url)
    if args.json:
        out(pretty_json(data))
        return 0
    out(format_manifest(m))
    return 0


def cmd_commit_job(args: argparse.Namespace) -> int:
    from amcommit.committer.sync import BlockingCommitter

    committer = BlockingCommitter(
        args.dest, args.job_id, config=committer_config(args), store_options=store_options(args)
    )
    with ProgressBar() as bar:
        report = committer.commit_job(progress=None if args.quiet else bar, allow_partial=args.allow_partial)
    out(format_report(report) + (f"\n  completeness: {report.completeness}" if report.completeness else ""))
    return 0


def cmd_abort_job(args: argparse.Namespace) -> int:
    from amcommit.committer.sync import BlockingCommitter

    committer = BlockingCommitter(
        args.dest, args.job_id, config=committer_config(args), store_options=store_options(args)
    )
    with ProgressBar() as bar:
        report = committer.abort_job(progress=None if args.quiet else bar)
    if report.success:
        print(f"job {args.job_id} had passed its point of no return: the commit was completed instead")
        out(format_report(report))
    elif report.rolled_back:
        print(f"job {args.job_id} aborted: renamed files rolled back, temporary data deleted")
    else:
        print(f"job {args.job_id} aborted: temporary data deleted (destination untouched)")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from amcommit.api import list_jobs

    opts = store_options(args)
    config = committer_config(args)

    removed: list[str] = []

    async def main(store: Store, dest: str) -> DestinationJobs:
        if args.remove_leftovers:
            from amcommit.committer.jobs import check_exists
            from amcommit.committer.leftovers import remove_leftovers
            from amcommit.store.retry import policies_of

            await check_exists(store, dest, policies_of(config)[0])
            removed.extend((await remove_leftovers(store, dest, config=config)).removed)
        return await list_jobs(store, dest, config=config)

    result = on_store(args.dest, opts, main)
    if args.remove_leftovers and not args.json:
        for job_id in removed:
            print(f"removed what task attempts left after job {job_id} was over")
    if args.json:
        out(dumps_json(jobs_json(result)))
    else:
        out(format_jobs(result))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from amcommit.demo import run_demo

    return run_demo(args)


def cmd_emulator_start(args: argparse.Namespace) -> int:
    """Run an emulator until Ctrl-C (or SIGTERM), after printing how to use it. SIGINT is
    handled even when the shell started us in the background with it ignored."""
    import signal
    import time

    from amcommit.emulators.targets import start_target

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with start_target(args.kind, args.bucket, port=args.port) as target:
            # once the emulator is up, Ctrl-C at any point is a request to stop it (also
            # right after its description is printed: a script that read it may signal at
            # once, before this process runs again)
            try:
                if args.json:
                    doc = {
                        "emulator": target.kind,
                        "endpoint": target.endpoint,
                        "bucket": target.bucket,
                        "url": target.url,
                        "options": target.options,
                        "env": target.env,
                    }
                    print(dumps_json(doc), flush=True)
                else:
                    print("\n".join(target.instructions()), flush=True)
                    print(
                        "\nrunning; Ctrl-C stops it (the data is kept in memory / a temp dir only)",
                        flush=True,
                    )
                while True:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
        print(f"{target.kind} emulator stopped", file=sys.stderr, flush=True)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def package_version() -> str:
    """The installed package's version (``importlib.metadata``), else ``amcommit.__version__``."""
    from importlib import metadata

    try:
        return metadata.version("amcommit")
    except metadata.PackageNotFoundError:
        import amcommit

        return str(getattr(amcommit, "__version__", "unknown"))


def register_success(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("success", help="show a _SUCCESS report", description="Show a _SUCCESS report.")
    sp.add_argument("url", help="the _SUCCESS file or its directory: " + URL_FORMS)
    sp.add_argument("--json", action="store_true", help="print the raw JSON")
    store_args(sp)
    sp.set_defaults(func=cmd_success)


def register_manifest(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("manifest", help="show a task manifest", description="Show a task manifest.")
    sp.add_argument("url", help="the task manifest file (...-manifest.json): " + URL_FORMS)
    sp.add_argument("--json", action="store_true", help="print the JSON, pretty")
    store_args(sp)
    sp.set_defaults(func=cmd_manifest)


def register_jobs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser(
        "jobs",
        help="list the jobs under a destination (state, manifests, lock, last commit)",
        description="List the jobs under DEST/_temporary (amcommit's and Hadoop's layout) with their "
        "state: 'set up' (commit not begun), 'renaming' (commit under way or stopped; abort rolls back), "
        "'renamed' (past the point of no return; abort completes it), 'committed' (only cleanup "
        "pending); the destination lock's holder and the last commit from _SUCCESS. For a Hudi "
        "table: its instants that are not completed, with their write's staging and commit state, "
        "their writer's heartbeat (alive, stopped, expired, none) and the table's lock. 'leftover': "
        "a job directory without job marker or journal, written by task attempts still running "
        "after their job was committed or aborted. Reads only (unless --remove-leftovers); "
        "a destination where nothing exists is an error.",
    )
    sp.add_argument("dest", help="destination directory: " + URL_FORMS)
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sp.add_argument(
        "--remove-leftovers",
        action="store_true",
        help="first delete the 'leftover' job directories (never a job with a marker, a journal or "
        "the lock; never Hadoop's layout)",
    )
    sp.add_argument(
        "--conf",
        action="append",
        metavar="KEY=VALUE",
        help="committer option; writer_ttl judges table heartbeats (default 120 s)",
    )
    store_args(sp)
    sp.set_defaults(func=cmd_jobs)


def register_commit_and_abort(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, func, helptext in (
        ("commit-job", cmd_commit_job, "run or resume the job commit from the manifests in the store"),
        ("abort-job", cmd_abort_job, "abort a job: roll back or clean up"),
    ):
        sp = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        sp.add_argument("dest", help="destination directory: " + URL_FORMS)
        sp.add_argument("--job-id", required=True, help="the job's id (see `amcommit jobs DEST`)")
        modes = ["append", "fail", "replace", "overwrite"]
        sp.add_argument(
            "--mode",
            type=choice_arg(modes),
            metavar="{" + ",".join(modes) + "}",
            help="conflict mode when a file exists (default append)",
        )
        sp.add_argument("--io-threads", type=int_arg(1), help="concurrent file operations")
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


def register_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from amcommit.demo import add_demo_arguments

    sp = sub.add_parser(
        "demo",
        help="write a partitioned dataset with Spark through amcommit into fake-gcs-server "
        "(or Azurite, a local dir), report and verify; --no-spark: the engine alone",
    )
    add_demo_arguments(sp)
    sp.set_defaults(func=cmd_demo)


def register_emulator(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from amcommit.emulators.targets import EMULATOR_KINDS

    sp = sub.add_parser(
        "emulator",
        help="run a local storage emulator (fake-gcs-server or Azurite) for trying amcommit",
        description="Run a local storage emulator on 127.0.0.1.",
    )
    actions = sp.add_subparsers(dest="action", required=True, metavar="ACTION")
    st = actions.add_parser(
        "start",
        help="start it, create a bucket/container, print the endpoint and options, run until Ctrl-C",
        description="Start fake-gcs-server (gcs, bundled in the emulators extra) or Azurite (azurite, "
        "from $AMCOMMIT_AZURITE, tools/node or PATH) on 127.0.0.1, create a bucket (GCS) or "
        "container (Azurite), print the endpoint, the store options and the exact CLI and Spark "
        "option lines to use it with amcommit, and run until Ctrl-C. Data lives only as long as "
        "the emulator runs.",
    )
    st.add_argument(
        "kind",
        type=choice_arg(EMULATOR_KINDS),
        metavar="{" + ",".join(EMULATOR_KINDS) + "}",
        help="which emulator: gcs or azurite",
    )
    st.add_argument("--port", type=int_arg(0), help="port on 127.0.0.1 (default: a free one)")
    st.add_argument(
        "--bucket",
        default="amcommit",
        help="bucket (GCS) or container (Azurite) to create (default amcommit)",
    )
    st.add_argument(
        "--json", action="store_true", help="print one JSON document (endpoint, url, options, env)"
    )
    st.set_defaults(func=cmd_emulator_start)


def register_tables(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from amcommit.cli import table

    table.add_commands(sub)


COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    register_success,
    register_manifest,
    register_jobs,
    register_commit_and_abort,
    register_demo,
    register_emulator,
    register_tables,
]
"""Each adds its subcommand(s) to ``amcommit``'s parser; a new command appends one here."""


class _VersionAction(argparse.Action):
    """``--version``: the package version, and the event loop commands would run on
    (``--no-uvloop`` given before it is taken into account)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kw.get("help"))

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, "no_uvloop", False):
            how = "asyncio (--no-uvloop)"
        else:
            try:
                how = loop.describe()
            except ConfigError as e:
                how = f"none: {e}"
        print(f"amcommit {package_version()}\nevent loop: {how}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="amcommit", description="Async job-commit engine for ABFS, GCS and local files."
    )
    p.add_argument(
        "--version",
        action=_VersionAction,
        help="show the version and the event loop commands run on, and exit",
    )
    p.add_argument(
        "--no-uvloop",
        action="store_true",
        help=f"run on asyncio's default event loop even where uvloop is installed (= {loop.ENV_VAR}=0, "
        "also for the processes this command starts); results are the same, only speed differs",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    log_to_stderr()
    if args.no_uvloop:  # in the environment, so processes started from here inherit it
        os.environ[loop.ENV_VAR] = "0"
    try:
        status = int(args.func(args))
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return output_closed()
    except KeyboardInterrupt:
        print("amcommit: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as e:
        return print_error(e, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
