"""Run the repository's GCS test double (``src/amcommit/testing/gcs_double.py``) as a server process.

    .venv/bin/python -m benchmarks.gcs_double_server

It speaks the GCS JSON API like the real service where amcommit's correctness depends on
it: preconditions enforced everywhere and ``objects.move`` (atomic), which
fake-gcs-server lacks. The benchmarks use it to measure the rename path a real GCS bucket
takes (metadata PATCH + ``objects.move``). It runs in a process of its own so that its CPU
is measured apart from the client's. Prints ``http://127.0.0.1:PORT`` once it listens
(loopback only) and serves until stdin closes or it is terminated.
"""

from __future__ import annotations

import asyncio
import sys


async def _serve() -> None:
    from amcommit.testing.gcs_double import GcsDouble

    double = GcsDouble(supports_move=True)
    await double.start()
    print(double.url, flush=True)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(sys.stdin.fileno(), lambda: done.done() or done.set_result(None))
    try:
        await done  # stdin readable = the parent closed it (or wrote): stop
    finally:
        await double.stop()


def main() -> int:
    asyncio.run(_serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
