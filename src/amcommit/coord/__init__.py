"""Coordination on a store, with one clock rule: the lease (:mod:`amcommit.coord.lease`).

Used by the destination lock (:mod:`amcommit.committer.lock`) and the streaming query's
lease (:mod:`amcommit.spark.stream_state`). Imports only the kernel
(:mod:`amcommit.errors`, :mod:`amcommit.paths`, :mod:`amcommit.iostats`),
:mod:`amcommit.liveness` and :mod:`amcommit.store`.
"""

from amcommit.coord.lease import (
    ABSENT,
    SAFE_FRACTION,
    FencedStore,
    Holding,
    Lease,
    LeaseLost,
    Seen,
    Watch,
    judge,
)

__all__ = [
    "ABSENT",
    "SAFE_FRACTION",
    "FencedStore",
    "Holding",
    "Lease",
    "LeaseLost",
    "Seen",
    "Watch",
    "judge",
]
