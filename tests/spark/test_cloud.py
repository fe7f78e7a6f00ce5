"""``df.write.format("amcommit")`` to Azurite (Blob API, ``wasb://``) and fake-gcs-server
(``gs://``), endpoints and credentials given as options. Spark has no connector for these
emulators here, so the destination is downloaded through amcommit's store and read back
with Spark from a local copy: exactly the objects the job left behind."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from amcommit.paths import relative_to
from amcommit.store.base import Store
from amcommit.store.schemes import open_location
from tests.spark.helpers import make_df, read, rows, writer

pytestmark = pytest.mark.spark


def download(url: str, options: dict[str, Any], to: Path) -> list[str]:
    """Copy every object under ``url`` to ``to``; return their relative paths."""

    async def main() -> list[str]:
        store: Store
        store, dest = open_location(url, **options)
        names = []
        async with store:
            async for info in store.list(dest, recursive=True):
                if info.is_dir:
                    continue
                rel = relative_to(info.path, dest)
                names.append(rel)
                target = to / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(await store.get(info.path))
        return sorted(names)

    return anyio.run(main)


def round_trip(spark: Any, url: str, options: dict[str, Any], tmp_path: Path) -> None:
    df = make_df(spark, n=8_000, parts=3)
    writer(df, partitionBy="cat", **options).save(url)
    more = make_df(spark, n=2_000, start=8_000, cats="bd", parts=2)
    writer(more, "overwrite", partitionBy="cat", partitionOverwriteMode="dynamic", **options).save(url)
    names = download(url, options, tmp_path / "copy")
    assert not [n for n in names if n.startswith("_temporary")], names
    assert "_SUCCESS" in names
    expected = df.where("cat in ('a', 'c')").unionByName(more)
    assert rows(read(spark, tmp_path / "copy", df.schema)) == rows(expected)


def test_round_trip_azurite(spark: Any, azurite: Any, tmp_path: Path) -> None:
    from amcommit.store.azure import BlobStore

    container = f"spark{uuid.uuid4().hex[:12]}"
    store = BlobStore(container, **azurite.store_options())
    anyio.run(store.create_container)
    anyio.run(store.aclose)
    url = f"wasb://{container}@{azurite.account}.blob.core.windows.net/warehouse/events"
    options = {"endpoint": azurite.endpoint, "account": azurite.account, "account_key": azurite.account_key}
    round_trip(spark, url, options, tmp_path)


def test_bad_credentials_fail_before_tasks_without_leaking(spark: Any, azurite: Any, tmp_path: Path) -> None:
    secret = "d3Jvbmcta2V5LW5vdC1hLXJlYWwtb25l" * 2
    url = f"wasb://nosuch{uuid.uuid4().hex[:8]}@{azurite.account}.blob.core.windows.net/x"
    with pytest.raises(Exception, match="cannot use destination") as ei:
        writer(
            make_df(spark, n=10), endpoint=azurite.endpoint, account=azurite.account, account_key=secret
        ).save(url)
    assert secret not in str(ei.value)


def test_round_trip_fake_gcs(spark: Any, fake_gcs: Any, tmp_path: Path) -> None:
    bucket = f"amc-spark-{uuid.uuid4().hex[:10]}"
    fake_gcs.create_bucket(bucket)
    round_trip(spark, f"gs://{bucket}/warehouse/events", {"endpoint": fake_gcs.url}, tmp_path)
    assert os.listdir(tmp_path / "copy")
