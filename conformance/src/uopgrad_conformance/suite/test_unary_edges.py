"""Every unary Tensor op at ±300, ±89, ±30, ±inf and ±0 (unary_edges.py, docs/conformance.md "What it
checks" 7): values and gradients against float64 closed forms, one program per family of ops and dtype."""

from __future__ import annotations

import pytest

from uopgrad_conformance.plugin import claimed_cases, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target
from uopgrad_conformance.unary_edges import DTYPES, FAMILIES, check_family


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per family of ops and float dtype (float32, float64)."""
    rows = {f"unary edges {fam}": fam for fam in FAMILIES}
    parametrize_suite(metafunc, lambda target, _: claimed_cases(target, rows, DTYPES, "edges", "edge"))


def test_unary_edges(case: Case, target: Target, record: Recorder) -> None:
    """The family's ops at extreme inputs: value and gradient as the closed forms say."""
    assert case.dtype is not None
    check_family(target, case.payload, case.dtype, record)
