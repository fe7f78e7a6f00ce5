"""Helpers for engine tests: run task attempts, snapshot a destination."""

from __future__ import annotations

from amcommit.committer.layout import TEMP_DIR_NAME, JobLayout
from amcommit.committer.task import abort_task, commit_task, setup_task
from amcommit.manifest import TaskManifest
from amcommit.paths import join, relative_to
from amcommit.store.base import Store


def task_ids(job: str, n: int, attempt: int = 0) -> tuple[str, str]:
    task = f"task_{job}_m_{n:06d}"
    return task, f"attempt_{job}_m_{n:06d}_{attempt}"


async def run_task(
    store: Store,
    layout: JobLayout,
    n: int,
    files: dict[str, bytes],
    *,
    attempt: int = 0,
    commit: bool = True,
    abort: bool = False,
) -> TaskManifest | None:
    """Set up task attempt (n, attempt), write ``files`` (relative path -> bytes) into its
    working directory, then commit or abort it (or neither: a failed attempt)."""
    task, ta = task_ids(layout.job_id, n, attempt)
    work = await setup_task(store, layout, ta)
    for rel, data in files.items():
        await store.put(join(work, rel), data)
    if abort:
        await abort_task(store, layout, ta)
        return None
    if commit:
        return await commit_task(store, layout, task, ta)
    return None


async def snapshot(store: Store, dest: str, *, include_temp: bool = False) -> dict[str, bytes]:
    """Every file under ``dest`` (relative path -> content), without ``_SUCCESS`` and
    (unless asked) ``_temporary``."""
    out = {}
    async for info in store.list(dest, recursive=True):
        rel = relative_to(info.path, dest)
        if rel == "_SUCCESS":
            continue
        if not include_temp and (rel == TEMP_DIR_NAME or rel.startswith(TEMP_DIR_NAME + "/")):
            continue
        out[rel] = await store.get(info.path)
    return out


async def temp_files(store: Store, dest: str) -> list[str]:
    return [i.path async for i in store.list(join(dest, TEMP_DIR_NAME), recursive=True)]
