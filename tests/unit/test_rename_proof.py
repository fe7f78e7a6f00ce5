"""The one "did this rename happen?" judgement (amcommit.store.proof.judge_rename), alone."""

from __future__ import annotations

import pytest

from amcommit.store.base import Capabilities, ObjectInfo
from amcommit.store.proof import Expected, Verdict, judge_rename

ATOMIC = Capabilities(atomic_rename=True, directories=True, etag_kept_on_rename=True)
COPY = Capabilities(atomic_rename=False, directories=False, etag_kept_on_rename=False, rename_provenance=True)
PLAIN = Capabilities(atomic_rename=False, directories=False, etag_kept_on_rename=False)


def obj(
    size: int = 3, etag: str | None = "e1", rid: str | None = None, src_etag: str | None = None
) -> ObjectInfo:
    return ObjectInfo("p", size, etag, rename_id=rid, source_etag=src_etag)


CASES = [
    # (caps, expected, dst, src, verdict)
    ("absent", COPY, Expected("r"), None, obj(), Verdict.ABSENT),
    ("dir", ATOMIC, Expected("r", 3, "e1"), ObjectInfo("p", 0, is_dir=True), None, Verdict.FOREIGN),
    ("etag kept, done", ATOMIC, Expected("r", 3, "e1"), obj(), None, Verdict.DONE),
    ("etag kept, other etag", ATOMIC, Expected("r", 3, "e1"), obj(etag="e2"), None, Verdict.FOREIGN),
    ("etag kept, source back", ATOMIC, Expected("r", 3, "e1"), obj(), obj(etag="e9"), Verdict.FOREIGN),
    ("etag kept, no etag, size", ATOMIC, Expected("r", 3), obj(), None, Verdict.DONE),
    ("copy done", COPY, Expected("r", 3, "s1"), obj(rid="r", src_etag="s1"), None, Verdict.DONE),
    (
        "copy of a source moved back by a rollback",
        COPY,
        Expected("r", 3, "s1"),
        obj(rid="r", src_etag="s7"),
        None,
        Verdict.DONE,
    ),
    ("copy half", COPY, Expected("r", 3, "s1"), obj(rid="r", src_etag="s1"), obj(etag="s1"), Verdict.HALF),
    ("aside half", COPY, Expected("r"), obj(rid="r", src_etag="s1"), obj(etag="s1"), Verdict.HALF),
    ("aside stale", COPY, Expected("r"), obj(rid="r", src_etag="s1"), obj(etag="s2"), Verdict.STALE),
    ("old copy without source etag: size", COPY, Expected("r"), obj(rid="r"), obj(size=3), Verdict.HALF),
    (
        "old copy without source etag: other size",
        COPY,
        Expected("r"),
        obj(rid="r"),
        obj(size=4),
        Verdict.STALE,
    ),
    ("other id", COPY, Expected("r", 3), obj(rid="x"), None, Verdict.FOREIGN),
    ("no id on a provenance store", COPY, Expected("r", 3), obj(), None, Verdict.FOREIGN),
    ("size differs", COPY, Expected("r", 4), obj(rid="r"), None, Verdict.FOREIGN),
    ("plain store: size only, source gone", PLAIN, Expected("r", 3), obj(), None, Verdict.DONE),
    ("plain store: source still there", PLAIN, Expected("r", 3), obj(), obj(), Verdict.FOREIGN),
    ("plain store: nothing known", PLAIN, Expected("r"), obj(), None, Verdict.FOREIGN),
]


@pytest.mark.parametrize(
    ("caps", "want", "dst", "src", "verdict"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_judge_rename(
    caps: Capabilities, want: Expected, dst: ObjectInfo | None, src: ObjectInfo | None, verdict: Verdict
) -> None:
    assert judge_rename(caps, want, dst, src) is verdict


def test_engine_ids_are_deterministic_and_distinct() -> None:
    from amcommit.committer.stages.rename_files import aside_id, back_id, rename_id, restore_id

    ids = [f("job_1", "d/p=1/a.bin") for f in (rename_id, aside_id, restore_id, back_id)]
    assert ids == [f("job_1", "d/p=1/a.bin") for f in (rename_id, aside_id, restore_id, back_id)]
    assert len(set(ids)) == 4
    assert rename_id("job_1", "d/a") != rename_id("job_2", "d/a") != rename_id("job_1", "d/b")
