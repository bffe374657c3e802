"""Programs whose answer is an identity (identities.py, docs/conformance.md "What it checks" 7): reductions
over an empty axis (sum 0, prod 1, all True, any False, mean NaN, logsumexp -inf; max/min raise) against
numpy, and equal-valued leaves with requires_grad set after construction, each with a gradient of its own,
against the closed form."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import dtypes
from uopgrad_conformance.identities import check_empty, check_leaves, empty_reductions, equal_leaves
from uopgrad_conformance.plugin import claimed_cases, parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target

EMPTY_DTYPES = (dtypes.int32, dtypes.float32)
LEAF_DTYPES = (dtypes.float32, dtypes.float64)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Empty reductions in int32 and float32; equal leaves in float32 and float64."""

    def cases(target: Target, test: str) -> list[Case]:
        if test == "test_empty_reductions":
            return claimed_cases(target, {"empty reductions": None}, EMPTY_DTYPES, "random", "reduce")
        return claimed_cases(target, {"equal leaves": None}, LEAF_DTYPES, "random", "grad")

    parametrize_suite(metafunc, cases)


@settings(max_examples=max(2, settings().max_examples // 5))
@given(data=st.data())
def test_empty_reductions(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Reductions of a tensor with an empty dimension: the identities, as numpy gives them."""
    assert case.dtype is not None
    check_empty(target, data.draw(empty_reductions(case.dtype), label="program"), record)


@settings(max_examples=max(2, settings().max_examples // 10))
@given(data=st.data())
def test_equal_leaves(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Pairs of equal leaves (every way of making one), requires_grad set late: a gradient each."""
    assert case.dtype is not None
    check_leaves(target, data.draw(equal_leaves(case.dtype), label="program"), record)
