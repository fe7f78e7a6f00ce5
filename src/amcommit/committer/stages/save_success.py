"""Stage 7 (``save_success``, with ``config.success_marker``): write ``_SUCCESS``, the
commit's report, after the point of no return: ``run(ctx, SaveSuccessInputs) -> None``."""

from __future__ import annotations

from dataclasses import dataclass

from amcommit.committer.context import JobContext
from amcommit.committer.stages.renaming import rename_id
from amcommit.errors import AlreadyExists, CommitError, NotFound
from amcommit.manifest import SuccessData, encode_json
from amcommit.store.base import PutMode


@dataclass(frozen=True)
class SaveSuccessInputs:
    success: SuccessData
    """What ``_SUCCESS`` says (``report.to_success_data()``, taken when the stage starts)."""


async def run(ctx: JobContext, inputs: SaveSuccessInputs) -> None:
    """Write ``_SUCCESS`` (see :func:`save_success`)."""
    await save_success(ctx, inputs.success)


async def save_success(ctx: JobContext, success: SuccessData) -> None:
    """Write ``_SUCCESS`` via a temporary file and a rename (replacing an older one).

    Runs after the point of no return, so every request uses the patient retry policy. A
    rename whose answer was lost and that, retried, finds its source gone (or its
    destination taken) is proven by reading ``_SUCCESS`` back: this run's report (its bytes,
    which carry this run's timestamp) means the rename happened. Not atomic as a whole:
    between the delete of an older ``_SUCCESS`` and the rename there is none.
    """
    layout, store = ctx.layout, ctx.store
    data = encode_json(success)
    tmp, final = layout.success_tmp_path, layout.success_path
    rid = rename_id(layout.job_id, final)

    async def published() -> bool:
        try:
            return await ctx.call(lambda: store.get(final), patient=True) == data
        except NotFound:
            return False

    need_tmp = True
    for _ in range(3):
        if need_tmp:
            await ctx.call(lambda: store.put(tmp, data, mode=PutMode.OVERWRITE), patient=True)
        await ctx.call(lambda: store.delete(final), patient=True)
        try:
            await ctx.call(lambda: store.rename(tmp, final, rename_id=rid), patient=True)
            return
        except NotFound:
            if await published():  # an earlier attempt's answer was lost
                return
            need_tmp = True  # the temporary file is gone: write it again
        except AlreadyExists:
            if await published():  # renamed by an attempt whose answer was lost
                await ctx.call(lambda: store.delete(tmp), patient=True)  # a copy's leftover
                return
            need_tmp = False  # another writer's _SUCCESS appeared in between: replace it
    raise CommitError("could not replace _SUCCESS (another job keeps writing it)")
