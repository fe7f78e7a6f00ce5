"""Child process for test_stream_units: one run of a streaming query as far as its lease
goes. At wall-clock time ``start_at`` it takes the query's lease (``acquire_lease``, what a
run's tasks and batch commits do), prints ``{"running": RUN, "took": ...}``, then renews it
every ``ttl / 4`` for ``hold_for`` seconds (until killed if negative) and exits 0. If the
lease is refused it prints the one-line error on stderr and exits 1.

``--spec JSON``: ``{"backend": INFO, "dest", "app", "run", "ttl", "start_at", "hold_for",
"delay", "driver"}``; ``delay``: seconds each put of the lease waits before it is sent (so
that both racing runs have read the stale lease before either writes); ``driver``:
``"self"`` records this process as the run's driver."""

from __future__ import annotations

import json
import sys
import time

import anyio

from amcommit.errors import ConflictError
from amcommit.liveness import this_process
from amcommit.spark.stream_state import acquire_lease
from amcommit.testing.faults import FaultyStore
from tests.matrix.stores import open_store


def main() -> None:
    spec = json.loads(sys.argv[2])
    ttl, run = float(spec["ttl"]), spec["run"]
    kw = {"driver": this_process()} if spec.get("driver") == "self" else {}

    async def go() -> int:
        store = FaultyStore(open_store(spec["backend"]))
        if spec.get("delay"):
            store.latency(float(spec["delay"]), "put", path="*/.hoodie/.amcommit/streams/*")
        async with store:
            await anyio.sleep(max(0.0, float(spec["start_at"]) - time.time()))
            try:
                took = await acquire_lease(store, spec["dest"], spec["app"], run, ttl, **kw)  # type: ignore[arg-type]
                print(json.dumps({"running": run, "took": took}), flush=True)
                end = time.monotonic() + float(spec["hold_for"])
                while spec["hold_for"] < 0 or time.monotonic() < end:
                    await anyio.sleep(ttl / 4)
                    await acquire_lease(store, spec["dest"], spec["app"], run, ttl, **kw)  # type: ignore[arg-type]
            except ConflictError as e:
                print(f"amcommit: error: {e}", file=sys.stderr, flush=True)
                return 1
        return 0

    sys.exit(anyio.run(go))


if __name__ == "__main__":
    main()
