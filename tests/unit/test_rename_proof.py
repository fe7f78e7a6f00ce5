"""The one "did this rename happen?" judgement (amcommit.store.proof.judge_rename), alone."""

from __future__ import annotations

import pytest

from amcommit.store.base import Capabilities, ObjectInfo
from amcommit.store.proof import Expected, Verdict, judge_rename, source_at

ATOMIC = Capabilities(atomic_rename=True, directories=True, etag_kept_on_rename=True)
COPY = Capabilities(atomic_rename=False, directories=False, etag_kept_on_rename=False, rename_provenance=True)
PLAIN = Capabilities(atomic_rename=False, directories=False, etag_kept_on_rename=False)


def obj(
    size: int = 3,
    etag: str | None = "e1",
    rid: str | None = None,
    src_etag: str | None = None,
    crc: str | None = None,
) -> ObjectInfo:
    return ObjectInfo("p", size, etag, rename_id=rid, source_etag=src_etag, checksum=crc)


# what the stores pass for their internal retries (the source as their copy's precondition
# knows it: source_at), and checksums (GCS crc32c)
COPY_DST = obj(rid="r", src_etag="g1", size=5)
LEGACY_DST = obj(rid="r", size=5)  # a copy without the source's etag


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
    ("checksum equal", COPY, Expected("r", 3, checksum="c1"), obj(rid="r", crc="c1"), None, Verdict.DONE),
    (
        "checksum differs",
        COPY,
        Expected("r", 3, checksum="c1"),
        obj(rid="r", crc="c2"),
        None,
        Verdict.FOREIGN,
    ),
    ("checksum not reported", COPY, Expected("r", 3, checksum="c1"), obj(rid="r"), None, Verdict.DONE),
    ("checksum not known", COPY, Expected("r", 3), obj(rid="r", crc="c2"), None, Verdict.DONE),
    (
        "store: copy of the version it copies",
        COPY,
        Expected("r"),
        COPY_DST,
        source_at("s", "g1", 5, COPY_DST),
        Verdict.HALF,
    ),
    (
        "store: copy of an older version",
        COPY,
        Expected("r"),
        COPY_DST,
        source_at("s", "g2", 5, COPY_DST),
        Verdict.STALE,
    ),
    (
        "store: source size unknown",
        COPY,
        Expected("r"),
        COPY_DST,
        source_at("s", "g1", None, COPY_DST),
        Verdict.HALF,
    ),
    (
        "store: legacy copy, same size",
        COPY,
        Expected("r"),
        LEGACY_DST,
        source_at("s", "g1", 5, LEGACY_DST),
        Verdict.HALF,
    ),
    (
        "store: legacy copy, other size",
        COPY,
        Expected("r"),
        LEGACY_DST,
        source_at("s", "g1", 6, LEGACY_DST),
        Verdict.STALE,
    ),
    (
        "store: legacy copy, size unknown",
        COPY,
        Expected("r"),
        LEGACY_DST,
        source_at("s", "g1", None, LEGACY_DST),
        Verdict.HALF,
    ),
    (
        "store: another's copy",
        COPY,
        Expected("r"),
        obj(rid="x", src_etag="g1"),
        source_at("s", "g1", 3, obj()),
        Verdict.FOREIGN,
    ),
    ("dfs: kept etag, no id", ATOMIC, Expected("", etag='"0x1"'), obj(etag='"0x1"'), None, Verdict.DONE),
    ("dfs: other etag", ATOMIC, Expected("", etag='"0x1"'), obj(etag='"0x2"'), None, Verdict.FOREIGN),
    (
        "dfs: a directory there",
        ATOMIC,
        Expected("", etag='"0x1"'),
        ObjectInfo("p", 0, '"0x1"', is_dir=True),
        None,
        Verdict.FOREIGN,
    ),
]


@pytest.mark.parametrize(
    ("caps", "want", "dst", "src", "verdict"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_judge_rename(
    caps: Capabilities, want: Expected, dst: ObjectInfo | None, src: ObjectInfo | None, verdict: Verdict
) -> None:
    assert judge_rename(caps, want, dst, src) is verdict


def test_engine_ids_are_deterministic_and_distinct() -> None:
    from amcommit.committer.stages.renaming import aside_id, back_id, rename_id, restore_id

    ids = [f("job_1", "d/p=1/a.bin") for f in (rename_id, aside_id, restore_id, back_id)]
    assert ids == [f("job_1", "d/p=1/a.bin") for f in (rename_id, aside_id, restore_id, back_id)]
    assert len(set(ids)) == 4
    assert rename_id("job_1", "d/a") != rename_id("job_2", "d/a") != rename_id("job_1", "d/b")
