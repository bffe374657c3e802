"""What a user's program does to tensors it holds (docs/conformance.md "What it checks" 7):
- generated setitem programs (setitem_programs.py): duplicate indices (the last write wins), views of the
  target read the write, writes through `detach()` reach the tensor, sharded targets; every tensor read at
  the end against numpy, bit for bit. The sharded row needs a second device of the backend (skipped as not
  claimed where it has none);
- generated TinyJit replays (jit_programs.py): random values are new on every replay, an assign into a
  fresh `empty_like` buffer returns each call's values, a setitem at a bound variable's offset writes the
  right rows. A backend that launches no kernels (REFERENCE) captures nothing and runs the step on every
  call: the same results."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad_conformance import jit_programs, setitem_programs
from uopgrad_conformance.plugin import parametrize_suite
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target, no_second_device

FEWER = settings(max_examples=max(2, settings().max_examples // 5))  # each example is a whole program


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row of each generator (float32)."""

    def cases(target: Target, name: str) -> list[Case]:
        rows: tuple[str, ...]
        if name == "test_setitem":
            rows, dt = setitem_programs.ROWS, setitem_programs.DT
            skips = {row: no_second_device(target) if row == "sharded" else None for row in rows}
        else:
            rows, dt, skips = jit_programs.ROWS, jit_programs.DT, {}
        kind = name.removeprefix("test_")
        return [
            Case(f"{kind} {row}", dt, "random", target.not_claimed(dt) or skips.get(row), row, kind)
            for row in rows
        ]

    parametrize_suite(metafunc, cases)


@FEWER
@given(data=st.data())
def test_setitem(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Random setitem programs of the row: the target, its views and its detach against numpy."""
    prog = data.draw(setitem_programs.setitem_programs(case.payload), label="program")
    setitem_programs.check_setitem(target, prog, record)


@FEWER
@given(data=st.data())
def test_jit(case: Case, target: Target, record: Recorder, data: st.DataObject) -> None:
    """Random TinyJit programs of the row: every call's result, read right after it, against the oracle."""
    prog = data.draw(jit_programs.jit_programs(case.payload), label="program")
    jit_programs.check_jit(target, prog, record)
