"""Run documentation examples (used by ``test_docs_examples``; a script, not a test module).

``python run_blocks.py BLOCKS.json``: BLOCKS.json is a list of ``[page, line, source]``; the
blocks of one page run in order in one namespace (a page reads like one session), each page in
a fresh one. Tracebacks name the page and its line numbers (the source is compiled at its
line in the page). The first failing block ends the run with status 1 after printing
``EXAMPLE FAILED: page:line``.
"""

from __future__ import annotations

import json
import sys
import traceback


def main(path: str) -> int:
    with open(path) as f:
        blocks: list[list[object]] = json.load(f)
    namespaces: dict[str, dict[str, object]] = {}
    for page, line, source in blocks:
        assert isinstance(page, str) and isinstance(line, int) and isinstance(source, str)
        ns = namespaces.setdefault(page, {"__name__": "__main__"})
        code = compile("\n" * (line - 1) + source, page, "exec")
        try:
            exec(code, ns)
        except BaseException:
            traceback.print_exc()
            print(f"EXAMPLE FAILED: {page}:{line}", file=sys.stderr, flush=True)
            return 1
        print(f"EXAMPLE OK: {page}:{line}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
