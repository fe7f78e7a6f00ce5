"""The fault matrix of issue 11: scenarios x backends, each checked against an oracle.

Plain destinations and, since issue 13, Hudi table commits (scenarios ``table-*``: append,
dynamic and whole-table overwrite killed at the table commit's stages then resumed or
aborted, killed mid-cleanup, a failed write rolled back, dead writers taken over), checked
against :mod:`tests.matrix.table_oracle` (exact objects and bytes, the completed instant's
metadata) and hudi-rs (the whole instant or nothing) where hudi-rs reaches the backend
(local files, Azurite, fake-gcs-server; not the ADLS test server or the GCS double: see
:data:`tests.matrix.table_runner.HUDI_UNREACHABLE`).

* :mod:`tests.matrix.scenarios`: the scenario table (data);
* :mod:`tests.matrix.oracle`: the expected destination, computed from a scenario (pure);
* :mod:`tests.matrix.stores`: backend connection info as JSON, and opening a store from it;
* :mod:`tests.matrix.kill_rules` / :mod:`tests.matrix.kill_child`: a job commit or abort in
  a real subprocess that SIGKILLs itself at a point given as JSON (progress event, store
  operation, HTTP request);
* :mod:`tests.matrix.chaos_proxy`: HTTP faults in front of any emulator (429/503 storms,
  lost answers, connection resets);
* :mod:`tests.matrix.runner`: runs one scenario on one backend (since issue 23 also commits
  that fail for good with each error class, ``error-*`` / ``table-error-*``, then
  ``commit-job`` again or ``abort-job``; and ``way-*``: a file or directory in the way);
* :mod:`tests.matrix.test_way_kills`: an overwrite with something in the way killed after
  each of its requests about it, then resumed and separately aborted;
* :mod:`tests.matrix.table_oracle` / :mod:`tests.matrix.table_runner`: the table scenarios'
  expected results (pure) and runner;
* :mod:`tests.matrix.table`: the markdown table of the last run (``last_run.md``).
"""
