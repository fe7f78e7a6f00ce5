"""The fast paths of manifest loading let no bad input through.

``check_manifest_columns`` checks a plain manifest with C loops over all its entries at once
(``_fast_columns``); the spool finds duplicate destinations with a flat array of digests
(``DestIndex``, numpy or set). Each case here spoils the *last* entry of an otherwise
fast manifest (so a check that looks at only some entries would miss it) and expects the
same one-line ManifestError as the exact path; good manifests give exactly the exact
path's result.
"""

from __future__ import annotations

import importlib.util

import pytest

from amcommit.committer.spool import DestIndex, EntrySpool
from amcommit.committer.stages.load_manifests import _check_file_dir_clashes
from amcommit.errors import ManifestError
from amcommit.manifest import (
    TASK_MANIFEST_TYPE,
    CheckedManifest,
    FileEntry,
    RenameEntry,
    Scope,
    TaskManifest,
    _exact_columns,
    _fast_columns,
    check_manifest,
    check_manifest_columns,
    decode_manifest,
    encode_json,
    manifest_is_plain,
)

JOB = "202611230000_0001"
TA = f"attempt_{JOB}_m_000001_0"
DEST = "out/table"
TEMP = f"{DEST}/_temporary/manifest_{JOB}"
TASKS = f"{TEMP}/00/tasks"
HAVE_NUMPY = importlib.util.find_spec("numpy") is not None
INDEX_MODES = [False, pytest.param(True, marks=pytest.mark.skipif(not HAVE_NUMPY, reason="no numpy"))]


def scope(root: str = "mem://b/", dest: str = DEST) -> Scope:
    temp = f"{dest}/_temporary/manifest_{JOB}" if dest else f"_temporary/manifest_{JOB}"
    return Scope(root, dest, temp, f"{temp}/00/tasks")


def manifest(files: list[FileEntry]) -> TaskManifest:
    return TaskManifest(
        type=TASK_MANIFEST_TYPE,
        version=1,
        job_id=JOB,
        job_attempt_number=0,
        task_id=f"task_{JOB}_m_000001",
        task_attempt_id=TA,
        files=files,
    )


def good_files(
    n: int = 50, root: str = "mem://b/", dst_root: str | None = None, sc: Scope | None = None
) -> list[FileEntry]:
    sc = sc or scope(root)
    dst_root = root if dst_root is None else dst_root
    return [
        FileEntry(
            f"{root}{sc.tasks_dir}/{TA}/day={i % 7}/part-{i:04d}.parquet",
            f"{dst_root}{sc.dest}/day={i % 7}/part-{i:04d}.parquet",
            i,
            f"e{i}" if i % 3 else "",
        )
        for i in range(n)
    ]


def run_both(m: TaskManifest, sc: Scope) -> CheckedManifest:
    """Check ``m`` through the JSON (as the load stage does) and as an object; both must
    agree with the exact path."""
    raw = encode_json(m)
    via_json = check_manifest_columns(
        decode_manifest(raw), job_id=JOB, scope=sc, plain=manifest_is_plain(raw)
    )
    as_object = check_manifest_columns(m, job_id=JOB, scope=sc)
    exact = _exact_columns(m, sc, f"{sc.tasks_dir}/{TA}/", sc.dest + "/" if sc.dest else "", "m")
    exact.dirs.discard(sc.dest)
    assert via_json == as_object == exact
    return via_json


@pytest.mark.parametrize(
    ("root", "dst_root"),
    [("mem://b/", None), ("file:///", "file:/"), ("file:/", "file:///"), ("file://localhost/", "file:/")],
)
def test_fast_path_gives_the_exact_paths_result(root: str, dst_root: str | None) -> None:
    sc = scope("file:///" if root.startswith("file") else root)
    files = good_files(root=root, dst_root=dst_root, sc=sc)
    m = manifest(files)
    if "localhost" not in root:  # (file://localhost/ URIs take the exact path)
        assert _fast_columns(sc, f"{TASKS}/{TA}/", DEST + "/", files) is not None
    got = run_both(m, sc)
    assert got.srcs[3] == f"{TASKS}/{TA}/day=3/part-0003.parquet"
    assert got.dsts[3] == f"{DEST}/day=3/part-0003.parquet" and got.sizes[3] == 3
    assert got.etags[:3] == [None, "e1", "e2"]
    assert got.dirs == {f"{DEST}/day={i}" for i in range(7)}
    entries, dirs = check_manifest(m, job_id=JOB, scope=sc)
    assert entries[4] == RenameEntry(got.srcs[4], got.dsts[4], 4, "e4") and dirs == got.dirs


def test_fast_path_under_a_table_staging_folder_and_dot_names() -> None:
    """Dot-leading segments are legal but left to the exact path (same result); the
    table staging folder (``.hoodie/.temp``) in the prefixes keeps the fast path."""
    sc = Scope("mem://b/", DEST, f"{DEST}/.hoodie/.temp/0001", f"{DEST}/.hoodie/.temp/0001/tasks")
    files = good_files(sc=sc)
    assert _fast_columns(sc, f"{sc.tasks_dir}/{TA}/", DEST + "/", files) is not None
    run_both(manifest(files), sc)
    files[-1].dest = files[-1].dest.replace("part-", ".part-")  # a hidden file: legal
    files[-2].source = files[-2].source.replace("day=", ".day=")
    assert _fast_columns(sc, f"{sc.tasks_dir}/{TA}/", DEST + "/", files) is None
    got = run_both(manifest(files), sc)
    assert got.dsts[-1].endswith("/.part-0049.parquet")


SRC = f"mem://b/{TASKS}/{TA}/"
DST = f"mem://b/{DEST}/"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("source", SRC + "../attempt_x/f", "'..' segment"),
        ("source", SRC + "day=1/../../../../f", "'..' segment"),
        ("source", SRC + "./f", "'.' or '..' segment"),
        ("source", SRC + "a//f", "empty"),
        ("source", SRC + "day=1/", "must not be empty or end with '/'"),
        ("source", SRC, "must not be empty or end with '/'"),
        ("source", "mem://b/etc/passwd", "outside the task attempt directory"),
        ("source", "/etc/passwd", "not in this store"),
        ("source", f"mem://b/{TASKS}/attempt_other/f", "outside the task attempt directory"),
        ("dest", DST + "../escape/f", "'..' segment"),
        ("dest", DST + "day=1/../../x", "'..' segment"),
        ("dest", DST + "day=1//f", "empty"),
        ("dest", DST + "day=1/", "must not be empty or end with '/'"),
        ("dest", "mem://b/elsewhere/f", "outside the job's destination"),
        ("dest", "mem://b/out/tablex/f", "outside the job's destination"),
        ("dest", "/out/table/f", "not in this store"),
        ("dest", f"mem://b/{TEMP}/00/tasks/x", "inside the job's temporary directory"),
        ("dest", f"mem://b/{TEMP}", "inside the job's temporary directory"),
        ("dest", DST[:-1], "the destination directory itself"),
        ("size", -1, "negative size"),
        ("size", 2**63, "size too large"),
    ],
)
def test_fast_path_refuses_a_bad_last_entry(field: str, value: object, message: str) -> None:
    sc = scope()
    files = good_files()
    assert _fast_columns(sc, f"{TASKS}/{TA}/", DEST + "/", files) is not None
    setattr(files[-1], field, value)
    assert _fast_columns(sc, f"{TASKS}/{TA}/", DEST + "/", files) is None  # never accepted fast
    m = manifest(files)
    with pytest.raises(ManifestError, match="part-0049|" + message.replace("(", r"\(")) as e:
        check_manifest_columns(m, job_id=JOB, scope=sc, name="m1")
    assert message in str(e.value) and "m1" in str(e.value) and "\n" not in str(e.value)
    if field != "size":  # as the load stage sees it: JSON, plain or not
        raw = encode_json(m)
        with pytest.raises(ManifestError, match=message.replace("(", r"\(")):
            check_manifest_columns(decode_manifest(raw), job_id=JOB, scope=sc, plain=manifest_is_plain(raw))


def test_fast_path_refuses_mixed_uri_roots_and_dest_at_store_root() -> None:
    sc = scope()
    files = good_files()
    files[-1].source = files[-1].source.replace("mem://b/", "mem://other/")
    with pytest.raises(ManifestError, match="not in this store"):
        check_manifest_columns(manifest(files), job_id=JOB, scope=sc)
    root_sc = scope(dest="")
    files = good_files(sc=root_sc)
    assert run_both(manifest(files), root_sc).dsts[0] == "day=0/part-0000.parquet"
    files[-1].dest = "mem://b/day=1/../../x"
    with pytest.raises(ManifestError):
        check_manifest_columns(manifest(files), job_id=JOB, scope=root_sc)


@pytest.mark.parametrize("use_numpy", INDEX_MODES)
def test_spool_finds_duplicates_across_and_within_manifests_exactly(use_numpy: bool) -> None:
    sp = EntrySpool(batch_size=7, use_numpy=use_numpy)
    for k in range(30):
        mi = sp.add_manifest(f"m{k}")
        sp.append_columns(
            [f"s{k}/{i}" for i in range(40)], [f"d/{k}/{i}" for i in range(40)], [1] * 40, [None] * 40, mi
        )
    assert sp.find_duplicates() == [] and sp.count == 1200 and sp.total_bytes == 1200
    last = sp.add_manifest("late")
    sp.append([RenameEntry("x", "d/new", 1, None), RenameEntry("y", "d/17/39", 2, "e")], last)
    assert sp.find_duplicates() == [("d/17/39", ["m17", "late"])]
    assert sp.has_dest("d/new") and sp.has_dest("d/0/0") and not sp.has_dest("d/none")
    again = sp.add_manifest("twice")
    sp.append([RenameEntry("a", "d/again", 1, None), RenameEntry("b", "d/again", 1, None)], again)
    assert ("d/again", ["twice", "twice"]) in sp.find_duplicates()
    assert [e.dst for e in sp.entries()][-2:] == ["d/again", "d/again"]
    sp.close()


@pytest.mark.parametrize("use_numpy", INDEX_MODES)
def test_digest_collisions_are_resolved_exactly(use_numpy: bool) -> None:
    """A digest repeated without a repeated destination (as a hash collision would be) is
    not reported: the second pass compares the paths."""
    sp = EntrySpool(use_numpy=use_numpy)
    sp.append([RenameEntry("s", "d/a", 1, None)], sp.add_manifest("m"))
    sp.index.duplicates().add(hash("d/b"))  # a suspect no entry really repeats
    sp.append([RenameEntry("t", "d/b", 1, None)], sp.add_manifest("n"))
    assert sp.find_duplicates() == []


@pytest.mark.parametrize("use_numpy", INDEX_MODES)
def test_dest_index_counts_and_membership(use_numpy: bool) -> None:
    ix = DestIndex(use_numpy=use_numpy)
    assert "x" not in ix.duplicates() and hash("x") not in ix
    ix.add(["a", "b"])
    ix.add(["c", "a"])
    assert ix.duplicates() == {hash("a")} and hash("c") in ix and hash("z") not in ix and ix.count == 4


@pytest.mark.parametrize("use_numpy", INDEX_MODES)
def test_file_dir_clash_found(use_numpy: bool) -> None:
    sp = EntrySpool(use_numpy=use_numpy)
    sp.append([RenameEntry("s1", "d/p=1/f", 1, None)], sp.add_manifest("m0"))
    sp.append([RenameEntry("s2", "d/p=1", 1, None)], sp.add_manifest("m1"))
    with pytest.raises(ManifestError, match="m1: destination 'd/p=1' is a file"):
        _check_file_dir_clashes(sp, {"d/p=1"}, "d")
    _check_file_dir_clashes(sp, {"d/p=2/q"}, "d")  # no clash


@pytest.mark.skipif(not HAVE_NUMPY, reason="no numpy")
def test_index_uses_numpy_only_for_large_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    small = DestIndex()
    small.add(["a", "b", "a"])
    assert small.duplicates() == {hash("a")} and not small.use_numpy
    monkeypatch.setattr(DestIndex, "NUMPY_FROM", 3)
    big = DestIndex()
    big.add(["a", "b", "a"])
    assert big.duplicates() == {hash("a")} and big.use_numpy and hash("b") in big
