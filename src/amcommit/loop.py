"""Which event loop amcommit runs on: the one place that decides.

Every event loop amcommit starts itself (the blocking facade
:func:`run_blocking` used by the Spark driver, the Spark tasks'
blocking portal, the CLI, the table keep-alive process, the demos) is started through
:func:`run` or :func:`blocking_portal` here, on the loop :func:`choice` picks:

* `uvloop <https://github.com/MagicStack/uvloop>`_ when it is importable (install it with
  the ``fast`` extra: ``pip install 'amcommit[fast]'``; Linux and macOS only) and not
  turned off;
* otherwise asyncio's default loop.

Turn uvloop off with the environment variable ``AMCOMMIT_UVLOOP=0`` (also ``false``,
``no``, ``off``), or with ``amcommit --no-uvloop COMMAND ...``, which sets that variable
for the CLI process and the processes it starts. ``AMCOMMIT_UVLOOP=1`` (``true``, ``yes``,
``on``) *requires* uvloop: starting a loop then fails with :class:`ConfigError` if it is
not installed. Unset, empty or ``auto``: uvloop if importable. The variable is read each
time a loop starts; for Spark executors set it with ``spark.executorEnv.AMCOMMIT_UVLOOP``.

Behaviour is identical on both loops: the same requests, the same
atomicity (a rename is as atomic as the store makes it, a job commit is not atomic as a
whole and is recovered the same way), the same errors. Only speed differs: uvloop
spends somewhat less client CPU per request (measured by ``python -m benchmarks.event_loop``;
within the noise on the emulators of a 2-core machine, see benchmarks/README.md).

The bridge from blocking code (on the kernel floor, below the stores and the engine, so
any of them may use it): :func:`run_blocking` runs a coroutine function to completion from
any thread; :func:`kept_portal` / :func:`run_kept_loop` use one loop kept for the life of
the process (Spark workers, the streaming sink).

Code that runs inside a loop someone else started (an ``async`` caller, a notebook, the
async API) uses that loop, whichever it is: nothing here changes it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any, Literal, TypeVar, TypeVarTuple, Unpack

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from amcommit.errors import ConfigError

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

ENV_VAR = "AMCOMMIT_UVLOOP"
"""The environment variable that turns uvloop off (``0``) or requires it (``1``)."""

LoopName = Literal["uvloop", "asyncio"]

_OFF = frozenset({"0", "false", "no", "off"})
_ON = frozenset({"1", "true", "yes", "on"})
_AUTO = frozenset({"", "auto"})


def _uvloop() -> Any | None:
    """The uvloop module, or None where it is not installed (or cannot load)."""
    try:
        return import_module("uvloop")
    except ImportError:
        return None


def uvloop_available() -> bool:
    """True when uvloop can be imported in this interpreter."""
    return _uvloop() is not None


def choice() -> LoopName:
    """The loop the next :func:`run` / :func:`blocking_portal` starts, from
    ``AMCOMMIT_UVLOOP`` and whether uvloop is installed.

    Raises :class:`ConfigError` (one line) for a value it does not know, or for
    ``AMCOMMIT_UVLOOP=1`` without uvloop installed."""
    raw = os.environ.get(ENV_VAR, "")
    value = raw.strip().lower()
    if value in _OFF:
        return "asyncio"
    if value in _ON:
        if not uvloop_available():
            raise ConfigError(
                f"{ENV_VAR}={raw} requires uvloop, which is not installed "
                "(pip install 'amcommit[fast]'; not available on Windows)"
            )
        return "uvloop"
    if value in _AUTO:
        return "uvloop" if uvloop_available() else "asyncio"
    raise ConfigError(f"{ENV_VAR}={raw!r}: expected 0/1, true/false, yes/no, on/off or auto")


def describe() -> str:
    """``uvloop 0.21.0`` or ``asyncio``: the loop :func:`choice` picks, for messages."""
    if choice() == "uvloop":
        mod = _uvloop()
        return f"uvloop {getattr(mod, '__version__', '?')}"
    return "asyncio"


def running() -> str:
    """The event loop running the calling coroutine, as ``uvloop 0.21.0`` or ``asyncio``
    (another loop: its module's name): what really runs, not what was asked for."""
    mod = type(asyncio.get_running_loop()).__module__.split(".")[0]
    if mod == "uvloop":
        return f"uvloop {getattr(_uvloop(), '__version__', '?')}"
    return mod


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A function creating a new loop of the kind :func:`choice` picks
    (``uvloop.new_event_loop`` or ``asyncio.new_event_loop``); for runners other than
    anyio's (the test suite's pytest-asyncio hook uses it)."""
    if choice() == "uvloop":
        mod = _uvloop()
        assert mod is not None  # choice() checked
        factory: Callable[[], asyncio.AbstractEventLoop] = mod.new_event_loop
        return factory
    return asyncio.new_event_loop


def backend_options() -> dict[str, Any]:
    """anyio ``backend_options`` for the loop :func:`choice` picks (for ``anyio.run``,
    ``start_blocking_portal``): ``{"loop_factory": uvloop.new_event_loop}`` or ``{}``.

    An explicit factory rather than anyio's ``use_uvloop=True``, which on Windows would
    import winloop instead."""
    return {"loop_factory": loop_factory()} if choice() == "uvloop" else {}


def run(fn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts) -> T:
    """``anyio.run(fn, *args)`` on the chosen loop, in this thread (which must not be
    running a loop already: see :func:`run_blocking`)."""
    return anyio.run(fn, *args, backend_options=backend_options())


@contextmanager
def blocking_portal() -> Iterator[BlockingPortal]:
    """:func:`anyio.from_thread.start_blocking_portal` on the chosen loop: a new thread
    running a fresh loop, for calling async code from blocking code."""
    with start_blocking_portal(backend_options=backend_options()) as portal:
        yield portal


def run_blocking(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn()`` to completion and return its result (or raise its error), from any
    thread. With no event loop running in this thread: in a fresh loop in this thread.
    Inside a running loop (a notebook, an async caller): in a fresh loop on a portal
    thread (:func:`blocking_portal`), which this call waits for. The fresh
    loop is uvloop where installed and not turned off (this module)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run(fn)
    with blocking_portal() as portal:
        return portal.call(fn)


_kept: tuple[int, BlockingPortal] | None = None
"""(pid, portal) of :func:`kept_portal`'s loop thread."""
_kept_lock = threading.Lock()


def kept_portal() -> BlockingPortal:
    """The portal of an event loop kept for the life of the process (a daemon thread,
    started by the first call, again after a fork). For callers that run many short
    operations in one long-lived process (a Spark Python worker runs task after task, the
    streaming sink's ``commit()`` worker batch after batch): the loop's worker threads
    (local files' reads, writes, listings) are reused instead of started afresh each
    time, which is about half of a 10-file commit. Never stopped: tasks a caller starts
    on it (``start_task_soon``) must be cancelled or awaited by that caller."""
    global _kept
    with _kept_lock:
        if _kept is None or _kept[0] != os.getpid():
            _kept = (os.getpid(), _start_kept_loop())
        return _kept[1]


def _start_kept_loop() -> BlockingPortal:
    """A daemon thread running an event loop with a portal into it. Not anyio's
    ``start_blocking_portal``: its thread is joined at interpreter exit, and this loop
    never stops, so the process would never exit."""
    ready = threading.Event()
    box: list[BlockingPortal | BaseException] = []

    async def serve() -> None:
        async with BlockingPortal() as portal:
            box.append(portal)
            ready.set()
            await portal.sleep_until_stopped()

    def thread() -> None:
        try:
            run(serve)
        except BaseException as e:  # reported to the caller waiting below
            box.append(e)
            ready.set()

    threading.Thread(target=thread, name="amcommit-kept-loop", daemon=True).start()
    ready.wait()
    got = box[0]
    if isinstance(got, BaseException):
        raise got
    return got


def run_kept_loop(fn: Callable[[], Awaitable[T]]) -> T:
    """Like :func:`run_blocking`, on the process's kept event loop (:func:`kept_portal`).
    Calls from several threads at once run as concurrent tasks of that loop. Must not be
    called from the kept loop's own thread."""
    return kept_portal().call(fn)
