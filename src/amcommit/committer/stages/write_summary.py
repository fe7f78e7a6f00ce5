"""The summary report (not a timed stage; runs after a commit, successful or not):
``summary-<jobId>.json`` in ``config.summary_report_directory``:
``run(ctx, SummaryInputs) -> None``. One whole-object put (atomic)."""

from __future__ import annotations

from dataclasses import dataclass

from amcommit.committer.context import JobContext
from amcommit.committer.report import JobReport
from amcommit.manifest import encode_json
from amcommit.paths import join
from amcommit.store.base import PutMode


@dataclass(frozen=True)
class SummaryInputs:
    report: JobReport
    """The report to write (read when the summary is written)."""


async def run(ctx: JobContext, inputs: SummaryInputs) -> None:
    """Write the summary report (see :func:`write_summary`)."""
    await write_summary(ctx, inputs.report)


async def write_summary(ctx: JobContext, report: JobReport) -> None:
    """Write ``summary-<jobId>.json`` to ``config.summary_report_directory`` (best effort
    on failure paths: errors here are recorded, never raised over the original error).
    The put goes through the job's retry layer."""
    from amcommit.store.schemes import open_location

    url = ctx.config.summary_report_directory
    if not url:
        return
    store, base = open_location(url)  # a store of its own, closed here
    async with store:
        data = encode_json(report.to_success_data())
        path = join(base, f"summary-{ctx.layout.job_id}.json")
        await ctx.call(lambda: store.put(path, data, mode=PutMode.OVERWRITE))
