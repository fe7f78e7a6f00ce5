"""The journal state machine: THE commit of every job kind.

A job commit (fresh or resumed) is one walk through the journal's states
(:mod:`amcommit.committer.journal`); this module walks it for every kind, and a kind
contributes only a :class:`CommitPlan`: its checks, what it puts in place, what it
publishes. Nothing of the journal (loading it, the resume rules of
:func:`~amcommit.committer.actions.next_action`, its ``renaming`` / ``renamed`` /
``committed`` writes, what a resumed run reports) lives in a kind.

==============================  ======================================================
step (:func:`run_commit`)        the plan's part
==============================  ======================================================
load the journal                 ``begin``: its own reads, at the same time (True: the
                                 commit was published already)
(published, or ``committed``)    ``finished``: what is left (a report, late cleanup); end
load the manifests               ``manifest_check`` (each manifest, while loading);
(+ publish given manifests)      ``loaded`` (the loaded set; a resume re-reads what the
                                 fresh run saved)
no journal                       ``check`` (conflicts, order, the plan to publish): a
                                 :class:`Fresh`, recorded in the new journal ``renaming``;
                                 None: nothing to commit (the plan undid the write)
journal ``renaming``             ``place`` (the renames; any steps around them), then the
                                 journal ``renamed`` (patient): THE point of no return
journal ``renamed``              ``placed`` (what a resume past the renames redoes)
                                 after the report is restored from the journal
                                 ``publish`` (old files, ``_SUCCESS``, a completed instant)
                                 then the journal ``committed`` (patient)
                                 ``committed`` (after the journal says so)
==============================  ======================================================

What is atomic: each journal write (one whole-object put); the renames and the publish as
each plan says. The all-or-nothing outcome of the commit comes from the journal and the
resume/abort rules of :mod:`amcommit.committer.job`, which also rolls back from
:class:`~amcommit.committer.context.CommitRun` when a commit fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from amcommit.committer.actions import Action, next_action
from amcommit.committer.context import CommitRun, JobContext
from amcommit.committer.journal import Journal, load_journal, record_renames, restore_renames, save_journal
from amcommit.committer.stages import load_manifests, publish_manifests
from amcommit.committer.stages.load_manifests import LoadedManifests, ManifestCheck
from amcommit.manifest import TaskManifest
from amcommit.parallel import run_parallel

__all__ = ["CommitPlan", "Fresh", "run_commit"]


@dataclass(frozen=True)
class Fresh:
    """What a fresh commit's checks decided, recorded in its new journal."""

    victim_chunks: int = 0
    """Chunks of the victim lists (old files an overwrite removes) the checks saved."""
    layout: str = "amcommit"
    """The journal's ``layout`` field (``amcommit``, ``hadoop``, ``table``)."""


class CommitPlan(Protocol):
    """A kind's part of one job commit (module doc). One object per commit run: it may keep
    what its steps learn for the later ones."""

    async def begin(self, ctx: JobContext) -> bool:
        """Reads of the kind before anything else (while the frame loads the journal).
        True if the commit was published already (only :meth:`finished` remains)."""
        ...

    async def finished(self, ctx: JobContext, journal: Journal | None) -> None:
        """The commit is published (:meth:`begin` said so, or the journal is
        ``committed``): fill the report in and do what a run cut short left."""
        ...

    def manifest_check(self, ctx: JobContext, journal: Journal | None) -> ManifestCheck | None:
        """The kind's check of each task manifest while they are loaded (None: none). May
        raise (CommitError) to refuse the commit before anything is loaded."""
        ...

    async def loaded(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal | None) -> None:
        """After the manifests are loaded: checks of the whole set; for a resume
        (``journal``), what the fresh run saved for the later steps."""
        ...

    async def check(self, ctx: JobContext, loaded: LoadedManifests) -> Fresh | None:
        """A fresh commit's checks and preparations, before anything is published. None:
        nothing to commit (the plan ended the write itself; no journal is written)."""
        ...

    async def place(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        """Put the files in place (journal ``renaming``: fresh or resumed). Must be safe to
        run again from any point it was cut short at."""
        ...

    async def placed(self, ctx: JobContext, loaded: LoadedManifests) -> None:
        """A resume past the point of no return (journal ``renamed``): what :meth:`place`
        did after its renames that must be done again before :meth:`publish`."""
        ...

    async def publish(self, ctx: JobContext, loaded: LoadedManifests, journal: Journal) -> None:
        """Past the point of no return: the steps that make the commit visible and final
        (sets ``report.success``)."""
        ...

    async def committed(self, ctx: JobContext) -> None:
        """After the journal says ``committed``."""
        ...


async def run_commit(
    ctx: JobContext,
    run: CommitRun,
    manifests: Sequence[TaskManifest] | None,
    etags: Sequence[str | None] | None,
    plan: CommitPlan,
) -> None:
    """Commit (or resume committing) ``ctx``'s job through ``plan`` (module doc). Runs
    under the destination lock. ``run`` receives the spool and the loaded manifests (the
    caller closes it and rolls back from it on failure)."""
    report = ctx.report
    journal: Journal | None = None
    published = False

    async def journal_of() -> None:
        nonlocal journal
        journal = await load_journal(ctx)

    async def begin() -> None:
        nonlocal published
        published = await plan.begin(ctx)

    # both are reads, neither depends on the other, and a first run needs both
    await run_parallel([journal_of, begin], lambda step: step(), 2)
    if journal is not None:
        report.resumed = True
        journal.runs += 1
    ctx.journal = journal
    action = next_action("commit", journal.state if journal is not None else None)
    if published or action is Action.CLEANUP:
        await plan.finished(ctx, journal)
        return
    if journal is not None and journal.conflict_mode != ctx.config.conflict_mode:
        # a resumed commit keeps the mode it started with
        ctx.config = ctx.config.with_options(conflict_mode=journal.conflict_mode)
        report.conflict_mode = journal.conflict_mode

    check = plan.manifest_check(ctx, journal)
    async with ctx.stage("load_manifests"):
        run.spool = load_manifests.new_spool(ctx)
        # (a resumed commit's manifests passed the check when its journal was saved)
        loaded = run.loaded = await load_manifests.run(
            ctx, load_manifests.LoadInputs(run.spool, manifests, check)
        )
        if manifests is not None and journal is None:
            await publish_manifests.run(ctx, publish_manifests.PublishInputs(manifests, etags))
    await plan.loaded(ctx, loaded, journal)

    if journal is None:
        fresh = await plan.check(ctx, loaded)
        if fresh is None:
            return
        journal = Journal(
            job_id=ctx.layout.job_id,
            state="renaming",
            conflict_mode=ctx.config.conflict_mode,
            victim_chunks=fresh.victim_chunks,
            layout=fresh.layout,
            stage_seconds=dict(report.stage_seconds),
        )
        ctx.journal = journal
        await save_journal(ctx, journal)

    if journal.state == "renaming":
        for stage, secs in journal.stage_seconds.items():  # a resume: the first run's checks
            report.stage_seconds.setdefault(stage, secs)
        await plan.place(ctx, loaded)
        journal.state = "renamed"
        record_renames(journal, report)
        # the point of no return: from here a transient error must not fail the commit
        await save_journal(ctx, journal, patient=True)
    else:
        restore_renames(journal, report)  # the run that renamed recorded what it did
        await plan.placed(ctx, loaded)
    await plan.publish(ctx, loaded, journal)
    journal.state = "committed"
    await save_journal(ctx, journal, patient=True)
    await plan.committed(ctx)
