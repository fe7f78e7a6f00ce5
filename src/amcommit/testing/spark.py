"""Deliberate failures of the Spark adapter (test code: production code never imports this).

Installed as :class:`SparkFaults`, the hooks of :mod:`amcommit.spark.hooks`, from code, by
:func:`configure` (or :func:`armed`). Spark runs Python in other processes too: its
workers, the process that runs a Python data source's ``commit()`` / ``abort()``, the
streaming sink's runner. :func:`configure` reaches them with a ``sitecustomize`` module
that it writes into the control directory and puts first on ``PYTHONPATH`` (the JVM, and so
every Python process it starts, inherits the environment; Spark adds its own ``PYTHONPATH``
to the one it was given). Every Python process started with it calls
:func:`install_from_env` once, at its start: the environment is read there, never per
batch, and never by production code. (Spark's ``spark.python.daemon.module`` would reach
only the executors' workers, not the data source ``commit()`` process.)

What a test can switch on:

``armed(fail_task={...})``
    Task attempts fail after writing: ``{"partitions": [0, 2] | null (all), "attempts": [0]
    (default), "after_rows": 0, "how": "raise" | "exit"}``. ``raise`` raises
    :class:`InjectedTaskFailure` once ``after_rows`` rows were seen (the attempt cleans up
    after itself, as on any error); ``exit`` finishes the attempt's files and kills the
    Python worker with ``os._exit`` (no cleanup: a crashed executor). Spark retries the task.
    Workers see it through a file in the control directory.

``armed(driver_faults=[...])``
    Fault rules for the store of the driver's job ``commit()`` / ``abort()`` (read from a
    file in the control directory too):
    ``[{"phase": "commit" | "abort" | "both", "kind": "error" | "lost_response" |
    "throttle" | "latency", "op": "rename" | [...], "path": "*.parquet", "after": 0,
    "count": null, "error": "PermissionDenied", "seconds": 0.0}]`` (a
    :class:`~amcommit.testing.faults.FaultyStore`).

``AMCOMMIT_TESTING_STREAM_FAULT="<point>@<batchId>[=<seconds>]"`` (:data:`STREAM_ENV`)
    In the environment of a streaming driver process that calls :func:`install_from_env`
    and :func:`configure` at its start (``tests/spark/stream_child.py``). ``kill`` means
    SIGKILL of the driver's whole process group (:data:`PGID_ENV`) and this one:

    ``after_begin``   killed right after the batch's instant was allocated (``begin_write``,
                      its keep-alive process started), before any task ran; the
                      ``format("amcommit")`` sink's driver side sees no batch id: it is the
                      newest one of the checkpoint's offsets log (a local checkpoint)
    ``task_write``    a task is killed after it wrote its first rows
    ``before_commit`` ``commit()`` is entered and killed
    ``in_renames``    killed inside the job commit, before its second rename of a data file;
                      a direct write (``table_commit=direct``), which renames none, is
                      killed before it publishes its completed instant (its files in place,
                      its losers deleted)
    ``after_commit``  killed after the batch committed, before Spark records it
    ``slow_task``     tasks sleep ``seconds`` after their first rows; they first create the
                      file named by :data:`SIGNAL_ENV` if set, and stop sleeping early once
                      the file named by :data:`RELEASE_ENV` exists
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from amcommit import errors
from amcommit.errors import ConfigError, StoreError
from amcommit.spark import hooks
from amcommit.spark.hooks import SparkHooks
from amcommit.store.base import RenameRequest, RenameResult, Store, batch_renamer
from amcommit.testing.faults import FaultRule, FaultyStore

DIR_ENV = "AMCOMMIT_TESTING_SPARK_DIR"
"""The control directory shared by the test process and Spark's Python workers."""
SITECUSTOMIZE = """\
# written by amcommit.testing.spark.configure (test code): install amcommit's test hooks
import os

if os.environ.get("AMCOMMIT_TESTING_SPARK_DIR") or os.environ.get("AMCOMMIT_TESTING_STREAM_FAULT"):
    from amcommit.testing.spark import install_from_env

    install_from_env()
"""
STREAM_ENV = "AMCOMMIT_TESTING_STREAM_FAULT"
SIGNAL_ENV = "AMCOMMIT_TESTING_STREAM_SIGNAL"
RELEASE_ENV = "AMCOMMIT_TESTING_STREAM_RELEASE"
PGID_ENV = "AMCOMMIT_TESTING_STREAM_PGID"
POINTS = frozenset({"after_begin", "task_write", "before_commit", "in_renames", "after_commit", "slow_task"})
_FAIL_TASK = "fail_task.json"
_DRIVER_FAULTS = "driver_faults.json"


class InjectedTaskFailure(RuntimeError):
    """Raised by an armed ``fail_task``."""


@dataclass(frozen=True)
class TaskFailure:
    """A parsed ``fail_task``."""

    partitions: frozenset[int] | None
    attempts: frozenset[int]
    after_rows: int
    how: str

    def applies(self, partition: int, attempt: int) -> bool:
        return (self.partitions is None or partition in self.partitions) and attempt in self.attempts


def parse_task_failure(spec: Any) -> TaskFailure | None:
    """A ``fail_task`` spec (a dict, or its JSON text) checked; None for none."""
    if not spec:
        return None
    if isinstance(spec, str):
        spec = _json("fail_task", spec)
    if not isinstance(spec, dict):
        raise ConfigError("fail_task must be a JSON object")
    how = spec.get("how", "raise")
    if how not in ("raise", "exit"):
        raise ConfigError("fail_task: 'how' must be 'raise' or 'exit'")
    parts = spec.get("partitions")
    return TaskFailure(
        partitions=None if parts is None else frozenset(int(p) for p in parts),
        attempts=frozenset(int(a) for a in spec.get("attempts", [0])),
        after_rows=int(spec.get("after_rows", 0)),
        how=how,
    )


def parse_driver_faults(spec: Any) -> list[dict[str, Any]]:
    """A ``driver_faults`` spec (a list of dicts, or its JSON text) checked."""
    if not spec:
        return []
    if isinstance(spec, str):
        spec = _json("driver_faults", spec)
    if not isinstance(spec, list) or not all(isinstance(r, dict) for r in spec):
        raise ConfigError("driver_faults must be a JSON list of objects")
    for r in spec:
        fault_rule(r)
    return spec


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{name} is not valid JSON: {e}") from None


def fault_rule(r: dict[str, Any]) -> FaultRule:
    """One ``driver_faults`` entry as a :class:`FaultRule`."""
    err_name = r.get("error", "Transient")
    err = getattr(errors, err_name, None)
    if not (isinstance(err, type) and issubclass(err, errors.StoreError)):
        raise ConfigError(f"driver_faults: unknown store error {err_name!r}")
    op = r.get("op")
    ops = None if op is None else frozenset([op] if isinstance(op, str) else op)
    try:
        return FaultRule(
            kind=r.get("kind", "error"),
            ops=ops,
            path=r.get("path"),
            count=r.get("count"),
            after=int(r.get("after", 0)),
            error=err,
            seconds=float(r.get("seconds", 0.0)),
            retry_after=r.get("retry_after"),
        )
    except ValueError as e:
        raise ConfigError(f"driver_faults: {e}") from None


def wrap_driver_store(store: Store, spec: list[dict[str, Any]], phase: str) -> Store:
    """``store`` wrapped in a FaultyStore with the rules of ``phase`` (or ``store`` itself)."""
    both = ("commit", "abort")  # "both" is the job's two phases, not "check" / "begin"
    rules = [
        r for r in spec if r.get("phase", "commit") == phase or (r.get("phase") == "both" and phase in both)
    ]
    if not rules:
        return store
    faulty = FaultyStore(store, seed=0)
    for r in rules:
        faulty.add(fault_rule(r))
    return cast(Store, faulty)


def fault_at(spec: str, point: str, batch: int | None) -> float | None:
    """The seconds (0.0 if none given) if the stream kill point ``spec`` arms ``point`` for
    ``batch``, else None."""
    if not spec or batch is None:
        return None
    where, _, secs = spec.partition("=")
    name, _, at = where.partition("@")
    if name != point or not at.strip().lstrip("-").isdigit() or int(at) != batch:
        return None
    return float(secs) if secs else 0.0


def kill_driver() -> None:
    """SIGKILL the driver's process group (:data:`PGID_ENV`: Spark's Python workers run in a
    group of their own), then this one."""
    pgid = os.environ.get(PGID_ENV, "")
    if pgid.isdigit():
        os.killpg(int(pgid), signal.SIGKILL)
    os.killpg(os.getpgrp(), signal.SIGKILL)
    time.sleep(60)  # pragma: no cover  (never reached)


def _completed_instant_file(path: str) -> bool:
    """``path`` is a completed write instant's file ``.hoodie/<instant>.commit`` /
    ``.replacecommit``."""
    from amcommit.table.format.model import parse_instant_file

    folder, _, name = path.rpartition("/")
    i = parse_instant_file(name)
    return (
        folder.endswith(".hoodie")
        and i is not None
        and i.completed
        and i.action in ("commit", "replacecommit")
    )


class KillOnRename:
    """Store proxy that kills the driver before its ``n``-th rename of a ``.parquet`` file,
    or before it publishes a completed instant (a rename or put onto
    ``.hoodie/<instant>.commit``/``.replacecommit``), whichever comes first: a direct table
    write renames no data file."""

    def __init__(self, inner: Store, n: int) -> None:
        self._inner, self._n, self._seen = inner, n, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put(self, path: str, data: bytes, **kw: Any) -> Any:
        if _completed_instant_file(path):
            kill_driver()
        return await self._inner.put(path, data, **kw)

    async def rename(self, src: str, dst: str, **kw: Any) -> RenameResult:
        if _completed_instant_file(dst):
            kill_driver()
        if dst.endswith(".parquet"):
            self._seen += 1
            if self._seen >= self._n:
                kill_driver()
        return await self._inner.rename(src, dst, **kw)

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """A batch (local files) is cut just before its request that is the ``n``-th rename
        of a ``.parquet`` file: the requests before it are renamed, then the driver dies."""
        inner = batch_renamer(self._inner)
        assert inner is not None, "rename_batch of a store without batches"
        for i, r in enumerate(requests):
            if r.dst.endswith(".parquet"):
                self._seen += 1
                if self._seen >= self._n:
                    if i:
                        await inner.rename_batch(requests[:i])
                    kill_driver()
        return await inner.rename_batch(requests)


class SparkFaults(SparkHooks):
    """The hooks that fail on purpose: task failures and driver store faults read from
    ``control_dir`` (written by :func:`armed` in the test process: Spark runs a data
    source's ``commit()`` in a Python process of its own), and one streaming kill point
    (``stream_spec``)."""

    def __init__(self, control_dir: str | None, stream_spec: str = "") -> None:
        self.control_dir = control_dir
        self.stream_spec = stream_spec

    def _read(self, name: str) -> str | None:
        if not self.control_dir:
            return None
        try:
            with open(os.path.join(self.control_dir, name)) as f:
                return f.read()
        except FileNotFoundError:
            return None

    def driver_store(self, store: Store, phase: str) -> Store:
        return wrap_driver_store(store, parse_driver_faults(self._read(_DRIVER_FAULTS)), phase)

    def _task_failure(self) -> TaskFailure | None:
        return parse_task_failure(self._read(_FAIL_TASK))

    def task_rows(
        self, partition: int, attempt: int, rows: int, done: bool, finish: Callable[[], None]
    ) -> None:
        failure = self._task_failure()
        if failure is None or not failure.applies(partition, attempt):
            return
        if not done and rows < failure.after_rows:
            return
        if failure.how == "exit":
            finish()  # leave complete files behind, as a crash after writing would
            os._exit(17)
        raise InjectedTaskFailure("fail_task: injected task failure")

    def stream_point(self, point: str, batch: int | None) -> None:
        for name in ("slow_task", "task_write") if point == "task_rows" else (point,):
            secs = fault_at(self.stream_spec, name, batch)
            if secs is None:
                continue
            if name != "slow_task":
                kill_driver()
            flag = os.environ.get(SIGNAL_ENV)
            if flag:
                with open(flag, "a"):
                    pass
            release = os.environ.get(RELEASE_ENV)
            end = time.monotonic() + secs
            while time.monotonic() < end and not (release and os.path.exists(release)):
                time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    def stream_begun(self, batch: int | None, checkpoint: str | None) -> None:
        """The ``after_begin`` point (``batch`` None: the newest batch of the checkpoint's
        offsets log, read only when the point is armed)."""
        if not self.stream_spec.startswith("after_begin@"):
            return
        if batch is None and checkpoint:
            try:
                names = os.listdir(os.path.join(checkpoint.removeprefix("file:"), "offsets"))
            except OSError:
                names = []
            batch = max((int(n) for n in names if n.isdigit()), default=None)
        self.stream_point("after_begin", batch)

    def stream_store(self, store: Store, batch: int) -> Store:
        if fault_at(self.stream_spec, "in_renames", batch) is None:
            return store
        return cast(Store, KillOnRename(store, 2))


def install_from_env() -> SparkFaults:
    """Install :class:`SparkFaults` with the control directory (:data:`DIR_ENV`) and the
    streaming kill point (:data:`STREAM_ENV`) of this process's environment, read once:
    called at the start of every Python process that :func:`configure`'s
    ``sitecustomize`` reaches."""
    faults = SparkFaults(os.environ.get(DIR_ENV) or None, os.environ.get(STREAM_ENV, ""))
    hooks.install(faults)
    return faults


def configure(builder: Any, control_dir: str | None = None) -> Any:
    """``builder`` (a ``SparkSession.Builder``, before the session starts) and this process
    set up for :func:`armed` and the streaming kill points: a control directory holding a
    ``sitecustomize`` module, in ``PYTHONPATH`` and :data:`DIR_ENV` of this process's
    environment (which the JVM, its Python processes and child processes inherit), and the
    hooks installed here."""
    directory = control_dir or os.environ.get(DIR_ENV) or tempfile.mkdtemp(prefix="amcommit-testing-")
    with open(os.path.join(directory, "sitecustomize.py"), "w") as f:
        f.write(SITECUSTOMIZE)
    os.environ[DIR_ENV] = directory
    path = os.environ.get("PYTHONPATH", "")
    if directory not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join([directory, path]) if path else directory
    install_from_env()
    return builder


def _faults() -> SparkFaults:
    current = hooks.current
    if isinstance(current, SparkFaults) and current.control_dir:
        return current
    return install_from_env() if os.environ.get(DIR_ENV) else _own_dir()


def _own_dir() -> SparkFaults:
    os.environ[DIR_ENV] = tempfile.mkdtemp(prefix="amcommit-testing-")
    return install_from_env()


@contextlib.contextmanager
def armed(*, fail_task: Any = None, driver_faults: Any = None) -> Iterator[SparkFaults]:
    """Arm task failures and driver store faults for the writes in the block (see module
    doc); both are checked first (a bad spec raises :class:`ConfigError`)."""
    parse_task_failure(fail_task)
    parse_driver_faults(driver_faults)
    faults = _faults()
    assert faults.control_dir is not None
    written = []
    for name, spec in ((_FAIL_TASK, fail_task), (_DRIVER_FAULTS, driver_faults)):
        if spec:
            path = os.path.join(faults.control_dir, name)
            with open(path + ".tmp", "w") as f:
                f.write(spec if isinstance(spec, str) else json.dumps(spec))
            os.replace(path + ".tmp", path)
            written.append(path)
    try:
        yield faults
    finally:
        for path in written:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


__all__ = [
    "DIR_ENV",
    "PGID_ENV",
    "POINTS",
    "RELEASE_ENV",
    "SIGNAL_ENV",
    "SITECUSTOMIZE",
    "STREAM_ENV",
    "InjectedTaskFailure",
    "KillOnRename",
    "SparkFaults",
    "TaskFailure",
    "armed",
    "configure",
    "fault_at",
    "fault_rule",
    "install_from_env",
    "kill_driver",
    "parse_driver_faults",
    "parse_task_failure",
    "wrap_driver_store",
]
