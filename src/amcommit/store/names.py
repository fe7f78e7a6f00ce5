"""What names a store can hold: each backend's limits on path length, as pure checks.

A store declares its limits in ``Capabilities.name_limits`` (:class:`NameLimits`):

* local files: at most 255 bytes per path component (``NAME_MAX`` of ext4, xfs, btrfs,
  tmpfs...) and at most 4,095 bytes for the whole path the system call sees (``PATH_MAX``
  4,096 with its NUL), the store's root included;
* Azure storage (Blob and ADLS Gen2): at most 1,024 characters per blob name and at most
  254 path segments. Characters are counted as UTF-16 code units (the service's own count;
  a character outside the Basic Multilingual Plane counts twice, which can only refuse a
  name that might have fitted, never accept one that does not);
* Google Cloud Storage: at most 1,024 bytes per object name, UTF-8 encoded.

The job commit refuses a manifest naming a destination the store cannot hold while it loads
the manifests (:meth:`NameLimits.first_problem`), before anything is published. The HTTP
stores also refuse to send such a name at all (:func:`check_storable`: a write fails with
:class:`~amcommit.errors.InvalidInput`; :func:`unreachable`: a read answers "not found", which
is what it is: no object of that name can exist), so a rollback or abort that meets one (a
manifest that slipped past the check) still ends. Local files leave that to the file system
(``ENAMETOOLONG`` is mapped the same way).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from amcommit.errors import InvalidInput, NotFound

__all__ = [
    "AZURE_LIMITS",
    "GCS_LIMITS",
    "NameLimits",
    "check_storable",
    "clip",
    "local_limits",
    "shorten",
    "unreachable",
]


def shorten(value: str, limit: int = 80) -> str:
    """``repr`` of a (long) name for a message: one line, at most about ``limit`` characters."""
    r = repr(value)
    return r if len(r) <= limit else f"{r[: limit - 16]}...{r[-12:]}"


def clip(path: str, limit: int = 120) -> str:
    """``path`` cut to about ``limit`` characters (for an error's ``path``)."""
    return path if len(path) <= limit else f"{path[: limit - 20]}...{path[-12:]}"


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def _utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True, slots=True)
class NameLimits:
    """A store's limits on the names it can hold (0 = no limit of that kind); ``where``
    names the store in messages ("local files")."""

    where: str
    segment_bytes: int = 0
    """UTF-8 bytes per path component (a file or directory name)."""
    path_bytes: int = 0
    """UTF-8 bytes of the whole store path."""
    path_units: int = 0
    """UTF-16 code units ("characters" to Azure) of the whole store path."""
    segments: int = 0
    """Path components of the whole store path."""
    _fast_path: int = field(init=False, repr=False, compare=False)
    _fast_segment: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # a path of at most _fast_path characters (a component of at most _fast_segment)
        # breaks no limit, whatever its characters: a character is at most 4 UTF-8 bytes
        # and 2 UTF-16 units, and a path of n characters has at most (n + 1) // 2 segments
        big = 1 << 62
        bounds = [
            self.path_bytes // 4 if self.path_bytes else big,
            self.path_units // 2 if self.path_units else big,
            2 * self.segments - 1 if self.segments else big,
        ]
        object.__setattr__(self, "_fast_path", min(bounds))
        object.__setattr__(self, "_fast_segment", self.segment_bytes // 4 if self.segment_bytes else big)

    def problem(self, path: str, *, components: bool = True) -> str | None:
        """Why the store cannot hold a file or directory named ``path`` (a store path), or
        None if it can (``components=False``: the limit per component is not checked). Pure."""
        if len(path) <= self._fast_path and (len(path) <= self._fast_segment or not components):
            return None
        if self.path_bytes and len(path) > self._fast_path:
            n = _utf8_len(path)
            if n > self.path_bytes:
                return f"it is {n:,} bytes long (UTF-8); {self.where} allow at most {self.path_bytes:,}"
        if self.path_units and len(path) > self._fast_path:
            n = _utf16_len(path)
            if n > self.path_units:
                return f"it is {n:,} characters long; {self.where} allow at most {self.path_units:,} per name"
        if self.segments and len(path) > self._fast_path:
            n = path.count("/") + 1
            if n > self.segments:
                return f"it has {n:,} path segments; {self.where} allow at most {self.segments:,}"
        if components and self.segment_bytes and len(path) > self._fast_segment:
            for seg in path.split("/"):
                if len(seg) > self._fast_segment:
                    n = _utf8_len(seg)
                    if n > self.segment_bytes:
                        return (
                            f"its component {shorten(seg, 40)} is {n:,} bytes long; {self.where} "
                            f"allow at most {self.segment_bytes:,} bytes per path component"
                        )
        return None

    def first_problem(self, files: Sequence[str], dirs: Iterable[str] = ()) -> tuple[str, str] | None:
        """``(path, reason)`` of the first of ``files`` or ``dirs`` the store cannot hold;
        None if it can hold all. ``dirs`` must hold the parent directory of every file
        (the components of the directories are checked there, once per directory).

        For the many files of a manifest: C loops only (lengths, a join and an ASCII test)
        while every name is short, or long but plain ASCII within the limits; exact checks
        only for the few names that need them."""
        for d in dirs:
            why = self.problem(d)
            if why is not None:
                return d, why
        if not files:
            return None
        fast = self._fast_path
        if max(map(len, files)) > fast:
            long = list(itertools.compress(files, map(fast.__lt__, map(len, files))))
            for p in long:
                why = self.problem(p, components=False)
                if why is not None:
                    return p, why
        if self.segment_bytes:
            names = list(map(operator.itemgetter(2), map(str.rpartition, files, itertools.repeat("/"))))
            longest = max(map(len, names))
            if longest > self._fast_segment and not (
                longest <= self.segment_bytes and "".join(names).isascii()  # characters = bytes
            ):
                for p, name in zip(files, names, strict=True):
                    if len(name) > self._fast_segment and _utf8_len(name) > self.segment_bytes:
                        why = self.problem(p)
                        assert why is not None
                        return p, why
        return None


AZURE_LIMITS = NameLimits("Azure storage", path_units=1024, segments=254)
"""Blob names (Blob and ADLS Gen2): 1,024 characters, 254 path segments."""
GCS_LIMITS = NameLimits("Google Cloud Storage", path_bytes=1024)
"""Object names: 1,024 bytes of UTF-8."""


def local_limits(root: str) -> NameLimits:
    """Local files under directory ``root``: 255 bytes per component, and the whole path
    (``root/`` plus the store path) within ``PATH_MAX``."""
    base = _utf8_len(root.rstrip("/") + "/")
    return NameLimits("local files", segment_bytes=255, path_bytes=max(1, 4095 - base))


def unreachable(limits: NameLimits | None, path: str, op: str) -> NotFound | None:
    """The :class:`~amcommit.errors.NotFound` a read of ``path`` answers without asking the
    service when the store cannot hold such a name (no such object can exist); None if it
    can."""
    if limits is None:
        return None
    why = limits.problem(path)
    if why is None:
        return None
    return NotFound(f"no such object: the name cannot exist ({why})", op=op, path=clip(path))


def check_storable(limits: NameLimits | None, path: str, op: str) -> None:
    """:class:`~amcommit.errors.InvalidInput` (one line, naming the limit) if the store
    cannot hold ``path``; sent before any request."""
    if limits is None:
        return
    why = limits.problem(path)
    if why is not None:
        raise InvalidInput(f"name too long for the store: {why}", op=op, path=clip(path))
