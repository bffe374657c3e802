"""The CUDA C++ dialect on hand-built linear programs (spec/kernels.md §2): golden kernels (grid indices,
`__launch_bounds__` of the block, `__restrict__`, bools, float16 as bits, a reduce with a variable, shared
memory with a barrier), the defined wrap-around of signed ints, bitcasts and safe names. Every golden is also
compiled by NVRTC to a cubin; the pipeline tests run what the renderer prints."""

from __future__ import annotations

import numpy as np
import pytest

from uopgrad import Ops, UOp, dtypes
from uopgrad_conformance.kit.linear import alu, const, grid_row_sums, load, param, special, store
from uopgrad_conformance.kit.linear import render as kit_render
from uopgrad_cuda import CUDARenderer

i32, i64, u16, f32, f64, f16 = (
    dtypes.int32,
    dtypes.int64,
    dtypes.uint16,
    dtypes.float32,
    dtypes.float64,
    dtypes.float16,
)


def render(name: str, *roots: UOp, local_size=None) -> str:
    return kit_render(CUDARenderer(), name, *roots, local_size=local_size)


@pytest.fixture
def compiles(nvrtc):
    def check(src: str) -> str:
        assert nvrtc.compile(src)[:4] == b"\x7fELF"
        return src

    return check


# ---------------------------------------------------------------------- golden kernels
def test_golden_grid_elementwise(compiles):
    # out[g*64 + l] = max(a[...] * 2, -0.0) where in bounds: a padded grid over 100 elements
    out, a = param(0, f32, 100), param(1, f32, 100)
    idx = alu(Ops.ADD, alu(Ops.MUL, special("gidx0", 2), const(i32, 64)), special("lidx0", 64))
    ok = alu(Ops.CMPLT, idx, const(i32, 100))
    val = alu(Ops.MAX, alu(Ops.MUL, load(a, idx, ok), const(f32, 2.0)), const(f32, -0.0))
    assert (
        compiles(render("E_100", store(out, idx, val, ok), local_size=(64, 1, 1)))
        == """\
extern "C" __global__ void __launch_bounds__(64) E_100(float* __restrict__ data0, \
const float* __restrict__ data1) {
  const int gidx0 = blockIdx.x;
  const int alu0 = ((int)((unsigned int)(gidx0)*(unsigned int)(64)));
  const int lidx0 = threadIdx.x;
  const int alu1 = ((int)((unsigned int)(alu0)+(unsigned int)(lidx0)));
  const bool alu2 = (alu1<100);
  const float val0 = (alu2?data1[alu1]:0.0f);
  const float alu3 = (val0*2.0f);
  const float alu4 = (((alu3!=alu3)||(alu3>(-0.0f)))?alu3:(-0.0f));
  if (alu2) data0[alu1] = alu4;
}
"""
    )


def test_golden_float16_is_bits_in_buffers_and_float_in_registers(compiles):
    out, a, b = param(0, f16, 8), param(1, f16, 8), param(2, dtypes.bool, 8)
    g = special("gidx0", 8)
    val = alu(Ops.WHERE, load(b, g), alu(Ops.ADD, load(a, g), const(f16, float("inf"))), const(f16, 0.5))
    src = compiles(render("E_8", store(out, g, val), local_size=(8, 1, 1)))
    assert src.startswith("static __device__ inline float __uopgrad_bits_half(unsigned short h) {")
    names = ("__uopgrad_bits_half", "__uopgrad_half_bits", "__uopgrad_half")
    first = [src.index(f"{name}(") for name in names]
    assert first == sorted(first)
    assert "__uopgrad_half_d" not in src  # only the helpers the kernel calls, and those they call
    assert (
        src[src.index('extern "C"') :]
        == """\
extern "C" __global__ void __launch_bounds__(8) E_8(unsigned short* __restrict__ data0, \
const unsigned short* __restrict__ data1, const bool* __restrict__ data2) {
  const int gidx0 = blockIdx.x;
  const bool val0 = data2[gidx0];
  const float val1 = __uopgrad_bits_half(data1[gidx0]);
  const float alu0 = __uopgrad_half((float)(((float)val1)+((float)((float)__int_as_float(0x7f800000)))));
  const float alu1 = __uopgrad_half((float)(val0?((float)alu0):((float)((float)0.5f))));
  data0[gidx0] = __uopgrad_half_bits(alu1);
}
"""
    )


def test_golden_reduce_with_variable_and_unused_buffer(compiles):
    src = CUDARenderer().render(grid_row_sums(UOp.variable("n", 1, 64, i32)))  # slot 1 is never used
    assert (
        compiles(src)
        == """\
extern "C" __global__ void __launch_bounds__(1) r_4_n(float* __restrict__ data0, const void* data1, \
const float* __restrict__ data2, const long long n) {
  const int gidx0 = blockIdx.x;
  float acc0 = 0.0f;
  for (int ridx1 = 0; ridx1 < n; ridx1++) {
    const float val0 = acc0;
    const int alu0 = ((int)((unsigned int)(gidx0)*(unsigned int)(n)));
    const int alu1 = ((int)((unsigned int)(alu0)+(unsigned int)(ridx1)));
    const float val1 = data2[alu1];
    const float alu2 = (val0+val1);
    acc0 = alu2;
  }
  const float val2 = acc0;
  data0[gidx0] = val2;
}
"""
    )


def test_golden_shared_memory_and_barrier(compiles, launch):
    # out[l] = a[63 - l] through a __shared__ tile: the write, a barrier, the read of another thread's slot
    out, a = param(0, f32, 64), param(1, f32, 64)
    tile = UOp(Ops.DEFINE_LOCAL, f32.ptr(64, type(f32.ptr().addrspace).LOCAL), (), 0)
    lidx = special("lidx0", 64)
    put = store(tile, lidx, load(a, lidx))
    bar = UOp(Ops.BARRIER, dtypes.void, (put,))
    other = alu(Ops.SUB, const(i32, 63), lidx)
    got = load(UOp(Ops.AFTER, tile.dtype, (tile, bar)), other)  # the tile as it is after the barrier
    src = compiles(render("rev", store(out, lidx, got), local_size=(64, 1, 1)))
    assert (
        src
        == """\
extern "C" __global__ void __launch_bounds__(64) k_rev_d1e75aca(float* __restrict__ data0, \
const float* __restrict__ data1) {
  const int lidx0 = threadIdx.x;
  __shared__ float temp0[64];
  const float val0 = data1[lidx0];
  temp0[lidx0] = val0;
  __syncthreads();
  const int alu0 = ((int)((unsigned int)(63)-(unsigned int)(lidx0)));
  const float val1 = temp0[alu0];
  data0[lidx0] = val1;
}
"""
    )
    x = np.arange(64, dtype=np.float32)
    for reverse in (False, True):
        res, _ = launch(
            src,
            CUDARenderer().function_name("rev"),
            (1, 1, 1),
            (64, 1, 1),
            np.zeros_like(x),
            x,
            reverse=reverse,
        )
        np.testing.assert_array_equal(res, x[::-1])


# ---------------------------------------------------------------------- spellings
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int16, i32, i64, dtypes.uint8, u16])
@pytest.mark.parametrize("op", [Ops.ADD, Ops.SUB, Ops.MUL, Ops.SHL])
def test_int_ops_that_can_overflow_are_computed_unsigned(op, dt):
    x, y = UOp(Ops.PARAM, dt.ptr(1), (), 1), UOp(Ops.PARAM, dt.ptr(1), (), 2)
    out = param(0, dt, 1)
    g = special("gidx0", 1)
    src = render("k", store(out, g, alu(op, load(x, g), load(y, g))))
    unsigned = "unsigned long long" if dt.itemsize == 8 else "unsigned int"
    assert f"(({unsigned})(val0)" in src and f"(({CUDARenderer().ctype(dt)})(" in src


def test_negation_and_mulacc_of_signed_ints_wrap():
    x = param(1, i32, 1)
    g = special("gidx0", 1)
    v = load(x, g)
    src = render(
        "k",
        store(param(0, i32, 1), g, alu(Ops.NEG, v)),
        store(param(2, i32, 1), g, UOp(Ops.MULACC, i32, (v, v, v))),
    )
    assert "((int)(0u-(unsigned int)(val0)))" in src
    assert "((int)((unsigned int)(val0)*(unsigned int)(val0)+(unsigned int)(val0)))" in src


@pytest.mark.parametrize(
    ("src_dt", "dst_dt", "spelling"),
    [
        (f32, i32, "((int)__float_as_uint(val0))"),
        (i32, f32, "__uint_as_float((unsigned int)val0)"),
        (f64, dtypes.uint64, "((unsigned long long)__double_as_longlong(val0))"),
        (i64, f64, "__longlong_as_double((long long)val0)"),
        (f16, u16, "((unsigned short)__uopgrad_half_bits(val0))"),
        (dtypes.int16, f16, "__uopgrad_bits_half((unsigned short)val0)"),
        (dtypes.uint8, dtypes.bool, "(val0!=0)"),
    ],
)
def test_bitcasts(src_dt, dst_dt, spelling, compiles):
    out, a = param(0, dst_dt, 1), param(1, src_dt, 1)
    g = special("gidx0", 1)
    src = compiles(render("k", store(out, g, UOp(Ops.BITCAST, dst_dt, (load(a, g),)))))
    assert spelling in src


def test_names_never_take_cuda_words(compiles):
    r = CUDARenderer()
    names = [r.function_name(n) for n in ("threadIdx", "atomicAdd", "class", "printf", "E_4")]
    assert names[-1] == "E_4"  # codegen's own names are kept
    for word, got in zip(("threadIdx", "atomicAdd", "class", "printf"), names):
        assert got.startswith(f"k_{word}_") and len(got) == len(word) + 11  # prefixed and hashed
    v = UOp.variable("blockDim", 1, 8, i32)
    g = special("gidx0", 1)
    src = compiles(render("template", store(param(0, i32, 1), g, v)))
    assert f"{r.function_name('template')}(" in src and "const long long var0" in src
    assert "blockDim)" not in src
