"""The package's floors (ARCHITECTURE.md "Package layout"): no import cycles, the engine
knows no table, the store layer knows no engine, the instant syntax is defined once.

The import graph is read from the source with :mod:`ast` (every ``import`` statement,
inside functions too; those under ``if TYPE_CHECKING:`` are type-only and left out).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import amcommit
from amcommit.committer.config import CommitterConfig
from amcommit.committer.report import JobReport
from amcommit.table.report import TableReport
from amcommit.table.settings import TableConfig, TableSettings

SRC = Path(amcommit.__file__).parent

ALLOWED_EDGES: dict[tuple[str, str], str] = {}
"""Imports left out of the cycle check, each with why: none (the engine's compatibility
shims that called the front door are gone; ``amcommit.committer.commit_job`` & co. resolve
to :mod:`amcommit.api`'s own functions)."""


def _modules() -> dict[str, tuple[Path, bool]]:
    out: dict[str, tuple[Path, bool]] = {}
    for path in SRC.rglob("*.py"):
        parts = ["amcommit", *path.relative_to(SRC).with_suffix("").parts]
        pkg = parts[-1] == "__init__"
        if pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, pkg)
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of ``name`` (a module, or a name inside one)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_only(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def imports_of(module: str) -> set[str]:
    """The src modules ``module`` imports (at any depth of its code, type-only ones aside)."""
    path, pkg = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_only(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(t for a in node.names if (t := _owner(a.name)) is not None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if pkg else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join([*here, *([base] if base else [])])
            for a in node.names:
                full = f"{base}.{a.name}"
                t = _owner(full if full in MODULES else base)
                if t is not None:
                    out.add(t)
    out.discard(module)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp: set[str] = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = {m: {t for t in ts if (m, t) not in ALLOWED_EDGES} for m, ts in GRAPH.items()}
    found = [sorted(c) for c in cycles(graph)]
    assert found == []


def test_no_edge_is_allowed_and_the_engine_has_no_front_door_shims() -> None:
    import amcommit.api
    import amcommit.committer
    import amcommit.committer.job

    assert ALLOWED_EDGES == {}
    assert "amcommit.api" not in GRAPH["amcommit.committer.job"]
    for name in ("setup_job", "commit_job", "abort_job"):
        assert not hasattr(amcommit.committer.job, name)
        # the README's old path, kept for one release: the front door's function itself
        with pytest.warns(
            DeprecationWarning, match=f"amcommit.committer.{name} moved to amcommit.api.{name}"
        ):
            assert getattr(amcommit.committer, name) is getattr(amcommit.api, name)
    with pytest.raises(AttributeError, match="no attribute 'commit_jobs'"):
        _ = amcommit.committer.commit_jobs  # type: ignore[attr-defined]


def _imports_from(prefix: str) -> dict[str, set[str]]:
    return {m: ts for m, ts in GRAPH.items() if m == prefix or m.startswith(prefix + ".")}


def test_engine_imports_no_table_spark_or_cli() -> None:
    bad = {
        m: sorted(t for t in ts if t.startswith(("amcommit.table", "amcommit.spark", "amcommit.cli")))
        for m, ts in _imports_from("amcommit.committer").items()
    }
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_engine_names_no_table_module() -> None:
    """Not even in a docstring: ``grep -rn amcommit.table src/amcommit/committer``."""
    named = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted((SRC / "committer").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "amcommit.table" in line
    ]
    assert named == []


def test_store_imports_no_engine_or_table() -> None:
    bad = {
        m: sorted(t for t in ts if t.startswith(("amcommit.committer", "amcommit.table")))
        for m, ts in _imports_from("amcommit.store").items()
    }
    assert {m: ts for m, ts in bad.items() if ts} == {}


_INSTANT_SYNTAX = re.compile(r"\\d\{1[47]\}|\[0-9\]\{1[47]\}|\\d\{3\}")


def test_instant_syntax_defined_once() -> None:
    """The regular expression of an instant time is written once (table/format/naming.py);
    everything else that parses instants builds on it."""
    found = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if _INSTANT_SYNTAX.search(line)
    ]
    assert len(found) == 1 and found[0].startswith("table/format/naming.py:"), found


def test_kind_settings_and_report_fields_are_the_tables() -> None:
    """The engine's config and report hold no table field; the table's types do, and the
    combined option set users give is exactly the engine's plus the table's."""
    table_fields = set(TableSettings.__struct_fields__)
    assert table_fields == {
        "writer_ttl",
        "clean_retain_commits",
        "table_commit",
        "compact_every",
        "compaction_target_io",
        "archive",
        "keep_max_commits",
        "keep_min_commits",
    }
    assert not table_fields & set(CommitterConfig.__struct_fields__)
    assert set(TableConfig.__struct_fields__) == set(CommitterConfig.__struct_fields__) | table_fields
    for name in table_fields:
        assert getattr(TableConfig(), name) == getattr(TableSettings(), name)
    report_fields = {f.name for f in dataclasses.fields(TableReport)} - {
        f.name for f in dataclasses.fields(JobReport)
    }
    assert report_fields == {"instant", "operation", "label", "skipped_label", "active_writes"}


TABLE_FLOORS = ("format", "file_group", "timeline", "query", "write", "commit", "mutate")
"""The table's folders, lowest first (query: reading rows, below the writers, which compaction uses): a folder imports only from folders before it (and from
the table's top modules :mod:`~amcommit.table.errors`, ``settings`` and ``report``)."""

TABLE_TOP = {"amcommit.table", "amcommit.table.errors", "amcommit.table.settings", "amcommit.table.report"}


def _table_floor(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["amcommit", "table"] or len(parts) < 3 or parts[2] not in TABLE_FLOORS:
        return None
    return parts[2]


def test_table_is_folders_with_at_most_five_top_modules() -> None:
    table = SRC / "table"
    top = sorted(p.name for p in table.glob("*.py"))
    assert len(top) <= 5, top
    folders = sorted(p.name for p in table.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert set(folders) <= set(TABLE_FLOORS), folders


def test_table_folders_import_only_downwards() -> None:
    """format <- file_group <- timeline <- write <- commit <- mutate: no import upwards, no
    edge allowed; the top modules (errors, settings, report) import no folder."""
    upward: list[str] = []
    for m, ts in _imports_from("amcommit.table").items():
        floor = _table_floor(m)
        for t in ts:
            if not t.startswith("amcommit.table"):
                continue
            tf = _table_floor(t)
            if m in TABLE_TOP - {"amcommit.table"} and tf is not None:
                upward.append(f"{m} -> {t}")
            elif floor is not None and tf is not None and TABLE_FLOORS.index(tf) > TABLE_FLOORS.index(floor):
                upward.append(f"{m} -> {t}")
    assert upward == []


def test_table_format_uses_no_store() -> None:
    """``grep -rn amcommit.store src/amcommit/table/format`` finds nothing: the format is pure."""
    named = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted((SRC / "table" / "format").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "amcommit.store" in line
    ]
    assert named == []


def test_old_flat_table_paths_import_as_the_moved_modules() -> None:
    """``amcommit.table.labels`` (the README's path before issue 33) is the module it became."""
    import importlib
    import sys

    from amcommit.table import MOVED

    for old, new in MOVED.items():
        sys.modules.pop(f"amcommit.table.{old}", None)
        with pytest.warns(DeprecationWarning, match=f"amcommit.table.{old} moved to {new}"):
            mod = importlib.import_module(f"amcommit.table.{old}")
        assert mod is importlib.import_module(new)
    from amcommit.table.labels import Label  # type: ignore[import-not-found]

    from amcommit.table.commit.labels import Label as Moved

    assert Label is Moved
