"""Stage 3 (``prepare_dirs``): create the destination directories once, before any rename:
``run(ctx, PrepareInputs) -> PrepareResult``.

Planning is pure (:func:`plan_directories`): deduplicate, and create only the leaves
(``mkdirs`` creates their parents). On stores with real directories, each planned
directory is checked first: a *file* where a directory must go is moved aside to the trash
when the commit replaces that part of the destination, and is a conflict otherwise (an
append never deletes a user's file). Flat stores (Blob, GCS) have nothing to create.
"""

from __future__ import annotations

from dataclasses import dataclass

from amcommit.committer.context import JobContext
from amcommit.committer.stages.load_manifests import LoadedManifests
from amcommit.committer.stages.messages import next_steps, uri
from amcommit.committer.stages.renaming import move_aside
from amcommit.committer.stages.scope import in_replace_scope, replace_scope
from amcommit.errors import ConflictError, NotFound
from amcommit.parallel import run_parallel
from amcommit.paths import is_within


def plan_directories(dirs: set[str]) -> list[str]:
    """Leaf directories of ``dirs`` (no other directory of the set lies below them)."""
    ordered = sorted(dirs)
    leaves = []
    for i, d in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        # sorted order puts every descendant of d right after d (prefix + "/")
        if nxt is None or not is_within(nxt, d) or nxt == d:
            leaves.append(d)
    return leaves


def with_ancestors(dirs: set[str], dest: str) -> set[str]:
    """``dirs`` plus all their ancestors below ``dest`` (pure)."""
    out = set()
    for d in dirs:
        while d and d != dest and is_within(d, dest):
            if d in out:
                break
            out.add(d)
            d = d.rpartition("/")[0]
    return out


@dataclass(frozen=True)
class PrepareInputs:
    loaded: LoadedManifests


@dataclass(frozen=True)
class PrepareResult:
    created: int
    """How many leaf directories were created (also ``report.directories_created``)."""
    new_dirs: frozenset[str] = frozenset()
    """Every directory that did not exist before this stage and does now (leaves and their
    missing ancestors): nothing can be in them but what this commit puts there."""


async def run(ctx: JobContext, inputs: PrepareInputs) -> PrepareResult:
    """Create the planned directories (files in the way are moved aside in replace scope,
    else a ConflictError); counts ``moved_aside`` and ``directories_created`` in the report."""
    return await prepare_dirs(ctx, inputs.loaded)


async def prepare_dirs(ctx: JobContext, loaded: LoadedManifests) -> PrepareResult:
    """Create the planned directories; return how many leaves were created, and which
    directories are new."""
    dirs = set(loaded.dirs)
    if not ctx.store.capabilities.directories or not dirs:
        return PrepareResult(0)
    store = ctx.store
    replacing = ctx.config.conflict_mode in ("replace", "overwrite")
    roots = replace_scope(ctx, loaded.spool) if replacing else []
    missing: set[str] = set()

    async def check(d: str) -> None:
        try:
            info = await ctx.call(lambda: store.stat(d))
        except NotFound:
            missing.add(d)
            return
        if info.is_dir:
            return
        if replacing and in_replace_scope(ctx, d, roots):
            await move_aside(ctx, d)
            missing.add(d)
            return
        raise ConflictError(next_steps(ctx, f"a file is in the way of directory {uri(ctx, d)!r}"))

    await run_parallel(sorted(with_ancestors(dirs, ctx.layout.dest)), check, ctx.config.io_threads)
    leaves = plan_directories(missing)

    async def make(d: str) -> None:
        await ctx.call(lambda: store.mkdirs(d))

    await run_parallel(leaves, make, ctx.config.io_threads)
    ctx.report.directories_created = len(leaves)
    return PrepareResult(len(leaves), frozenset(missing))
