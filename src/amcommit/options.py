"""Typed options: one conversion for store, committer and Spark options.

Every option set is a frozen :class:`Options` struct (``msgspec.Struct``): the store options
of each backend (:mod:`amcommit.store.options`) and
:class:`~amcommit.committer.config.CommitterConfig`. :func:`convert_options` is the only
place that turns user input into them, for the CLI, the Spark data source, the Spark
session conf and :func:`~amcommit.store.schemes.open_location`:

* values may be strings, as the CLI and Spark pass them: ``"false"`` -> ``False``,
  ``"64"`` -> ``64``, ``"1.5"`` -> ``1.5`` (``msgspec.convert(..., strict=False)``), plus
  ``yes``/``no``/``on``/``off`` for booleans and ``""``/``none``/``null`` for optional values;
* an unknown key is a :class:`~amcommit.errors.ConfigError` naming it, with "did you mean"
  the closest known key;
* a value of the wrong type is a ConfigError naming the key and what it expects, never
  showing the value (a value given to the wrong option may be a secret: an account key
  pasted as ``io_threads``);
* the values of secret fields (``secret_fields``) are registered with
  :func:`amcommit.redact.register_secret`, so no message, log or report of this process
  shows them, and the struct's ``repr`` masks them.

Conversion is pure (no I/O) and all or nothing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

import msgspec
import msgspec.inspect as mi

from amcommit.errors import ConfigError
from amcommit.redact import MASK, Secret, register_secret

T = TypeVar("T", bound="Options")

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_NONE = frozenset({"", "none", "null"})
_GROUPED = re.compile(r"[+-]?\d+(?:_\d+)+")


class Options(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every typed option set. Subclasses list their secret fields in
    ``secret_fields`` (masked in ``repr``, registered for redaction) and name themselves in
    ``kind`` (used in messages: "unknown <kind> option ...")."""

    secret_fields: ClassVar[frozenset[str]] = frozenset()
    kind: ClassVar[str] = ""

    def __repr__(self) -> str:
        parts = []
        for name in self.__struct_fields__:
            v = getattr(self, name)
            if v is msgspec.UNSET:
                continue
            parts.append(f"{name}={MASK if name in self.secret_fields and v is not None else repr(v)}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def given(self) -> dict[str, Any]:
        """The fields that were set (not ``UNSET``), as keyword arguments."""
        return {name: v for name in self.__struct_fields__ if (v := getattr(self, name)) is not msgspec.UNSET}


def field_names(cls: type[Options]) -> tuple[str, ...]:
    """The option names of an :class:`Options` type."""
    return cls.__struct_fields__


def suggest(key: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the known key closest to ``key``, or ``""``."""
    hint = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


_NAME_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}(?:[.\-][A-Za-z0-9_]{1,32})*")
"""What an option name looks like: words of letters, digits and ``_`` (at most 32 each),
joined by ``.`` or ``-``. An account key or token does not (its ``+``, ``/``, ``=`` or one
long run of characters)."""


def show_key(key: str) -> str:
    """An unknown option's key for a message: quoted if it looks like an option name, else
    not shown (``--conf <an account key>`` splits the key at its ``=`` padding)."""
    k = key.strip()
    if len(k) <= 120 and _NAME_LIKE.fullmatch(k):
        return repr(key)
    return f"(a key of {len(key)} characters that is no option name; not shown)"


def unknown_option(
    kind: str, key: str, known: Iterable[str], *, normalised: str | None = None
) -> ConfigError:
    """The error for an unknown option ``key`` (the user's spelling) of ``kind``."""
    label = f"unknown {kind} option" if kind else "unknown option"
    hint = suggest(normalised or key, known) if _NAME_LIKE.fullmatch(key.strip()) else ""
    return ConfigError(f"{label} {show_key(key)}{hint}")


# -- type descriptions -----------------------------------------------------------------------


def _flat(t: mi.Type) -> list[mi.Type]:
    return list(t.types) if isinstance(t, mi.UnionType) else [t]


def _describe(t: mi.Type) -> str:
    words: list[str] = []
    types = _flat(t)
    nullable = any(isinstance(x, mi.NoneType) for x in types)
    for x in types:
        if isinstance(x, mi.BoolType):
            words.append("true or false")
        elif isinstance(x, mi.IntType):
            lo = x.ge if x.ge is not None else (x.gt + 1 if x.gt is not None else None)
            words.append("an integer" + (f" >= {lo}" if lo is not None else ""))
        elif isinstance(x, mi.FloatType):
            words.append("a number")
        elif isinstance(x, mi.StrType):
            words.append("a string")
        elif isinstance(x, mi.LiteralType):
            words.append("one of " + ", ".join(str(v) for v in x.values))
        elif isinstance(x, mi.NoneType):
            continue
        elif isinstance(x, mi.CustomType):
            words.append(f"a {x.cls.__name__} object (Python API only)")
        else:
            words.append("a valid value")
    return " or ".join(words) + (" (or none)" if nullable and words else "")


_AT_FIELD = re.compile(r"- at `\$\.([A-Za-z_][A-Za-z0-9_]*)`")


class _Info:
    """What conversion needs to know about one Options type (computed once per type)."""

    def __init__(self, cls: type[Options]) -> None:
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        self.types: dict[str, mi.Type] = {f.name: f.type for f in info.fields}
        flat = {name: _flat(t) for name, t in self.types.items()}
        self.bools = frozenset(n for n, ts in flat.items() if any(isinstance(x, mi.BoolType) for x in ts))
        self.nullable = frozenset(n for n, ts in flat.items() if any(isinstance(x, mi.NoneType) for x in ts))
        self.numbers = frozenset(
            n for n, ts in flat.items() if any(isinstance(x, (mi.IntType, mi.FloatType)) for x in ts)
        )


_infos: dict[type[Options], _Info] = {}


def _info(cls: type[Options]) -> _Info:
    info = _infos.get(cls)
    if info is None:
        info = _infos[cls] = _Info(cls)
    return info


def _prepare(name: str, value: Any, info: _Info) -> Any:
    """Normalise a string value for ``msgspec.convert``: trim, boolean words, empty/none."""
    if isinstance(value, Secret):
        return value.reveal()
    if not isinstance(value, str):
        return value
    v = value.strip()
    low = v.lower()
    if name in info.nullable and low in _NONE:
        return None
    if name in info.bools:
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    if name in info.numbers and _GROUPED.fullmatch(v):
        return v.replace("_", "")  # 1_000_000, as Python writes it
    return v


def convert_options(
    cls: type[T],
    values: Mapping[str, Any],
    *,
    base: T | None = None,
    normalise: Callable[[str], str | None] | None = None,
    aliases: Iterable[str] = (),
) -> T:
    """``values`` (raw keys -> raw values) as a ``cls``, on top of ``base`` if given.

    ``normalise`` maps a user's key to a field name (None: not an option of ``cls``);
    ``aliases`` are extra spellings offered by "did you mean". Raises ConfigError naming
    the option and what it expects, never its value.
    """
    info = _info(cls)
    known = cls.__struct_fields__
    changes: dict[str, Any] = {}
    raw_keys: dict[str, str] = {}
    for raw_key, raw in values.items():
        name = normalise(raw_key) if normalise is not None else raw_key.strip()
        if name is None or name not in info.types:
            raise unknown_option(cls.kind, raw_key, [*known, *aliases], normalised=name or raw_key)
        changes[name] = _prepare(name, raw, info)
        raw_keys[name] = raw_key
    for name in cls.secret_fields:
        v = changes.get(name)
        if isinstance(v, str):
            register_secret(v)
    data = msgspec.structs.asdict(base) if base is not None else {}
    data.update(changes)
    data = {k: v for k, v in data.items() if v is not msgspec.UNSET}
    try:
        return msgspec.convert(data, cls, strict=False)
    except msgspec.ValidationError as e:
        m = _AT_FIELD.search(str(e))
        if m is None or m.group(1) not in info.types:  # raised by the struct's own checks
            raise ConfigError(str(e)) from None
        name = m.group(1)
        label = f"{cls.kind} option" if cls.kind else "option"
        raise ConfigError(
            f"{label} {raw_keys.get(name, name)!r} must be {_describe(info.types[name])}"
        ) from None


__all__ = ["Options", "convert_options", "field_names", "show_key", "suggest", "unknown_option"]
