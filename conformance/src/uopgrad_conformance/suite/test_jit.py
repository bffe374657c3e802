"""Generated TinyJit replays (jit_programs.py, docs/conformance.md "What it checks" 7): random values are
new on every replay, an assign into a fresh `empty_like` buffer returns each call's values, a setitem at a
bound variable's offset writes the right rows. A backend that launches no kernels (REFERENCE) captures
nothing and runs the step on every call: the same results."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad_conformance.jit_programs import DT, ROWS, check_jit, jit_programs
from uopgrad_conformance.plugin import get_target
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row (float32)."""
    if "case" not in metafunc.fixturenames:
        return
    target = get_target(metafunc.config)
    cases = [Case(f"jit {row}", DT, "random", target.not_claimed(DT), row, "jit") for row in ROWS]
    metafunc.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.skip)] if c.skip
                                               else []) for c in cases])


@settings(max_examples=max(2, settings().max_examples // 5))
@given(data=st.data())
def test_jit(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Random TinyJit programs of the row: every call's result, read right after it, against the oracle."""
    prog = data.draw(jit_programs(case.payload), label="program")
    check_jit(target, prog, record)
