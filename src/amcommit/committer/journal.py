"""The job-commit journal: what a resumed commit or a rollback needs to know.

Stored as ``journal.json`` in the job directory and rewritten (whole, atomically) at each
state change:

* ``renaming``: victims (old files an overwrite removes) are recorded; renames may be
  partly done. ``commit_job`` resumes; ``abort_job`` rolls back (deletes the files this job
  renamed in, restores old files moved to ``trash/``).
* ``renamed``: every file is in place; old files are being deleted. This is the point of no
  return: ``abort_job`` completes the commit instead of rolling back.
* ``committed``: ``_SUCCESS`` is written; only cleanup may remain.
"""

from __future__ import annotations

import time
from typing import Literal

import msgspec

from amcommit.committer.layout import JobLayout
from amcommit.errors import NotFound
from amcommit.store.base import PutMode, Store

JournalState = Literal["renaming", "renamed", "committed"]


class Journal(msgspec.Struct):
    job_id: str
    state: JournalState
    conflict_mode: str
    victim_chunks: int = 0
    started: float = msgspec.field(default_factory=time.time)
    updated: float = msgspec.field(default_factory=time.time)
    runs: int = 1
    """How many job-commit runs have worked on this journal (1 + resumes)."""
    layout: str = "amcommit"


_dec = msgspec.json.Decoder(Journal)


async def load_journal(store: Store, layout: JobLayout) -> Journal | None:
    try:
        data = await store.get(layout.journal_path)
    except NotFound:
        return None
    return _dec.decode(data)


async def save_journal(store: Store, layout: JobLayout, journal: Journal) -> None:
    journal.updated = time.time()
    await store.put(layout.journal_path, msgspec.json.encode(journal), mode=PutMode.OVERWRITE)
