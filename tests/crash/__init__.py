"""Crash tests: a real child process SIGKILLed at an exact point of a job commit or abort
(see :mod:`tests.crash.kill`), then resumed or aborted by the test."""
