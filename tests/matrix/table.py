"""The fault matrix as a markdown table (scenario x backend), from the last run's results.

``python -m tests.matrix.table`` prints ``tests/matrix/last_run.md`` again from
``last_run.json`` (both written by tests/matrix/conftest.py at the end of a run that
included the matrix; both gitignored).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.matrix.scenarios import BY_NAME, SCENARIOS
from tests.matrix.stores import BACKENDS

SYMBOL = {
    "passed": "pass",
    "failed": "**FAIL**",
    "xfail": "xfail",
    "xpass": "**XPASS**",  # a strict xfail passed: the run failed, remove the mark
    "xpassed": "xpass",  # a non-strict xfail passed (allowed)
    "skip": "skip",
}


def render(results: list[dict[str, str]]) -> str:
    by = {(r["scenario"], r["backend"]): r for r in results}
    notes: dict[str, int] = {}
    lines = [
        "| scenario | what | " + " | ".join(BACKENDS) + " |",
        "|---|---|" + "---|" * len(BACKENDS),
    ]
    for sc in SCENARIOS:
        cells = []
        for b in BACKENDS:
            r = by.get((sc.name, b))
            if r is None:
                cells.append("–")
                continue
            text = SYMBOL.get(r["outcome"], r["outcome"])
            if r["reason"] and r["outcome"] != "passed":
                n = notes.setdefault(r["reason"], len(notes) + 1)
                text += f" [{n}]"
            cells.append(text)
        lines.append(f"| {sc.name} | {BY_NAME[sc.name].summary} | " + " | ".join(cells) + " |")
    count = Counter(r["outcome"] for r in results)
    total = sum(float(r.get("seconds", 0)) for r in results)
    lines.append("")
    lines.append(
        f"{len(SCENARIOS)} scenarios x {len(BACKENDS)} backends: "
        + ", ".join(f"{k} {v}" for k, v in sorted(count.items()))
        + f"; {total:.0f} s in test calls"
    )
    if notes:
        lines.append("")
        lines += [f"[{n}] {reason}" for reason, n in notes.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    here = Path(__file__).parent
    print(render(json.loads((here / "last_run.json").read_text())), end="")


if __name__ == "__main__":
    main()
