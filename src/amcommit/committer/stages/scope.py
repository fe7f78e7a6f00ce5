"""Shared by the stages of a ``replace``/``overwrite`` commit: which part of the
destination the commit replaces, and where an old file goes when it is moved aside.

Used by ``check_conflicts`` (the victims to record), ``prepare_dirs`` and ``rename_files``
(which old files may be moved aside) and :mod:`~amcommit.committer.stages.renaming`. Pure
path planning, no I/O (the spool is read, not the store).
"""

from __future__ import annotations

from amcommit.committer.context import JobContext
from amcommit.committer.spool import EntrySpool
from amcommit.paths import is_within, join, parent


def minimal_roots(dirs: set[str]) -> list[str]:
    """Drop every directory that lies below another one in the set (pure)."""
    roots: list[str] = []
    for d in sorted(dirs, key=lambda p: (p.count("/"), p)):
        if not any(is_within(d, r) for r in roots):
            roots.append(d)
    return roots


def replace_scope(ctx: JobContext, spool: EntrySpool) -> list[str]:
    """The directories whose old content a ``replace``/``overwrite`` commit removes."""
    if ctx.config.conflict_mode == "overwrite":
        return [ctx.layout.dest]
    file_dirs = set()
    for e in spool.entries():
        file_dirs.add(parent(e.dst))
    return minimal_roots(file_dirs)


def in_replace_scope(ctx: JobContext, path: str, roots: list[str]) -> bool:
    return not is_within(path, ctx.layout.temp_root) and any(is_within(path, r) for r in roots)


def trash_path(ctx: JobContext, dst: str) -> str:
    """Where an old file at ``dst`` is moved aside to."""
    rel = dst[len(ctx.layout.dest) + 1 :] if ctx.layout.dest else dst
    return join(ctx.layout.trash_dir, rel)
