"""Shared by ``delete_victims`` and ``rollback``: removing the directories a commit left
empty. Each delete is not recursive, so a directory that still holds anything stays."""

from __future__ import annotations

from amcommit.committer.context import JobContext
from amcommit.errors import StoreError
from amcommit.paths import is_within, parent


async def remove_empty_dirs(ctx: JobContext, dirs: set[str]) -> list[str]:
    """Delete the empty directories among ``dirs`` and their ancestors below the
    destination, deepest first; return the ones deleted. A path that is a file (a user's
    file where the job wanted a directory) or a non-empty directory is left alone. Only
    on stores with real directories (elsewhere there is nothing to delete)."""
    removed: list[str] = []
    if not ctx.store.capabilities.directories:
        return removed
    todo = set(dirs)
    while todo:
        d = max(todo, key=lambda p: (p.count("/"), p))
        todo.discard(d)
        if not d or d == ctx.layout.dest or not is_within(d, ctx.layout.dest):
            continue
        try:
            info = await ctx.store.stat(d)
            if not info.is_dir:
                continue
            await ctx.store.delete(d)
        except StoreError:  # not empty (PreconditionFailed), gone, or unreachable: leave it
            continue
        removed.append(d)
        todo.add(parent(d))
    return removed
