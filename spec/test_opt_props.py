"""The exactness policy of the opt pass (spec/opt.md), as a property: random reduce programs run on the CPU
backend with the pass off (OPT=0) and on (OPT=1, the default) give the same bits wherever the policy says
they must, and results within the float ADD bound where it lets a reduce change its order.

Runs where the CPU backend is installed and its vector width is non-zero (the pass is off elsewhere, so
there is nothing to compare); the skip says which.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import Tensor
from uopgrad.backend import Device
from uopgrad.config import Context

cpu = pytest.importorskip("uopgrad_cpu", reason="the CPU backend (packages/backend-cpu) is not installed")
if Device["CPU"].capabilities.vector_width == 0:
    pytest.skip("this CPU has no vector width the renderer knows: the opt pass is off",
                allow_module_level=True)

DIMS = st.sampled_from([16, 3, 32, 17, 48, 1, 64])  # multiples of the lane counts, and odd sizes
DTYPES = st.sampled_from([np.float32, np.float64, np.int32, np.int64])
# a reduce along axis 0 (output stride-1: vector lanes) or 1 (the reduce stride-1: a vector accumulator)
PROGRAMS = ["matmul", "matmul_t", "sum0", "sum1", "max0", "max1", "prod1", "chain_sum0", "chain_sum1"]


def _data(rng: np.random.Generator, shape: tuple[int, ...], dt: type) -> np.ndarray:
    if np.issubdtype(dt, np.integer):
        return rng.integers(-1000, 1000, size=shape).astype(dt)
    x = rng.standard_normal(shape).astype(dt)
    x.flat[:: max(1, x.size // 5)] = -0.0  # signed zeros: a reordered MAX would show them
    return x


def _run(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a, b = Tensor(x, device="CPU"), Tensor(y, device="CPU")
    if name == "matmul":
        out = a @ b
    elif name == "matmul_t":
        out = a @ b.T.contiguous().T
    elif name.startswith("chain"):
        v = a * a - a
        out = v.sum(int(name[-1]))
    elif name.startswith("prod"):
        out = (a % 7 + 1).prod(1)
    else:
        out = getattr(a, name[:3])(int(name[-1]))
    return out.numpy()


@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=8)
@given(m=DIMS, k=DIMS, n=DIMS, dt=DTYPES, seed=st.integers(0, 2**16))
def test_opt_is_exact_where_the_policy_says(name: str, m: int, k: int, n: int, dt: type, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = _data(rng, (m, k), dt)
    y = _data(rng, (k, n), dt)
    with Context(OPT=0):
        want = _run(name, x, y)
    got = _run(name, x, y)
    if not (np.issubdtype(dt, np.floating) and _may_reorder(name, k, n)):
        # upcast, register tiles, integer and MAX reduces, float reduces along a strided axis: bit for bit
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
    else:  # a float ADD along an axis that is stride-1 in every load may be summed in lanes: a bound
        scale = _abs_sum(name, x.astype(np.float64), y.astype(np.float64))
        bound = np.finfo(dt).eps * 2 * k * scale + np.finfo(dt).tiny
        assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


def _may_reorder(name: str, k: int, n: int) -> bool:
    """The policy's condition: the reduce axis is stride-1 in every load that uses it."""
    return name in ("sum1", "chain_sum1", "matmul_t") or (name == "matmul" and n == 1) or \
        (name in ("sum0", "chain_sum0") and k == 1)


def _abs_sum(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The sum of the magnitudes of the terms: what a reordered float sum's error is bounded by."""
    if name.startswith("matmul"):
        return np.abs(x) @ np.abs(y)
    v = np.abs(x * x - x) if name.startswith("chain") else np.abs(x)
    return v.sum(int(name[-1]))


def test_opt_runs_on_the_programs_of_the_property() -> None:
    """The property can fail: with the pass on, a matmul and a row sum are vector kernels."""
    from uopgrad.pipeline import lower
    from uopgrad.schedule import schedule
    a = Tensor(np.ones((32, 32), np.float32), device="CPU").realize()
    for out in (a @ a, a.sum(1)):
        kernel = schedule(out.uop.sink()).kernels[-1]
        be = Device["CPU"]
        prg = lower(kernel, be.renderer.supports, None, be.capabilities.vector_width)
        assert any(u.dtype.count > 1 for u in prg.uops)
        with Context(OPT=0):
            prg0 = lower(kernel, be.renderer.supports, None, be.capabilities.vector_width)
        assert all(u.dtype.count == 1 for u in prg0.uops)
