"""Backends of the matrix as JSON-able connection info, and opening a store from it.

The test process and the kill child (another process) open the same store from the same
info, so what the child did is what the test process checks. Info kinds::

    {"kind": "local", "root": DIR}
    {"kind": "blob" | "dfs", "endpoint": URL, "account": NAME, "account_key": KEY, "container": NAME}
    {"kind": "gcs", "endpoint": URL, "bucket": NAME, "use_move": bool | None,
     "verify_preconditions": bool | None}

``endpoint`` may be replaced by a proxy's (see :func:`via`).
"""

from __future__ import annotations

from typing import Any

from yarl import URL

from amcommit.store.base import Store
from amcommit.store.limits import Limiter
from amcommit.store.retry import RetryPolicy

BackendInfo = dict[str, Any]

BACKENDS: list[str] = ["local", "blob", "dfs", "gcs-double", "gcs-fake"]
"""Column order of the matrix: local files, Blob on Azurite, the ADLS Gen2 test server, GCS
on the project's double (objects.move, server-side preconditions), GCS on fake-gcs-server
(rewrite + delete, client-side preconditions)."""

HTTP_BACKENDS = frozenset(BACKENDS) - {"local"}
COPY_RENAME_BACKENDS = frozenset({"blob", "gcs-fake"})
"""Backends whose rename is two requests (copy, then delete of the source)."""

FAST_RETRY = RetryPolicy(max_attempts=8, base_delay=0.005, max_delay=0.2)


def open_store(info: BackendInfo) -> Store:
    """A fresh store (its own HTTP session) for ``info``."""
    kind = info["kind"]
    if kind == "local":
        from amcommit.store.local import LocalStore

        return LocalStore(info["root"], fsync=False)
    if kind in ("blob", "dfs"):
        from amcommit.store.azure import BlobStore, DfsStore

        cls = BlobStore if kind == "blob" else DfsStore
        return cls(
            info["container"],
            endpoint=info["endpoint"],
            account=info["account"],
            account_key=info["account_key"],
            retry=FAST_RETRY,
        )
    if kind == "gcs":
        from amcommit.store.gcs import GcsStore

        return GcsStore(
            info["bucket"],
            endpoint=info["endpoint"],
            limiter=Limiter(max_concurrency=32),
            write_rate=None,
            retry=FAST_RETRY,
            use_move=info.get("use_move"),
            verify_preconditions=info.get("verify_preconditions"),
        )
    raise ValueError(f"unknown backend kind {kind!r}")


def via(info: BackendInfo, proxy_url: str) -> BackendInfo:
    """``info`` with its endpoint's scheme/host/port replaced by ``proxy_url``'s (the path,
    e.g. Azurite's ``/devstoreaccount1``, stays)."""
    ep, px = URL(info["endpoint"]), URL(proxy_url)
    return info | {"endpoint": str(ep.with_scheme(px.scheme).with_host(px.host or "").with_port(px.port))}
