"""Every deliberate failure the package ships, for tests, benchmarks and chaos drills.

Nothing here runs unless code switches it on: :mod:`amcommit.testing.faults` wraps a store in
fault rules (:class:`~amcommit.testing.faults.FaultyStore`); production code never imports
this package and never parses a fault option.

Also here, for tests and benchmarks: :mod:`amcommit.testing.gcs_double` (an in-process GCS
JSON API server with fault rules; needs ``google-crc32c``) and
:mod:`amcommit.testing.tablegen` (synthetic Hudi timelines; needs ``pyarrow``).
"""
