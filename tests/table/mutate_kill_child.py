"""Child process of test_mutate_resume: an upsert or delete through the engine API
(:func:`amcommit.table.mutate.engine.upsert` / ``delete``) SIGKILLed just before its first mutating
store request matching a regex (tests.table.killstore), e.g. its task commit (the task
manifest's put): the instant is allocated and the files written, nothing committed.

    python -m tests.table.mutate_kill_child '{"root": R, "dest": D, "op": "upsert" | "delete",
        "rows": [...], "label": [APP, VERSION] | null, "kill": REGEX, "ttl": 600}'

(``"backend": INFO`` of tests.matrix.stores in place of ``"root"``: any backend.)

Prints ``completed <instant>`` if it was not killed."""

from __future__ import annotations

import json
import sys

import anyio
import pyarrow as pa

from amcommit.store.local import LocalStore
from amcommit.table.commit.labels import Label
from amcommit.table.mutate import engine as mutate
from amcommit.table.settings import TableConfig
from tests.table.killstore import KillStore
from tests.table.test_mutate import SCHEMA


def main() -> None:
    spec = json.loads(sys.argv[1])
    label = None if spec.get("label") is None else Label(spec["label"][0], int(spec["label"][1]))
    ttl = float(spec.get("ttl", 600.0))
    cfg = TableConfig(io_threads=2, writer_ttl=ttl, lock_ttl=60.0)

    async def run() -> str:
        if "backend" in spec:
            from tests.matrix.stores import open_store

            opened = open_store(spec["backend"])
        else:
            opened = LocalStore(spec["root"], fsync=False)
        async with opened as inner:
            store = KillStore(inner, spec["kill"], 1)
            if spec["op"] == "upsert":
                data = pa.Table.from_pylist(spec["rows"], schema=SCHEMA)
                rep = await mutate.upsert(
                    store,  # type: ignore[arg-type]
                    spec["dest"],
                    data,
                    record_key="id",
                    partition_by="p",
                    precombine_field="ts",
                    label=label,
                    config=cfg,
                )
            else:
                data = pa.Table.from_pylist(
                    spec["rows"], schema=pa.schema([("id", pa.int64()), ("p", pa.string())])
                )
                rep = await mutate.delete(
                    store,  # type: ignore[arg-type]
                    spec["dest"],
                    data,
                    record_key="id",
                    partition_by="p",
                    label=label,
                    config=cfg,
                )
            return rep.instant

    print(f"completed {anyio.run(run)}", flush=True)


if __name__ == "__main__":
    main()
