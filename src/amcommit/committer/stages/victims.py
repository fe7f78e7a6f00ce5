"""Shared by ``check_conflicts`` (which writes them) and ``delete_victims`` (which reads
them): the victim lists, the old files a ``replace``/``overwrite`` commit removes, stored
in the job directory as JSON chunks of at most :data:`VICTIM_CHUNK` paths (each chunk is
one whole-object put: atomic; the set of chunks is counted by the journal)."""

from __future__ import annotations

from functools import partial

import msgspec

from amcommit.committer.context import JobContext
from amcommit.errors import NotFound

VICTIM_CHUNK = 50_000


async def load_victims(ctx: JobContext, chunks: int) -> list[list[str]]:
    _dec = msgspec.json.Decoder(list[str])
    out = []
    for i in range(chunks):
        path = ctx.layout.victims_path(i)
        try:
            out.append(_dec.decode(await ctx.call(partial(ctx.store.get, path))))
        except NotFound:
            out.append([])
    return out
