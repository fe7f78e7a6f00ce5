"""What the ``amcommit`` commands share: argument types, store arguments and options, the
committer config from ``--conf``, reading one object, and how errors and warnings are printed
(one line, redacted, no traceback)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from amcommit.committer.config import CommitterConfig
from amcommit.errors import AmcommitError, ConfigError
from amcommit.messages import for_user
from amcommit.redact import redact
from amcommit.table.settings import TableConfig

if TYPE_CHECKING:
    from amcommit.store.base import Store

T = TypeVar("T")


def int_arg(minimum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for an integer (>= ``minimum`` if given) whose error names what
    the option expects, never the text given (argparse's own quotes it: it may be a secret
    given to the wrong option)."""
    expects = "an integer" if minimum is None else f"an integer >= {minimum}"

    def integer(text: str) -> int:
        try:
            n = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects {expects}") from None
        if minimum is not None and n < minimum:
            raise argparse.ArgumentTypeError(f"expects {expects}")
        return n

    return integer


def choice_arg(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse ``type`` for one of ``choices`` (give ``metavar`` to show them in the
    usage) whose error lists the choices, never the text given (see :func:`int_arg`)."""

    def choice(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expects one of {', '.join(choices)}")
        return text

    return choice


def store_options(args: argparse.Namespace) -> dict[str, Any]:
    """The store options of the command (``--endpoint``, ``--store-option``, the Azure
    environment variables), converted and checked by the backend's options struct."""
    from amcommit.store.schemes import store_options as checked

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
    return checked(url, opts)


def committer_config(args: argparse.Namespace) -> CommitterConfig:
    """The committer config from ``--conf KEY=VALUE`` (and ``--mode``, ``--io-threads``)."""
    conf: dict[str, str] = {}
    for item in args.conf or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("--conf expects KEY=VALUE (one was given without '=')")
        conf[key.strip()] = value
    if getattr(args, "mode", None):
        conf["conflict_mode"] = args.mode
    if getattr(args, "io_threads", None):
        conf["io_threads"] = str(args.io_threads)
    return TableConfig.from_mapping(conf)  # the engine's options and the table's


def on_store(url: str, opts: dict[str, Any], work: Callable[[Store, str], Awaitable[T]]) -> T:
    """``work(store, path)`` on the store of ``url`` (opened with store options ``opts``,
    closed afterwards), run from a command's synchronous code."""
    from amcommit.loop import run_blocking
    from amcommit.store.schemes import open_location

    async def main() -> T:
        store, path = open_location(url, **opts)
        async with store:
            return await work(store, path)

    return run_blocking(main)


def read_object(url: str, opts: dict[str, Any]) -> bytes:
    """The bytes of the object at ``url`` (opened with store options ``opts``)."""
    return on_store(url, opts, lambda store, path: store.get(path))


URL_FORMS = (
    "a path (~ expanded), file://, abfs[s]://fs@account.dfs.core.windows.net/..., "
    "wasb[s]://container@account.blob.core.windows.net/..., gs://bucket/..., or fsspec-style "
    "az://container/..., abfs[s]://fs/... (account from --store-option account=NAME or "
    "AZURE_STORAGE_ACCOUNT_NAME), gcs://bucket/..."
)


def store_args(sp: argparse.ArgumentParser) -> None:
    """``--endpoint`` and ``--store-option``: for commands that open a store."""
    sp.add_argument(
        "--endpoint", help="service endpoint (emulators), e.g. http://127.0.0.1:10000/devstoreaccount1"
    )
    sp.add_argument(
        "--store-option",
        action="append",
        metavar="KEY=VALUE",
        help="store option (repeatable), e.g. account=NAME, account_key=..., token=..., use_move=false",
    )


EXIT_SIGPIPE = 141
"""Exit status when the reader of our output went away (128 + SIGPIPE, as ``cat`` or
``git log | head`` end)."""


def output_closed() -> int:
    """stdout's reader is gone: send what is left to /dev/null (so the interpreter's final
    flush stays quiet) and return :data:`EXIT_SIGPIPE`."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (tests): nothing to silence
        pass
    return EXIT_SIGPIPE


class StderrHandler(logging.Handler):
    """amcommit's warnings as ``amcommit: <message>`` lines on the current ``sys.stderr``
    (redacted)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"amcommit: {redact(record.getMessage())}", file=sys.stderr, flush=True)
        except Exception:
            self.handleError(record)


def log_to_stderr() -> None:
    """Warnings of the ``amcommit`` loggers go to stderr (once per process)."""
    logger = logging.getLogger("amcommit")
    if not any(isinstance(h, StderrHandler) for h in logger.handlers):
        handler = StderrHandler(logging.WARNING)
        logger.addHandler(handler)


def print_error(e: BaseException, args: argparse.Namespace) -> int:
    """Print a user error as one redacted line (``amcommit: error: ...``), paths as the user
    wrote them; return the exit status 1."""
    if isinstance(e, AmcommitError):  # paths as the user wrote them, buckets named
        e = for_user(e, getattr(args, "dest", None) or getattr(args, "url", None))
    print(f"amcommit: error: {redact(str(e))}", file=sys.stderr)
    return 1


USER_ERRORS: tuple[type[BaseException], ...] = (AmcommitError, msgspec.DecodeError, OSError, ValueError)
"""What :func:`print_error` reports in one line; anything else is a bug (traceback)."""

__all__ = [
    "EXIT_SIGPIPE",
    "URL_FORMS",
    "USER_ERRORS",
    "StderrHandler",
    "choice_arg",
    "committer_config",
    "int_arg",
    "log_to_stderr",
    "output_closed",
    "print_error",
    "read_object",
    "store_args",
    "store_options",
]
