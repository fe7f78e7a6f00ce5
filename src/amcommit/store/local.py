"""Local filesystem store (``file://`` URLs and plain paths): the embedded default.

Blocking calls run in worker threads, bounded by the store's limiter.

Atomicity on a POSIX filesystem:

* ``put`` writes a hidden temporary file in the target directory, fsyncs it, then renames it
  into place: readers see the old or the new content, never a partial file.
  ``PutMode.CREATE`` uses ``renameat2(RENAME_NOREPLACE)`` (or ``link`` + ``unlink`` where that
  is unavailable), so it never overwrites, even against other processes. ``UpdateIf``
  compares the etag and replaces under a per-process lock plus an exclusive ``flock`` on
  the parent directory, so two processes updating one file conditionally cannot both win
  (a plain ``OVERWRITE`` by another process does not take the ``flock`` and is not fenced).
* ``rename`` is atomic and never overwrites (``RENAME_NOREPLACE``). The ``src_etag`` check
  happens just before the rename, not atomically with it.
* Durability (``fsync=True``, the default): a put fsyncs its file before renaming it into
  place. A rename changes two directories (the source's and the destination's parent);
  until it is on disk a power loss may undo it. The renames made so far are made durable
  before the store's next ``put`` or ``delete`` (and at ``aclose`` /
  :meth:`LocalStore.sync`): the job commit records renames only by a put or a delete (its
  journal, ``_SUCCESS``), so no record of a rename reaches the disk before the rename
  itself. What that takes depends on the file system (:func:`dir_sync_rule`): both
  directories of every rename where each directory is written back on its own, only the
  destination directories where one journal transaction holds the whole rename, nothing
  in memory-only file systems; each directory once however many renames changed it, many
  at once (:data:`DIR_SYNC_THREADS`). (The put's own directory is not fsynced.) Without
  ``fsync`` no file or directory is fsynced.
* The etag is ``inode-mtime_ns-size`` (hex): a rename keeps it, any rewrite changes it.

Symbolic links are never followed below a listed directory: ``list`` reports a link (and a
FIFO, socket or device) as a non-directory entry with ``ObjectInfo.special`` set, and a
rename that declares a file (``src_etag`` / ``rename_id``) refuses a source that is not a
regular file. :meth:`LocalStore.find_non_file` lets the job commit refuse such sources (also
one behind a symlinked directory) before its first rename; that check is not atomic with
the renames (a process still writing into a task directory can race it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import itertools
import os
import shutil
import stat as stat_mod
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from operator import itemgetter
from typing import Literal, Self, TypeVar

import anyio

from amcommit.errors import (
    AlreadyExists,
    InvalidInput,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    StoreError,
    Transient,
)
from amcommit.iostats import IOStatistics
from amcommit.paths import check_path, join, parent
from amcommit.store.base import (
    TMP_PREFIX,
    Capabilities,
    ObjectInfo,
    PutMode,
    RenameRequest,
    RenameResult,
    StoreRecipe,
    UpdateIf,
    WriteMode,
)
from amcommit.store.limits import Limiter
from amcommit.store.names import clip, local_limits

T = TypeVar("T")


_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def _load_renameat2() -> Callable[[bytes, bytes], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int

    def call(src: bytes, dst: bytes) -> int:
        return int(fn(_AT_FDCWD, src, _AT_FDCWD, dst, _RENAME_NOREPLACE))

    return call


_renameat2 = _load_renameat2()
_FS_ENCODING = sys.getfilesystemencoding()
"""``os.fsencode`` is ``str.encode(_FS_ENCODING, "surrogateescape")`` on POSIX."""


def rename_noreplace(src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` atomically, failing with FileExistsError if ``dst`` exists."""
    global _renameat2
    if _renameat2 is not None:
        if _renameat2(os.fsencode(src), os.fsencode(dst)) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), src, None, dst)
        # filesystem without RENAME_NOREPLACE support: fall back below
    if os.path.isdir(src):
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, "destination exists", dst)
        os.rename(src, dst)
        return
    os.link(src, dst)  # atomic create-only
    os.unlink(src)


DIR_SYNC_THREADS = 16
"""Directories fsynced at once (see :meth:`LocalStore._sync_dirs`)."""


def _device_of(d: str) -> int | None:
    """The device of ``d``, or of its nearest existing ancestor (a put creates missing
    directories on the same file system as that ancestor); None if none can be read."""
    while True:
        try:
            return os.stat(d).st_dev
        except FileNotFoundError:
            parent = os.path.dirname(d)
            if parent == d:
                return None
            d = parent
        except OSError:
            return None


def _fsync_dir(d: bytes) -> None:
    """fsync directory ``d`` (skipped if it is gone)."""
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


DirSyncRule = Literal["each", "dest", "syncfs", "none"]
"""What makes a rename durable on a file system (see :func:`dir_sync_rule`)."""

_TMPFS_MAGIC = 0x01021994
_RAMFS_MAGIC = 0x858458F6
_EXT4_MAGIC = 0xEF53  # ext2, ext3 and ext4 (one driver: ext4)
_XFS_MAGIC = 0x58465342


def _load_statfs() -> Callable[[bytes], int | None] | None:
    """``statfs(2)``'s ``f_type`` (the file system's magic number), or None if the call
    fails; None if libc has no ``statfs``."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.statfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int

    def call(path: bytes) -> int | None:
        buf = ctypes.create_string_buffer(512)  # struct statfs: 120 bytes on 64-bit Linux
        if fn(path, buf) != 0:
            return None
        # f_type (__fsword_t: a C long) is the first field
        return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF

    return call


_statfs_type = _load_statfs()


def _load_syncfs() -> Callable[[int], None] | None:
    """``syncfs(2)`` of the file system holding open file ``fd`` (raises OSError); None if
    libc has no ``syncfs``."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int

    def call(fd: int) -> None:
        if fn(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return call


_syncfs = _load_syncfs()

SYNCFS_MIN_DIRS = 16
"""Under the ``"syncfs"`` rule, fewer directories than this to sync are fsynced one by one
instead (a small commit does not wait for other writers' dirty data)."""


def _syncfs_dir(d: bytes) -> bool:
    """``syncfs`` of the file system holding directory ``d``; False if ``d`` is gone or
    there is no ``syncfs`` (the caller fsyncs the directories then)."""
    if _syncfs is None:
        return False
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        _syncfs(fd)
    finally:
        os.close(fd)
    return True


def _ext4_journaled(path: bytes | str) -> bool:
    """Whether the ext4 file system holding ``path`` has its journal: the kernel lists an
    internal jbd2 journal as ``/proc/fs/jbd2/<device>-8`` (8: the journal's inode). An
    ext4 made without a journal (``^has_journal``), one with an external journal device, or
    a ``/proc`` or ``/sys`` that does not show the device: False (the safe answer)."""
    try:
        st_dev = os.stat(path).st_dev
        dev = os.path.basename(os.readlink(f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}"))
    except OSError:
        return False
    return os.path.isdir(f"/proc/fs/jbd2/{dev}-8")


def dir_sync_rule(path: bytes | str) -> DirSyncRule:
    """What the local store fsyncs, before it records anything after a rename, so that the
    rename (its source's and its destination's directory entries) survives a power loss,
    for renames within the file system holding ``path`` (detected by ``statfs(2)``'s
    ``f_type``; a rename never crosses file systems):

    * ``"dest"``: ext4 with its journal (ext3 too, the same driver) and xfs. Each rename
      is one journal transaction holding both directories' changes, and transactions
      reach the disk in the order they were made: the fsync of a directory waits until
      the transaction that last changed it (and every earlier one) is committed. So the
      fsync of each renamed-into directory makes its renames durable, their sources'
      directories with them. Before a fsynced put on the same file system (the journal
      record that follows renames) not even those: the put's own fsync commits the
      journal past every rename made before it (:meth:`LocalStore._sync_dirs`). (ext4's
      optional fast commits keep this: a fast commit writes every change queued since
      the last full commit, and a rename it cannot express falls back to a full commit.)
    * ``"none"``: tmpfs and ramfs: memory only, nothing survives a power loss and fsync
      does nothing there; the renames and what records them are lost together.
    * ``"syncfs"`` (chosen explicitly only, not detected): meant for ext4 without a journal
      (``^has_journal``; the project VM's root file system is one), which gets ``"each"``
      by default: the one whole-commit measurement (tasks' files still dirty, as a Spark
      job's are at commit) ran 0.65x the rename loop with ``syncfs`` against 0.90x with
      ``"each"``, because ``syncfs`` also writes every dirty data page. Each directory is written back on its own, in no order, so both
      directories of every rename must reach the disk: one ``syncfs(2)`` writes every
      dirty directory block and inode of the file system and flushes the disk's cache
      once, where an fsync per directory is one synchronous write and one cache flush
      each (2,100 directories of a 20,000-file commit, measured 2026-11-29 under load
      6-9: 1.25-1.33 s by 16 threads of fsyncs, 0.09-0.13 s by one ``syncfs``, against
      0.41-0.62 s for the renames). ``syncfs`` also writes other writers' dirty data on
      that file system, so fewer than :data:`SYNCFS_MIN_DIRS` directories are fsynced
      one by one instead.
    * ``"each"``: every other file system: both directories of every rename are fsynced
      (btrfs, where a directory's fsync logs that directory only, f2fs, NFS, FUSE and
      overlay mounts, any file system ``statfs`` cannot name).
    """
    if _statfs_type is None:
        return "each"
    try:
        magic = _statfs_type(os.fsencode(path))
    except (UnicodeError, ValueError):
        return "each"
    if magic in (_TMPFS_MAGIC, _RAMFS_MAGIC):
        return "none"
    if magic == _XFS_MAGIC:
        return "dest"
    if magic == _EXT4_MAGIC:
        return "dest" if _ext4_journaled(path) else "each"
    return "each"


def _pairs(
    bsrcs: list[bytes] | None, bdsts: list[bytes] | None, root: str, requests: Sequence[RenameRequest]
) -> dict[bytes, set[bytes]]:
    """The parent directories of the destinations of ``requests``, each with the parent
    directories of the sources renamed into it (OS paths; ``bsrcs``/``bdsts``: the encoded
    paths, None if one cannot be encoded: such a request renamed nothing and is left
    out)."""
    if bsrcs is not None and bdsts is not None:
        pairs = set(zip(map(_dir_of, bdsts), map(_dir_of, bsrcs), strict=True))
    else:
        pairs = set()
        for r in requests:
            try:
                pairs.add(
                    (os.fsencode(os.path.dirname(root + r.dst)), os.fsencode(os.path.dirname(root + r.src)))
                )
            except UnicodeError:
                continue
    out: dict[bytes, set[bytes]] = {}
    for d, s in pairs:
        out.setdefault(d, set()).add(s)
    return out


def _dir_of(p: bytes) -> bytes:
    return p[: p.rfind(b"/")]


def _rename_file(ps: str, pd: str, src: str, dst: str, src_etag: str | None, declared: bool) -> RenameResult:
    """The rename of :meth:`LocalStore.rename` (OS paths ``ps``/``pd`` of store paths
    ``src``/``dst``), blocking. ``declared``: the caller says the source is a file."""
    if declared:
        st = os.lstat(ps)
        what = _not_a_file(st.st_mode)
        if what is not None:
            raise PreconditionFailed(f"source is {what}, not a file", op="rename", path=src)
        if src_etag is not None and _etag(st) != src_etag:
            raise PreconditionFailed(
                f"source etag is {_etag(st)}, expected {src_etag}", op="rename", path=src
            )
    try:
        rename_noreplace(ps, pd)  # optimistic: the parent usually exists already
    except FileExistsError:
        raise AlreadyExists("destination exists", op="rename", path=dst) from None
    except FileNotFoundError:
        os.stat(ps)  # a missing source raises NotFound here
        os.makedirs(os.path.dirname(pd), exist_ok=True)
        try:
            rename_noreplace(ps, pd)
        except FileExistsError:
            raise AlreadyExists("destination exists", op="rename", path=dst) from None
    return RenameResult(dst=dst, etag=src_etag)


def _special(mode: int) -> str | None:
    """What a non-regular, non-directory file is (None for files and directories)."""
    if stat_mod.S_ISREG(mode) or stat_mod.S_ISDIR(mode):
        return None
    if stat_mod.S_ISLNK(mode):
        return "symlink"
    if stat_mod.S_ISFIFO(mode):
        return "fifo"
    if stat_mod.S_ISSOCK(mode):
        return "socket"
    return "device"


_KIND_TEXT = {"symlink": "a symbolic link", "fifo": "a FIFO", "socket": "a socket", "device": "a device"}


def _not_a_file(mode: int) -> str | None:
    """Why a file of this mode cannot be a declared file (None for a regular file)."""
    if stat_mod.S_ISREG(mode):
        return None
    if stat_mod.S_ISDIR(mode):
        return "a directory"
    return _KIND_TEXT[_special(mode) or "device"]


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


_req_src = itemgetter(0)
_req_dst = itemgetter(1)


def check_paths(paths: Sequence[str]) -> None:
    """:func:`~amcommit.paths.check_path` (``allow_root=False``) of every path, by a few C
    scans of ``"/" + "/".join(paths) + "/"``, where an empty path, a leading or trailing
    ``/`` or an empty segment shows as ``//``, a ``.`` or ``..`` segment as ``/./`` or
    ``/../`` (looked for only if ``/.`` occurs at all: rare, and a fast scan), and a NUL
    as itself. No Python code per path while all are valid; otherwise the paths are
    checked one by one, which raises the first one's InvalidInput."""
    joined = "/" + "/".join(paths) + "/"
    if "\0" in joined or "//" in joined or ("/." in joined and ("/./" in joined or "/../" in joined)):
        for p in paths:
            check_path(p, allow_root=False)


def _encode_all(root: str, paths: list[str]) -> list[bytes] | None:
    """``os.fsencode(root + p)`` of every path (one encode and one split, in C); None if
    one cannot be encoded (the slow path then raises its error for that request only)."""
    if not paths:
        return []
    try:
        joined = (root + ("\0" + root).join(paths)).encode(_FS_ENCODING, "surrogateescape")
    except UnicodeError:
        return None
    return joined.split(b"\0")


_LONG_NAME_READS = frozenset({"stat", "get", "list", "delete"})
"""Operations for which a name too long for the file system means "nothing there"."""

_WAY_READS = frozenset({"stat", "get"})
"""Operations for which a file standing where a parent directory of the path would be
means only that the path does not exist (as on every other store)."""


def _map_oserror(e: OSError, op: str, path: str) -> StoreError:
    msg = e.strerror or str(e)
    if isinstance(e, FileNotFoundError):
        return NotFound(msg, op=op, path=path)
    if e.errno == errno.ENAMETOOLONG:
        # no file of that name can exist: reads find nothing (so that a rollback meeting
        # such a name ends), writes are refused as bad input; the path is cut short
        if op in _LONG_NAME_READS:
            return NotFound(f"no such file: {msg}", op=op, path=clip(path))
        return InvalidInput(f"name too long for the file system: {msg}", op=op, path=clip(path))
    if isinstance(e, FileExistsError):
        return AlreadyExists(msg, op=op, path=path)
    if isinstance(e, NotADirectoryError):
        if op in _WAY_READS:  # a file where a parent directory would be: the path does not exist
            return NotFound(f"a file is in the way: {msg}", op=op, path=path)
        return AlreadyExists(f"a file is in the way: {msg}", op=op, path=path)
    if isinstance(e, PermissionError):
        return PermissionDenied(msg, op=op, path=path)
    if e.errno == errno.ENOTEMPTY:
        return PreconditionFailed("directory not empty", op=op, path=path)
    if isinstance(e, IsADirectoryError):
        return InvalidInput(f"is a directory: {msg}", op=op, path=path)
    if e.errno in (errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT):
        return Transient(msg, op=op, path=path)
    return StoreError(msg, op=op, path=path)


def _unencodable(e: UnicodeError, op: str, path: str) -> InvalidInput:
    """A path the file system cannot name (a lone surrogate, say): a typed error, not the
    codec's."""
    return InvalidInput(
        f"the path cannot be encoded for the local file system ({e.__class__.__name__})", op=op, path=path
    )


def _rmtree(p: str, attempts: int = 5) -> None:
    """``shutil.rmtree`` that tolerates writers racing it: a file or directory created
    below ``p`` while the tree is removed (a late task attempt still writing when its job
    is aborted) makes the removal of its parent fail with ENOTEMPTY, and rmtree stops at
    the first error, leaving the rest (e.g. the job marker) behind. Walk again, a few
    times, then give up with the error."""
    for i in range(attempts):
        try:
            shutil.rmtree(p)
            return
        except FileNotFoundError:
            if not os.path.lexists(p):
                return  # removed by someone else meanwhile
            if i == attempts - 1:
                raise
        except OSError as e:
            if e.errno != errno.ENOTEMPTY or i == attempts - 1:
                raise
        time.sleep(0.02 * (i + 1))


def _remove_dirs_only(name: str, dir_fd: int | None = None, depth: int = 3) -> bool:
    """Remove directory ``name`` (relative to ``dir_fd``) if it holds nothing but
    directories that hold nothing but directories (up to ``depth`` levels below it), the
    empty directories first: a job's task attempt directories once their files are
    renamed. ``rmdir`` only: never removes a file, never follows a symbolic link (each
    level is opened with ``O_NOFOLLOW`` and its children are removed relative to it).
    True if ``name`` is gone; False if something else is left (the caller then removes
    the rest the general way, :func:`_rmtree`). Few system calls per directory: no
    ``lstat``, one listing per non-empty directory."""
    try:
        os.rmdir(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return True
    except OSError as e:
        if depth <= 0 or e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            return False
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        with os.scandir(fd) as it:
            subdirs = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        for sub in subdirs:
            _remove_dirs_only(sub, fd, depth - 1)
    finally:
        os.close(fd)
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


INLINE_PUT_BYTES = 64 * 1024
"""A put of at most this many bytes without fsync runs inline (see :class:`LocalStore`)."""

INLINE_GET_BYTES = 64 * 1024
"""A get of a file of at most this many bytes runs inline (see :class:`LocalStore`)."""


_tmp_token = uuid.uuid4().hex
_tmp_count = itertools.count()


def _new_tmp_token() -> None:
    global _tmp_token, _tmp_count
    _tmp_token, _tmp_count = uuid.uuid4().hex, itertools.count()


os.register_at_fork(after_in_child=_new_tmp_token)


def _tmp_name() -> str:
    """A put's temporary file name: unique across processes (a random token drawn once per
    process, again in a forked child) and within one (a counter), without a
    ``getrandom`` system call per put (``uuid4`` makes one, which releases the GIL: on the
    event loop, a wait behind busy worker threads)."""
    return f"{TMP_PREFIX}{_tmp_token}-{next(_tmp_count)}"


class _NotSmall(Exception):
    """Raised inside an inline get whose file is larger than :data:`INLINE_GET_BYTES`."""


class LocalStore:
    """A :class:`~amcommit.store.base.Store` over a local directory tree rooted at ``root``.

    Metadata operations (stat, rename, single-file delete, mkdirs) take microseconds on a
    local filesystem, far less than a hop to a worker thread, so they run inline on the
    event loop, and so do gets of files of at most :data:`INLINE_GET_BYTES` and puts of
    at most :data:`INLINE_PUT_BYTES` when ``fsync`` is off;
    other data transfers, listings and recursive deletes run in worker threads. On a
    slow network filesystem pass ``offload_metadata=True`` to move everything to threads.
    ``fsync=True`` (default) flushes written files to disk before they are published.
    """

    def __init__(
        self,
        root: str = "/",
        *,
        limiter: Limiter | None = None,
        fsync: bool = True,
        offload_metadata: bool = False,
    ) -> None:
        self.root = os.path.abspath(root)
        self.recipe = StoreRecipe(type(self), (root,), {"fsync": fsync, "offload_metadata": offload_metadata})
        self.offload_metadata = offload_metadata
        self.limiter = limiter or Limiter(max_concurrency=32)
        self.fsync = fsync
        self.iostats = IOStatistics()
        self.capabilities = Capabilities(
            atomic_rename=True,
            directories=True,
            etag_kept_on_rename=True,
            rename_provenance=False,
            conditional_put=True,
            name="local",
            local_root=self.root,
            parallel_io=False,
            batch_rename=True,
            name_limits=local_limits(self.root),
        )
        self._locks: dict[str, threading.Lock] = {}
        self._closed = False
        self._renaming = anyio.Lock()
        """One batch renames at a time (the kernel serialises renames between directories
        of one file system; two threads renaming were measured 2x slower than one); the
        caller prepares the next batch meanwhile."""
        self._unsynced: dict[bytes, set[bytes]] = {}
        """Directories changed by renames and not fsynced yet (``fsync`` only): each
        destination directory with the source directories of the renames into it."""
        self._unsynced_lock = threading.Lock()
        self._rules: dict[int, DirSyncRule] = {}
        """:func:`dir_sync_rule` by device number (``st_dev``)."""

    @property
    def root_uri(self) -> str:
        from amcommit.paths import encode_path

        r = self.root.rstrip("/")
        return "file://" + encode_path(r) + "/"

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def os_path(self, path: str) -> str:
        """The filesystem path of store path ``path``."""
        check_path(path)
        return os.path.join(self.root, path) if path else self.root

    async def _run(self, op: str, path: str, fn: Callable[[], T], *, inline: bool = False) -> T:
        t0 = time.perf_counter()
        async with self.limiter.slot():
            try:
                if inline and not self.offload_metadata:
                    result = fn()
                else:
                    result = await anyio.to_thread.run_sync(fn)
            except OSError as e:
                self.iostats.record(op, time.perf_counter() - t0, failed=True)
                raise _map_oserror(e, op, path) from None
            except UnicodeError as e:
                self.iostats.record(op, time.perf_counter() - t0, failed=True)
                raise _unencodable(e, op, path) from None
            except StoreError:
                self.iostats.record(op, time.perf_counter() - t0, failed=True)
                raise
        self.iostats.record(op, time.perf_counter() - t0)
        self.limiter.succeeded()
        return result

    def _info(self, path: str, st: os.stat_result) -> ObjectInfo:
        is_dir = stat_mod.S_ISDIR(st.st_mode)
        return ObjectInfo(
            path=path,
            size=0 if is_dir else st.st_size,
            etag=None if is_dir else _etag(st),
            is_dir=is_dir,
            mtime=st.st_mtime,
            special=_special(st.st_mode),
        )

    async def stat(self, path: str) -> ObjectInfo:
        p = self.os_path(path)
        return await self._run("stat", path, lambda: self._info(path, os.stat(p)), inline=True)

    async def list(self, prefix: str, *, recursive: bool = True) -> AsyncIterator[ObjectInfo]:
        check_path(prefix)
        pending = [prefix]
        while pending:
            d = pending.pop()
            osd = self.os_path(d)

            def scan(d: str = d, osd: str = osd) -> list[tuple[str, os.stat_result]]:
                out = []
                try:
                    with os.scandir(osd) as it:
                        for ent in it:
                            if ent.name.startswith(TMP_PREFIX):
                                continue
                            try:
                                # never follow links: a link to a directory outside
                                # must not be descended into (nor moved from)
                                out.append((join(d, ent.name), ent.stat(follow_symlinks=False)))
                            except FileNotFoundError:
                                continue
                except (FileNotFoundError, NotADirectoryError):
                    return []
                except OSError as e:
                    if e.errno == errno.ENAMETOOLONG:
                        return []  # no directory of that name can exist
                    raise
                return out

            for p, st in await self._run("list", d, scan):
                info = self._info(p, st)
                if info.is_dir:
                    if recursive:
                        pending.append(p)
                    else:
                        yield info
                else:
                    yield info

    async def get(self, path: str) -> bytes:
        p = self.os_path(path)

        def read() -> bytes:
            with open(p, "rb") as f:
                return f.read()

        if self.offload_metadata:
            return await self._run("get", path, read)

        def read_small() -> bytes:
            with open(p, "rb") as f:
                if os.fstat(f.fileno()).st_size > INLINE_GET_BYTES:
                    raise _NotSmall
                return f.read()

        # a small file (a journal, a marker, a lock) is read inline, like a stat: an open, a
        # stat and a read; a larger one in a worker thread
        try:
            return await self._run("get", path, read_small, inline=True)
        except _NotSmall:
            return await self._run("get", path, read)

    async def get_many(self, paths: Sequence[str]) -> tuple[bytes, ...]:
        """:meth:`get` of every path, in one worker-thread hop (a job commit reads its
        manifests so). The first path that cannot be read raises its error (as ``get``
        would); none of the data is returned then."""
        ps = [self.os_path(p) for p in paths]

        def read() -> tuple[bytes, ...]:
            out = []
            for i, p in enumerate(ps):
                try:
                    with open(p, "rb") as f:
                        out.append(f.read())
                except OSError as e:
                    raise _map_oserror(e, "get", paths[i]) from None
                except UnicodeError as e:
                    raise _unencodable(e, "get", paths[i]) from None
            return tuple(out)

        t0 = time.perf_counter()
        async with self.limiter.slot():
            try:
                result = await anyio.to_thread.run_sync(read)
            except StoreError:
                self.iostats.record("get", time.perf_counter() - t0, failed=True)
                raise
        self.iostats.record_many("get", len(paths), time.perf_counter() - t0)
        self.limiter.succeeded()
        return result

    def _lock(self, p: str) -> threading.Lock:
        lk = self._locks.get(p)
        if lk is None:
            lk = self._locks.setdefault(p, threading.Lock())
        return lk

    async def put(self, path: str, data: bytes, *, mode: WriteMode = PutMode.OVERWRITE) -> ObjectInfo:
        check_path(path, allow_root=False)
        p = self.os_path(path)

        def write() -> ObjectInfo:
            d = os.path.dirname(p)
            if self._unsynced:
                # renames first: what this put records of them is written after (on a
                # journaling file system this put's own fsync does it: _sync_dirs)
                self._sync_dirs(put_dev=_device_of(d))
            tmp = os.path.join(d, _tmp_name())
            try:
                f = open(tmp, "wb")  # optimistic: the directory usually exists already
            except (FileNotFoundError, NotADirectoryError):
                os.makedirs(d, exist_ok=True)  # raises what a missing or blocked directory means
                f = open(tmp, "wb")
            try:
                with f:
                    f.write(data)
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
                    # the published file's stat: a rename keeps its inode, mtime and size
                    st = os.fstat(f.fileno())
                if mode is PutMode.CREATE:
                    rename_noreplace(tmp, p)
                elif isinstance(mode, UpdateIf):
                    with self._lock(p), _dir_flock(d):
                        try:
                            cur = _etag(os.stat(p))
                        except FileNotFoundError:
                            raise PreconditionFailed("no object to update", op="put", path=path) from None
                        if cur != mode.etag:
                            raise PreconditionFailed(
                                f"etag is {cur}, expected {mode.etag}", op="put", path=path
                            )
                        os.replace(tmp, p)
                else:
                    os.replace(tmp, p)  # a directory at p: IsADirectoryError (EISDIR)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
            return self._info(path, st)

        # a small write without fsync is a few system calls, like a rename: inline
        return await self._run("put", path, write, inline=not self.fsync and len(data) <= INLINE_PUT_BYTES)

    async def rename(
        self,
        src: str,
        dst: str,
        *,
        src_etag: str | None = None,
        rename_id: str | None = None,
        src_meta: bool | None = None,
    ) -> RenameResult:
        check_path(src, allow_root=False)
        check_path(dst, allow_root=False)
        ps, pd = self.os_path(src), self.os_path(dst)

        def mv() -> RenameResult:
            result = _rename_file(ps, pd, src, dst, src_etag, src_etag is not None or rename_id is not None)
            if self.fsync:
                self._changed({os.fsencode(os.path.dirname(pd)): {os.fsencode(os.path.dirname(ps))}})
            return result

        return await self._run("rename", src, mv, inline=True)

    def _changed(self, pairs: dict[bytes, set[bytes]]) -> None:
        """Directories renames changed (destination directory: source directories), to
        make durable before the next put (``fsync`` only)."""
        with self._unsynced_lock:
            unsynced = self._unsynced
            for d, srcs in pairs.items():
                have = unsynced.get(d)
                if have is None:
                    unsynced[d] = set(srcs)
                else:
                    have.update(srcs)

    def _rule_of(self, d: bytes) -> tuple[int, DirSyncRule]:
        """The device of directory ``d`` and :func:`dir_sync_rule` of its file system
        (``(-1, "each")`` if ``d`` is gone: its renames' sources are fsynced then)."""
        try:
            dev = os.stat(d).st_dev
        except OSError:
            return -1, "each"
        rule = self._rules.get(dev)
        if rule is None:
            rule = self._rules[dev] = dir_sync_rule(d)
        return dev, rule

    def _sync_dirs(self, put_dev: int | None = None) -> None:
        """Make every rename since the last call durable (blocking): fsync the directories
        the renames changed that :func:`dir_sync_rule` names for their file system (a
        destination directory's rule is the rule of its renames); one that is gone
        meanwhile (a removed task directory) is skipped. Many directories are fsynced by
        up to :data:`DIR_SYNC_THREADS` threads at once: each fsync waits for a flush of
        the disk's cache, and concurrent flushes are merged (2,010 directories of a
        2,000-file commit: 0.16 s instead of 1.9 s on a busy machine).

        ``put_dev``: the device of a put that follows at once and fsyncs its own new file
        before it publishes it (:meth:`put`). On a journaling file system (``"dest"``) that
        fsync alone makes the renames before it durable, so their directories are not
        fsynced: the put's file is created after every rename returned, so the journal
        transaction that creates it is the renames' transaction or a later one, and an
        fsync commits the journal up to the file's transaction, every earlier transaction
        with it (ext4/jbd2 and xfs commit their journal in order). The put's rename into
        place is later still: after a power loss, if what the put records is there, so
        are the renames."""
        with self._unsynced_lock:
            pending, self._unsynced = self._unsynced, {}
        dirs: set[bytes] = set()
        whole: dict[int, tuple[bytes, set[bytes]]] = {}  # "syncfs": device -> (a dst, all dirs)
        for d, srcs in pending.items():
            dev, rule = self._rule_of(d)
            if rule == "none":
                continue
            if rule == "dest" and put_dev is not None and dev == put_dev:
                continue  # the put's own fsync commits the journal past these renames
            if rule == "syncfs":
                one = whole.setdefault(dev, (d, set()))[1]
                one.add(d)
                one.update(srcs)
                continue
            dirs.add(d)
            if rule == "each":
                dirs.update(srcs)
        for d, fs_dirs in whole.values():
            if len(fs_dirs) < SYNCFS_MIN_DIRS or not _syncfs_dir(d):
                dirs.update(fs_dirs)
        if not dirs:
            return
        if len(dirs) <= 4:
            for d in sorted(dirs):
                _fsync_dir(d)
            return
        with ThreadPoolExecutor(
            min(DIR_SYNC_THREADS, len(dirs)), thread_name_prefix="amcommit-dirsync"
        ) as pool:
            for _ in pool.map(_fsync_dir, sorted(dirs)):
                pass

    async def sync(self) -> None:
        """fsync the directories changed by renames so far (a no-op without ``fsync``); the
        next put and ``aclose`` do it anyway."""
        if self._unsynced:
            await self._run("sync", "", self._sync_dirs)

    async def rename_batch(self, requests: Sequence[RenameRequest]) -> dict[int, StoreError]:
        """Many :meth:`rename` calls in one worker-thread hop under one limiter slot (see
        :meth:`~amcommit.store.base.BatchRenamer.rename_batch`): each request is checked
        and renamed exactly as ``rename`` does it (a declared file's ``lstat`` and etag
        compared just before its ``RENAME_NOREPLACE``), one after another; a killed process
        has done a prefix of them. One thread: renames between directories of one file
        system are serialised by the kernel anyway (``s_vfs_rename_mutex``).

        The paths are checked (:func:`check_paths`) and encoded for the system calls all at
        once, in C; the thread's loop per request is an ``lstat``, the etag compare and the
        rename."""
        n = len(requests)
        srcs: list[str] = list(map(_req_src, requests))
        dsts: list[str] = list(map(_req_dst, requests))
        check_paths(srcs)
        check_paths(dsts)
        root = self.root.rstrip("/") + "/"
        bsrcs, bdsts = _encode_all(root, srcs), _encode_all(root, dsts)

        sync = self.fsync

        def run() -> dict[int, StoreError]:
            failed: dict[int, StoreError] = {}
            lstat, is_reg, mv, etag_of = os.lstat, stat_mod.S_ISREG, _renameat2, _etag
            for i, r in enumerate(requests):
                try:
                    etag = r.src_etag
                    if mv is not None and bsrcs is not None and bdsts is not None:
                        if etag is not None:  # the checks of _rename_file, inlined (the hot path)
                            ps = bsrcs[i]
                            st = lstat(ps)
                            if is_reg(st.st_mode) and etag_of(st) == etag and mv(ps, bdsts[i]) == 0:
                                continue
                        elif r.rename_id is not None:
                            ps = bsrcs[i]
                            if is_reg(lstat(ps).st_mode) and mv(ps, bdsts[i]) == 0:
                                continue
                    # the slow path decides and explains every other case
                    _rename_file(
                        root + r.src,
                        root + r.dst,
                        r.src,
                        r.dst,
                        etag,
                        etag is not None or r.rename_id is not None,
                    )
                except OSError as e:
                    failed[i] = _map_oserror(e, "rename", r.src)
                except UnicodeError as e:
                    failed[i] = _unencodable(e, "rename", r.src)
                except StoreError as e:
                    failed[i] = e
            if sync:  # after the renames: the directories they changed, fsynced before the next put
                self._changed(_pairs(bsrcs, bdsts, root, requests))
            return failed

        t0 = time.perf_counter()
        async with self.limiter.slot(), self._renaming:
            failed = await anyio.to_thread.run_sync(run)
        self.iostats.record_many("rename", n, time.perf_counter() - t0, failed=len(failed))
        if len(failed) < n:
            self.limiter.succeeded()
        return failed

    async def find_non_file(self, paths: Sequence[str], below: str) -> tuple[str, str] | None:
        """The first of ``paths`` (declared files, all below directory ``below``) that is
        not a regular file reached through real directories, with the reason; None if all
        are fine. Missing paths are skipped (a resumed commit renamed them already).

        Each directory holding a few of ``paths`` is listed once (``scandir``: the entry
        types come with the listing, no ``lstat`` per file), and so is each directory
        above it up to ``below`` (its listing says whether a child is a real directory
        or a symbolic link). A path the listings do not show as a regular file in real
        directories, or in a directory holding fewer than 4 of the paths, is
        checked exactly: one ``lstat`` per path plus one per directory between it and
        ``below``, which also gives the reason. Read only; not atomic with what the caller
        does next.
        """
        root = self.root
        base = root if root.endswith("/") else root + "/"  # + a store path: os.path.join
        prefix = below + "/" if below else ""
        first, third = itemgetter(0), itemgetter(2)

        def check() -> tuple[str, str] | None:
            real_dirs: set[str] = set()

            def exact(p: str) -> tuple[str, str] | None:
                d = parent(p)
                while len(d) > len(below) and d not in real_dirs:
                    try:
                        st = os.lstat(base + d)
                    except FileNotFoundError:
                        break
                    if not stat_mod.S_ISDIR(st.st_mode):
                        return p, f"its directory {d!r} is {_not_a_file(st.st_mode) or 'a file'}"
                    real_dirs.add(d)
                    d = parent(d)
                try:
                    st = os.lstat(base + p)
                except (FileNotFoundError, NotADirectoryError):
                    return None
                what = _not_a_file(st.st_mode)
                if what is not None:
                    return p, f"it is {what}, not a file"
                return None

            if not all(map(str.startswith, paths, itertools.repeat(prefix))):
                p = next(p for p in paths if not p.startswith(prefix))
                return p, f"it is not below {below!r}"
            # (directory, "/", name) of every path, grouped by directory: C loops only
            parts = sorted(map(str.rpartition, paths, itertools.repeat("/")))
            listings: dict[str, tuple[set[str], set[str]] | None] = {}

            def listing(d: str) -> tuple[set[str], set[str]] | None:
                """The names of ``d``'s regular files and of its real directories."""
                if d not in listings:
                    files: set[str] = set()
                    dirs: set[str] = set()
                    try:
                        with os.scandir(base + d if d else root) as it:
                            for e in it:
                                if e.is_file(follow_symlinks=False):
                                    files.add(e.name)
                                elif e.is_dir(follow_symlinks=False):
                                    dirs.add(e.name)
                        listings[d] = files, dirs
                    except OSError:
                        listings[d] = None
                return listings[d]

            def known_real(d: str) -> bool:
                """``d`` and every directory above it, up to ``below``, are real directories
                (by the listings of their parents)."""
                chain = []  # real if every one above is: added to real_dirs only then
                while len(d) > len(below) and d not in real_dirs:
                    up, _, name = d.rpartition("/")
                    kinds = listing(up)
                    if kinds is None or name not in kinds[1]:
                        return False
                    chain.append(d)
                    d = up
                real_dirs.update(chain)
                return True

            for d, group in itertools.groupby(parts, first):
                names = list(map(third, group))
                kinds = listing(d) if len(names) >= 4 and known_real(d) else None
                if kinds is not None and kinds[0].issuperset(names):
                    continue  # all regular files, in real directories
                for name in names:
                    if kinds is None or name not in kinds[0]:
                        bad = exact(f"{d}/{name}" if d else name)
                        if bad is not None:
                            return bad
            return None

        return await self._run("check", below, check)

    async def delete(self, path: str, *, recursive: bool = False) -> bool:
        check_path(path, allow_root=False)
        p = self.os_path(path)

        def rm() -> bool:
            try:
                st = os.lstat(p)
            except (FileNotFoundError, NotADirectoryError):  # (a file where a parent would be)
                return False
            except OSError as e:
                if e.errno == errno.ENAMETOOLONG:
                    return False  # no file of that name can exist
                raise
            if stat_mod.S_ISDIR(st.st_mode):
                if recursive:
                    if not _remove_dirs_only(p):  # a tree of empty directories: rmdir only
                        _rmtree(p)
                else:
                    os.rmdir(p)
            else:
                os.unlink(p)
            return True

        if self._unsynced:  # renames first (a rollback's last record is a delete)
            await self.sync()
        return await self._run("delete", path, rm, inline=not recursive)

    async def mkdirs(self, path: str) -> None:
        if path == "":
            return
        check_path(path)
        p = self.os_path(path)

        def mk() -> None:
            try:
                os.makedirs(p, exist_ok=True)
            except FileExistsError:
                raise AlreadyExists("a file is in the way", op="mkdirs", path=path) from None

        await self._run("mkdirs", path, mk, inline=True)

    async def aclose(self) -> None:
        if self._unsynced:
            await anyio.to_thread.run_sync(self._sync_dirs)
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def local_store_of(store: object, *, depth: int = 8) -> LocalStore | None:
    """The :class:`LocalStore` under ``store`` (following wrappers' ``inner``), or None."""
    for _ in range(depth):
        if isinstance(store, LocalStore):
            return store
        store = getattr(store, "inner", None)
        if store is None:
            return None
    return None


@contextmanager
def _dir_flock(d: str) -> Iterator[None]:
    """Exclusive advisory lock on directory ``d`` across processes (released on close)."""
    fd = os.open(d, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


__all__ = ["DirSyncRule", "LocalStore", "dir_sync_rule", "local_store_of", "rename_noreplace"]
