"""The fault matrix of issue 11: every scenario of tests/matrix/scenarios.py on every
backend (plain destinations and Hudi tables), checked against the oracle (exact listing and
bytes; for tables also hudi-rs). Writes
tests/matrix/last_run.md (``python -m tests.matrix.table`` prints it again)."""

from __future__ import annotations

import anyio
import pytest

from tests.matrix.runner import Cell, run_cell
from tests.matrix.scenarios import SCENARIOS, Scenario
from tests.matrix.stores import BACKENDS, open_store


def _marks(sc: Scenario, backend: str) -> list[pytest.MarkDecorator]:
    skip = sc.skip.get(backend) or sc.skip.get("*")
    if skip:
        return [pytest.mark.skip(reason=skip)]
    why = sc.xfail.get(backend) or sc.xfail.get("*")
    if why:
        return [pytest.mark.xfail(strict=True, reason=why)]
    maybe = sc.maybe.get(backend) or sc.maybe.get("*")
    return [pytest.mark.xfail(strict=False, reason=maybe)] if maybe else []


CELLS = [
    pytest.param(sc, backend, id=f"{sc.name}.{backend}", marks=_marks(sc, backend))
    for sc in SCENARIOS
    for backend in BACKENDS
    if sc.backends is None or backend in sc.backends
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sc", "backend"), CELLS)
def test_matrix(sc: Scenario, backend: str, request: pytest.FixtureRequest) -> None:
    info = request.getfixturevalue("matrix_" + backend.replace("-", "_"))
    sdk_list = request.getfixturevalue("matrix_sdk_list")(backend, info)

    async def go() -> None:
        store = open_store(info)
        async with store:
            await run_cell(Cell(sc, backend, info, store, sdk_list))

    anyio.run(go)
