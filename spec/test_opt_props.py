"""The exactness policy of the opt pass (spec/opt.md), as a property: random reduce programs run on the CPU
backend with the pass off (OPT=0) and on (OPT=1, the default) give the same bits wherever the policy says
they must, and results within the float ADD bound where it lets a reduce change its order.

Runs where the CPU backend is installed and its vector width is non-zero (the pass is off elsewhere, so
there is nothing to compare); the skip says which.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopgrad import Ops, Tensor, dtypes
from uopgrad.backend import Device
from uopgrad.config import Context

cpu = pytest.importorskip("uopgrad_cpu", reason="the CPU backend (packages/backend-cpu) is not installed")
if Device["CPU"].capabilities.vector_width == 0:
    pytest.skip(
        "this CPU has no vector width the renderer knows: the opt pass is off", allow_module_level=True
    )

DIMS = st.sampled_from([16, 3, 32, 17, 48, 1, 64])  # multiples of the lane counts, and odd sizes
DTYPES = st.sampled_from([np.float32, np.float64, np.int32, np.int64])
# a reduce along axis 0 (output stride-1: vector lanes) or 1 (the reduce stride-1: a vector accumulator);
# matmuls with the epilogues of training kernels (relu, a WHERE gate, elementwise MAX, NEG, casts), reduces
# of masked and MAXed values, and MAX reduces over matmuls
PROGRAMS = [
    "matmul",
    "matmul_t",
    "sum0",
    "sum1",
    "max0",
    "max1",
    "max_all",
    "prod1",
    "chain_sum0",
    "chain_sum1",
    "relu_mm",
    "relu_mm_t",
    "where_mm",
    "maxe_mm",
    "neg_cast_mm",
    "relu_sum0",
    "relu_sum1",
    "where_sum1",
    "maxe_sum0",
    "max_mm0",
    "max_mm1",
    "lanewise_mm",
    "lanewise_sum0",
    "lanewise_sum1",
    "wide_mm",
    # column reduces over 512 columns: a tile of vectors that share no load (codegen/opt.py STREAM_BYTES)
    "wide_sum0",
    "wide_max0",
    # elementwise nests of two loops, vectorised by the pass on a loop-style target (spec/opt.md §1)
    "ew_relu",
    "ew_where",
    "ew_maxe",
    "ew_lanewise",
]
# programs that only select among their inputs' values (no arithmetic on them): compared bit for bit, so
# that a NaN keeps its payload and a zero its sign
SELECTS = {"max0", "max1", "max_all", "wide_max0"}


def _data(rng: np.random.Generator, shape: tuple[int, ...], dt: type) -> np.ndarray:
    if np.issubdtype(dt, np.integer):
        return rng.integers(-1000, 1000, size=shape).astype(dt)
    x = rng.standard_normal(shape).astype(dt)
    x.flat[:: max(1, x.size // 5)] = -0.0  # signed zeros: a reordered MAX would show them
    x[rng.random(shape[0]) < 0.15] = 0.0  # zero rows: exact ±0 matmul results, ties of relu and MAX
    _ties_and_nans(rng, x)
    _ties_and_nans(rng, x.T)  # the same for columns
    return x


def _ties_and_nans(rng: np.random.Generator, x: np.ndarray) -> None:
    """Make some rows of `x` (a view) lines whose MAX only an exact reduce gets bit for bit: ties of 0.0 and
    -0.0 at the top, or two NaNs with different payloads and signs."""
    n = x.shape[1]
    kind = rng.random(x.shape[0])
    for i in np.flatnonzero(kind < 0.2):
        x[i] = -np.abs(x[i])
        zeros = np.flatnonzero(rng.random(n) < 0.5)
        x[i, zeros] = np.where(rng.random(len(zeros)) < 0.5, 0.0, -0.0)
    bits = x.view(np.uint32 if x.dtype == np.float32 else np.uint64)
    quiet = np.array([np.nan], x.dtype).view(bits.dtype)[0]
    sign = bits.dtype.type(1) << bits.dtype.type(8 * bits.itemsize - 1)
    for i in np.flatnonzero(kind > 0.9) if n >= 2 else ():
        j, k = rng.choice(n, size=2, replace=False)
        bits[i, j], bits[i, k] = quiet | 1, quiet | 2 | sign


# a matmul whose right operand's panel is packed into scratch (spec/opt.md §1, Pack): the inputs repeated to
# (rows, 256) @ (256, 512), a panel over 256 rows of 2 KB; at least WIDE_ROWS rows, so that the row loop runs
# PACK_MIN_ROWS times with the widest tile (8 rows, AVX-512)
WIDE = (256, 512)
WIDE_ROWS = 64


def _run(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if name == "wide_mm":
        x, y = np.resize(x, (max(x.shape[0], WIDE_ROWS), WIDE[0])), np.resize(y, WIDE)
    if name.startswith("wide_") and name != "wide_mm":
        x, y, name = np.resize(x, (x.shape[0], WIDE[1])), np.resize(y, (WIDE[1], y.shape[1])), name[5:]
    a, b = Tensor(x, device="CPU"), Tensor(y, device="CPU")
    mm = a @ b
    if name in ("matmul", "wide_mm"):
        out = mm
    elif name in ("matmul_t", "relu_mm_t"):
        out = a @ b.T.contiguous().T
        out = out.relu() if name == "relu_mm_t" else out
    elif name in _EPILOGUES:
        out = _EPILOGUES[name](mm, b)
    elif name.startswith("ew_"):
        out = _MASKED[name[3:]](a) * 1.5 - a  # a 2-D elementwise nest (a realized view keeps its 2 loops)
    elif name[:-5] in _MASKED:
        out = _MASKED[name[:-5]](a).sum(int(name[-1]))
    elif name == "max_all":  # a reduce over both axes, whose NaN sum shares the maximum's loops
        out = a.max()
    elif name.startswith("max_mm"):
        out = mm.max(int(name[-1]))
    elif name.startswith("chain"):
        v = a * a - a
        out = v.sum(int(name[-1]))
    elif name.startswith("prod"):
        out = (a % 7 + 1).prod(1)
    else:
        out = getattr(a, name[:3])(int(name[-1]))
    return out.numpy()


_EPILOGUES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "relu_mm": lambda mm, b: mm.relu(),
    "where_mm": lambda mm, b: (mm < b[:1]).where(mm * 2, b[:1]),  # a row of b broadcast: an upcast input
    "maxe_mm": lambda mm, b: mm.maximum(b[:1]).maximum(-0.0),  # ties with ±0 either way round
    "neg_cast_mm": lambda mm, b: -((mm != 0).cast(mm.dtype) * mm),
    # ops without a vector form, computed lane by lane among vector ops: POW, SQRT, integer // and %
    "lanewise_mm": lambda mm, b: (
        (mm * mm).sqrt() + (mm - b[:1]).pow(2.0) if dtypes.is_float(mm.dtype) else mm // 7 + mm % 5
    ),
}
_MASKED: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": lambda a: a.relu(),
    "where": lambda a: (a > 0.5).where(a, -a),
    "maxe": lambda a: a.maximum(a * 0.5),
    "lanewise": lambda a: (a * 0.01).exp() if dtypes.is_float(a.dtype) else a // 3,
}


@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=8)
@given(m=DIMS, k=DIMS, n=DIMS, dt=DTYPES, seed=st.integers(0, 2**16))
def test_opt_is_exact_where_the_policy_says(name: str, m: int, k: int, n: int, dt: type, seed: int) -> None:
    rng = np.random.default_rng(seed)
    if name in _EPILOGUES or name.startswith("max_mm"):
        n = max(n, 2)  # an epilogue compares: a matmul reordered (n == 1, a stride-1 reduce) could flip it
    x = _data(rng, (m, k), dt)
    y = _data(rng, (k, n), dt)
    with Context(OPT=0):
        want = _run(name, x, y)
    got = _run(name, x, y)
    nan = np.isnan(want) if np.issubdtype(dt, np.floating) else np.zeros(want.shape, bool)
    assert np.array_equal(np.isnan(got), nan)
    if not (np.issubdtype(dt, np.floating) and _may_reorder(name, k, n)):
        # upcast, register tiles, integer and MAX reduces, float reduces along a strided axis: bit for bit
        # (which of two NaNs an addition keeps is the C compiler's choice of operand order, in both runs)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
        if name in SELECTS:
            # Tensor.max's NaN is a float sum of the row's NaNs (spec/opt.md §2), summed in lanes along a
            # stride-1 reduce axis (max1): there a row of two NaNs may keep the other payload
            keep = ~nan if name in ("max1", "max_all") else np.ones(want.shape, bool)
            assert got[keep].tobytes() == want[keep].tobytes()
    else:  # a float ADD along an axis that is stride-1 in every load may be summed in lanes: a bound
        scale = _abs_sum(name, x.astype(np.float64), y.astype(np.float64))
        # a NaN term: the sum is NaN in any order, and so is what the epilogue makes of it (relu: 0)
        bound = np.nan_to_num(np.finfo(dt).eps * 2 * k * scale, nan=0.0) + np.finfo(dt).tiny
        fin = np.isfinite(want)
        assert np.array_equal(got[~fin & ~nan], want[~fin & ~nan])
        assert np.all(np.abs(got[fin].astype(np.float64) - want[fin]) <= bound[fin])


def _may_reorder(name: str, k: int, n: int) -> bool:
    """The policy's condition: the reduce axis is stride-1 in every load that uses it."""
    sums0 = ("sum0", "chain_sum0", "relu_sum0", "maxe_sum0", "lanewise_sum0")
    return (
        name in ("sum1", "chain_sum1", "relu_sum1", "where_sum1", "lanewise_sum1", "matmul_t", "relu_mm_t")
        or (name == "matmul" and n == 1)
        or (name in sums0 and k == 1)
    )


def _abs_sum(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The sum of the magnitudes of the terms: what a reordered float sum's error is bounded by."""
    if name.startswith(("matmul", "relu_mm")):
        return np.abs(x) @ np.abs(y)
    if name.startswith("chain"):
        v = np.abs(x * x - x)
    elif name.startswith("lanewise"):
        v = np.abs(np.exp(x * 0.01))
    else:  # |relu(x)|, |where(x > .5, x, -x)|, |max(x, x/2)| <= |x|; a NaN relu'd is 0, any other stays NaN
        v = np.abs(np.nan_to_num(x, nan=0.0))
    return v.sum(int(name[-1]))


def test_opt_runs_on_the_programs_of_the_property() -> None:
    """The property can fail: with the pass on, a matmul and a row sum are vector kernels, and so are they
    with an op that has no vector form (computed lane by lane); the wide matmul packs its panel."""
    from uopgrad.codegen import Target
    from uopgrad.pipeline import lower
    from uopgrad.schedule import schedule

    a = Tensor(np.ones((32, 32), np.float32), device="CPU").realize()
    ones = Tensor(np.ones(WIDE, np.float32), device="CPU")
    wide = ones[:WIDE_ROWS, : WIDE[0]] @ ones
    # (program, whether its panel goes through scratch: the wide matmul's, and a transposed operand's gather)
    cases = [
        (a @ a, False),
        (a.sum(1), False),
        ((a @ a).sqrt(), False),
        ((a * 0.01).exp().sum(1), False),
        (wide, True),
        (a @ a.T.contiguous().T, True),
    ]
    be = Device["CPU"]
    for out, packs in cases:
        kernel = schedule(out.uop.sink()).kernels[-1]
        width, scratch = be.capabilities.vector_width, be.renderer.scratch
        prg = lower(kernel, Target.for_ops(be.renderer.supports, None, width, scratch))
        assert any(u.dtype.count > 1 for u in prg.uops)
        assert any(u.op is Ops.DEFINE_LOCAL for u in prg.uops) == packs
        with Context(OPT=0):
            prg0 = lower(kernel, Target.for_ops(be.renderer.supports, None, be.capabilities.vector_width))
        assert all(u.dtype.count == 1 for u in prg0.uops)
