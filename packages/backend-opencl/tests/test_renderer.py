"""The OpenCL C dialect on hand-built linear programs (spec/kernels.md §2): golden kernels with grid
indices, address spaces, bools stored as uchar and the extension pragmas; the OpenCL spellings of types,
literals, casts, bitcasts and helpers; safe names. Nothing here needs a device."""

from __future__ import annotations

import math
import re

import pytest

from uopgrad import DType, Ops, UOp, dtypes
from uopgrad.codegen import GridLimits
from uopgrad.renderer import CStyleRenderer
from uopgrad_conformance.kit.linear import alu, const, grid_row_sums, load, param, special, store
from uopgrad_conformance.kit.linear import render as kit_render
from uopgrad_opencl import OpenCLRenderer

i32, f32, f64, f16 = dtypes.int32, dtypes.float32, dtypes.float64, dtypes.float16


def render(name: str, *roots: UOp) -> str:
    return kit_render(OpenCLRenderer(), name, *roots)


def unary(op: Ops, src_dt: DType, dst_dt: DType) -> str:
    out, a = param(0, dst_dt, 4), param(1, src_dt, 4)
    g = special("gidx0", 4)
    return render("k", store(out, g, UOp(op, dst_dt, (load(a, g),))))


# ---------------------------------------------------------------------- golden kernels
def test_golden_grid_elementwise():
    # out[g*64 + l] = max(a[...] * 2, -0.0) where in bounds: a padded grid over 100 elements
    out, a = param(0, f32, 100), param(1, f32, 100)
    idx = alu(Ops.ADD, alu(Ops.MUL, special("gidx0", 2), const(i32, 64)), special("lidx0", 64))
    ok = alu(Ops.CMPLT, idx, const(i32, 100))
    val = alu(Ops.MAX, alu(Ops.MUL, load(a, idx, ok), const(f32, 2.0)), const(f32, -0.0))
    assert (
        render("E_100", store(out, idx, val, ok))
        == """\
#pragma OPENCL FP_CONTRACT OFF

__kernel void E_100(__global float* restrict data0, __global const float* restrict data1) {
  const int gidx0 = get_group_id(0);
  const int alu0 = (gidx0*64);
  const int lidx0 = get_local_id(0);
  const int alu1 = (alu0+lidx0);
  const bool alu2 = (alu1<100);
  const float val0 = (alu2?data1[alu1]:0.0f);
  const float alu3 = (val0*2.0f);
  const float alu4 = (((alu3!=alu3)||(alu3>(-0.0f)))?alu3:(-0.0f));
  if (alu2) data0[alu1] = alu4;
}
"""
    )


def test_golden_bools_are_uchar_in_buffers_and_bool_in_registers():
    out, a, b = param(0, dtypes.bool, 8), param(1, f64, 8), param(2, dtypes.bool, 8)
    g = special("gidx0", 8)
    val = alu(Ops.AND, alu(Ops.CMPLT, load(a, g), const(f64, 0.5)), load(b, g))
    assert (
        render("E_8", store(out, g, val))
        == """\
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

__kernel void E_8(__global uchar* restrict data0, __global const double* restrict data1, \
__global const uchar* restrict data2) {
  const int gidx0 = get_group_id(0);
  const double val0 = data1[gidx0];
  const bool alu0 = (val0<0.5);
  const bool val1 = data2[gidx0];
  const bool alu1 = (alu0&val1);
  data0[gidx0] = alu1;
}
"""
    )


def test_golden_reduce_with_variable_and_unused_buffer():
    src = OpenCLRenderer().render(grid_row_sums(UOp.variable("n", 1, 64, i32)))  # slot 1 is never used
    assert (
        src
        == """\
#pragma OPENCL FP_CONTRACT OFF

__kernel void r_4_n(__global float* restrict data0, __global const void* data1, \
__global const float* restrict data2, const long n) {
  const int gidx0 = get_group_id(0);
  float acc0 = 0.0f;
  for (int ridx1 = 0; ridx1 < n; ridx1++) {
    const float val0 = acc0;
    const int alu0 = (gidx0*n);
    const int alu1 = (alu0+ridx1);
    const float val1 = data2[alu1];
    const float alu2 = (val0+val1);
    acc0 = alu2;
  }
  const float val2 = acc0;
  data0[gidx0] = val2;
}
"""
    )


def test_grid_indices():
    src = render(
        "k",
        store(param(0, i32, 8), special("lidx2", 8), alu(Ops.ADD, special("gidx1", 8), special("idx0", 8))),
    )
    assert "const int gidx1 = get_group_id(1);" in src
    assert "const int idx0 = get_global_id(0);" in src
    assert "const int lidx2 = get_local_id(2);" in src


# ---------------------------------------------------------------------- types, literals, pragmas
def test_opencl_type_names():
    r = OpenCLRenderer()
    ints = {1: "char", 2: "short", 4: "int", 8: "long"}  # OpenCL C's integers by size; unsigned adds a `u`
    for dt in dtypes.ints:
        assert r.ctype(dt) == ("u" if dtypes.is_unsigned(dt) else "") + ints[dt.itemsize], dt
    # float16 values live in floats
    assert [r.ctype(dt) for dt in (dtypes.bool, f16, f32, f64)] == ["bool", "float", "float", "double"]


@pytest.mark.parametrize(
    ("value", "dt", "text"),
    [
        (math.inf, f32, "INFINITY"),
        (-math.inf, f64, "(-INFINITY)"),
        (math.nan, f32, "NAN"),
        (-0.0, f32, "(-0.0f)"),
        (-0.0, f64, "(-0.0)"),
        (0.5, f16, "((float)0.5f)"),
        (-(2**63), dtypes.int64, "(-9223372036854775807l-1)"),
        (2**64 - 1, dtypes.uint64, "18446744073709551615ul"),
        (7, dtypes.int64, "7l"),
        (7, dtypes.uint32, "7u"),
        (-3, dtypes.int8, "((char)-3)"),
        (True, dtypes.bool, "1"),
    ],
)
def test_constants(value, dt, text):
    assert OpenCLRenderer().render_const(value, dt) == text


def test_golden_float16_is_bits_in_buffers_and_float_in_registers():
    # no `half` type (it needs cl_khr_fp16): ushort buffers, float values rounded to float16 after each op
    out, a = param(0, f16, 4), param(1, f16, 4)
    g = special("gidx0", 4)
    src = render("E_4", store(out, g, alu(Ops.ADD, alu(Ops.SQRT, load(a, g)), const(f16, 0.5))))
    kernel = src[src.index("__kernel") :]
    assert (
        kernel
        == """\
__kernel void E_4(__global ushort* restrict data0, __global const ushort* restrict data1) {
  const int gidx0 = get_group_id(0);
  const float val0 = __uopgrad_bits_half(data1[gidx0]);
  const float alu0 = __uopgrad_half((float)sqrt(((float)val0)));
  const float alu1 = __uopgrad_half((float)(((float)alu0)+((float)((float)0.5f))));
  data0[gidx0] = __uopgrad_half_bits(alu1);
}
"""
    )
    assert not re.search(r"\bhalf\b", src) and "cl_khr_fp16" not in src and "cl_khr_fp64" not in src
    # each helper once, callees before callers
    names = re.findall(r"^static inline \w+ (\w+)\(", src, re.MULTILINE)
    assert names == ["__uopgrad_bits_half", "__uopgrad_half_bits", "__uopgrad_half"]


def test_float16_conversions():
    assert "__uopgrad_half_d(val0)" in unary(Ops.CAST, f64, f16)  # a double is rounded once
    assert "__uopgrad_half((float)val0)" in unary(Ops.CAST, dtypes.int32, f16)
    assert "((double)val0)" in unary(Ops.CAST, f16, f64)


def test_math_builtins_are_overloaded():
    assert "sqrt(" in unary(Ops.SQRT, f64, f64) and "sqrtf" not in unary(Ops.SQRT, f32, f32)
    assert "exp2(val0)" in unary(Ops.EXP2, f32, f32) and "log2(val0)" in unary(Ops.LOG2, f64, f64)
    assert "trunc(val0)" in unary(Ops.TRUNC, f32, f32) and "sin(val0)" in unary(Ops.SIN, f32, f32)


def test_no_c99_only_spellings():
    # the helpers, the guards and the literals in OpenCL C: no `long long`, no static locals, no unions
    out, a, b = param(0, dtypes.int64, 4), param(1, dtypes.int64, 4), param(2, dtypes.uint64, 4)
    g = special("gidx0", 4)
    x, y = load(a, g), load(b, g)
    val = alu(Ops.ADD, alu(Ops.SHL, x, x), alu(Ops.SHR, x, x))
    val = alu(Ops.ADD, val, UOp(Ops.CAST, dtypes.int64, (alu(Ops.THREEFRY, y, y),)))
    val = alu(Ops.ADD, val, alu(Ops.POW, x, x))
    val = alu(Ops.ADD, val, UOp(Ops.BITCAST, dtypes.int64, (UOp(Ops.CAST, f64, (x,)),)))
    val = alu(Ops.ADD, val, UOp(Ops.CAST, dtypes.int64, (UOp(Ops.CAST, f64, (x,)),)))
    src = render("k", store(out, g, val))
    assert "long long" not in src and "static const" not in src and "union" not in src
    assert re.findall(r"^\w*\s*inline", src, re.MULTILINE) == ["static inline"] * 3  # static, never extern
    assert "__uopgrad_threefry" in src and "__uopgrad_ipow" in src and "__uopgrad_f2i(" in src
    assert "as_long((double)" in src and "(((ulong)(val0))<64u?" in src


def test_float_to_int_uses_the_float_helper_unless_the_source_is_double():
    assert "((int)__uopgrad_f2if((float)val0))" in unary(Ops.CAST, f32, i32)
    assert "((uchar)__uopgrad_f2if((float)val0))" in unary(Ops.CAST, f16, dtypes.uint8)
    src = unary(Ops.CAST, f64, dtypes.int64)
    assert "((long)__uopgrad_f2i((double)val0))" in src and "cl_khr_fp64" in src
    assert "__uopgrad_f2if" not in src and "double" not in unary(Ops.CAST, f32, i32)


def test_bitcasts():
    assert "as_uint((float)val0)" in unary(Ops.BITCAST, f32, dtypes.uint32)
    assert "__uopgrad_bits_half((ushort)val0)" in unary(Ops.BITCAST, dtypes.int16, f16)
    assert "((short)__uopgrad_half_bits(val0))" in unary(Ops.BITCAST, f16, dtypes.int16)
    assert "(val0!=0)" in unary(Ops.BITCAST, dtypes.uint8, dtypes.bool)
    assert "((char)val0)" in unary(Ops.BITCAST, dtypes.bool, dtypes.int8)


# ---------------------------------------------------------------------- names and the class
@pytest.mark.parametrize(
    "name", ["max", "dot", "kernel", "half", "get_global_id", "convert_int", "sqrtf", "my kernel", "x" * 300]
)
def test_kernel_names_never_clash_with_opencl(name):
    ident = OpenCLRenderer().function_name(name)
    assert ident.startswith("k_") and len(ident) <= 44 and ident.isidentifier()


def test_codegen_kernel_names_are_kept():
    assert OpenCLRenderer().function_name("E_4_4") == "E_4_4"


def test_renderer_is_grid_style_with_the_device_limits():
    limits = GridLimits(local_max=(256, 256, 256), local_prod_max=256, local_size=256)
    r = OpenCLRenderer(limits)
    assert r.grid is limits and r.device == "CL" and OpenCLRenderer().grid == GridLimits()
    assert isinstance(r, CStyleRenderer) and r.supports == CStyleRenderer().supports
    assert not {Ops.FLOORDIV, Ops.FLOORMOD} & r.supports  # floor semantics come from codegen


def test_variable_names_never_clash_with_opencl():
    out = param(0, i32, 4)
    g = special("gidx0", 4)
    names = ("global", "half", "get_group_id", "as_float", "n")
    vs = [UOp.variable(name, 0, 9, i32) for name in names]
    val = vs[0]
    for v in vs[1:]:
        val = alu(Ops.ADD, val, v)
    src = render("v", store(out, g, val))
    assert "const long var0, const long var1, const long var2, const long var3, const long n)" in src
