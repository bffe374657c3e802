"""Random programs (docs/conformance.md "What it checks" 3): hypothesis generates well-typed programs
(broadcasting, movement ops, reduces, matmuls, casts, functions), runs them forward and backward on the
backend against REFERENCE and finite differences, and shrinks a failure to a minimal program."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uopgrad import DType, dtypes
from uopgrad_conformance.numerics import FLOATS
from uopgrad_conformance.plugin import case_rng, get_target
from uopgrad_conformance.programcheck import check_program
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.strategies import programs
from uopgrad_conformance.target import Target

INTS = (dtypes.int32, dtypes.uint8, dtypes.int64)
ROWS = {
    "programs": ("unary", "binary", "movement", "reduce", "matmul", "cast", "function"),
    "programs of functions": ("function", "binary", "reduce", "movement"),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row and dtype (float rows check backward too)."""
    if "case" not in metafunc.fixturenames:
        return
    target = get_target(metafunc.config)
    cases = []
    for row, kinds in ROWS.items():
        for dt in FLOATS:
            cases.append(Case(row, dt, "random", target.not_claimed(dt), kinds, "program"))
    for dt in INTS:
        cases.append(Case("programs", dt, "random", target.not_claimed(dt), ROWS["programs"], "program"))
    metafunc.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.skip)] if c.skip
                                               else []) for c in cases])


def _cast_targets(target: Target, dt: DType) -> list[DType]:
    """Dtypes a program may cast to and back without leaving what C defines."""
    if dtypes.is_float(dt):
        cands = [*FLOATS, dtypes.int32, dtypes.bool]
    else:
        cands = [dtypes.int64, dtypes.bool]
    return [d for d in cands if d != dt and d in target.claimed]


@given(data=st.data())
def test_programs(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Random programs of one dtype: forward (and backward) against REFERENCE; shrunk when one fails."""
    dt = case.dtype
    assert dt is not None
    prog = data.draw(programs(dt, kinds=case.payload, cast_to=_cast_targets(target, dt)), label="program")
    check_program(target, prog, record, case_rng(case, salt=prog.body()))
