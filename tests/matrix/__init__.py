"""The fault matrix of issue 11: scenarios x backends, each checked against an oracle.

* :mod:`tests.matrix.scenarios`: the scenario table (data);
* :mod:`tests.matrix.oracle`: the expected destination, computed from a scenario (pure);
* :mod:`tests.matrix.stores`: backend connection info as JSON, and opening a store from it;
* :mod:`tests.matrix.kill_rules` / :mod:`tests.matrix.kill_child`: a job commit or abort in
  a real subprocess that SIGKILLs itself at a point given as JSON (progress event, store
  operation, HTTP request);
* :mod:`tests.matrix.chaos_proxy`: HTTP faults in front of any emulator (429/503 storms,
  lost answers, connection resets);
* :mod:`tests.matrix.runner`: runs one scenario on one backend;
* :mod:`tests.matrix.table`: the markdown table of the last run (``last_run.md``).
"""
