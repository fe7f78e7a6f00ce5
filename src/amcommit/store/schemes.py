"""The URL scheme registry (scheme -> backend opener) and ``open_store(url)``: a
:class:`~amcommit.store.base.Store` for a URL. Path and URI algebra is in
:mod:`amcommit.paths`.

Schemes:

* plain paths, ``file:/...``, ``file:///...`` -> :class:`~amcommit.store.local.LocalStore`
  (rooted at ``/``);
* ``abfs[s]://filesystem@account.dfs.core.windows.net/path`` -> ADLS Gen2 ``DfsStore``;
* ``wasb[s]://container@account.blob.core.windows.net/path`` -> flat Blob ``BlobStore``;
* ``gs://bucket/path`` -> ``GcsStore``.

fsspec-style URLs, as users of adlfs and gcsfs write them, name the same stores:

* ``abfs[s]://filesystem/path`` (no ``@account``) -> ``DfsStore``, and
  ``az://container/path`` -> ``BlobStore`` (adlfs maps both to its Blob file system; we
  keep ``abfs`` on ADLS Gen2, as Hadoop does, and give ``az`` the flat Blob store). The
  account comes from the ``account`` store option, else a ``connection_string``'s
  account, else the ``endpoint`` (an emulator's ``http://127.0.0.1:10000/acct``), else
  ``AZURE_STORAGE_ACCOUNT_NAME`` (as adlfs reads it); without any of them the URL is a
  ConfigError naming the ``account`` option. The store's ``root_uri`` is the canonical
  form (``abfs[s]://fs@acct.dfs.core.windows.net/``, ``wasbs://c@acct.blob.core.windows.net/``).
* ``gcs://bucket/path`` is ``gs://bucket/path`` (:func:`parse_location` rewrites it).

Plain local paths may start with ``~`` (expanded like a shell does).

Backends register a factory ``from_url(parsed: ParsedUri, **options) -> Store`` under
their schemes (:func:`register_scheme`), with the typed options it accepts (an
:class:`~amcommit.store.options.StoreOptions` struct); the built-in cloud backends are
imported lazily. The factories convert and validate their options through that struct
(strings as the CLI and Spark pass them are converted; an unknown key is a ConfigError with
"did you mean"); :func:`store_options` does the same without opening a store.
The store is rooted at the container (filesystem, bucket; ``/`` for local files), so one
store (and its limiter) serves every path in it; :func:`open_location` also returns the
path within the store.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from amcommit.errors import ConfigError, InvalidInput
from amcommit.options import convert_options
from amcommit.paths import ParsedUri, parse_uri
from amcommit.store.base import Store
from amcommit.store.options import BlobOptions, DfsOptions, GcsOptions, LocalOptions, StoreOptions

OptionsT = TypeVar("OptionsT", bound=StoreOptions)

StoreFactory = Callable[..., Store]

_factories: dict[str, StoreFactory] = {}
_lazy: dict[str, str] = {
    "abfs": "amcommit.store.azure:dfs_from_url",
    "abfss": "amcommit.store.azure:dfs_from_url",
    "wasb": "amcommit.store.azure:blob_from_url",
    "wasbs": "amcommit.store.azure:blob_from_url",
    "az": "amcommit.store.azure:blob_from_url",
    "gs": "amcommit.store.gcs:gcs_from_url",
}
_options: dict[str, type[StoreOptions]] = {
    "abfs": DfsOptions,
    "abfss": DfsOptions,
    "wasb": BlobOptions,
    "wasbs": BlobOptions,
    "az": BlobOptions,
    "gs": GcsOptions,
}


def register_scheme(scheme: str, factory: StoreFactory, options: type[StoreOptions] | None = None) -> None:
    """Make ``open_store`` use ``factory(parsed_uri, **options)`` for ``scheme`` URLs;
    ``options`` is the struct the factory's options are checked against."""
    _factories[scheme.lower()] = factory
    if options is not None:
        _options[scheme.lower()] = options


def normalise_store_key(key: str) -> str:
    """A store option name as the structs spell it (``Use-Move`` -> ``use_move``)."""
    return key.strip().replace("-", "_").lower()


def convert_store_options(cls: type[OptionsT], options: Mapping[str, Any]) -> OptionsT:
    """``options`` checked and converted through ``cls`` (see :mod:`amcommit.options`)."""
    return convert_options(cls, options, normalise=normalise_store_key)


def store_options_type(scheme: str) -> type[StoreOptions]:
    """The options struct of the backend for ``scheme`` (ConfigError if unsupported)."""
    t = _options.get(scheme.lower())
    if t is None:
        _factory(scheme.lower())  # raises the "unsupported URL scheme" error
        raise ConfigError(f"the {scheme!r} backend declares no options")
    return t


def store_options(url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options for the store of ``url``, converted and validated (without opening it):
    the keyword arguments that were set, with their typed values."""
    return convert_store_options(store_options_type(parse_location(url).scheme), options).given()


def _local_from_url(parsed: ParsedUri, **options: Any) -> Store:
    from amcommit.store.local import LocalStore

    return LocalStore("/", **convert_store_options(LocalOptions, options).given())


register_scheme("file", _local_from_url, LocalOptions)


_SCHEME_ALIASES = {"gcs": "gs"}
"""fsspec scheme names that are another name of one of ours (the canonical one is kept)."""


def parse_location(url: str) -> ParsedUri:
    """Parse a URL or a local path (``~`` expanded, relative paths made absolute);
    ``gcs://`` becomes ``gs://``."""
    if not url:
        raise InvalidInput("empty URL")
    if "://" not in url and not url.startswith("file:"):
        return parse_uri(os.path.abspath(os.path.expanduser(url)))
    parsed = parse_uri(url)
    alias = _SCHEME_ALIASES.get(parsed.scheme)
    return parsed if alias is None else ParsedUri(alias, parsed.authority, parsed.path)


def _factory(scheme: str) -> StoreFactory:
    f = _factories.get(scheme)
    if f is not None:
        return f
    target = _lazy.get(scheme)
    if target is None:
        known = ", ".join(sorted({*_factories, *_lazy}))
        raise ConfigError(f"unsupported URL scheme {scheme!r} (supported: {known})")
    mod, _, name = target.partition(":")
    try:
        f = cast(StoreFactory, getattr(importlib.import_module(mod), name))
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"the {scheme!r} backend is not available: {e}") from None
    _factories[scheme] = f
    return f


def open_location(url: str, **options: Any) -> tuple[Store, str]:
    """Open the store for ``url`` and return it with the path of ``url`` inside it.

    ``options`` are checked and converted by the backend's options struct (strings such as
    ``"false"`` or ``"64"`` are accepted); ConfigError names an unknown or mistyped key."""
    parsed = parse_location(url)
    return _factory(parsed.scheme)(parsed, **options), parsed.path


def open_store(url: str, **options: Any) -> Store:
    """Open the store (rooted at the container / bucket / ``/``) that holds ``url``."""
    return open_location(url, **options)[0]


__all__ = [
    "convert_store_options",
    "normalise_store_key",
    "open_location",
    "open_store",
    "parse_location",
    "register_scheme",
    "store_options",
    "store_options_type",
]
