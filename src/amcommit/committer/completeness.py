"""Is a job complete enough to commit from the store alone? (``commit-job`` without manifests)

Only the caller that ran the tasks knows which tasks make a complete job. Spark's driver
does (its ``commit()`` receives one authorised commit message per partition), but a job
committed later from the store (``amcommit commit-job``, or ``commit_job`` without
``manifests``) sees only the task manifests that happen to be there: after a crashed
driver, some tasks may never have committed. So:

* a job the caller set up with ``expected_tasks`` is committed only when exactly that many
  task manifests are there;
* a job set up by the Spark adapter (``origin`` ``"spark"``) without a recorded count is
  refused unless its commit was begun by the driver (the journal exists: the authorised
  manifests were published before it was written), because nothing else says what complete
  is;
* a Hadoop job directory records neither: it is committed, and the report says that
  completeness could not be checked.

``allow_partial`` overrides a refusal (the user accepts publishing what is there). Nothing
here changes the store; :func:`check_completeness` is pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from amcommit.committer.config import DEFAULT_CONFIG, CommitterConfig
from amcommit.errors import ConfigError, IncompleteJob, NotFound, StoreError
from amcommit.parallel import run_parallel
from amcommit.store.base import Store
from amcommit.store.retry import policies_of, retry_call, retry_list

from .layout import MANIFEST_SUFFIX, JobLayout


@dataclass(frozen=True)
class JobMarker:
    """What ``_job.json`` says about the job (absent for Hadoop job directories)."""

    origin: str | None = None
    """Who set the job up: ``"api"``, ``"spark"``; None if unknown (no or an old marker)."""
    expected_tasks: int | None = None
    """How many task manifests make the job complete, if the caller knew."""
    hadoop: bool = False


def marker_fields(origin: str, expected_tasks: int | None) -> dict[str, str | int]:
    """The ``_job.json`` fields :func:`parse_marker` reads back (validated)."""
    if expected_tasks is not None and (isinstance(expected_tasks, bool) or expected_tasks < 0):
        raise ConfigError(f"expected_tasks must be an integer >= 0, got {expected_tasks!r}")
    fields: dict[str, str | int] = {"origin": origin}
    if expected_tasks is not None:
        fields["expectedTasks"] = expected_tasks
    return fields


def parse_marker(data: bytes | None, *, hadoop: bool = False) -> JobMarker:
    """Parse ``_job.json`` leniently (markers written before these fields existed have none)."""
    if data is None:
        return JobMarker(hadoop=hadoop)
    try:
        body = json.loads(data)
    except ValueError:
        return JobMarker(hadoop=hadoop)
    if not isinstance(body, dict):
        return JobMarker(hadoop=hadoop)
    origin = body.get("origin")
    expected = body.get("expectedTasks")
    return JobMarker(
        origin=origin if isinstance(origin, str) else None,
        expected_tasks=expected if isinstance(expected, int) and not isinstance(expected, bool) else None,
        hadoop=hadoop,
    )


PARTIAL_ALLOWED = "PARTIAL (allowed): "
"""How :func:`check_completeness`'s note starts for a job with another number of task
manifests than expected, committed with ``allow_partial``."""
UNCHECKED_ALLOWED = "not checked (allowed partial): "
"""How it starts for a Spark job whose driver never began the commit, committed with
``allow_partial``."""


def partial_allowed(note: str | None) -> bool:
    """Whether ``note`` (a report's ``completeness``) says the job was committed only
    because ``allow_partial`` overrode a refusal (pure)."""
    return note is not None and note.startswith((PARTIAL_ALLOWED, UNCHECKED_ALLOWED))


def check_completeness(marker: JobMarker, n_manifests: int, allow_partial: bool) -> str:
    """Decide whether a job found on the store may be committed from its ``n_manifests``
    task manifests. Returns a one-line note for the report; raises
    :class:`~amcommit.errors.IncompleteJob` (naming what was found and the override) when
    it must not be committed and ``allow_partial`` is false."""
    found = f"{n_manifests} task manifest{'s' if n_manifests != 1 else ''}"
    if marker.expected_tasks is not None:
        if n_manifests == marker.expected_tasks:
            return f"complete: {found} of {marker.expected_tasks} expected"
        problem = f"{found} found, {marker.expected_tasks} expected"
        if allow_partial:
            return f"{PARTIAL_ALLOWED}{problem}"
        raise IncompleteJob(
            f"the job is incomplete: {problem}; committing it would publish partial output "
            "(use --allow-partial / allow_partial=True to commit it anyway, or abort-job)",
            stage="commit_job",
        )
    if marker.origin == "spark":
        problem = (
            f"the job was set up by Spark, which never began its job commit; {found} present, "
            "but only Spark's driver knows how many tasks make the job complete"
        )
        if allow_partial:
            return f"{UNCHECKED_ALLOWED}{problem}"
        raise IncompleteJob(
            f"{problem} (use --allow-partial / allow_partial=True to commit what is there anyway, "
            "or abort-job)",
            stage="commit_job",
        )
    if marker.hadoop:
        return f"not checked: a Hadoop job directory does not record how many tasks it has ({found})"
    return f"not checked: no expected task count was recorded ({found})"


async def job_completeness(
    store: Store, layout: JobLayout, allow_partial: bool, config: CommitterConfig = DEFAULT_CONFIG
) -> str:
    """Read the marker and count the manifests of a job to be committed from the store, then
    :func:`check_completeness`. A commit the driver already began (journal present) is a
    resume of an authorised commit: always allowed. Requests go through the engine's retry
    layer (``config``'s policy).

    The three reads (the journal's stat, the marker, the manifest listing) are made at the
    same time (one round trip, not three): they change nothing, and a journal found makes
    the other two unused (their failures too: before, they were not made then)."""
    policy = policies_of(config)[0]
    resumed = False
    data: bytes | None = None
    n = 0
    failed: list[StoreError] = []

    async def journal() -> None:
        nonlocal resumed
        try:
            await retry_call(lambda: store.stat(layout.journal_path), policy=policy)
            resumed = True
        except NotFound:
            pass

    async def marker() -> None:
        nonlocal data
        try:
            data = await retry_call(lambda: store.get(layout.job_marker), policy=policy)
        except NotFound:
            data = None
        except StoreError as e:
            failed.append(e)

    async def manifests() -> None:
        nonlocal n
        try:
            async for info in retry_list(store, layout.manifests_dir, recursive=False, policy=policy):
                if not info.is_dir and info.path.endswith(MANIFEST_SUFFIX):
                    n += 1
        except NotFound:
            pass
        except StoreError as e:
            failed.append(e)

    await run_parallel([journal, marker, manifests], lambda step: step(), 3)
    if resumed:
        return "resumed: the commit was begun with its authorised manifests"
    if failed:
        raise failed[0]
    return check_completeness(parse_marker(data, hadoop=layout.hadoop), n, allow_partial)


__all__ = [
    "PARTIAL_ALLOWED",
    "UNCHECKED_ALLOWED",
    "JobMarker",
    "check_completeness",
    "job_completeness",
    "marker_fields",
    "parse_marker",
    "partial_allowed",
]
