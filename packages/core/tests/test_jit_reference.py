"""TinyJit on REFERENCE, which launches no kernels: the function runs on every call, with the same checks
of its inputs as a captured one (the capture itself is tested on CPU: backend-cpu/tests/test_jit.py)."""

import numpy as np
import pytest

from uopgrad import Tensor, TinyJit, UOp
from uopgrad.errors import JitError


def test_reference_runs_the_function_every_call_and_checks_inputs() -> None:
    calls = []

    @TinyJit
    def f(x: Tensor) -> Tensor:
        calls.append(1)
        return (x * 2).sum()

    for k in range(4):
        xn = np.random.default_rng(k).standard_normal(5).astype(np.float32)
        assert f(Tensor(xn, device="REFERENCE")).item() == pytest.approx(float((xn * 2).sum()), rel=1e-6)
    assert len(calls) == 4 and f.captured is None
    with pytest.raises(JitError, match=r"input 0 is shape \(6,\)"):
        f(Tensor(np.zeros(6, np.float32), device="REFERENCE"))


def test_a_variable_made_anew_each_call_is_the_same_argument() -> None:
    """tinygrad's habit: `Variable("v", 0, 3).bind(i)` built at every call of the step, the last one gone."""

    @TinyJit
    def write_row(t: Tensor, a: Tensor, v: UOp) -> Tensor:
        t[v : v + 1] = a
        return t.realize()

    t = Tensor.zeros(4, 2).contiguous().realize()
    want = np.zeros((4, 2), np.float32)
    for i in (2, 0, 3, 1):
        write_row(t, Tensor.full((1, 2), float(i + 1)).contiguous(), UOp.variable("v", 0, 3).bind(i))
        want[i] = i + 1
        np.testing.assert_array_equal(t.numpy(), want)
