"""Generated setitem programs (setitem_programs.py, docs/conformance.md "What it checks" 7): duplicate
indices (the last write wins), views of the target read the write, writes through `detach()` reach the
tensor, sharded targets; every tensor read at the end against numpy, bit for bit. The sharded row needs a
second device of the backend (skipped as not claimed where it has none)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad_conformance.plugin import get_target
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.setitem_programs import DT, ROWS, check_setitem, setitem_programs
from uopgrad_conformance.target import Target, no_second_device


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row (float32)."""
    if "case" not in metafunc.fixturenames:
        return
    target = get_target(metafunc.config)
    cases = []
    for row in ROWS:
        skip = target.not_claimed(DT) or (no_second_device(target) if row == "sharded" else None)
        cases.append(Case(f"setitem {row}", DT, "random", skip, row, "setitem"))
    metafunc.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.skip(reason=c.skip)] if c.skip
                                               else []) for c in cases])


@settings(max_examples=max(2, settings().max_examples // 5))
@given(data=st.data())
def test_setitem(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Random setitem programs of the row: the target, its views and its detach against numpy."""
    prog = data.draw(setitem_programs(case.payload), label="program")
    check_setitem(target, prog, record)
