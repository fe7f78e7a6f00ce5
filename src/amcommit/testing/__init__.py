"""Every deliberate failure the package ships, for tests, benchmarks and chaos drills.

Nothing here runs unless code switches it on: :mod:`amcommit.testing.faults` wraps a store in
fault rules (:class:`~amcommit.testing.faults.FaultyStore`); production code never imports
this package and never parses a fault option.
"""
