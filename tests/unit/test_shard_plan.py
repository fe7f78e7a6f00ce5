"""How many processes rename a job commit by default (:func:`amcommit.committer.shard.
default_processes`): the cores, bounded by the store's ceiling, one on local files and for
small jobs; and a store's recipe opens the same store again (what a worker does)."""

from __future__ import annotations

import pickle
from pathlib import Path

from amcommit.committer.shard import AUTO_MIN_FILES, default_processes
from amcommit.store.azure import BlobStore
from amcommit.store.base import store_recipe
from amcommit.store.gcs.store import GcsStore
from amcommit.store.local import LocalStore

KEY = "a2V5"  # base64 of "key": a made-up account key (no request is sent)
BIG = 10_000_000


def test_local_files_rename_in_one_process(tmp_path: Path) -> None:
    assert default_processes(LocalStore(str(tmp_path)), BIG, cores=8) == 1


def test_small_jobs_rename_in_one_process() -> None:
    store = BlobStore("c", endpoint="https://acct.blob.core.windows.net", account_key=KEY)
    assert default_processes(store, AUTO_MIN_FILES - 1, cores=8) == 1
    assert default_processes(store, AUTO_MIN_FILES, cores=8) == 5


def test_azure_account_ceiling_bounds_the_cores() -> None:
    store = BlobStore("c", endpoint="https://acct.blob.core.windows.net", account_key=KEY)
    # 20,000 requests/s an account, ~4,800 a process sends: 5 processes keep it busy
    assert default_processes(store, BIG, cores=16) == 5
    assert default_processes(store, BIG, cores=2) == 2
    unlimited = BlobStore(
        "c", endpoint="https://acct.blob.core.windows.net", account_key=KEY, request_rate=None
    )
    assert default_processes(unlimited, BIG, cores=16) == 16


def test_cold_gcs_bucket_keeps_one_process_busy() -> None:
    cold = GcsStore("bucket", endpoint="http://127.0.0.1:1", anonymous=True)
    assert default_processes(cold, BIG, cores=8) == 1  # 1,000 writes/s
    warm = GcsStore("bucket", endpoint="http://127.0.0.1:1", anonymous=True, bucket_warm=True)
    assert default_processes(warm, BIG, cores=8) == 8


def test_recipe_opens_the_same_store(tmp_path: Path) -> None:
    store = BlobStore("c", endpoint="http://127.0.0.1:1/acct", account_key=KEY, block_size=1 << 20)
    recipe = store_recipe(store)
    assert recipe is not None and KEY not in repr(recipe)
    again = pickle.loads(pickle.dumps(recipe)).open()
    assert isinstance(again, BlobStore)
    assert (again.container, again.account, again.endpoint, again.block_size) == (
        "c",
        "acct",
        store.endpoint,
        1 << 20,
    )
    local = store_recipe(LocalStore(str(tmp_path), fsync=False))
    assert local is not None
    opened = local.open()
    assert isinstance(opened, LocalStore) and opened.root == str(tmp_path) and not opened.fsync
