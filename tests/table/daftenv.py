"""Daft (``daft.read_hudi``) as a second independent reader of amcommit's tables.

Daft pins ``pyarrow<26`` while the test environment runs a newer pyarrow (PySpark's), so it
lives in its own virtualenv, ``.venv-daft`` at the repository root, created by the first test
that needs it (once: a stamp names what was installed; a file lock keeps pytest-xdist
workers from creating it twice) and used through a subprocess. Daft also needs
``sortedcontainers``, which its package does not install.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-daft"
REQUIREMENTS = ("daft==0.7.26", "sortedcontainers>=2.4")
"""What the Daft environment holds (measured with Daft 0.7.26, which pulls pyarrow 25)."""

_SCRIPT = """
import json, sys
import daft
table = daft.read_hudi(sys.argv[1]).to_arrow()
print("DAFT-RESULT " + json.dumps({"columns": table.column_names, "rows": table.to_pylist()}, default=str))
"""


class DaftUnavailable(Exception):
    """Daft could not be installed here (no package index, no wheel for this platform)."""


def _python() -> Path:
    return VENV / "bin" / "python"


def daft_python() -> Path:
    """The Python of the Daft environment, created or updated when its stamp differs."""
    want = hashlib.sha256("\n".join([*REQUIREMENTS, sys.version]).encode()).hexdigest()[:16]
    stamp = VENV / ".stamp-daft"
    with open(ROOT / ".venv-daft.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == want and _python().exists():
            return _python()
        shutil.rmtree(VENV, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", str(VENV)],
            [str(_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *REQUIREMENTS],
        ]
        for cmd in steps:
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise DaftUnavailable(f"{cmd[2]}: {e}") from None
            if r.returncode != 0:
                lines = (r.stderr or r.stdout).strip().splitlines()
                raise DaftUnavailable(f"{' '.join(cmd[1:5])}: {lines[-1] if lines else r.returncode}")
        stamp.write_text(want)
        return _python()


def daft_read(python: Path, table_path: str) -> tuple[list[str], list[dict[str, Any]]]:
    """``(columns, rows)`` of ``daft.read_hudi(table_path)`` (a snapshot), run in the Daft
    environment. AssertionError with Daft's last line of output if it fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    r = subprocess.run(
        [str(python), "-c", _SCRIPT, table_path], capture_output=True, text=True, timeout=300, env=env
    )
    for line in r.stdout.splitlines():
        if line.startswith("DAFT-RESULT "):
            doc = json.loads(line[len("DAFT-RESULT ") :])
            return doc["columns"], doc["rows"]
    last = (r.stderr or r.stdout).strip().splitlines()
    raise AssertionError(f"daft.read_hudi failed: {last[-1] if last else r.returncode}")
