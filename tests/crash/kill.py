"""Kill the current process at an exact point: after (or before) the N-th HTTP request
matching a rule, or at a progress event of the engine. Used inside a child process (see
:mod:`tests.crash.child`); reusable by any crash test or fault matrix.

Kill rules are plain JSON-able dicts so a parent test can hand them to a child:

``{"method": "PUT", "url": "regex", "header": "x-ms-copy-source", "nth": 1, "when": "after",
"status": 202}``

* ``method``: HTTP method (case-insensitive); omitted = any.
* ``url``: a regular expression searched (``re.search``) in the request URL *after
  percent-decoding* (so ``_temporary/.*/trash/p=1/same.bin`` matches GCS's
  ``%2F``-encoded object names too); omitted = any.
* ``header``: name of a request header that must be present (``x-ms-copy-source`` marks a
  Blob Copy Blob); omitted = any.
* ``status``: only count responses with this status (``"after"`` only); omitted = any.
* ``nth``: kill at the N-th matching request (1-based, counted in this process).
* ``when``: ``"after"`` (default) kills as soon as the response headers arrived, i.e. the
  service has executed the request but the client never learns it; ``"before"`` kills just
  before the request is sent (it never reaches the service).

How it works: :func:`install_request_killer` wraps ``aiohttp.ClientSession.__init__`` so
every session created afterwards in this process carries an ``aiohttp.TraceConfig`` whose
``on_request_start`` / ``on_request_end`` hooks count matching requests and call
``os.kill(os.getpid(), SIGKILL)`` — no cleanup, no ``finally``, exactly like a killed
driver. Every HTTP backend (Blob, ADLS, GCS) goes through ``aiohttp``, so no product code
needs a hook. Install it before the store sends its first request.

:func:`progress_killer` gives a ``progress`` callback for ``commit_job``/``abort_job`` that
kills at a stage event: ``"stage:phase"`` or ``"stage:progress:N"`` (N-th done item).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import aiohttp

from amcommit.committer.report import Progress


def die() -> None:
    """SIGKILL this process (never returns)."""
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class KillRule:
    """One request-kill rule (see the module docstring)."""

    method: str | None = None
    url: str | None = None
    header: str | None = None
    status: int | None = None
    nth: int = 1
    when: str = "after"
    seen: int = field(default=0, compare=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KillRule:
        unknown = set(d) - {"method", "url", "header", "status", "nth", "when"}
        if unknown:
            raise ValueError(f"unknown kill rule keys: {sorted(unknown)}")
        rule = cls(**d)
        if rule.when not in ("after", "before"):
            raise ValueError(f"kill rule 'when' must be 'after' or 'before', not {rule.when!r}")
        return rule

    def matches(self, method: str, url: str, headers: Any, status: int | None) -> bool:
        if self.method is not None and method.upper() != self.method.upper():
            return False
        if self.url is not None and re.search(self.url, unquote(url)) is None:
            return False
        if self.header is not None and self.header not in headers:
            return False
        return self.status is None or status == self.status


def install_request_killer(rules: list[dict[str, Any]] | list[KillRule]) -> list[KillRule]:
    """Make every aiohttp session created from now on SIGKILL this process per ``rules``.
    Returns the rule objects (their ``seen`` counters show what was matched)."""
    parsed = [r if isinstance(r, KillRule) else KillRule.from_dict(r) for r in rules]

    def check(when: str, method: str, url: str, headers: Any, status: int | None) -> None:
        for r in parsed:
            if r.when == when and r.matches(method, url, headers, status):
                r.seen += 1
                if r.seen >= r.nth:
                    die()

    async def on_start(_s: Any, _c: Any, p: aiohttp.TraceRequestStartParams) -> None:
        check("before", p.method, str(p.url), p.headers, None)

    async def on_end(_s: Any, _c: Any, p: aiohttp.TraceRequestEndParams) -> None:
        check("after", p.method, str(p.url), p.headers, p.response.status)

    tc = aiohttp.TraceConfig()
    tc.on_request_start.append(on_start)
    tc.on_request_end.append(on_end)
    original = aiohttp.ClientSession.__init__

    def patched(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        kwargs["trace_configs"] = [*(kwargs.get("trace_configs") or []), tc]
        original(self, *args, **kwargs)

    aiohttp.ClientSession.__init__ = patched  # type: ignore[method-assign]
    return parsed


def progress_killer(point: str | None) -> Callable[[Progress], None] | None:
    """A progress callback that SIGKILLs at ``"stage:phase"`` (phase ``start``/``end``) or
    ``"stage:progress:N"`` (once N items are done); None for no point."""
    if not point:
        return None
    stage, phase, *rest = point.split(":")
    at = int(rest[0]) if rest else 0

    def progress(p: Progress) -> None:
        if p.stage == stage and p.phase == phase and (phase != "progress" or p.done >= at):
            die()

    return progress
