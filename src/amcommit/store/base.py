"""The storage protocol every backend implements, and the small types it speaks.

Paths are keys relative to the store's root (a bucket, an ADLS filesystem, or ``/`` for
local files): ``"a/b/c.parquet"``, no leading or trailing ``/``, no empty, ``.`` or ``..``
segments. ``""`` is the root itself. :func:`amcommit.paths.check_path` enforces this; all path algebra is in :mod:`amcommit.paths`.

What is atomic, per operation (all backends):

* ``put``: the object appears whole or not at all. ``PutMode.CREATE`` never overwrites;
  ``UpdateIf(etag)`` replaces only the version with that etag.
* ``rename``: never overwrites an existing destination. It is atomic for a file on stores
  with ``Capabilities.atomic_rename`` (local, ADLS Gen2, GCS ``objects.move``); elsewhere it
  is copy-then-delete and, for a moment, both source and destination exist.
* ``delete(recursive=True)``: not atomic on any store; a failure may leave part of the tree.
* ``list``: not a snapshot; entries changed during a listing may or may not appear.

Idempotency: ``stat``, ``get``, ``list``, ``mkdirs`` and ``delete`` may be repeated freely.
``rename`` repeated after success raises :class:`~amcommit.errors.NotFound` for the source;
backends that can prove the earlier attempt succeeded (etag kept on rename, or the
``rename_id`` provenance mark) return ``RenameResult(recovered=True)`` instead.
``rename_batch`` (stores with ``Capabilities.batch_rename``) is many renames in one call,
each atomic as ``rename`` is, the batch as a whole not. ``delete_batch`` (stores with
``Capabilities.delete_batch_max``) is many file deletes in one call (Blob: one Blob Batch
request per 256), each atomic as ``delete`` of a file is, the batch as a whole not.
"""

from __future__ import annotations

import enum
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from amcommit.errors import StoreError
from amcommit.iostats import IOStatistics
from amcommit.paths import check_path
from amcommit.store.names import NameLimits


class PutMode(enum.Enum):
    """How ``put`` treats an existing object."""

    OVERWRITE = "overwrite"
    """Replace whatever is there."""
    CREATE = "create"
    """Fail with :class:`~amcommit.errors.AlreadyExists` if the path exists."""


@dataclass(frozen=True, slots=True)
class UpdateIf:
    """``put`` mode: replace only the object whose current etag is ``etag``
    (else :class:`~amcommit.errors.PreconditionFailed`)."""

    etag: str


WriteMode = PutMode | UpdateIf


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a store knows about one path.

    ``etag`` identifies a version of the content (opaque; compare for equality only).
    ``rename_id`` is the provenance mark a copy-based rename wrote on the destination, when
    the store keeps one (Blob, GCS); it lets a retried rename prove it already happened.
    ``source_etag`` is the etag the *source* had when that copy was made (same stores): it
    tells whether a source still present is the version copied (see
    :func:`amcommit.store.proof.judge_rename`).
    """

    path: str
    size: int
    etag: str | None = None
    is_dir: bool = False
    mtime: float | None = None
    rename_id: str | None = None
    special: str | None = None
    """Set (local stores only) when the path is neither a regular file nor a directory:
    ``"symlink"``, ``"fifo"``, ``"socket"`` or ``"device"``. Listings never follow
    symbolic links; such an entry describes the link itself."""
    source_etag: str | None = None
    checksum: str | None = None
    """A checksum of the content when the store reports one for free (GCS: ``crc32c``);
    compared by :func:`amcommit.store.proof.judge_rename` when the renamer knows it."""
    user_meta: bool | None = None
    """Whether the object carries user metadata a copy-based rename must carry over
    (amcommit's own marks excluded), when the store reports it for free (Blob listings and
    stats); None = not known. Task commit records it in the manifest so that the job
    commit's rename need not read the source again (see ``Store.rename(src_meta=)``)."""


@dataclass(frozen=True, slots=True)
class RenameResult:
    """Outcome of a rename: ``recovered`` is True when the rename had already happened
    (a retry after a lost response, or a resumed job commit) and was proven by the store."""

    dst: str
    etag: str | None = None
    recovered: bool = False


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a store can promise; the engine adapts to these, never to the backend's name."""

    atomic_rename: bool
    """A file rename is one atomic operation (no moment with both or neither visible)."""
    directories: bool
    """Directories exist on their own (local, ADLS Gen2); else they are implied by keys."""
    etag_kept_on_rename: bool
    """The destination of a rename has the source's etag (proves a rename happened)."""
    rename_provenance: bool = False
    """Renames record ``rename_id`` on the destination (proves a copy-based rename)."""
    conditional_put: bool = True
    """``PutMode.CREATE`` and ``UpdateIf`` are enforced by the store."""
    name: str = ""
    """Short backend name for reports (``"local"``, ``"dfs"``, ``"blob"``, ``"gcs"``)."""
    retries: bool = False
    """The store retries transient errors and throttling of its own requests (HTTP
    stores). The engine then makes one call per operation and retries only what the store
    declined to repeat; for stores without it (local, fault injection) the engine's
    :meth:`~amcommit.committer.context.JobContext.call` is the retry layer. See
    :mod:`amcommit.store.retry`."""
    local_root: str | None = None
    """The OS directory the store's paths are files in, when a caller on this machine may
    read and write them directly (:func:`local_os_path`); None for remote stores and for
    wrappers that must see every operation (fault injection)."""
    parallel_io: bool = True
    """Operations sent at once finish sooner than one after another (remote stores: the
    latency overlaps). False for local files, where the kernel serialises renames and
    deletes of one file system and worker threads only contend: the engine then removes
    directories one at a time."""
    batch_rename: bool = False
    """The store has ``rename_batch`` (:class:`BatchRenamer`): many renames in one call,
    cheaper per file than one ``rename`` each (local files: one worker-thread hop per
    batch instead of one coroutine per file). Use :func:`batch_renamer`."""
    delete_batch_max: int = 0
    """The store has ``delete_batch`` (:class:`BatchDeleter`) and one call takes at most
    this many paths (Blob: 256, the Blob Batch limit); 0: no ``delete_batch``. Use
    :func:`batch_deleter`."""
    name_limits: NameLimits | None = None
    """The longest names the store can hold (:mod:`amcommit.store.names`); None: not known.
    The job commit refuses a manifest whose destinations break them, before anything is
    published."""


class RenameRequest(NamedTuple):
    """One rename of a :meth:`BatchRenamer.rename_batch`: the arguments of
    :meth:`Store.rename`."""

    src: str
    dst: str
    src_etag: str | None = None
    rename_id: str | None = None
    src_meta: bool | None = None


@runtime_checkable
class Store(Protocol):
    """The asynchronous storage protocol. See the module docstring for atomicity."""

    capabilities: Capabilities
    iostats: IOStatistics

    @property
    def root_uri(self) -> str:
        """URI of the store's root, e.g. ``file:///``, ``gs://bucket/``,
        ``abfs://fs@account.dfs.core.windows.net/``."""
        ...

    async def stat(self, path: str) -> ObjectInfo:
        """Info of a file or directory; :class:`~amcommit.errors.NotFound` if absent."""
        ...

    def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        """Entries below directory ``prefix``.

        ``recursive=True`` yields every file (never directories) below ``prefix``.
        ``recursive=False`` yields the direct children, files and directories
        (``is_dir=True``). A missing prefix yields nothing. Order is unspecified.
        """
        ...

    async def get(self, path: str) -> bytes:
        """The whole content of a file."""
        ...

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        """Write a whole file atomically (creating parent directories as needed)."""
        ...

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        """Rename a file; never overwrites ``dst`` (:class:`~amcommit.errors.AlreadyExists`).

        ``src_etag``: fail with :class:`~amcommit.errors.PreconditionFailed` unless the
        source still has this etag. ``rename_id``: an opaque id recorded on the destination
        by copy-based stores so a retry can prove this rename happened. Creates missing
        parent directories of ``dst``.

        ``src_meta=False`` (only meaningful with ``src_etag``): the caller knows that the
        source *at that etag* carries no user metadata (a task manifest records it), so a
        copy-based store that must re-send metadata with its copy (Blob) need not read the
        source first. The copy is conditioned on ``src_etag``, and changing metadata
        changes the etag, so a wrong claim about a later version cannot lose metadata.
        ``None`` (unknown) or ``True`` keeps the safe path. Stores that rename in place
        ignore it.

        With ``src_etag`` or ``rename_id`` the caller declares the source to be a file (a
        job commit's forward rename): a directory (or, on local stores, a symbolic link or
        other special file) is refused with :class:`~amcommit.errors.PreconditionFailed`
        and nothing is renamed. Without them, directories may be renamed too (moving an
        old file or directory aside).
        """
        ...

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete a file, or a directory (with ``recursive=True`` when not empty).

        Returns False if nothing was there (idempotent). Deleting a non-empty directory
        without ``recursive`` raises :class:`~amcommit.errors.PreconditionFailed`.
        """
        ...

    async def mkdirs(self, path: str) -> None:
        """Create a directory and its parents; no-op where directories are virtual.

        Raises :class:`~amcommit.errors.AlreadyExists` if a file is in the way.
        """
        ...

    async def aclose(self) -> None:
        """Release connections. Idempotent."""
        ...

    async def __aenter__(self) -> object:
        """``async with store:`` enters with the store itself ..."""
        ...

    async def __aexit__(self, *exc: object) -> None:
        """... and closes it (:meth:`aclose`) when the block ends, however it ends."""
        ...


TMP_PREFIX = ".amcommit-tmp-"
"""Name prefix of the temporary files a store writes next to their final name before an
atomic publish (local files, ADLS Gen2); listings skip them."""


def local_os_path(store: Store, path: str) -> str | None:
    """The OS path of store path ``path`` if ``store`` is files of this machine
    (``capabilities.local_root``), else None. Pure."""
    root = store.capabilities.local_root
    if root is None:
        return None
    check_path(path)
    return os.path.join(root, path) if path else root


async def read_range(store: Store, path: str, start: int, length: int) -> bytes:
    """``length`` bytes of the object ``path`` from byte ``start`` (fewer at its end): one
    ranged read where the store offers one (an optional ``get_range(path, start, length)``:
    Google Cloud Storage, Azure Blob and ADLS Gen2), else the whole object, sliced.
    Idempotent."""
    ranged = getattr(store, "get_range", None)
    if ranged is not None:
        data: bytes = await ranged(path, start, length)
        return data
    return (await store.get(path))[start : start + length]


class BatchFailures(dict[int, StoreError]):
    """What ``rename_batch`` may return instead of a plain dict: the failures by index, and
    ``recovered``, the indices of requests that succeeded by proving an earlier attempt
    (what ``RenameResult.recovered`` says for one ``rename``; e.g. a Blob Batch of deletes
    repeated after its answer was lost). A plain dict means none were."""

    __slots__ = ("recovered",)

    def __init__(self) -> None:
        super().__init__()
        self.recovered: set[int] = set()


def recovered_in(failed: dict[int, StoreError]) -> set[int]:
    """The ``recovered`` indices of a ``rename_batch`` answer (empty for a plain dict)."""
    return failed.recovered if isinstance(failed, BatchFailures) else set()


@runtime_checkable
class BatchRenamer(Protocol):
    """A store that renames many files in one call (``Capabilities.batch_rename``)."""

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """Carry out every request as :meth:`Store.rename` would, in order, each on its
        own: a failed request does not stop the ones after it. Returns the failures: the
        index of each request that failed, with the :class:`~amcommit.errors.StoreError`
        ``rename`` would have raised (returned, not raised). Every other request succeeded
        as ``rename`` would have (``RenameResult(dst, etag=src_etag)``); a
        :class:`BatchFailures` answer also names those that were ``recovered``.

        Atomic per request only, as ``rename`` is: on stores with atomic renames (local
        files) a batch stopped midway (a killed process) has done a prefix of its
        requests, each whole or not at all; on copy-based stores (Blob: the copies first,
        then the source deletes in Blob Batches) it may have copied any of its requests and
        deleted the sources of any of those, as a ``rename`` stopped between its copy and
        its delete does. Not retried: the caller repeats a failed request through
        ``rename`` (every request is recognisable when repeated, like ``rename``'s). Errors
        other than :class:`~amcommit.errors.StoreError` (cancellation, a bug) are raised
        and may leave part of the batch done.
        """
        ...


def batch_renamer(store: Store) -> BatchRenamer | None:
    """``store`` as a :class:`BatchRenamer` if it declares and has ``rename_batch``; None
    otherwise (a wrapper that copies the capabilities but not the method stays on
    ``rename``)."""
    if store.capabilities.batch_rename and isinstance(store, BatchRenamer):
        return store
    return None


@runtime_checkable
class BatchDeleter(Protocol):
    """A store that deletes many files in one call (``Capabilities.delete_batch_max``)."""

    async def delete_batch(self, paths: Sequence[str]) -> dict[int, StoreError]:
        """Delete every path of ``paths`` (files, as a recursive listing yields them; at
        most ``capabilities.delete_batch_max``) as :meth:`Store.delete` would, each on its
        own: a path that names nothing is not a failure (deletes are idempotent; an
        earlier, lost attempt may have deleted it). Returns the failures: the index of each
        path whose delete failed, with the :class:`~amcommit.errors.StoreError` ``delete``
        would have raised (returned, not raised); every other path is gone.

        Atomic per path only: a call stopped midway (a killed process, a lost answer) may
        have deleted any subset of the paths. Failures of single paths are not retried
        (the caller repeats them through ``delete``); a failure of the call as a whole is
        raised as a :class:`~amcommit.errors.StoreError` after the store's own retries
        (repeating the whole call is safe). Cancellation waits until the store's answer
        has settled, as for every mutation.
        """
        ...


def batch_deleter(store: Store) -> BatchDeleter | None:
    """``store`` as a :class:`BatchDeleter` if it declares and has ``delete_batch``; None
    otherwise (a wrapper that copies the capabilities but not the method stays on
    ``delete``)."""
    if store.capabilities.delete_batch_max > 0 and isinstance(store, BatchDeleter):
        return store
    return None


@dataclass(frozen=True)
class StoreRecipe:
    """How to open the same store again in another process: its class and the
    constructor arguments it was given, without the request limiters (the other process
    gets its own, see :mod:`amcommit.store.limits`: a shared budget). Kept by the
    backends as ``store.recipe``; used by a job commit sharded over worker processes
    (:mod:`amcommit.committer.shard`). It may hold credentials (it is handed to the worker
    over a pipe, never logged: its ``repr`` names the class only)."""

    factory: type
    args: tuple[object, ...]
    kwargs: dict[str, object]

    def __repr__(self) -> str:
        return f"StoreRecipe({self.factory.__name__})"

    def open(self, **overrides: object) -> Store:
        """A new store from the recipe (``overrides``: more or other keyword arguments)."""
        store: Store = self.factory(*self.args, **{**self.kwargs, **overrides})
        return store


def store_recipe(store: Store) -> StoreRecipe | None:
    """``store``'s recipe, if it keeps one (None: a store, or a wrapper around one, that
    cannot be opened again elsewhere)."""
    recipe = getattr(store, "recipe", None)
    return recipe if isinstance(recipe, StoreRecipe) else None
