"""Gradient checks by finite differences (docs/conformance.md "What it checks" 2): every pm_gradient rule,
every movement op and reduce, every FUNCTION/CALL shape (each also against its inlined body), and second
order where it is defined."""

from __future__ import annotations

import pytest

from uopgrad_conformance.gradcases import FUNCTION_CASES, GRAD_CASES
from uopgrad_conformance.gradcheck import GradProgram, check_gradients, second_order
from uopgrad_conformance.numerics import FLOATS
from uopgrad_conformance.plugin import case_rng, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target, no_second_device


def _cases(table: dict[str, GradProgram], group: str, target: Target) -> list[Case]:
    out = []
    for row, prog in table.items():
        for dt in FLOATS:
            for check in ("grad", "grad2") if prog.second_order else ("grad",):
                # a program on the second device too (COPY, MULTI) needs one
                skip = target.not_claimed(dt) or (no_second_device(target) if "dev2" in prog.body else None)
                out.append(Case(row, dt, check, skip, prog, group))
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise over the rows of the gradient and function tables, for every float dtype."""
    tables = {"test_gradient": (GRAD_CASES, "gradient"), "test_function": (FUNCTION_CASES, "function")}
    parametrize_suite(metafunc, lambda target, test: _cases(*tables[test], target))


def _run(case: Case, target: Target, record: Recorder) -> None:
    prog: GradProgram = case.payload
    dt = case.dtype
    assert dt is not None
    rng = case_rng(case)
    if case.check == "grad2":
        prog = second_order(prog, dt, rng)
    check_gradients(target, prog, dt, rng, record, 2.0 if case.check == "grad2" else 1.0)


def test_gradient(case: Case, target: Target, record: Recorder) -> None:
    """One pm_gradient rule (or reduce, movement op): dot-product test, full Jacobian, REFERENCE."""
    _run(case, target, record)


def test_function(case: Case, target: Target, record: Recorder) -> None:
    """One FUNCTION/CALL shape: as test_gradient, and equal to the gradient of the inlined body."""
    _run(case, target, record)
