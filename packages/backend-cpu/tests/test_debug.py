"""DEBUG=1..4 through the `uopgrad` logger, as a user sees them for a program on CPU."""

import logging
import re

import numpy as np

from uopgrad import Tensor
from uopgrad.config import Context


def _run(level: int, caplog) -> list[logging.LogRecord]:
    caplog.set_level(logging.INFO, logger="uopgrad")
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="CPU")
    with Context(DEBUG=level):
        out = ((a * 2 + 1).sum(axis=1)).numpy()
    np.testing.assert_allclose(out, (np.arange(12).reshape(3, 4) * 2 + 1).sum(1))
    return [r for r in caplog.records if r.name.startswith("uopgrad")]


def test_debug_1_names_each_kernel_with_device_time_and_rates(caplog):
    recs = _run(1, caplog)
    kernels = [r for r in recs if r.name == "uopgrad.kernel"]
    assert kernels, "DEBUG=1 logged no kernel line"
    line = kernels[0].getMessage()
    assert re.match(r"CPU\s+r_3\s+.*\d+\.\d+ ms\s+\d+\.\d+ GFLOP/s\s+\d+\.\d+ GB/s", line), line
    # nothing of the higher levels (uopgrad.realize: the build and summary lines of level 1)
    assert {r.name for r in recs} <= {"uopgrad.kernel", "uopgrad.realize"}


def test_debug_2_adds_the_schedule(caplog):
    recs = _run(2, caplog)
    sched = [r.getMessage() for r in recs if r.name == "uopgrad.schedule"]
    assert sched and "schedule on CPU" in sched[0] and "CPU:float[12]" in sched[0]
    assert not [r for r in recs if r.name == "uopgrad.pass"]


def test_debug_3_adds_the_ir_after_each_pass_and_4_the_source(caplog):
    passes = [r.getMessage() for r in _run(3, caplog) if r.name == "uopgrad.pass"]
    if not passes:  # this kernel was lowered by an earlier test in this process: lowering is cached
        from uopgrad.pipeline import clear_program_cache

        clear_program_cache()
    caplog.clear()
    Tensor.manual_seed(1)
    b = Tensor.rand(5, 7, device="CPU")  # a kernel structure no other test here lowers
    caplog.set_level(logging.INFO, logger="uopgrad")
    with Context(DEBUG=4):
        b.exp2().max(axis=0).numpy()
    msgs = {r.name: [] for r in caplog.records}
    for r in caplog.records:
        msgs[r.name].append(r.getMessage())
    assert any(m.startswith("--- after index") for m in msgs["uopgrad.pass"])
    assert any(m.startswith("--- after decompositions") for m in msgs["uopgrad.pass"])
    assert any("void r_7" in m and "exp2" in m for m in msgs["uopgrad.source"]), msgs["uopgrad.source"]
