"""Job-commit stages, one module each, in the order they run:

load_manifests -> check_conflicts -> prepare_dirs -> rename_files -> delete_victims
-> validate_output -> save_success -> cleanup; and rollback (abort after a partial commit).
Each takes a :class:`~amcommit.committer.context.JobContext` and can be tested alone.
"""
