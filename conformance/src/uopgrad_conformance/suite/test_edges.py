"""The case classes backend authors get wrong (edges.py, docs/conformance.md "What it checks" 4): large,
odd and prime sizes, broadcast WHERE conditions, bound variables, updates in place of fresh buffers,
integer edge values (in a subprocess), many buffers and strided views; bit-exact against REFERENCE, and
the same bits when run again with another thread count."""

from __future__ import annotations

import pytest

from uopgrad_conformance.edges import EDGE_ROWS, EdgeCase
from uopgrad_conformance.forward import ForwardCheck, check_equal, run_forward
from uopgrad_conformance.plugin import case_rng, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row and dtype."""

    def cases(target: Target, _: str) -> list[Case]:
        return [
            Case(row, dt, "forward", target.not_claimed(dt), spec, "edge")
            for row, spec in EDGE_ROWS.items()
            for dt in spec.dtypes
        ]

    parametrize_suite(metafunc, cases)


def test_edge(case: Case, target: Target, record: Recorder) -> None:
    """Every expression of the row on the backend against REFERENCE, bit for bit."""
    dt = case.dtype
    assert dt is not None
    built: EdgeCase = case.payload.build(dt, case_rng(case))
    checks = [ForwardCheck(e, dt, check_equal(dt), built.elementwise) for e in built.exprs]
    run_forward(
        target,
        dt,
        built.inputs,
        checks,
        record,
        extra=built.extra,
        extra_src=built.extra_src,
        isolate=built.isolate,
    )
