"""Write stats built by task commits and spliced by the job commit (amcommit.table.format.writestats):
the spliced JSON says exactly what building every stat says, and anything that does not
check out falls back to building them."""

from __future__ import annotations

import json

import anyio
import msgspec
import pytest

from amcommit.api import commit_job
from amcommit.committer import CommitterConfig, commit_task, setup_task
from amcommit.errors import ManifestError
from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table.commit import table_commit
from amcommit.table.format.model import (
    CommitMetadata,
    Operation,
    decode_commit_metadata,
    encode_commit_metadata,
)
from amcommit.table.format.naming import base_file_name
from amcommit.table.format.writestats import (
    STATS_KEY,
    rows_of_task_stats,
    spliced_write_stats,
    task_write_stats,
    write_stat,
)
from amcommit.table.write.task import TableSpec, begin_write

INSTANT = "20261123020000000"
AVRO = json.dumps(
    {
        "type": "record",
        "name": "r",
        "namespace": "hoodie.t",
        "fields": [{"name": "p", "type": ["null", "string"], "default": None}],
    }
)


def _task(t: int, parts: list[str], n: int = 3) -> tuple[list[tuple[str, int]], dict[str, int]]:
    files = [
        (
            f"{p}/{base_file_name(f'{t:04d}{i:04d}-aaaa-bbbb-cccc-dddddddddddd-0', f'{t}-0-0', INSTANT)}",
            100 + i,
        )
        for i in range(n)
        for p in parts
    ]
    return files, {rel: 10 * t + i for i, (rel, _) in enumerate(files)}


def _built(tasks: list[tuple[list[tuple[str, int]], dict[str, int]]]) -> dict[str, list[dict[str, object]]]:
    """What building every stat gives (sorted by path, as the job commit's own builder does)."""
    out: dict[str, list[dict[str, object]]] = {}
    for files, rows in tasks:
        for rel, size in files:
            part, _, name = rel.rpartition("/")
            out.setdefault(part, []).append(
                msgspec.to_builtins(write_stat(rel, part, name.partition("_")[0], rows[rel], size))
            )
    return {p: sorted(v, key=lambda s: str(s["path"])) for p, v in sorted(out.items())}


def _spliced_json(spliced: dict[str, list[bytes]]) -> dict[str, list[dict[str, object]]]:
    data = encode_commit_metadata(CommitMetadata(operation_type="INSERT"), spliced=spliced)
    got = json.loads(data)["partitionToWriteStats"]
    return {p: sorted(v, key=lambda s: s["path"]) for p, v in got.items()}


@pytest.mark.parametrize(
    "parts",
    [
        ["day=1", "day=2"],
        ['p=a "quoted" \\ back', "p=caf\u00e9 \u65e5\u672c", "p=new\nline"],
    ],
    ids=["plain", "escapes"],
)
def test_spliced_stats_equal_built_ones(parts: list[str]) -> None:
    tasks = [_task(t, parts) for t in range(4)] + [([], {})]  # an empty task too
    extra = [{STATS_KEY: task_write_stats(files, rows)} for files, rows in tasks]
    files = sum(len(f) for f, _ in tasks)
    size = sum(s for f, _ in tasks for _, s in f)
    spliced = spliced_write_stats(extra, len(extra), files, size, 1)
    assert spliced is not None
    assert _spliced_json(spliced) == _built(tasks)
    # the instant's JSON decodes into the same metadata either way
    meta = decode_commit_metadata(
        encode_commit_metadata(CommitMetadata(operation_type="INSERT"), spliced=spliced)
    )
    assert sum(len(v) for v in meta.partition_to_write_stats.values()) == files


def _extra() -> tuple[list[dict[str, str]], int, int]:
    tasks = [_task(t, ["day=1", "day=2"]) for t in range(3)]
    extra = [{STATS_KEY: task_write_stats(files, rows)} for files, rows in tasks]
    return extra, sum(len(f) for f, _ in tasks), sum(s for f, _ in tasks for _, s in f)


def test_stats_that_do_not_check_out_are_built_instead() -> None:
    extra, files, size = _extra()
    assert spliced_write_stats(extra, 3, files, size, 1) is not None
    # a manifest without stats (an older amcommit), or fewer manifests with extra data
    assert spliced_write_stats([extra[0], {}, extra[2]], 3, files, size, 1) is None
    assert spliced_write_stats(extra[:2], 3, files, size, 1) is None
    # counts or bytes that differ from the rename entries
    assert spliced_write_stats(extra, 3, files + 1, size, 1) is None
    assert spliced_write_stats(extra, 3, files, size - 1, 1) is None
    # partitions not as deep as the table's partition fields
    assert spliced_write_stats(extra, 3, files, size, 2) is None
    # a header that is not one, a line missing, an array that is not one
    head, *arrays = extra[1][STATS_KEY].split("\n")
    for bad in ("not json\n" + "\n".join(arrays), head + "\n" + arrays[0], head + "\n{}\n" + arrays[1]):
        assert spliced_write_stats([extra[0], {STATS_KEY: bad}, extra[2]], 3, files, size, 1) is None
    # a stat taken out of an array (bytes left as they were): the count says so
    one = json.loads(arrays[0])
    cut = head + "\n" + json.dumps(one[1:], separators=(",", ":")) + "\n" + arrays[1]
    assert spliced_write_stats([extra[0], {STATS_KEY: cut}, extra[2]], 3, files, size, 1) is None


def test_a_table_commit_splices_the_task_stats_and_builds_them_without(tmp_path: object) -> None:
    """End to end on local files: the same write committed with the task commits' stats and
    with them removed from the manifests (the job commit builds them) publishes the same
    stats; both name every file with its size and row count."""

    async def write(root: str, drop_stats: bool) -> tuple[CommitMetadata, list[tuple[str, int]]]:
        store = LocalStore(root, fsync=False)
        async with store:
            w = await begin_write(
                store,
                "t",
                operation=Operation.INSERT,
                spec=TableSpec(name="t", partition_fields=("p",)),
                avro_schema=AVRO,
            )
            written: list[tuple[str, int]] = []
            for t in range(3):
                ta = f"attempt_{w.instant}_m_{t:06d}_0"
                work = await setup_task(store, w.layout, ta)
                rows: dict[str, int] = {}
                for i in range(4):
                    rel = f"p={i % 2}/part-{t}-{i}.parquet"
                    await store.put(join(work, rel), b"x" * (10 + t * 4 + i))
                    rows[rel] = 7 * t + i
                m = await commit_task(
                    store,
                    w.layout,
                    f"task_{w.instant}_m_{t:06d}",
                    ta,
                    extra_data={"hudi.rows": json.dumps(rows)},
                )
                assert STATS_KEY in m.extra_data
                written += [(f.dest, f.size) for f in m.files]
                if drop_stats:  # as an older amcommit's task commit wrote it: row counts only
                    counts = rows_of_task_stats(m.extra_data.pop(STATS_KEY))
                    assert sorted(counts.values()) == sorted(rows.values())
                    m.extra_data["hudi.rows"] = json.dumps(counts, sort_keys=True)
                    path = w.layout.manifest_path(f"task_{w.instant}_m_{t:06d}")
                    from amcommit.manifest import encode_json

                    await store.put(path, encode_json(m))
            calls: list[bool] = []
            real = table_commit.spliced_write_stats

            def spy(*a: object) -> object:
                got = real(*a)  # type: ignore[arg-type]
                calls.append(got is not None)
                return got

            table_commit.spliced_write_stats = spy  # type: ignore[assignment]
            try:
                report = await commit_job(store, "t", w.instant, config=CommitterConfig())
            finally:
                table_commit.spliced_write_stats = real
            assert report.success and calls == [not drop_stats]
            names = [i.path async for i in store.list("t/.hoodie", recursive=False)]
            done = [n for n in names if n.endswith(".commit")]
            assert len(done) == 1
            return decode_commit_metadata(await store.get(done[0])), written

    def flat(meta: CommitMetadata) -> list[tuple[str, str, int, int, int]]:
        return sorted(
            (s.partition_path, s.path, s.num_writes, s.num_inserts, s.file_size_in_bytes)
            for s in meta.write_stats()
        )

    root = str(tmp_path)
    spliced, written = anyio.run(write, f"{root}/a", False)
    built, _ = anyio.run(write, f"{root}/b", True)
    assert len(flat(spliced)) == len(flat(built)) == 12
    assert sorted((p, r, s) for p, _, r, _, s in flat(spliced)) == sorted(
        (p, r, s) for p, _, r, _, s in flat(built)
    )
    assert sorted(size for _, size in written) == sorted(s for *_, s in flat(spliced))


def test_row_counts_read_back_from_task_stats() -> None:
    """A job commit that cannot splice the stats builds them, with the row counts the
    stats carry (a task commit no longer writes ``hudi.rows`` besides them)."""
    files, rows = _task(0, ["day=1", 'p=caf\u00e9 "q"'])
    raw = task_write_stats(files, rows)
    assert rows_of_task_stats(raw) == rows
    for bad in ("not json", raw.replace("[", "{", 1), raw.split("\n")[0] + "\n[1]"):
        with pytest.raises(ManifestError, match=r"hudi\.writeStats"):
            rows_of_task_stats(bad)


def test_spliced_replace_commit_keeps_its_replaced_file_ids() -> None:
    """A replacecommit's JSON spliced in one buffer has its stats, its replaced file ids and
    the other fields, exactly as encoding the same metadata with built stats says."""
    tasks = [_task(t, ["day=1", "day=2"]) for t in range(2)]
    extra = [{STATS_KEY: task_write_stats(files, rows)} for files, rows in tasks]
    files = sum(len(f) for f, _ in tasks)
    size = sum(s for f, _ in tasks for _, s in f)
    spliced = spliced_write_stats(extra, len(extra), files, size, 1)
    assert spliced is not None
    replace = {"day=1": ["a", "b"], "day=2": []}
    extra_meta = {"schema": '{"type":"record"}', "label": 'q "1"'}
    got = json.loads(
        encode_commit_metadata(
            CommitMetadata(
                operation_type="INSERT_OVERWRITE",
                extra_metadata=extra_meta,
                partition_to_replace_file_ids=replace,
            ),
            spliced=spliced,
        )
    )
    assert got["partitionToReplaceFileIds"] == replace
    assert got["extraMetadata"] == extra_meta
    assert got["operationType"] == "INSERT_OVERWRITE" and got["compacted"] is False
    built = {p: sorted(v, key=lambda s: str(s["path"])) for p, v in got["partitionToWriteStats"].items()}
    assert built == _built(tasks)
