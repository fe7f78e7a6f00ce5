"""Every ```python block of README.md and docs/**/*.md runs, as a reader would run it.

A block is marked by an HTML comment on the line right before its fence:

- none: it runs on local files (in a fresh temporary directory, its working directory);
- ``<!-- run: spark -->``: it runs in the Spark group (one driver process for every such
  block, pages in order; the test carries the ``spark`` marker, so ``./run test --fast``
  leaves it out);
- ``<!-- run: gcs -->``: it runs against the suite's fake-gcs-server (``STORAGE_EMULATOR_HOST``
  set, bucket ``lake`` created), as a reader's shell after ``amcommit emulator start gcs``;
- ``<!-- not-run: REASON -->``: shown only (e.g. it needs a real cloud account); the reason is
  required.

The blocks of one page and group run in order in one namespace (:mod:`tests.docs.run_blocks`),
so a page may build on its earlier blocks. A block that raises fails its test with the page
and line. Any other marker, or ``not-run`` without a reason, fails ``test_blocks_are_marked``.

The README's front-door promises are checked here too: at most 300 lines, the two commands
exactly as ``.ci/run`` and the demo test run them, and every relative link of the README and
the docs pages names a file that exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_blocks.py")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON_FENCES = {"python", "py", "python3", "pycon"}
MARK = re.compile(r"^<!--\s*(run|not-run)\s*:\s*(.*?)\s*-->\s*$")
GROUPS = ("local", "spark", "gcs")
TIMEOUT = {"local": 120, "gcs": 120, "spark": 540}


@dataclass(frozen=True)
class Block:
    page: str
    """The page's path relative to the repository root."""
    line: int
    """The line of the block's first source line (1-based)."""
    source: str
    group: str
    """``local``, ``spark``, ``gcs``, or ``not-run``."""
    mark: str | None
    """The marker comment's text, as written (None: unmarked)."""


def blocks_of(path: Path) -> list[Block]:
    """The python blocks of ``path`` with their groups (marker problems are kept for the check)."""
    rel = path.relative_to(ROOT).as_posix()
    lines = path.read_text().split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```\s*(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        lang = fence.group(2).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        if lang in PYTHON_FENCES:
            prev = lines[i - 1].strip() if i > 0 else ""
            m = MARK.match(prev)
            group = "local"
            if m and m.group(1) == "not-run":
                group = "not-run"
            elif m:
                group = m.group(2)
            out.append(Block(rel, i + 2, "\n".join(lines[i + 1 : j]) + "\n", group, prev if m else None))
        i = j + 1
    return out


ALL_BLOCKS = [b for page in PAGES for b in blocks_of(page)]


def test_blocks_are_marked() -> None:
    """Every python block runs in a known group, or says why it does not run."""
    problems = []
    for b in ALL_BLOCKS:
        if b.group == "not-run":
            assert b.mark is not None
            if not MARK.match(b.mark) or not MARK.match(b.mark).group(2):  # type: ignore[union-attr]
                problems.append(f"{b.page}:{b.line}: not-run without a reason")
        elif b.group not in GROUPS:
            problems.append(f"{b.page}:{b.line}: unknown marker {b.mark!r} (run: spark|gcs, not-run: REASON)")
    assert problems == []
    # the harness itself finds blocks in every group (a parse error would skip them silently)
    assert {b.group for b in ALL_BLOCKS} >= {"local", "spark", "gcs"}


def _run(blocks: list[Block], cwd: Path, env: dict[str, str], timeout: float) -> None:
    spec = cwd / ".blocks.json"
    spec.write_text(json.dumps([[b.page, b.line, b.source] for b in blocks]))
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
        pytest.fail(f"a documentation example failed:\n{tail}", pytrace=False)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


LOCAL_PAGES = sorted({b.page for b in ALL_BLOCKS if b.group == "local"})


@pytest.mark.parametrize("page", LOCAL_PAGES)
def test_local_examples(page: str, tmp_path: Path) -> None:
    """The page's unmarked blocks run, in order, on local files in an empty directory."""
    _run([b for b in ALL_BLOCKS if b.page == page and b.group == "local"], tmp_path, _env(), TIMEOUT["local"])


def test_gcs_examples(fake_gcs: Any, tmp_path: Path) -> None:
    """The ``run: gcs`` blocks run against fake-gcs-server, reached as a reader's shell would
    after ``amcommit emulator start gcs`` (``STORAGE_EMULATOR_HOST``; bucket ``lake``)."""
    try:
        fake_gcs.create_bucket("lake")
    except Exception:  # already there (another run of this test in the session)
        pass
    blocks = [b for b in ALL_BLOCKS if b.group == "gcs"]
    _run(blocks, tmp_path, _env(STORAGE_EMULATOR_HOST=fake_gcs.url), TIMEOUT["gcs"])


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_examples(tmp_path: Path) -> None:
    """The ``run: spark`` blocks run in one driver process (the README's complete example
    builds the session; later pages get it back with ``getOrCreate()``)."""
    home = os.environ.get("JAVA_HOME")
    if not (shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java")))):
        pytest.skip("Java is not available")
    blocks = [b for b in ALL_BLOCKS if b.group == "spark"]
    _run(blocks, tmp_path, _env(SPARK_LOCAL_IP="127.0.0.1"), TIMEOUT["spark"])


COMMANDS = (
    "./run demo    # the main job: Spark writes 3M rows through amcommit to the bundled fake-gcs-server, then reads them back",
    "./run test    # ruff + mypy + the whole test suite (Azurite, fake-gcs-server, ADLS Gen2 test server, Spark, Hadoop interop)",
)
"""The README's two commands, exactly as they stood before it became a front door."""


def test_readme_is_a_front_door() -> None:
    """At most 300 lines, and the two commands exactly as the suite and ``.ci/run`` use them."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for command in COMMANDS:
        assert f"\n{command}\n" in text, command
    assert "exec ./run test\n" in (ROOT / ".ci" / "run").read_text()


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in PAGES])
def test_relative_links_resolve(page: str) -> None:
    """Every relative link of the page names a file or folder that exists (anchors aside)."""
    path = ROOT / page
    missing = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#", 1)[0]).exists():
            missing.append(target)
    assert missing == []


def test_docs_index_names_every_page() -> None:
    """A reader finds every page from docs/index.md."""
    index = (ROOT / "docs" / "index.md").read_text()
    for p in sorted((ROOT / "docs").rglob("*.md")):
        rel = p.relative_to(ROOT / "docs").as_posix()
        if rel != "index.md":
            assert f"({rel})" in index, rel
