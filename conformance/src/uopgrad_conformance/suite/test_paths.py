"""The paths a user's training program takes (paths.py, docs/conformance.md "What it checks" 7): a TinyJit
step captured and replayed (bound launches, new random values), optimiser steps, a matmul through every
path of the opt pass (packed and gathered panels, tails), grouped reductions, a sharded value shrunk at both
ends of its axis, one gradient structure for several target sets and dtypes, and the memory a training loop
holds. Each is one fixed program, float32 (the gradient template in float64 too), against REFERENCE."""

from __future__ import annotations

import pytest

from uopgrad import dtypes
from uopgrad_conformance import paths
from uopgrad_conformance.plugin import get_target, parametrize_cases
from uopgrad_conformance.report import Case, Recorder
from uopgrad_conformance.target import Target, no_second_device

DT = dtypes.float32


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per row (the optimiser row once per optimiser)."""
    if "case" not in metafunc.fixturenames:
        return
    target = get_target(metafunc.config)
    cases = []
    for row in paths.ROWS:
        skip = target.not_claimed(DT) or (no_second_device(target) if row == "sharded shrink" else None)
        for payload in paths.OPTIMISERS if row == "optimiser" else (None,):
            check = payload.lower().replace(" ", "_") if payload else "program"
            cases.append(Case(f"path {row}", DT, check, skip, (row, payload), "program"))
    parametrize_cases(metafunc, cases)


def test_path(case: Case, target: Target, record: Recorder) -> None:
    """The row's program on the backend against REFERENCE (and, for `memory`, memory that does not grow)."""
    row, payload = case.payload
    prog = paths.program(row, target, payload)
    ns = paths.check_path(target, prog, DT, record)
    if row == "memory":
        paths.check_memory(target, prog, DT, ns)
    if row == "grouped reduce":
        local = target.backend.capabilities.local_memory
        record.note(f"grouped over a workgroup ({local} bytes of local memory)" if local else "not grouped")
