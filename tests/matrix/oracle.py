"""What the destination must hold after a scenario: pure functions of the scenario's setup.

Paths are relative to the destination directory. The rules are the product's contract
(committer/config.py ``ConflictMode``), written independently of the engine's code:

* ``append``: old + new; a new name that already exists refuses the whole commit (unless
  ``delete_target_files``: the new file wins);
* ``fail``: refused if a directory receiving new files already holds a file directly;
* ``replace``: old files below the (minimal) directories receiving new files are replaced
  by the new ones, other old files stay;
* ``overwrite``: only the new files remain.

On stores with real directories (local files, ADLS Gen2; ``directories=True``) an old
file can stand *in the way* of a new one: an old file named like a directory the job
writes into (``p=7`` vs ``p=7/x.bin``), or an old directory named like a new file
(``p=7/x.bin/old.bin`` vs ``p=7/x.bin``). ``replace``/``overwrite`` (and ``append`` with
``delete_target_files``) replace it like other old content; ``append`` and ``fail``
refuse the commit. On flat stores (Blob, GCS) both names coexist and nothing is in the way.

A refused commit leaves the destination as it was and keeps the job (issue 11 item 4).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import permutations

Files = Mapping[str, bytes]


@dataclass(frozen=True)
class Attempt:
    """One task attempt: the files it writes, and what becomes of it."""

    files: Files
    outcome: str = "commit"
    """``commit``; ``fail`` (files written, never committed nor aborted); ``abort``."""


@dataclass(frozen=True)
class Job:
    job_id: str
    mode: str
    tasks: tuple[tuple[Attempt, ...], ...]
    """Per task, its attempts in the order they run (the last committed one wins)."""
    delete_target_files: bool = False


def parent(rel: str) -> str:
    return rel.rpartition("/")[0]


def within(path: str, root: str) -> bool:
    return root == "" or path == root or path.startswith(root + "/")


def winners(job: Job) -> list[tuple[int, int, Files]]:
    """(task, attempt, files) of each task's last committed attempt."""
    out = []
    for t, attempts in enumerate(job.tasks):
        won = [(a, at.files) for a, at in enumerate(attempts) if at.outcome == "commit"]
        if won:
            out.append((t, *won[-1]))
    return out


def new_files(job: Job) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for _, _, files in winners(job):
        out.update(files)
    return out


def ancestors(rel: str) -> set[str]:
    out = set()
    p = parent(rel)
    while p:
        out.add(p)
        p = parent(p)
    return out


def minimal_roots(dirs: Iterable[str]) -> list[str]:
    roots: list[str] = []
    for d in sorted(set(dirs), key=lambda p: (p.count("/") if p else -1, p)):
        if not any(within(d, r) for r in roots):
            roots.append(d)
    return roots


def in_the_way(rel: str, new: Iterable[str]) -> bool:
    """On a store with directories: is the old file ``rel`` in the way of a new file (a
    directory of the job has its name, or it lies below a new file's name)?"""
    return any(n.startswith(rel + "/") or rel.startswith(n + "/") for n in new)


def refusal(old: Files, job: Job, directories: bool = False) -> str | None:
    """Why the job's commit is refused on ``old`` (None: it is not)."""
    new = new_files(job)
    if job.mode == "append" and not job.delete_target_files:
        clash = sorted(set(new) & set(old))
        if clash:
            return f"append: {clash[0]!r} exists"
    if job.mode == "fail":
        receiving = {d for rel in new for d in ancestors(rel)} | {parent(rel) for rel in new}
        busy = sorted(rel for rel in old if parent(rel) in receiving)
        if busy:
            return f"fail: {busy[0]!r} is in a receiving directory"
    if directories and (job.mode == "fail" or (job.mode == "append" and not job.delete_target_files)):
        way = sorted(rel for rel in old if in_the_way(rel, new))
        if way:
            return f"{job.mode}: {way[0]!r} is in the way of a new file"
    return None


def apply(old: Files, job: Job, directories: bool = False) -> dict[str, bytes]:
    """The destination after ``job`` committed on top of ``old`` (refused: unchanged)."""
    if refusal(old, job, directories) is not None:
        return dict(old)
    new = new_files(job)
    if job.mode == "overwrite":
        return dict(new)
    kept = dict(old)
    if job.mode == "replace":
        roots = minimal_roots(parent(rel) for rel in new)
        # files below a receiving directory (a file named like the directory is not below it)
        kept = {rel: d for rel, d in old.items() if not any(root_of(rel, r) for r in roots)}
    if directories:  # replaced as well (append: only with delete_target_files, else refused)
        kept = {rel: d for rel, d in kept.items() if not in_the_way(rel, new)}
    return kept | dict(new)


def root_of(rel: str, root: str) -> bool:
    """Is the file ``rel`` below the directory ``root``?"""
    return root == "" or rel.startswith(root + "/")


def serial_outcomes(old: Files, jobs: Iterable[Job], directories: bool = False) -> list[dict[str, bytes]]:
    """Every destination a serial order of ``jobs`` gives (for concurrent commits)."""
    out = []
    for order in permutations(jobs):
        state = dict(old)
        for j in order:
            state = apply(state, j, directories)
        if state not in out:
            out.append(state)
    return out


@dataclass(frozen=True)
class Expected:
    dest: dict[str, bytes]
    """Exact files of the destination (``_SUCCESS`` and ``_temporary`` aside)."""
    success: bool
    """The (last) commit reports success and ``_SUCCESS`` says so."""
    refused: str | None = None
    """Why the commit is refused (job kept until abort)."""


def expect_commit(old: Files, job: Job, directories: bool = False) -> Expected:
    why = refusal(old, job, directories)
    return Expected(apply(old, job, directories), why is None, why)


def expect_abort(old: Files, job: Job, past_no_return: bool, directories: bool = False) -> Expected:
    """abort_job after a partial commit: old data back, unless the commit had passed its
    point of no return (then abort completes the commit)."""
    if past_no_return:
        return Expected(apply(old, job, directories), True)
    return Expected(dict(old), False)
