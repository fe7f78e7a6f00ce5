"""Shared by ``check_conflicts`` (which writes them) and ``delete_victims`` (which reads
them): the victim lists, the old files a ``replace``/``overwrite`` commit removes, stored
in the job directory as JSON chunks of at most :data:`VICTIM_CHUNK` paths (each chunk is
one whole-object put: atomic; the set of chunks is counted by the journal).

A chunk holds paths relative to the destination (``{"dest_relative": [...]}``), so a commit
resumed or aborted through a store rooted elsewhere (the same local destination named by
another path) removes the same files. A chunk written by an earlier version is a plain list
of store paths, read as such."""

from __future__ import annotations

from functools import partial

import msgspec

from amcommit.committer.context import JobContext
from amcommit.errors import NotFound
from amcommit.paths import join, relative_to

VICTIM_CHUNK = 50_000


class VictimChunk(msgspec.Struct):
    """One victim list: old files' paths relative to the destination."""

    dest_relative: list[str]


_DECODER = msgspec.json.Decoder(VictimChunk | list[str])


def encode_victims(dest: str, paths: list[str]) -> bytes:
    """A chunk of the old files ``paths`` (store paths below ``dest``), as saved (pure)."""
    return msgspec.json.encode(VictimChunk([relative_to(p, dest) for p in paths]))


def decode_victims(dest: str, data: bytes) -> list[str]:
    """The store paths of a saved chunk, ``dest`` being the destination as this run's
    store names it (pure; a chunk of an earlier version is taken as it is)."""
    chunk = _DECODER.decode(data)
    if isinstance(chunk, list):
        return chunk
    return [join(dest, rel) for rel in chunk.dest_relative]


async def load_victims(ctx: JobContext, chunks: int) -> list[list[str]]:
    out = []
    for i in range(chunks):
        path = ctx.layout.victims_path(i)
        try:
            out.append(decode_victims(ctx.layout.dest, await ctx.call(partial(ctx.store.get, path))))
        except NotFound:
            out.append([])
    return out
