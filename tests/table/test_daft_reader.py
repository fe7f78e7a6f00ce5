"""Daft reads amcommit's tables (issue 23 item 10): snapshots of append-only tables, read by
``daft.read_hudi`` in its own environment (tests/table/daftenv.py), equal what was written
and what hudi-rs reads. Daft ignores replacecommits (README's reader table), so overwrites
are not read with it here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amcommit.paths import join
from amcommit.store.local import LocalStore
from amcommit.table.write.task import TableSpec
from tests.backends import StoreUnderTest
from tests.table.daftenv import DaftUnavailable, daft_python, daft_read
from tests.table.writehelpers import hudi_rows, keys, rows, write


@pytest.fixture(scope="session")
def daft() -> Path:
    try:
        return daft_python()
    except DaftUnavailable as e:
        pytest.skip(f"Daft could not be installed here: {e}")


async def test_daft_reads_append_only_snapshots(daft: Path, backend_local: StoreUnderTest) -> None:
    store = backend_local.store
    assert isinstance(store, LocalStore)
    for spec, parts in [(TableSpec("t1", partition_fields=("p",)), "ab"), (TableSpec("one", ("p",)), "x")]:
        dest = join(backend_local.base, spec.name)
        written = [*rows(0, 10, parts=parts), *rows(10, 6, parts=parts[::-1] + "c", tag="second")]
        await write(store, dest, written[:10], spec=spec)
        await write(store, dest, written[10:], spec=spec)
        uri = os.path.join(store.root, dest)
        columns, got = daft_read(daft, uri)
        assert columns[:5] == [
            "_hoodie_commit_time",
            "_hoodie_commit_seqno",
            "_hoodie_record_key",
            "_hoodie_partition_path",
            "_hoodie_file_name",
        ]
        assert columns[5:] == ["id", "p", "v"]
        assert keys(got) == keys(written) == hudi_rows(uri), spec.name
