"""The opt pass on OpenCL (spec/opt.md §5): vector types and register tiles in the kernels of a CPU device.
Matmuls and a conv against numpy; the exactness policy of spec/opt.md §2 against OPT=0 on programs that use
every vector form (masks, selects, MAX, casts, ops computed lane by lane) in every dtype the pass packs;
OpenCL's vector spellings in the source, at most 16 lanes; OPT=0 the kernel it was before the pass ran on
CL."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from uopgrad import Device, Ops, Tensor, dtypes
from uopgrad.config import Context
from uopgrad_conformance.kit.grouped import sequential_max, tricky_rows
from uopgrad_opencl.renderer import VECTOR_WIDTHS

CL = Device["CL"]
pytestmark = pytest.mark.skipif(
    CL.capabilities.vector_width == 0, reason=f"{CL!r} is not a CPU device: the opt pass is off there"
)


def rand(shape: tuple[int, ...], dt: type = np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dt)
    x = rng.standard_normal(shape).astype(dt)
    x.flat[::7] = -0.0  # signed zeros: relu, MAX and selects must keep which one they meet
    return x


def kernel(out: Tensor) -> Any:
    """The compiled kernel (its `program` and `src`) that computes `out`, the last of its schedule."""
    return CL.kernel(out.schedule_linear().src[-1])


def lanes(src: str) -> set[int]:
    """The lane counts of the vector types a source declares values of."""
    return {int(n) for n in re.findall(r"\b(?:u?char|u?short|u?int|u?long|float|double)(\d+) \w+ =", src)}


def test_a_cpu_device_fills_its_preferred_float_vector() -> None:
    dev = CL.dev  # type: ignore[attr-defined]
    preferred = 4 * int(dev.device.preferred_vector_width_float)
    width = CL.capabilities.vector_width
    assert width in VECTOR_WIDTHS and 0 < width <= max(preferred, 8)
    assert CL.capabilities.scratch == 0  # DEFINE_LOCAL is a work-group's memory, never a thread's


@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (33, 17, 48), (8, 256, 512), (100, 3, 100), (5, 7, 1)])
def test_a_matmul_matches_numpy_and_its_unoptimised_bits(m: int, k: int, n: int) -> None:
    x, y = rand((m, k)), rand((k, n), seed=1)
    a, b = Tensor(x, device="CL"), Tensor(y, device="CL")
    got = (a @ b).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64) @ y, rtol=1e-5, atol=1e-5)
    with Context(OPT=0):
        want = (a @ b).numpy()
    if n > 1:  # lanes along the output, register tiles: each output's reduce in its own order (§2)
        assert got.tobytes() == want.tobytes()


def test_a_512_matmul_is_a_register_tile_of_float_vectors() -> None:
    x, y = rand((512, 512), seed=2), rand((512, 512), seed=3)
    out = Tensor(x, device="CL") @ Tensor(y, device="CL")
    n, src = CL.capabilities.vector_width // 4, kernel(out).src
    np.testing.assert_allclose(out.numpy(), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)
    assert f"float{n} acc" in src and f"vload{n}(0, data2+" in src and f"vstore{n}(" in src
    assert src.count(f"float{n} acc") > 1  # several rows of the tile, one accumulator each


def test_a_conv_matches_numpy() -> None:
    x, w = rand((2, 3, 16, 16)), rand((8, 3, 3, 3), seed=1)
    got = Tensor(x, device="CL").conv2d(Tensor(w, device="CL"), padding=1).numpy()
    windows = sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    want = np.einsum("nchwij,ocij->nohw", windows.astype(np.float64), w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# programs that keep every output's order under the pass (lanes and tiles along the output axes), so OPT=1
# gives OPT=0's bits: matmuls with the epilogues of training kernels, and reduces along axis 0
BIT_EXACT: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "relu_mm": lambda a, b: (a @ b).relu(),
    "where_mm": lambda a, b: ((a @ b) < b[:1]).where((a @ b) * 2, b[:1]),
    "maxe_mm": lambda a, b: (a @ b).maximum(b[:1]),
    "neg_cast_mm": lambda a, b: -(((a @ b) != 0).cast(a.dtype) * (a @ b)),
    "wide_cast_mm": lambda a, b: ((a @ b) > 0).where((a @ b).cast(dtypes.float64), 2.0),
    "lanewise_mm": lambda a, b: (
        (a @ b).sqrt() + (a @ b).exp2() if dtypes.is_float(a.dtype) else (a @ b) // 7 + (a @ b) % 5
    ),
    "sum0": lambda a, b: a.sum(0),
    "max0": lambda a, b: a._reduce(Ops.MAX, 0, False),
    "relu_sum0": lambda a, b: a.relu().sum(0),
}
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.int16]


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", list(BIT_EXACT))
def test_the_pass_keeps_the_bits_where_the_policy_says(name: str, dt: type) -> None:
    x, y = rand((48, 64), dt), rand((64, 32), dt, seed=1)
    a, b = Tensor(x, device="CL"), Tensor(y, device="CL")
    with Context(OPT=0):
        want = BIT_EXACT[name](a, b).numpy()
    got = BIT_EXACT[name](a, b).numpy()
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int8])
def test_a_row_sum_in_vector_lanes_is_within_the_bound(dt: type) -> None:
    x = rand((16, 1024), dt)
    got = Tensor(x, device="CL").sum(1).numpy()
    if np.issubdtype(dt, np.integer):  # wrapping integer sums are exact in any order
        with Context(OPT=0):
            assert got.tobytes() == Tensor(x, device="CL").sum(1).numpy().tobytes()
        return
    exact, scale = x.astype(np.float64).sum(1), np.abs(x).astype(np.float64).sum(1)
    assert np.all(np.abs(got - exact) <= 2 * 1024 * np.finfo(dt).eps * scale)


@pytest.mark.parametrize("rows,cols", [(3, 4), (5, 48), (3, 64)])
def test_a_padded_grid_gates_whole_vectors(rows: int, cols: int) -> None:
    # too few outputs for a work-group: the grid is padded and every vector load and store is gated by the
    # bounds check of its work-item, which every pass's output must still satisfy its spec with (VERIFY)
    x = rand((rows, cols), np.int8)
    with Context(VERIFY=1):
        got = Tensor(x, device="CL").sum(1, dtype=dtypes.int8).numpy()
        mm = (Tensor(x, device="CL").cast(dtypes.float32).T @ Tensor(rand((rows, 32)), device="CL")).numpy()
    assert got.tobytes() == x.sum(1, dtype=np.int8).tobytes()
    np.testing.assert_allclose(mm, x.T.astype(np.float64) @ rand((rows, 32)), rtol=1e-5, atol=1e-4)


def test_a_row_max_in_vector_lanes_keeps_the_sequential_bits() -> None:
    rows = tricky_rows(1024)  # ties of 0.0 and -0.0, NaNs of different payloads: the exact fallback runs
    got = Tensor(rows, device="CL")._reduce(Ops.MAX, -1, False).numpy()
    assert got.tobytes() == sequential_max(rows).tobytes()


@pytest.mark.parametrize(
    "dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.float32, dtypes.float64], ids=str
)
def test_no_vector_has_more_than_16_lanes(dt: object) -> None:
    # 64 bytes are 64 int8 lanes, which OpenCL C has no type for: the pass stops at 16 on a grid target
    x = Tensor(rand((64, 256), dtypes.to_numpy(dt)), device="CL")  # type: ignore[arg-type]
    for axis in (0, 1):
        out, k = x.max(axis), kernel(x.max(axis))
        counts = {u.dtype.count for u in k.program.uops if u.dtype.count > 1}
        assert counts and max(counts) <= 16 and lanes(k.src) <= {2, 4, 8, 16}
        np.testing.assert_array_equal(out.numpy(), x.numpy().max(axis))


def test_the_vector_forms_print_as_opencl_c() -> None:
    x, y = rand((32, 16)), rand((16, 48), seed=1)
    mm = Tensor(x, device="CL") @ Tensor(y, device="CL")
    out = (mm > 0).where(mm.cast(dtypes.float64), 2.0) + mm.maximum(0.5).cast(dtypes.float64)
    want = np.where(x @ y > 0, (x @ y).astype(np.float64), 2.0) + np.maximum(x @ y, 0.5)
    src = kernel(out).src
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    # a float32 mask widened for a double select, the select itself, MAX as a select by a NaN-aware mask
    assert "convert_long" in src and "select(" in src and "convert_double" in src
    assert "__uopgrad" not in src  # none of C's helpers: OpenCL's own vector types and functions


def test_opt0_is_the_kernel_of_before() -> None:
    # the unoptimised kernel of a small matmul, as the renderer printed it before the pass ran on CL
    a, b = Tensor(np.ones((4, 8), np.float32), device="CL"), Tensor(np.ones((8, 4), np.float32), device="CL")
    with Context(OPT=0):
        k = kernel(a @ b)
    assert all(u.dtype.count == 1 for u in k.program.uops)
    assert k.src == OPT0_MATMUL
    assert kernel(a @ b).src != OPT0_MATMUL  # and the pass is on without OPT=0


OPT0_MATMUL = """\
#pragma OPENCL FP_CONTRACT OFF

__kernel void r_4_4(__global float* restrict data0, __global const float* restrict data1, \
__global const float* restrict data2) {
  const int gidx1 = get_group_id(1);
  const int lidx0 = get_local_id(0);
  float acc0 = 0.0f;
  const int alu0 = (gidx1*4);
  const int alu1 = (alu0+lidx0);
  const int alu2 = (gidx1*8);
  for (int ridx2 = 0; ridx2 < 8; ridx2++) {
    const float val0 = acc0;
    const int alu3 = (alu2+ridx2);
    const float val1 = data1[alu3];
    const int alu4 = (ridx2*4);
    const int alu5 = (alu4+lidx0);
    const float val2 = data2[alu5];
    const float alu6 = (val1*val2);
    const float alu7 = (val0+alu6);
    acc0 = alu7;
  }
  const float val3 = acc0;
  data0[alu1] = val3;
}
"""
