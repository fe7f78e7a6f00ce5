"""Everything amcommit shows a person: reports, tables, progress (one place, with ``rich``).

Text is rendered without colour or wrapping (:func:`render`) and printed by the caller, so
a closed pipe, ``| grep`` and the tests see plain lines. Progress (:class:`ProgressBar`)
goes to stderr: rich bars with rate and ETA per stage on a terminal, one plain line per
stage boundary otherwise. JSON documents (``--json``) are built here too and never pass
through rich.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from types import TracebackType
from typing import Any, TextIO

import msgspec
from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.table import Table

from amcommit.committer.jobs import DestinationJobs, JobInfo
from amcommit.committer.report import JobReport, Progress
from amcommit.manifest import SuccessData, TaskManifest
from amcommit.table.commit.jobs import TableJobs, TableWriteInfo

KEY_WIDTH = 14
"""Width of the key column of key/value reports (``job            ID``)."""


def render(*items: RenderableType) -> str:
    """``items`` as plain text: no colour, no wrapping, no trailing blanks."""
    buf = io.StringIO()
    Console(
        file=buf, width=10_000, color_system=None, highlight=False, force_terminal=False, emoji=False
    ).print(*items)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").split("\n"))


def out(text: str) -> None:
    """Print ``text`` and a newline to stdout as one write, to its file descriptor.

    One write: a reader such as ``| head -1`` that leaves after the first line never sees
    a second, failing write of a short output (``print`` writes text and newline apart).
    The descriptor: Python's buffered stdout drops the rest of a long text, without an
    error, when the reader leaves in the middle; ``os.write`` in a loop raises
    :class:`BrokenPipeError` instead (the CLI then exits with status 141)."""
    stream = sys.stdout
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured output)
        stream.write(text + "\n")
        stream.flush()
        return
    stream.flush()
    view = memoryview((text + "\n").encode(stream.encoding or "utf-8", stream.errors or "strict"))
    while view:
        view = view[os.write(fd, view) :]


def fields(rows: list[tuple[str, str]]) -> Table:
    """A key/value grid: keys padded to :data:`KEY_WIDTH`, one space, the value."""
    t = Table.grid(padding=(0, 1))
    t.add_column(min_width=KEY_WIDTH, no_wrap=True)
    t.add_column(no_wrap=True)
    for k, v in rows:
        t.add_row(k, v)
    return t


# -- _SUCCESS, job reports, manifests ---------------------------------------------------


def format_success(s: SuccessData) -> str:
    """``amcommit success``: the ``_SUCCESS`` report as a key/value table."""
    m = s.metrics
    rows = [
        ("job", f"{s.job_id}  ({'SUCCESS' if s.success else 'FAILED'})"),
        ("committer", s.committer),
        ("date", f"{s.date}  on {s.hostname}"),
    ]
    if "files" in m:
        dur = m.get("duration_ms", 0) / 1000
        rows.append(("files", f"{m.get('files', 0):,}  ({m.get('bytes', 0):,} bytes) in {dur:.2f} s"))
        rows.append(
            (
                "renames",
                f"{m.get('renamed', 0):,} (recovered {m.get('recovered_renames', 0)}, "
                f"retries {m.get('retries', 0)})  from {m.get('manifests', 0)} manifests",
            )
        )
        if m.get("victims_deleted") or m.get("moved_aside"):
            rows.append(("replaced", f"{m.get('victims_deleted', 0)} old files deleted"))
        stages = {k[6:-3]: v for k, v in m.items() if k.startswith("stage_") and k.endswith("_ms")}
        if stages:
            rows.append(("stages (ms)", ", ".join(f"{k} {v}" for k, v in stages.items())))
    rows.extend((k, v) for k, v in s.diagnostics.items())
    out = [render(fields(rows))]
    if s.filenames:
        out.append(f"files (first {len(s.filenames)}):")
        out.extend(f"  {f}" for f in s.filenames[:10])
        if len(s.filenames) > 10:
            out.append(f"  ... {len(s.filenames) - 10} more")
    return "\n".join(out)


def report_from_success(s: SuccessData) -> JobReport:
    """The :class:`JobReport` a ``_SUCCESS`` describes (for :func:`format_report`)."""
    r = JobReport(job_id=s.job_id, dest_uri=s.diagnostics.get("destination", ""), success=s.success)
    r.restore_from_success(s)
    r.retries = int(s.metrics.get("retries", 0))
    r.started, r.finished = 0.0, s.metrics.get("duration_ms", 0) / 1000 or 1e-9
    return r


def format_report(r: JobReport) -> str:
    """What a job commit (``commit-job``, ``abort-job`` completing, the demos) did."""
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
    out = [
        f"job {r.job_id}: {'committed' if r.success else 'FAILED'} {r.files:,} files ({r.bytes:,} bytes) "
        f"from {r.manifests} task manifests into {r.dest_uri}",
        f"  rename rate {r.rename_rate:,.0f} files/s, recovered renames {r.recovered_renames}, "
        f"retries {r.retries}, directories created {r.directories_created}, total {r.duration:.2f} s"
        + (" (resumed)" if r.resumed else ""),
        "  stages: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in r.stage_seconds.items()),
    ]
    if r.victims_deleted or r.moved_aside:
        out.append(f"  replaced old data: {r.victims_deleted + r.moved_aside} files")
    return "\n".join(out)


def format_manifest(m: TaskManifest, show: int = 20) -> str:
    """``amcommit manifest``: the task manifest's header and its first ``show`` files."""
    out = [
        render(
            fields(
                [
                    ("task", m.task_id),
                    ("attempt", f"{m.task_attempt_id}  (job {m.job_id}, job attempt {m.job_attempt_number})"),
                    ("files", f"{len(m.files):,}  ({m.total_bytes:,} bytes)"),
                    ("directories", f"{len(m.directories):,}"),
                ]
            )
        )
    ]
    if m.files:
        t = Table.grid(padding=(0, 2), pad_edge=True)
        t.add_column(justify="right", min_width=12, no_wrap=True)
        t.add_column(no_wrap=True)
        for f in m.files[:show]:
            t.add_row(f"{f.size:,}", f.dest)
        out.append(render(t))
    if len(m.files) > show:
        out.append(f"  ... {len(m.files) - show} more")
    return "\n".join(out)


def pretty_json(data: bytes) -> str:
    """A JSON document indented by two spaces, keys and numbers exactly as written."""
    return msgspec.json.format(data, indent=2).decode("utf-8")


# -- jobs -------------------------------------------------------------------------------


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
    if isinstance(d, TableJobs):
        return {
            "destination": d.dest_uri,
            "table": True,
            "writes": [_table_write_json(w) for w in d.table_writes],
            "lock": lock,
            "lockUnreadable": d.lock_unreadable,
            "lastInstant": None
            if d.last_instant is None
            else {"instant": d.last_instant.instant, "action": d.last_instant.action},
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


def _table_write_json(w: TableWriteInfo) -> dict[str, Any]:
    st = w.staging
    return {
        "instant": w.instant,
        "action": w.action or None,
        "state": w.state,
        "operation": st.operation if st is not None else None,
        "commit": st.state if st is not None else None,
        "manifests": st.manifests if st is not None else None,
        "origin": st.origin if st is not None else None,
        "created": st.created if st is not None else None,
        "heartbeat": w.heartbeat,
        "heartbeatAgeSeconds": None if w.heartbeat_age is None else round(w.heartbeat_age, 3),
        "holdsLock": w.holds_lock,
    }


def dumps_json(doc: Any) -> str:
    """A JSON document as the ``--json`` outputs print it (two-space indent, UTF-8 text)."""
    return json.dumps(doc, indent=2, ensure_ascii=False)


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


def jobs_table(d: DestinationJobs) -> Table:
    """The pending jobs as a rich table (one row per job)."""
    t = Table(box=None, pad_edge=False, show_edge=False)
    for name, justify in (
        ("JOB", "left"),
        ("LAYOUT", "left"),
        ("STATE", "left"),
        ("MANIFESTS", "right"),
        ("CREATED", "left"),
        ("ORIGIN", "left"),
        ("LOCK", "left"),
    ):
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for j in d.jobs:
        t.add_row(*_job_row(j))
    return t


def _beat_text(w: TableWriteInfo) -> str:
    if w.heartbeat_age is None:
        return w.heartbeat
    return f"{w.heartbeat} ({_ago(w.heartbeat_age)})"


def table_writes_table(d: TableJobs) -> Table:
    """A table's pending instants as a rich table (one row per instant)."""
    t = Table(box=None, pad_edge=False, show_edge=False)
    for name, justify in (
        ("INSTANT", "left"),
        ("ACTION", "left"),
        ("STATE", "left"),
        ("OPERATION", "left"),
        ("COMMIT", "left"),
        ("MANIFESTS", "right"),
        ("HEARTBEAT", "left"),
        ("ORIGIN", "left"),
        ("LOCK", "left"),
    ):
        t.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for w in d.table_writes:
        st = w.staging
        t.add_row(
            w.instant,
            w.action or "-",
            w.state,
            (st.operation if st is not None else None) or "-",
            st.state if st is not None else "no staging",
            str(st.manifests) if st is not None else "-",
            _beat_text(w),
            (st.origin if st is not None else None) or "-",
            "yes" if w.holds_lock else "",
        )
    return t


def format_jobs(d: DestinationJobs, now: float | None = None) -> str:
    """``amcommit jobs`` as plain text: the destination, a table of jobs (of a Hudi table:
    its pending instants), lock, last commit."""
    now = time.time() if now is None else now
    table = d if isinstance(d, TableJobs) else None
    out = [render(fields([("destination", d.dest_uri + ("  (Hudi table)" if table is not None else ""))]))]
    if d.jobs:
        out += ["", render(jobs_table(d)), ""]
    if table is not None and table.table_writes:
        out += ["", render(table_writes_table(table)), ""]
    rows: list[tuple[str, str]] = []
    if table is not None and not table.table_writes:
        rows.append(("instants", "none pending"))
    elif table is None and not d.jobs:
        rows.append(("jobs", "none pending"))
    if d.lock is not None:
        lk = d.lock
        rows.append(
            (
                "lock",
                f"held by job {lk.owner} ({lk.operation}, host {lk.host or '?'}, pid {lk.pid}), "
                f"last heartbeat {_ago(lk.heartbeat_age(now))}, ttl {lk.ttl:g} s",
            )
        )
    elif d.lock_unreadable:
        rows.append(("lock", "present but unreadable (not an amcommit lock)"))
    if table is not None:
        li = table.last_instant
        rows.append(("last commit", "none" if li is None else f"instant {li.instant} ({li.action})"))
    elif d.last_commit is not None:
        lc = d.last_commit
        files = f", {lc.files:,} files" if lc.files is not None else ""
        rows.append(
            (
                "last commit",
                f"job {lc.job_id or '?'}  {'SUCCESS' if lc.success else 'FAILED'}  "
                f"{lc.date or 'date unknown'}{files}",
            )
        )
    else:
        rows.append(("last commit", "none (no _SUCCESS report)"))
    out.append(render(fields(rows)))
    return "\n".join(out)


# -- progress ---------------------------------------------------------------------------


class ProgressBar:
    """Progress of a job commit on ``stream`` (stderr): a rich bar per stage with count,
    rate and ETA on a terminal; a plain line when a stage starts and ends otherwise.

    A :data:`~amcommit.committer.report.ProgressCallback`; use it as a context manager
    (``with ProgressBar() as bar: commit(progress=bar)``) so the display is closed. Safe to
    call from the event loop's thread or a worker thread."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._rich: RichProgress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._started: dict[str, float] = {}
        self._done: dict[str, tuple[int, int]] = {}

    def _display(self) -> RichProgress:
        if self._rich is None:
            self._rich = RichProgress(
                TextColumn("  {task.description:<16}"),
                BarColumn(bar_width=30),
                TextColumn("{task.fields[counts]:>15}"),
                TextColumn("{task.fields[rate]:>9}"),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TimeElapsedColumn(),
                console=Console(file=self.stream, force_terminal=True),
                transient=False,
            )
            self._rich.start()
        return self._rich

    def __call__(self, p: Progress) -> None:
        if p.phase == "progress":
            self._done[p.stage] = (p.done, p.total)
        if not self.tty:
            if p.phase == "start":
                self._started[p.stage] = time.monotonic()
                print(f"  {p.stage} ...", file=self.stream, flush=True)
            elif p.phase == "end":
                secs = time.monotonic() - self._started.pop(p.stage, time.monotonic())
                done, total = self._done.pop(p.stage, (0, 0))
                count = f"{done:,}/{total:,} " if total else ""
                print(f"  {p.stage} done: {count}in {secs:.2f} s", file=self.stream, flush=True)
            return
        bar = self._display()
        task = self._tasks.get(p.stage)
        if task is None:
            task = self._tasks[p.stage] = bar.add_task(p.stage, total=p.total or None, rate="", counts="")
        speed = next((t.speed for t in bar.tasks if t.id == task), None)
        rate = f"{speed:,.0f}/s" if speed else ""
        if p.phase == "progress":
            counts = f"{p.done:,}/{p.total:,}" if p.total else f"{p.done:,}"
            bar.update(task, completed=p.done, total=p.total or None, rate=rate, counts=counts)
        if p.phase == "end":  # the end event carries no counts: keep the last progress event's
            done, total = self._done.pop(p.stage, (0, 0))
            bar.update(task, completed=total or done or 1, total=total or done or 1, rate=rate)

    def close(self) -> None:
        """Stop the display (idempotent)."""
        bar, self._rich = self._rich, None
        if bar is not None:
            bar.stop()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


__all__ = [
    "ProgressBar",
    "dumps_json",
    "format_jobs",
    "format_manifest",
    "format_report",
    "format_success",
    "jobs_json",
    "jobs_table",
    "out",
    "pretty_json",
    "render",
    "report_from_success",
]
