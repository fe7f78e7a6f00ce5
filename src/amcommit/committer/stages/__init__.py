"""Job-commit stages, one module each, in the order they run:

load_manifests (+ publish_manifests) -> check_conflicts -> prepare_dirs -> rename_files
-> delete_victims -> validate_output -> save_success -> cleanup (and write_summary after a
run); rollback (abort after a partial commit) and renames_done (abort's "was the commit in
fact complete?").

Each stage module has ``run(ctx, inputs) -> result``: ``ctx`` is the
:class:`~amcommit.committer.context.JobContext` (store, layout, config, journal, limiter,
progress, and the report that collects counters), ``inputs`` and the result are small
frozen dataclasses defined next to ``run``. A stage hands nothing to the next through
``ctx``: the journal state machine (:mod:`amcommit.committer.machine`) and the kinds' plans
(:mod:`amcommit.committer.kind`, and those of kinds built on the engine) pass results on. Each can be tested alone (tests/unit/test_stage_*.py).

Shared helpers, by what they hold: :mod:`.renaming` (rename ids, the recovery of one
rename, moving a file aside), :mod:`.scope` (the replace scope and trash paths),
:mod:`.victims` (the victim lists on the store), :mod:`.dirs` (removing emptied
directories), :mod:`.messages` (what a user reads about a conflict).
"""
