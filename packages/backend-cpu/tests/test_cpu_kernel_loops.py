"""Custom kernels written with explicit loops, compiled and run on CPU, and the launch counters."""

from __future__ import annotations

import numpy as np

from uopgrad import GlobalCounters, Tensor, UOp


def axpy_and_square(y: UOp, s: UOp, a: UOp, x: UOp) -> UOp:
    i = UOp.range(x.numel(), 0)
    return UOp.group(y[i].store(a[0] * x[i] + y[i]), s[i].store(x[i] * x[i])).end(i).sink()


def test_explicit_loops_compile_and_run_on_cpu():
    xn = np.linspace(-2, 2, 9, dtype=np.float32)
    y0 = np.arange(9, dtype=np.float32)
    y, s, _, _ = Tensor.custom_kernel(
        Tensor(y0, device="CPU"),
        Tensor.invalids(9, device="CPU"),
        Tensor([3.0], device="CPU"),
        Tensor(xn, device="CPU"),
        fxn=axpy_and_square,
    )
    np.testing.assert_allclose(y.numpy(), 3.0 * xn + y0, rtol=1e-6)  # reads and writes y in one loop
    np.testing.assert_allclose(s.numpy(), xn * xn, rtol=1e-6)


def test_counters_count_every_cpu_launch():
    n = 16
    a = Tensor.ones(n, n, device="CPU").contiguous().realize()
    b = Tensor.ones(n, n, device="CPU").contiguous().realize()
    out = ((a * 2) @ b).relu()  # the doubled operand is computed once, not per multiply-add
    scheduled = len(out.linear_with_vars()[0].src)
    GlobalCounters.reset()
    out.realize()
    assert GlobalCounters.kernel_count == scheduled == 2
    # the MUL; a MUL and an ADD per multiply-add step; relu's CMPLT and WHERE
    assert GlobalCounters.global_ops == n * n + 2 * n**3 + 2 * n * n
    assert GlobalCounters.time_sum_s > 0
    np.testing.assert_array_equal(out.numpy(), np.full((n, n), 2.0 * n))
