"""Random programs (docs/conformance.md "What it checks" 3): hypothesis generates well-typed programs
(broadcasting, movement ops, reduces, matmuls, casts, functions), runs them forward and backward on the
backend against REFERENCE and finite differences, and shrinks a failure to a minimal program."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uopgrad import DType, dtypes
from uopgrad_conformance.numerics import FLOATS
from uopgrad_conformance.plugin import case_rng, claimed_cases, parametrize_suite
from uopgrad_conformance.programcheck import check_program
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.strategies import DEFAULT_KINDS, fixed_programs, programs
from uopgrad_conformance.target import Target

INTS = (dtypes.int32, dtypes.uint8, dtypes.int64)
ROWS = {
    "programs": DEFAULT_KINDS,
    "programs of functions": ("function", "binary", "reduce", "movement"),
    # intermediates realized (or read) at random points, and the outputs read before the gradient
    "programs realized": ("unary", "binary", "realize", "reduce", "movement", "matmul", "function"),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row and dtype (float rows check backward too)."""

    def cases(target: Target, test: str) -> list[Case]:
        if test == "test_program_examples":
            fixed = {
                row: row.endswith("realized")
                for row in ("programs one element", "programs one element realized")
            }
            return claimed_cases(target, fixed, (*FLOATS, dtypes.int32), "fixed", "program")
        ints = claimed_cases(target, {"programs": ROWS["programs"]}, INTS, "random", "program")
        return claimed_cases(target, ROWS, FLOATS, "random", "program") + ints

    parametrize_suite(metafunc, cases)


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


def test_program_examples(case: Case, target: Target, record: Recorder) -> None:
    """Fixed programs of shapes (1,) and (1, 1) (strategies.fixed_programs), which always run."""
    dt = case.dtype
    assert dt is not None
    for prog in fixed_programs(dt, realized=case.payload):
        check_program(target, prog, record, case_rng(case, salt=prog.body()))
