"""The one answer to "did this rename happen?" (pure: no I/O).

A rename ``src -> dst`` is judged from what a later look at both paths finds, plus what the
renamer knows it asked for (:class:`Expected`: its deterministic rename id, and the source's
size and etag when known). Every caller that must recognise its own earlier rename uses
:func:`judge_rename`: the engine's forward renames, its moves aside to the trash, its
restores from the trash and its rollback, whatever process made the rename.

The stores judge their own internal retries with it too (a retried request whose earlier
attempt landed, answer lost): GCS's four recoveries, Blob's and ADLS Gen2's. A store that
knows the source is still at the version it copies (its precondition) passes that as
``src`` (:func:`source_at`).

What each kind of store can prove:

* ``etag_kept_on_rename`` (local, ADLS Gen2): the destination has the source's etag. The
  rename is atomic, so there is never a half-done state.
* ``rename_provenance`` (Blob, GCS): a copy-based rename writes its ``rename_id`` and the
  copied source's etag (:attr:`ObjectInfo.source_etag`) onto the destination. A copy
  carrying our id proves *we* copied; the source's etag tells whether a source still there
  is the version copied (the rename stopped between copy and delete: completing it means
  deleting the source) or a newer one (our copy is stale).
* neither: only the size, and only once the source is gone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from amcommit.store.base import Capabilities, ObjectInfo


class Verdict(enum.Enum):
    """What a look at source and destination proves about one rename."""

    ABSENT = "absent"
    """Nothing at the destination: the rename did not happen (or was undone)."""
    DONE = "done"
    """The destination is provably this rename's result and the source is gone."""
    HALF = "half"
    """The destination is this rename's copy and the source is still the version copied:
    the rename stopped between copy and delete. Complete it by deleting the source, or
    undo it by deleting the copy."""
    STALE = "stale"
    """The destination is this rename's copy, but the source present now is another
    version: the copy is obsolete (delete it before renaming again)."""
    FOREIGN = "foreign"
    """Something at the destination that this rename cannot be proven to have put there."""


@dataclass(frozen=True, slots=True)
class Expected:
    """What the renamer knows: its ``rename_id``; the source's ``size``, ``etag`` and
    ``checksum`` when it knows them (task manifests record size and etag; a move aside
    knows none in advance; a store that read the source knows its checksum).

    On copy-based stores the id (plus size and checksum) is the proof; ``etag`` is not
    compared with the copy's recorded source etag, because a rollback that kept the job
    may have moved the source back (a copy: new etag) before the rename was made again."""

    rename_id: str
    size: int | None = None
    etag: str | None = None
    checksum: str | None = None


def judge_rename(
    caps: Capabilities, want: Expected, dst: ObjectInfo | None, src: ObjectInfo | None
) -> Verdict:
    """Judge one rename from ``dst`` and ``src`` as found now (``None`` = absent). Pure."""
    if dst is None:
        return Verdict.ABSENT
    if dst.is_dir or (want.size is not None and dst.size != want.size):
        return Verdict.FOREIGN
    if want.checksum is not None and dst.checksum is not None and dst.checksum != want.checksum:
        return Verdict.FOREIGN
    if caps.etag_kept_on_rename and want.etag is not None:
        # atomic rename: source and destination never both hold the file
        return Verdict.DONE if dst.etag == want.etag and src is None else Verdict.FOREIGN
    if caps.rename_provenance:
        if dst.rename_id != want.rename_id:
            return Verdict.FOREIGN
        if src is None:
            return Verdict.DONE
        if src.is_dir:
            return Verdict.FOREIGN
        if dst.source_etag is not None:
            return Verdict.HALF if src.etag == dst.source_etag else Verdict.STALE
        # an older copy without the source's etag: the size is all we can compare
        return Verdict.HALF if src.size == dst.size else Verdict.STALE
    if src is None and want.size is not None:
        return Verdict.DONE  # no better proof on this store: the size matched above
    return Verdict.FOREIGN


def source_at(path: str, etag: str, size: int | None, dst: ObjectInfo) -> ObjectInfo:
    """The source as a store knows it without looking again: at ``etag`` (the version its
    copy was conditioned on), of ``size`` -- or, size unknown, of the copy's size (then
    only the etag recorded on the copy can tell a stale copy). Pure."""
    return ObjectInfo(path, dst.size if size is None else size, etag)


__all__ = ["Expected", "Verdict", "judge_rename", "source_at"]
