"""No production module signals or ends a process: ``os.kill``, ``os.killpg`` and
``os._exit`` appear only in :mod:`amcommit.testing` (deliberate failures switched on by test
code) and :mod:`amcommit.emulators` (stopping the emulators it started). Checked on the
syntax tree of every module of the installed package (issue 24)."""

from __future__ import annotations

import ast
from pathlib import Path

import amcommit

ALLOWED = ("testing", "emulators")
CALLS = frozenset({"kill", "killpg", "_exit"})


def _calls(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in CALLS:
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append((node.lineno, f"os.{node.attr}"))
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [(node.lineno, f"from os import {a.name}") for a in node.names if a.name in CALLS]
    return sorted(found)


def test_only_testing_and_emulators_signal_processes() -> None:
    root = Path(amcommit.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in ALLOWED:
            continue
        bad += [f"{rel}:{line}: {what}" for line, what in _calls(ast.parse(path.read_text()))]
    assert bad == []


def test_the_check_sees_a_call() -> None:
    assert _calls(ast.parse("import os\nos.kill(1, 0)\nfrom os import _exit\n")) == [
        (2, "os.kill"),
        (3, "from os import _exit"),
    ]
